"""Missing function-level access control (CWE-862, CWE-285): admin routes accept any signed-in user."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, const, denied, step


def _probes(*sites: str):
    def build(ctx: ProbeContext):
        n = ctx.names
        attacker = ctx.who("attacker")
        victim = ctx.user("victim")
        record = ctx.record("read")
        out = []
        if "admin.users" in sites:
            out.append(
                ctx.security(
                    "a regular user cannot list accounts through the admin API",
                    [step(attacker, "GET", "/api/admin/users", *denied(victim.email))],
                    "admin.users",
                )
            )
        if "admin.export" in sites:
            out.append(
                ctx.security(
                    f"a regular user cannot export every {n.s}",
                    [step(attacker, "GET", f"/api/admin/{n.p}/export", *denied(ctx.title(record), *ctx.secrets(record)))],
                    "admin.export",
                )
            )
        if "internal.backup" in sites:
            out.append(
                ctx.security(
                    "a regular user cannot download the internal backup",
                    [step(attacker, "GET", "/api/internal/backup", *denied(victim.password_hash, victim.api_key))],
                    "internal.backup",
                )
            )
        return out

    return build


USER = const("user")

BUG = BugClass(
    name="missing_admin_check",
    cwe=("CWE-862", "CWE-285"),
    title="Missing function-level access control",
    symptom="ordinary accounts can reach administrator functions",
    variants=(
        Variant("users_route", ("admin.users",), {"admin.users": USER}, _probes("admin.users"),
                description="the admin user list only requires a login"),
        Variant("export_route", ("admin.export",), {"admin.export": USER}, _probes("admin.export"),
                features=("export",), description="the admin export only requires a login"),
        Variant("backup_route", ("internal.backup",), {"internal.backup": USER}, _probes("internal.backup"),
                features=("backup",), description="the internal backup only requires a login"),
        Variant("users_and_export", ("admin.users", "admin.export"), {"admin.users": USER, "admin.export": USER},
                _probes("admin.users", "admin.export"), features=("export",),
                site_keys={"admin.users": ("admin.users",), "admin.export": ("admin.export",)},
                description="two admin routes only require a login"),
    ),
)
