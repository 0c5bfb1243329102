"""Missing function-level access control (CWE-862, CWE-285): admin routes accept any signed-in user.

Forbidden paths: every caller who is not an administrator calls the route: plain users and, in
multi-tenant domains, managers (a route that refuses the ``user`` role instead of requiring ``admin``
lets them in).
"""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, const, let_through

REFUSE = '    raise HTTPException(status_code=403, detail="administrators only")'


def _probes(*sites: str):
    def build(ctx: ProbeContext):
        n = ctx.names
        victim = ctx.user("victim")
        record = ctx.record("read")
        out = []
        if "admin.users" in sites:
            out.append(
                ctx.security(
                    "only administrators can list accounts through the admin API",
                    ctx.admin_steps("GET", "/api/admin/users", victim.email),
                    "admin.users",
                )
            )
        if "admin.export" in sites:
            out.append(
                ctx.security(
                    f"only administrators can export every {n.s}",
                    ctx.admin_steps("GET", f"/api/admin/{n.p}/export", ctx.title(record), *ctx.secrets(record)),
                    "admin.export",
                )
            )
        if "internal.backup" in sites:
            out.append(
                ctx.security(
                    "only administrators can download the internal backup",
                    ctx.admin_steps("GET", "/api/internal/backup", victim.password_hash, victim.api_key),
                    "internal.backup",
                )
            )
        return out

    return build


def guard_lets_through(condition):
    """A check in the handler that refuses non-administrators, except callers matching ``condition``."""
    return lambda names, secure: [f'if {names.attr("user", "role")} != "admin" and not ({condition(names)}):', REFUSE]


USER = const("user")


def role_fixes(*sites: str, what: str = "calling the administrators' route"):
    """The routes opened to signed-in users and guarded in their handlers, each fix letting one kind
    of non-administrator in."""

    def build(who):
        fix = {}
        for site in sites:
            fix[site] = USER
            fix[f"{site}_guard"] = guard_lets_through(who)
        return fix

    return let_through("admin", build, what, record=False)

BUG = BugClass(
    name="missing_admin_check",
    cwe=("CWE-862", "CWE-285"),
    title="Missing function-level access control",
    symptom="ordinary accounts can reach administrator functions",
    variants=(
        Variant("users_route", ("admin.users",), {"admin.users": USER}, _probes("admin.users"),
                description="the admin user list only requires a login", narrow_fixes=role_fixes("admin.users")),
        Variant("export_route", ("admin.export",), {"admin.export": USER}, _probes("admin.export"),
                features=("export",), description="the admin export only requires a login",
                narrow_fixes=role_fixes("admin.export")),
        Variant("backup_route", ("internal.backup",), {"internal.backup": USER}, _probes("internal.backup"),
                features=("backup",), description="the internal backup only requires a login",
                narrow_fixes=role_fixes("internal.backup")),
        Variant("users_and_export", ("admin.users", "admin.export"), {"admin.users": USER, "admin.export": USER},
                _probes("admin.users", "admin.export"), features=("export",),
                site_keys={"admin.users": ("admin.users",), "admin.export": ("admin.export",)},
                description="two admin routes only require a login",
                narrow_fixes=role_fixes("admin.users", "admin.export")),
    ),
)
