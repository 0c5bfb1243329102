"""IDOR update/delete (CWE-639, CWE-862): records can be changed or deleted by anyone who knows the id.

Forbidden paths: every caller the policy does not let change the record (plain users who do not own
it and, in multi-tenant domains, the manager of the owner's tenant, who may read it but not change
it) edits or deletes it, and an edit may touch any field (a check that runs only when the title
changes leaves the other fields writable).
"""

from envcore.factory.bugs.base import (
    BugClass,
    NarrowFix,
    ProbeContext,
    Variant,
    check_skipped_for,
    drop,
    let_through,
)


def _update_logged(names, secure):
    who = names.attr("user", "id")
    return [
        f"if not can_modify(user, {names.rec}):",
        f'    logger.warning("user %s edits {names.s} %s owned by someone else", {who}, {names.id})',
    ]


def edit_probe(ctx: ProbeContext, stem: str, **request):
    return ctx.security(
        f"other users cannot edit any field of the victim's {ctx.names.s}",
        ctx.edit_steps(ctx.record("target_update"), stem, **request),
        "update",
    )


def delete_probe(ctx: ProbeContext, **request):
    return ctx.security(
        f"other users cannot delete the victim's {ctx.names.s}",
        ctx.delete_steps(ctx.record("target_delete"), **request),
        "delete",
    )


def _probes(*sites: str):
    def build(ctx: ProbeContext):
        out = []
        if "update" in sites:
            out.append(edit_probe(ctx, "update"))
        if "delete" in sites:
            out.append(delete_probe(ctx))
        return out

    return build


def _one_field_checked(field_index: int):
    """The update check runs only when the change touches some field other than field ``field_index``."""

    def mutate(names, secure):
        spared = names.fields[field_index]
        head, *rest = secure
        return [f"if set(payload.model_dump(exclude_unset=True)) - {{{spared!r}}} and {head[3:]}", *rest]

    return mutate


FIELD_FIXES = tuple(
    NarrowFix(f"spares_field_{i}", f"editing field number {i + 1} of the record alone",
              {"update.check": _one_field_checked(i)}, (f"field:{i}",))
    for i in range(8)
)
"""One per resource field, for the first eight (built-in domains have four; probes try every field)."""


def field_fixes(*extra: tuple[str, object]) -> tuple[NarrowFix, ...]:
    """The per-field narrow fixes of the update check, with ``extra`` mutations (site, mutation) added."""
    return tuple(
        NarrowFix(fix.name, fix.leaves_open, {**fix.mutations, **dict(extra)}, fix.needs) for fix in FIELD_FIXES
    )


def _narrow(*keys: str):
    fixes = let_through("modify", lambda who: {key: check_skipped_for(who) for key in keys},
                        "changing or deleting the record")
    return fixes + (field_fixes() if "update.check" in keys else ())


BUG = BugClass(
    name="idor_write",
    cwe=("CWE-639", "CWE-862"),
    title="Insecure direct object reference (update/delete)",
    symptom="users can change or delete records that belong to someone else",
    variants=(
        Variant("update_unchecked", ("update",), {"update.check": drop()}, _probes("update"),
                description="the update route has no ownership check", narrow_fixes=_narrow("update.check")),
        Variant("delete_unchecked", ("delete",), {"delete.check": drop()}, _probes("delete"),
                description="the delete route has no ownership check", narrow_fixes=_narrow("delete.check")),
        Variant("update_logged", ("update",), {"update.check": _update_logged}, _probes("update"), subtle=True,
                description="the update route logs a foreign edit and carries on", narrow_fixes=_narrow("update.check")),
        Variant("update_and_delete_unchecked", ("update", "delete"),
                {"update.check": drop(), "delete.check": drop()}, _probes("update", "delete"),
                site_keys={"update": ("update.check",), "delete": ("delete.check",)},
                description="neither update nor delete checks ownership",
                narrow_fixes=_narrow("update.check", "delete.check")),
    ),
)
