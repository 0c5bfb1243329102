"""IDOR update/delete (CWE-639, CWE-862): records can be changed or deleted by anyone who knows the id."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, denied, drop, ok, step
from envcore.scenario.probes import BodyExcludes


def _update_logged(names, secure):
    return [
        "if not can_modify(user, record):",
        f'    logger.warning("user %s edits {names.s} %s owned by someone else", user["id"], {names.id})',
    ]


def _probes(*sites: str):
    def build(ctx: ProbeContext):
        n = ctx.names
        victim, attacker = ctx.who("victim"), ctx.who("attacker")
        out = []
        if "update" in sites:
            record = ctx.record("target_update")
            forged = f"Edited by intruder {ctx.token('update')}"
            out.append(
                ctx.security(
                    f"another user cannot edit the victim's {n.s}",
                    [
                        step(attacker, "PATCH", ctx.detail(record), *denied(), json_body={n.title: forged}),
                        step(victim, "GET", ctx.detail(record), *ok(ctx.title(record)), BodyExcludes(texts=(forged,))),
                    ],
                    "update",
                )
            )
        if "delete" in sites:
            record = ctx.record("target_delete")
            out.append(
                ctx.security(
                    f"another user cannot delete the victim's {n.s}",
                    [
                        step(attacker, "DELETE", ctx.detail(record), *denied()),
                        step(victim, "GET", ctx.detail(record), *ok(ctx.title(record))),
                    ],
                    "delete",
                )
            )
        return out

    return build


BUG = BugClass(
    name="idor_write",
    cwe=("CWE-639", "CWE-862"),
    title="Insecure direct object reference (update/delete)",
    symptom="users can change or delete records that belong to someone else",
    variants=(
        Variant("update_unchecked", ("update",), {"update.check": drop()}, _probes("update"),
                description="the update route has no ownership check"),
        Variant("delete_unchecked", ("delete",), {"delete.check": drop()}, _probes("delete"),
                description="the delete route has no ownership check"),
        Variant("update_logged", ("update",), {"update.check": _update_logged}, _probes("update"), subtle=True,
                description="the update route logs a foreign edit and carries on"),
        Variant("update_and_delete_unchecked", ("update", "delete"),
                {"update.check": drop(), "delete.check": drop()}, _probes("update", "delete"),
                site_keys={"update": ("update.check",), "delete": ("delete.check",)},
                description="neither update nor delete checks ownership"),
    ),
)
