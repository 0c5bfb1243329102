"""Incorrect authorization logic (CWE-863): the check exists but its condition is wrong.

Classic Python slips: ``role == "admin" or "manager"`` (always true), or a role test standing in for
an ownership test. The permission helper is shared, so one wrong condition opens several routes.

Forbidden paths: everything the broken helper answers for. ``can_read`` guards the detail route and,
when the app has it, the v1 alias (a fix written into the detail route alone leaves the alias open);
``can_modify`` guards update and delete. Each is tried by every kind of caller the policy refuses.
"""

from envcore.factory.bugs.base import (
    BugClass,
    NarrowFix,
    ProbeContext,
    Variant,
    helper_allows,
    inline_check,
    let_through,
)
from envcore.factory.bugs.idor_write import delete_probe, edit_probe, field_fixes


def admin_test(names) -> str:
    """The first line of the permission helpers: administrators may do anything."""
    return f'if {names.attr("user", "role")} == "admin":'


def _or_literal(second: str):
    def mutate(names, secure):
        test = admin_test(names)
        return [f'{test[:-1]} or "{second}":' if line == test else line for line in secure]

    return mutate


def _role_instead_of_owner(names, secure):
    return [
        admin_test(names),
        "    return True",
        f'return {names.attr("user", "role")} in ("user", "manager", "admin")',
    ]


def _read_probes(ctx: ProbeContext):
    record = ctx.record("read")
    out = [
        ctx.security(
            f"other users cannot read the victim's {ctx.names.s}",
            ctx.read_steps(record),
            "detail",
        )
    ]
    if "legacy_alias" in ctx.spec.features:  # the alias asks the same helper
        out.append(ctx.legacy_read_security(record))
    return out


def _modify_probes(ctx: ProbeContext):
    return [edit_probe(ctx, "logic"), delete_probe(ctx)]


def _read_fixes(flaw):
    return let_through("read", lambda who: {"policy.can_read": helper_allows(who)}, "reading the record") + (
        NarrowFix("fixed_in_detail_route", "reading through the v1 alias, which still asks the broken helper",
                  {"policy.can_read": flaw, "detail.check": inline_check("read")}, ("legacy_alias",)),
        NarrowFix("fixed_in_alias_route", "reading through the detail route, which still asks the broken helper",
                  {"policy.can_read": flaw, "legacy.check": inline_check("read")}, ("legacy_alias",)),
    )


def _modify_fixes(flaw):
    return (
        let_through("modify", lambda who: {"policy.can_modify": helper_allows(who)}, "changing or deleting the record")
        + (
            NarrowFix("fixed_in_update_route", "deleting, which still asks the broken helper",
                      {"policy.can_modify": flaw, "update.check": inline_check("modify")}),
            NarrowFix("fixed_in_delete_route", "editing, which still asks the broken helper",
                      {"policy.can_modify": flaw, "delete.check": inline_check("modify")}),
        )
        + field_fixes()
    )


READ_OR_MANAGER = _or_literal("manager")
MODIFY_OR_OWNER = _or_literal("owner")

BUG = BugClass(
    name="broken_authz_logic",
    cwe=("CWE-863",),
    title="Incorrect authorization logic",
    symptom="the permission check lets the wrong people through",
    variants=(
        Variant("read_or_literal", ("detail",), {"policy.can_read": READ_OR_MANAGER}, _read_probes,
                subtle=True, description='can_read tests `role == "admin" or "manager"`, which is always true',
                narrow_fixes=_read_fixes(READ_OR_MANAGER)),
        Variant("read_role_not_owner", ("detail",), {"policy.can_read": _role_instead_of_owner}, _read_probes,
                subtle=True, description="can_read checks for a valid role instead of ownership",
                narrow_fixes=_read_fixes(_role_instead_of_owner)),
        Variant("modify_or_literal", ("update", "delete"), {"policy.can_modify": MODIFY_OR_OWNER},
                _modify_probes, subtle=True,
                description='can_modify tests `role == "admin" or "owner"`, which is always true',
                narrow_fixes=_modify_fixes(MODIFY_OR_OWNER)),
    ),
)
