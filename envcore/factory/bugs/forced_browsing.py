"""Forced browsing (CWE-425, CWE-424): an alternate path or verb skips the check the main path has.

Forbidden paths: on the v1 alias, every caller the policy does not let read the record; on the usage
report, both methods (GET and POST) from every non-administrator (a guard turned round to cover POST
leaves GET open; one that refuses the ``user`` role lets managers in); on the internal backup, every
caller but the administrators' job: anonymous callers *and* signed-in users (requiring a login is not
the fix).
"""

from envcore.factory.bugs.base import (
    BugClass,
    NarrowFix,
    ProbeContext,
    Variant,
    check_skipped_for,
    const,
    denied,
    drop,
    let_through,
    step,
)
from envcore.factory.bugs.missing_admin import REFUSE, role_fixes


def _legacy(ctx: ProbeContext):
    return [
        ctx.security(
            f"the v1 alias enforces the same ownership rule as the main {ctx.names.s} route",
            ctx.read_steps(ctx.record("read"), legacy=True),
            "legacy",
        )
    ]


def _verb(ctx: ProbeContext):
    return [
        ctx.security(
            "only administrators can view or regenerate the admin report",
            ctx.admin_steps("POST", "/api/admin/report") + ctx.admin_steps("GET", "/api/admin/report"),
            "admin.report",
        )
    ]


def _backup(ctx: ProbeContext):
    victim = ctx.user("victim")
    leaks = (victim.password_hash, victim.api_key)
    return [
        ctx.security(
            "the internal backup is served to nobody but administrators",
            [step(None, "GET", "/api/internal/backup", *denied(*leaks)),
             *ctx.admin_steps("GET", "/api/internal/backup", *leaks)],
            "internal.backup",
        )
    ]


def guard_for(method: str):
    """A check in the report handler that refuses non-administrators for one method only."""
    def guard(names, secure):
        return [f'if request.method == "{method}" and {names.attr("user", "role")} != "admin":', REFUSE]

    return guard


GET_ONLY_GUARD = guard_for("GET")
POST_ONLY_GUARD = guard_for("POST")

BUG = BugClass(
    name="forced_browsing",
    cwe=("CWE-425", "CWE-424"),
    title="Forced browsing through an unprotected alternate path",
    symptom="an old or unlisted way into the API skips the access checks",
    variants=(
        Variant("legacy_alias_unchecked", ("legacy",), {"legacy.check": drop()}, _legacy,
                features=("legacy_alias",), description="the v1 alias route lacks the ownership check",
                narrow_fixes=let_through("read", lambda who: {"legacy.check": check_skipped_for(who)},
                                         "reading the record through the v1 alias")),
        Variant("verb_tampering", ("admin.report",),
                {"admin.report": const("user"), "admin.report_guard": GET_ONLY_GUARD}, _verb,
                features=("report",), subtle=True, description="the admin check only covers GET",
                narrow_fixes=role_fixes("admin.report", what="using the admin report") + (
                    NarrowFix("guards_post_only", "viewing the admin report with GET",
                              {"admin.report": const("user"), "admin.report_guard": POST_ONLY_GUARD}),
                )),
        Variant("unauthenticated_backup", ("internal.backup",), {"internal.backup": const("public")}, _backup,
                features=("backup",), description="the internal backup route needs no login at all",
                narrow_fixes=role_fixes("internal.backup", what="downloading the internal backup")),
    ),
)
