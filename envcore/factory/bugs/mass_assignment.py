"""Mass assignment (CWE-915): request bodies may set fields the caller must not control."""

from envcore.factory.codegen.names import a
from envcore.factory.codegen.parts import py
from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, denied, step
from envcore.scenario.probes import BodyExcludes, JsonEquals, StatusIn


def _profile_role(names, secure):
    return [*secure, "    role: str | None = None"]


def _raw_params(names, secure):
    return ["payload: dict"]


def _raw_changes(names, secure):
    return ["changes = dict(payload)"]


def _create_owner_field(names, secure):
    return [*secure, f"    {names.owner}: {names.id_type} | None = None"]


def _create_owner_default(names, secure):
    return [f"if values.get({py(names.owner)}) is None:", f'    values[{py(names.owner)}] = user["id"]']


def _escalation(ctx: ProbeContext):
    climber = ctx.who("climber")
    return [
        ctx.security(
            "updating one's profile cannot grant the admin role",
            [
                step(climber, "PATCH", "/api/me", json_body={"role": "admin"}),
                step(climber, "GET", "/api/admin/users", *denied(ctx.user("victim").email)),
                step(climber, "GET", "/api/me", StatusIn(codes=(200,)), JsonEquals(path="role", value="user")),
            ],
            "profile",
        )
    ]


def _forged_owner(ctx: ProbeContext):
    n = ctx.names
    victim = ctx.user("victim")
    forged = f"Planted record {ctx.token('forged')}"
    owner = int(victim.user_id) if n.id_type == "int" else victim.user_id
    return [
        ctx.security(
            f"creating {a(n.s)} cannot assign it to another user",
            [
                step(ctx.who("attacker"), "POST", f"/api/{n.p}", json_body={n.title: forged, n.owner: owner}),
                step(victim.username, "GET", f"/api/{n.p}", StatusIn(codes=(200,)), BodyExcludes(texts=(forged,))),
            ],
            "create",
        )
    ]


BUG = BugClass(
    name="mass_assignment",
    cwe=("CWE-915",),
    title="Privilege escalation by mass assignment",
    symptom="users can set fields on their account or records that only the system should set",
    variants=(
        Variant("profile_role_field", ("profile",), {"schemas.profile": _profile_role}, _escalation,
                features=("profile",), subtle=True, description="the profile schema includes `role`"),
        Variant("profile_raw_dict", ("profile",), {"profile.params": _raw_params, "profile.changes": _raw_changes},
                _escalation, features=("profile",), description="the profile update applies the raw JSON body"),
        Variant("create_owner_field", ("create",),
                {"schemas.create": _create_owner_field, "create.owner": _create_owner_default}, _forged_owner,
                subtle=True, description="the create schema accepts the owner field"),
    ),
)
