"""Exposure of sensitive fields (CWE-200, CWE-359): responses carry data the caller must not see."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, step
from envcore.scenario.probes import BodyExcludes, JsonKeysAbsent

ACCOUNT_SECRETS = ("password_hash", "api_key")


def _directory_full(names, secure):
    return ["return all_users()"]


def _person_full(names, secure):
    return ["return person"]


def _shared_full(names, secure):
    return ["return record"]


def _probes(*sites: str):
    def build(ctx: ProbeContext):
        victim = ctx.user("victim")
        account_leak = (JsonKeysAbsent(keys=ACCOUNT_SECRETS), BodyExcludes(texts=(victim.password_hash, victim.api_key)))
        out = []
        if "directory.list" in sites:
            out.append(
                ctx.security(
                    "the people directory shows no password hashes or API keys",
                    [step(ctx.who("attacker"), "GET", "/api/people", *account_leak)],
                    "directory.list",
                )
            )
        if "directory.detail" in sites:
            out.append(
                ctx.security(
                    "a colleague's profile shows no password hash or API key",
                    [step(ctx.who("attacker"), "GET", f"/api/people/{victim.user_id}", *account_leak)],
                    "directory.detail",
                )
            )
        if "shared" in sites:
            record = ctx.record("read")  # the shared record
            out.append(
                ctx.security(
                    f"a share link never reveals the {ctx.names.s}'s sensitive fields",
                    [step(None, "GET", f"/api/shared/{record.share_code}",
                          JsonKeysAbsent(keys=ctx.names.sensitive), BodyExcludes(texts=ctx.secrets(record)))],
                    "shared",
                )
            )
        return out

    return build


BUG = BugClass(
    name="sensitive_exposure",
    cwe=("CWE-200", "CWE-359"),
    title="Exposure of sensitive information",
    symptom="responses include private fields that the caller should never receive",
    variants=(
        Variant("directory_full_records", ("directory.list",), {"directory.list": _directory_full},
                _probes("directory.list"), features=("directory",),
                description="the people directory returns whole account rows"),
        Variant("person_full_record", ("directory.detail",), {"directory.detail": _person_full},
                _probes("directory.detail"), features=("directory",),
                description="a person's profile returns the whole account row"),
        Variant("share_link_full_record", ("shared",), {"shared.fields": _shared_full}, _probes("shared"),
                features=("shared",), description="the public share link returns every field"),
        Variant("directory_list_and_detail", ("directory.list", "directory.detail"),
                {"directory.list": _directory_full, "directory.detail": _person_full},
                _probes("directory.list", "directory.detail"), features=("directory",),
                site_keys={"directory.list": ("directory.list",), "directory.detail": ("directory.detail",)},
                description="both directory routes return whole account rows"),
    ),
)
