"""Exposure of sensitive fields (CWE-200, CWE-359): responses carry data the caller must not see.

Forbidden paths: every key the policy leaves out of the response. The people directory shows id,
username and display name only, so email, role, the credentials and the tenant are all forbidden (a
fix that strips the password hash and API key still leaks the rest); a share link shows the record's
id and its non-sensitive fields only, so the sensitive fields, the owner, the tenant and the share
code are.

In the ORM styles the routes serialise rows through their ``response_model``, which is what keeps
the private fields out, so there the flaw is the wrong schema (the whole stored row's) and a narrow
fix hands back its own selection of fields.
"""

from envcore.factory.bugs.base import BugClass, NarrowFix, ProbeContext, Variant, step
from envcore.factory.codegen.parts import py
from envcore.scenario.probes import BodyExcludes, JsonKeysAbsent

DIRECTORY_FIELDS = ("id", "username", "display_name")
ACCOUNT_PRIVATE = ("email", "role", "password_hash", "api_key")


def account_private(names) -> tuple[str, ...]:
    """Account columns the directory must not show."""
    return ACCOUNT_PRIVATE + ((names.tenant,) if names.tenant else ())


def shared_private(names) -> tuple[str, ...]:
    """Record keys a share link must not show."""
    return (*names.sensitive, names.owner, *((names.tenant,) if names.tenant else ()), "share_code")


def _directory_full(names, secure):
    if names.orm:  # (response model, body): the whole account row's schema
        return "list[UserRecord]", secure[1]
    return ["return all_users()"]


def _person_full(names, secure):
    if names.orm:
        return "UserRecord", secure[1]
    return ["return person"]


def _shared_full(names, secure):
    if names.orm:
        return f"{names.model}Record", secure[1]
    return ["return record"]


def _probes(*sites: str):
    def build(ctx: ProbeContext):
        victim = ctx.user("victim")
        account_leak = (JsonKeysAbsent(keys=account_private(ctx.names)),
                        BodyExcludes(texts=(victim.password_hash, victim.api_key, victim.email)))
        out = []
        if "directory.list" in sites:
            out.append(
                ctx.security(
                    "the people directory shows nothing but ids, usernames and display names",
                    [step(ctx.who("attacker"), "GET", "/api/people", *account_leak)],
                    "directory.list",
                )
            )
        if "directory.detail" in sites:
            out.append(
                ctx.security(
                    "a colleague's profile shows nothing but their id, username and display name",
                    [step(ctx.who("attacker"), "GET", f"/api/people/{victim.user_id}", *account_leak)],
                    "directory.detail",
                )
            )
        if "shared" in sites:
            record = ctx.record("read")  # the shared record
            out.append(
                ctx.security(
                    f"a share link shows only the {ctx.names.s}'s id and non-sensitive fields",
                    [step(None, "GET", f"/api/shared/{record.share_code}",
                          JsonKeysAbsent(keys=shared_private(ctx.names)), BodyExcludes(texts=ctx.secrets(record)))],
                    "shared",
                )
            )
        return out

    return build


def _directory_with(column):
    """The directory routes, showing ``column(names)`` besides the directory fields."""

    def listing(names, secure):
        keys = py((*DIRECTORY_FIELDS, column(names)))
        if names.orm:
            everyone = names.rows("select(User).order_by(User.id)")
            return None, [f"return [{{k: getattr(u, k) for k in {keys}}} for u in {everyone}]"]
        return [f"return [{{k: u[k] for k in {keys}}} for u in all_users()]"]

    def person(names, secure):
        keys = py((*DIRECTORY_FIELDS, column(names)))
        if names.orm:
            return None, [f"return {{k: getattr(person, k) for k in {keys}}}"]
        return [f"return {{k: person[k] for k in {keys}}}"]

    return {"directory.list": listing, "directory.detail": person}


def _account_fixes(*sites: str):
    """One narrow fix per private account column: the routes show the directory fields plus that one."""
    columns = [(c, lambda n, c=c: c, ()) for c in ACCOUNT_PRIVATE] + [("tenant", lambda n: n.tenant, ("tenant",))]
    fixes = []
    for name, column, needs in columns:
        routes = _directory_with(column)
        fixes.append(NarrowFix(f"shows_{name}", f"reading colleagues' {name.replace('_', ' ')}",
                               {site: routes[site] for site in sites}, needs))
    return tuple(fixes)


def _shared_fixes():
    """One narrow fix per key a share link must not show: the shared fields plus that one."""
    keys = [
        ("sensitive_field", lambda n: n.sensitive[0], ()),
        ("owner", lambda n: n.owner, ()),
        ("tenant", lambda n: n.tenant, ("tenant",)),
        ("share_code", lambda n: "share_code", ()),
    ]
    def shows(key):
        def mutate(n, secure):
            if n.orm:
                return None, [f"return {{k: getattr({n.rec}, k) for k in (*SHARED_FIELDS, {py(key(n))})}}"]
            return [f"return {{k: record[k] for k in (*SHARED_FIELDS, {py(key(n))})}}"]

        return mutate

    return tuple(
        NarrowFix(f"shows_{name}", f"reading the {name.replace('_', ' ')} of a shared record without signing in",
                  {"shared.fields": shows(key)}, needs)
        for name, key, needs in keys
    )


BUG = BugClass(
    name="sensitive_exposure",
    cwe=("CWE-200", "CWE-359"),
    title="Exposure of sensitive information",
    symptom="responses include private fields that the caller should never receive",
    variants=(
        Variant("directory_full_records", ("directory.list",), {"directory.list": _directory_full},
                _probes("directory.list"), features=("directory",),
                description="the people directory returns whole account rows",
                narrow_fixes=_account_fixes("directory.list")),
        Variant("person_full_record", ("directory.detail",), {"directory.detail": _person_full},
                _probes("directory.detail"), features=("directory",),
                description="a person's profile returns the whole account row",
                narrow_fixes=_account_fixes("directory.detail")),
        Variant("share_link_full_record", ("shared",), {"shared.fields": _shared_full}, _probes("shared"),
                features=("shared",), description="the public share link returns every field",
                narrow_fixes=_shared_fixes()),
        Variant("directory_list_and_detail", ("directory.list", "directory.detail"),
                {"directory.list": _directory_full, "directory.detail": _person_full},
                _probes("directory.list", "directory.detail"), features=("directory",),
                site_keys={"directory.list": ("directory.list",), "directory.detail": ("directory.detail",)},
                description="both directory routes return whole account rows",
                narrow_fixes=_account_fixes("directory.list", "directory.detail")),
    ),
)
