"""Incorrect authorization logic (CWE-863): the check exists but its condition is wrong.

Classic Python slips: ``role == "admin" or "manager"`` (always true), or a role test standing in for
an ownership test. The permission helper is shared, so one wrong condition opens several routes.
"""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, denied, ok, step
from envcore.scenario.probes import BodyExcludes

ADMIN_TEST = 'if user["role"] == "admin":'


def _or_literal(second: str):
    def mutate(names, secure):
        return [f'if user["role"] == "admin" or "{second}":' if line == ADMIN_TEST else line for line in secure]

    return mutate


def _role_instead_of_owner(names, secure):
    return [
        ADMIN_TEST,
        "    return True",
        'return user["role"] in ("user", "manager", "admin")',
    ]


def _read_probes(ctx: ProbeContext):
    record = ctx.record("read")
    return [
        ctx.security(
            f"another user cannot read the victim's {ctx.names.s}",
            [step(ctx.who("attacker"), "GET", ctx.detail(record), *denied(ctx.title(record), *ctx.secrets(record)))],
            "detail",
        )
    ]


def _modify_probes(ctx: ProbeContext):
    n = ctx.names
    victim, attacker = ctx.who("victim"), ctx.who("attacker")
    target = ctx.record("target_update")
    forged = f"Edited by intruder {ctx.token('logic')}"
    doomed = ctx.record("target_delete")
    return [
        ctx.security(
            f"another user cannot edit the victim's {n.s}",
            [
                step(attacker, "PATCH", ctx.detail(target), *denied(), json_body={n.title: forged}),
                step(victim, "GET", ctx.detail(target), *ok(ctx.title(target)), BodyExcludes(texts=(forged,))),
            ],
            "update",
        ),
        ctx.security(
            f"another user cannot delete the victim's {n.s}",
            [step(attacker, "DELETE", ctx.detail(doomed), *denied()), step(victim, "GET", ctx.detail(doomed), *ok())],
            "delete",
        ),
    ]


BUG = BugClass(
    name="broken_authz_logic",
    cwe=("CWE-863",),
    title="Incorrect authorization logic",
    symptom="the permission check lets the wrong people through",
    variants=(
        Variant("read_or_literal", ("detail",), {"policy.can_read": _or_literal("manager")}, _read_probes,
                subtle=True, description='can_read tests `role == "admin" or "manager"`, which is always true'),
        Variant("read_role_not_owner", ("detail",), {"policy.can_read": _role_instead_of_owner}, _read_probes,
                subtle=True, description="can_read checks for a valid role instead of ownership"),
        Variant("modify_or_literal", ("update", "delete"), {"policy.can_modify": _or_literal("owner")},
                _modify_probes, subtle=True,
                description='can_modify tests `role == "admin" or "owner"`, which is always true'),
    ),
)
