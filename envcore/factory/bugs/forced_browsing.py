"""Forced browsing (CWE-425, CWE-424): an alternate path or verb skips the check the main path has."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, const, denied, drop, step


def _legacy(ctx: ProbeContext):
    record = ctx.record("read")
    return [
        ctx.security(
            f"the v1 alias enforces the same ownership rule as the main {ctx.names.s} route",
            [step(ctx.who("attacker"), "GET", ctx.detail(record, legacy=True),
                  *denied(ctx.title(record), *ctx.secrets(record)))],
            "legacy",
        )
    ]


def _verb(ctx: ProbeContext):
    return [
        ctx.security(
            "a regular user cannot regenerate the admin report with POST",
            [step(ctx.who("attacker"), "POST", "/api/admin/report", *denied())],
            "admin.report",
        )
    ]


def _backup(ctx: ProbeContext):
    victim = ctx.user("victim")
    return [
        ctx.security(
            "the internal backup is not served to anonymous callers",
            [step(None, "GET", "/api/internal/backup", *denied(victim.password_hash, victim.api_key))],
            "internal.backup",
        )
    ]


GET_ONLY_GUARD = [
    'if request.method == "GET" and user["role"] != "admin":',
    '    raise HTTPException(status_code=403, detail="administrators only")',
]

BUG = BugClass(
    name="forced_browsing",
    cwe=("CWE-425", "CWE-424"),
    title="Forced browsing through an unprotected alternate path",
    symptom="an old or unlisted way into the API skips the access checks",
    variants=(
        Variant("legacy_alias_unchecked", ("legacy",), {"legacy.check": drop()}, _legacy,
                features=("legacy_alias",), description="the v1 alias route lacks the ownership check"),
        Variant("verb_tampering", ("admin.report",),
                {"admin.report": const("user"), "admin.report_guard": const(GET_ONLY_GUARD)}, _verb,
                features=("report",), subtle=True, description="the admin check only covers GET"),
        Variant("unauthenticated_backup", ("internal.backup",), {"internal.backup": const("public")}, _backup,
                features=("backup",), description="the internal backup route needs no login at all"),
    ),
)
