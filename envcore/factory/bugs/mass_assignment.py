"""Mass assignment (CWE-915): request bodies may set fields the caller must not control.

Forbidden paths: every field the policy does not let the caller set that the store would write. On
one's own profile that is every account column but ``display_name`` and ``email``: the role (with
every value that grants something: ``admin``, ``manager``), the username, the credentials
(``password_hash``, ``api_key``) and, in multi-tenant domains, the tenant; ``id`` is never written by
the store, so it is no path. On a new record it is the owner field, named by any kind of caller.

Each field is tried in a request of its own (a fix that refuses a body because it carries ``role``
would otherwise hide the fields beside it) and read back where the app shows it: the role and
username on ``/api/me``, the others in the administrators' backup, which the raw-body variant's app
always has.
"""

from envcore.factory.bugs.base import BugClass, NarrowFix, ProbeContext, Variant, denied, let_through, step
from envcore.factory.codegen.names import a
from envcore.factory.codegen.parts import py
from envcore.scenario.probes import BodyExcludes, JsonEquals, StatusIn

ALLOWED = ("display_name", "email")
"""What the policy lets a user change on their own account."""
ROLES = ("admin", "manager")
"""Role values a climber tries (``manager`` is a role only in multi-tenant domains, but a user who can
write it into their account has changed their role all the same)."""
CREDENTIALS = ("password_hash", "api_key")


def _profile_role(names, secure):
    return [*secure, "    role: str | None = None"]


def _raw_params(names, secure):
    return ["payload: dict"]


def _raw_changes(names, secure):
    return ["changes = dict(payload)"]


def _create_owner_field(names, secure):
    return [*secure, f"    {names.owner}: {names.id_type} | None = None"]


def _create_owner_default(names, secure):
    return [f"if values.get({py(names.owner)}) is None:", f'    values[{py(names.owner)}] = {names.attr("user", "id")}']


def _escalation(ctx: ProbeContext):
    climber = ctx.who("climber")
    me = ctx.user("climber")
    steps = []
    for role in ROLES:
        steps.append(step(climber, "PATCH", "/api/me", json_body={"role": role}))
        if role == "admin":
            steps.append(step(climber, "GET", "/api/admin/users", *denied(ctx.user("victim").email)))
        steps.append(step(climber, "GET", "/api/me", StatusIn(codes=(200,)), JsonEquals(path="role", value="user")))
    steps += [
        step(climber, "PATCH", "/api/me", json_body={"username": f"{me.username}.{ctx.token('username')}"}),
        step(climber, "GET", "/api/me", StatusIn(codes=(200,)), JsonEquals(path="username", value=me.username)),
    ]
    if "backup" in ctx.spec.features:  # where the other columns can be read back
        hidden = {f: f"forged-{f.replace('_', '-')}-{ctx.token(f)}" for f in CREDENTIALS}
        if ctx.names.tenant:
            hidden[ctx.names.tenant] = f"forged-tenant-{ctx.token('tenant')}"
        steps += [step(climber, "PATCH", "/api/me", json_body={f: value}) for f, value in hidden.items()]
        steps.append(step(ctx.who("admin"), "GET", "/api/internal/backup", StatusIn(codes=(200,)),
                          BodyExcludes(texts=tuple(hidden.values()))))
    return [
        ctx.security(
            "updating one's profile cannot change one's role, username, credentials or tenant",
            steps,
            "profile",
        )
    ]


def _forged_owner(ctx: ProbeContext):
    n = ctx.names
    victim = ctx.user("victim")
    owner = int(victim.user_id) if n.id_type == "int" else victim.user_id
    planted = {part: f"Planted record {ctx.token(f'forged:{part}')}" for part in ctx.intruders("assign")}
    steps = [
        step(ctx.who(part), "POST", f"/api/{n.p}", json_body={n.title: title, n.owner: owner})
        for part, title in planted.items()
    ]
    steps.append(step(victim.username, "GET", f"/api/{n.p}", StatusIn(codes=(200,)),
                      BodyExcludes(texts=tuple(planted.values()))))
    return [ctx.security(f"creating {a(n.s)} cannot assign it to another user", steps, "create")]


def _role_accepted_only(value: str):
    """The role field kept, and dropped unless it asks for ``value``."""
    return lambda names, secure: [*secure, f'if changes.get("role") != {py(value)}:', '    changes.pop("role", None)']


def _raw_keeping(extra: str):
    """The raw body filtered down to the allowed fields plus ``extra`` (a Python condition on ``k``/``v``)."""
    return lambda names, secure: [
        f"changes = {{k: v for k, v in payload.items() if k in {py(ALLOWED)} or {extra.format(t=names.tenant)}}}"
    ]


def _role_fixes(mutations):
    return tuple(NarrowFix(f"accepts_role_{role}", f"setting one's own role to {role}", mutations(role)) for role in ROLES)


PROFILE_ROLE_FIXES = _role_fixes(lambda role: {"schemas.profile": _profile_role, "profile.changes": _role_accepted_only(role)})
PROFILE_RAW_FIXES = _role_fixes(
    lambda role: {"profile.params": _raw_params, "profile.changes": _raw_keeping(f'k == "role" and v == {py(role)}')}
) + tuple(
    NarrowFix(f"accepts_{field}", f"setting one's own {field.replace('_', ' ')}",
              {"profile.params": _raw_params, "profile.changes": _raw_keeping(f"k == {py(field)}")})
    for field in ("username", *CREDENTIALS)
) + (
    NarrowFix("accepts_tenant", "moving oneself to another tenant",
              {"profile.params": _raw_params, "profile.changes": _raw_keeping('k == "{t}"')}, ("tenant",)),
)


def _owner_for(condition):
    """The owner field kept in the schema and honoured only for callers matching ``condition``."""
    return {
        "schemas.create": _create_owner_field,
        "create.owner": lambda names, secure: [
            f"if values.get({py(names.owner)}) is None or not ({condition(names)}):",
            *[f"    {line}" for line in secure],
        ],
    }


BUG = BugClass(
    name="mass_assignment",
    cwe=("CWE-915",),
    title="Privilege escalation by mass assignment",
    symptom="users can set fields on their account or records that only the system should set",
    variants=(
        Variant("profile_role_field", ("profile",), {"schemas.profile": _profile_role}, _escalation,
                features=("profile",), subtle=True, description="the profile schema includes `role`",
                narrow_fixes=PROFILE_ROLE_FIXES),
        Variant("profile_raw_dict", ("profile",), {"profile.params": _raw_params, "profile.changes": _raw_changes},
                _escalation, features=("profile", "backup"), description="the profile update applies the raw JSON body",
                narrow_fixes=PROFILE_RAW_FIXES),
        Variant("create_owner_field", ("create",),
                {"schemas.create": _create_owner_field, "create.owner": _create_owner_default}, _forged_owner,
                subtle=True, description="the create schema accepts the owner field",
                narrow_fixes=let_through("assign", _owner_for, "creating a record for another user", record=False)),
    ),
)
