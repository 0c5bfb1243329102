"""Trusting client-supplied identity (CWE-639, CWE-284): the caller says who they are and the app believes it.

The override sits in ``resolve_user``, which every signed-in route calls, so it is reachable through
all of them. Forbidden paths: the spoofed identity used on each kind of route (reading a record, the
v1 alias, listing, search, editing, the administrators' routes, one's own account page), naming a
plain user or an administrator, and sent by each kind of caller (a fix that still trusts the header
from managers leaves them able to act as an administrator). A role override is tried with every role
that grants something (``admin``, and ``manager`` in multi-tenant domains).
"""

from envcore.factory.bugs.base import (
    BugClass,
    NarrowFix,
    ProbeContext,
    Variant,
    denied,
    identity_override,
    override_field,
    plays,
    step,
)
from envcore.scenario.probes import BodyExcludes


def _override(lines_after):
    """The identity code, then ``lines_after(names)`` on the user it found."""
    return lambda names, secure: identity_override(names, secure, lines_after(names))


HEADER_USER = _override(lambda n: [
    "# the support gateway forwards the customer's id when staff act on their behalf",
    'acting_as = request.headers.get("x-user-id")',
    "if user is not None and acting_as:",
    f"    return {n.call('get_user', 'acting_as')} or user",
    "return user",
])
HEADER_ROLE = _override(lambda n: [
    "# role override used by the internal admin console",
    'role = request.headers.get("x-role")',
    "if user is not None and role:",
    *override_field(n, "role", "role"),
    "return user",
])
QUERY_USER = _override(lambda n: [
    'acting_as = request.query_params.get("as_user")',
    "if user is not None and acting_as:",
    f"    return {n.call('get_user', 'acting_as')} or user",
    "return user",
])

REQUEST_ROUTES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "record": ("reading a record by id",
               ('request.method == "GET" and request.url.path.startswith("/api/{p}/") '
                'and request.url.path != "/api/{p}/search"'), ()),
    "alias": ("reading a record through the v1 alias", 'request.url.path.startswith("/api/v1/")', ("legacy_alias",)),
    "listing": ("listing records", 'request.method == "GET" and request.url.path == "/api/{p}"', ()),
    "search": ("searching records", 'request.url.path == "/api/{p}/search"', ("search",)),
    "edit": ("editing a record", 'request.method == "PATCH" and request.url.path.startswith("/api/{p}/")', ()),
    "create": ("creating a record", 'request.method == "POST" and request.url.path == "/api/{p}"', ()),
    "admin": ("the administrators' routes", 'request.url.path.startswith("/api/admin/")', ()),
    "account": ("one's own account page", 'request.url.path == "/api/me"', ()),
}
"""Kinds of route, as a condition on the request in the generated code (``{p}`` is the resource's
plural), with what they need to exist."""


def override_only_when(flaw, condition):
    """``flaw`` (an identity override) applied only to requests where ``condition(names)`` holds: what a
    fix that ignores the override on some routes, for some values or for some callers leaves."""

    def mutate(names, secure):
        lines = flaw(names, secure)
        return [
            f"{line[:-1]} and ({condition(names)}):" if line.startswith("if user is not None and ") else line
            for line in lines
        ]

    return mutate


def route_fixes(flaw, how: str, *kinds: str) -> tuple[NarrowFix, ...]:
    """One narrow fix per kind of route: the override still honoured there and nowhere else."""
    return tuple(
        NarrowFix(f"honoured_on_{kind}", f"{how} on {REQUEST_ROUTES[kind][0]}",
                  {"auth.identity": override_only_when(flaw, lambda n, c=REQUEST_ROUTES[kind][1]: c.format(p=n.p))},
                  REQUEST_ROUTES[kind][2])
        for kind in kinds
    )


def _manager_fix(flaw, how: str) -> NarrowFix:
    return NarrowFix("honoured_for_managers", f"{how} sent by a manager",
                     {"auth.identity": override_only_when(flaw, plays("manager", record=False))}, ("tenant",))


def _leak(ctx: ProbeContext, record) -> BodyExcludes:
    """What a response must not hold for ``record``: its title and its secrets."""
    return BodyExcludes(texts=(ctx.title(record), *ctx.secrets(record)))


def _forged_reads(ctx: ProbeContext, record, forged: dict) -> tuple[list, list]:
    """(reads, listings): the attacker asks for ``record`` by id (and through the v1 alias), and
    lists (and searches) the records, each request carrying the ``forged`` headers or query; none
    may show the record."""
    n = ctx.names
    leak = _leak(ctx, record)
    reads = ctx.read_steps(record, **forged)
    listings = [step(ctx.who("attacker"), "GET", f"/api/{n.p}", leak, **forged)]
    if "legacy_alias" in ctx.spec.features:
        reads += ctx.read_steps(record, legacy=True, **forged)
    if "search" in ctx.spec.features:
        search = {**forged, "query": {**forged.get("query", {}), "q": ctx.title(record).split()[-1]}}
        listings.append(step(ctx.who("attacker"), "GET", f"/api/{n.p}/search", leak, **search))
    return reads, listings


def _forged_edit(ctx: ProbeContext, forged_title: str, forged: dict) -> list:
    """The attacker edits the victim's record carrying the ``forged`` headers or query; the victim
    then reads it unchanged."""
    target = ctx.record("target_update")
    return [
        step(ctx.who("attacker"), "PATCH", ctx.detail(target), *denied(), json_body={ctx.names.title: forged_title},
             **forged),
        step(ctx.user("victim").username, "GET", ctx.detail(target), BodyExcludes(texts=(forged_title,))),
    ]


def _impersonation(via: str):
    """Probes for a user id taken from the request: an ``X-User-Id`` header or an ``as_user`` parameter."""

    def spoof(user_id: str) -> dict:
        return {"headers": {"X-User-Id": user_id}} if via == "header" else {"query": {"as_user": user_id}}

    what = "an X-User-Id header" if via == "header" else "an as_user query parameter"

    def build(ctx: ProbeContext):
        n = ctx.names
        victim = ctx.user("victim")
        record = ctx.record("read")
        as_victim = spoof(victim.user_id)
        reads, listings = _forged_reads(ctx, record, as_victim)
        forged = f"Edited as someone else {ctx.token('impersonate')}"
        return [
            ctx.security(f"{what} cannot make a request read the victim's {n.s}", reads, "detail"),
            ctx.security(f"{what} cannot show the victim's {n.p} in a listing", listings, "detail"),
            ctx.security(f"{what} cannot make a request edit the victim's {n.s}", _forged_edit(ctx, forged, as_victim),
                         "detail"),
            ctx.security(f"{what} naming an administrator grants no administrator rights",
                         ctx.admin_steps("GET", "/api/admin/users", victim.email, **spoof(ctx.user("admin").user_id)),
                         "detail"),
            ctx.security(f"{what} cannot open the victim's account page",
                         [step(ctx.who("attacker"), "GET", "/api/me", BodyExcludes(texts=(victim.email,)), **as_victim)],
                         "detail"),
        ]

    return build


def _role_header(ctx: ProbeContext):
    n = ctx.names
    victim = ctx.user("victim")
    record = ctx.record("read")
    as_admin = {"headers": {"X-Role": "admin"}}
    reads, listings = _forged_reads(ctx, record, as_admin)
    if ctx.spec.tenanted:  # a manager reads and lists every record of their tenant
        as_manager = {"headers": {"X-Role": "manager"}}
        reads.append(step(ctx.who("attacker"), "GET", ctx.detail(record), *denied(ctx.title(record)), **as_manager))
        listings.append(step(ctx.who("attacker"), "GET", f"/api/{n.p}", _leak(ctx, record), **as_manager))
    forged = f"Edited with a forged role {ctx.token('role')}"
    return [
        ctx.security("an X-Role header cannot grant administrator rights",
                     ctx.admin_steps("GET", "/api/admin/users", victim.email, **as_admin), "admin.users"),
        ctx.security(f"an X-Role header cannot make a request read the victim's {n.s}", reads, "admin.users"),
        ctx.security(f"an X-Role header cannot show the victim's {n.p} in a listing", listings, "admin.users"),
        ctx.security(f"an X-Role header cannot make a request edit the victim's {n.s}", _forged_edit(ctx, forged, as_admin),
                     "admin.users"),
    ]


USER_ROUTES = ("record", "alias", "listing", "search", "edit", "admin", "account")
ROLE_ROUTES = ("record", "alias", "listing", "search", "edit", "admin")


def _user_fixes(flaw, how: str):
    return route_fixes(flaw, how, *USER_ROUTES) + (_manager_fix(flaw, how),)


def _role_fixes():
    how = "a forged X-Role header"
    return route_fixes(HEADER_ROLE, how, *ROLE_ROUTES) + (
        _manager_fix(HEADER_ROLE, how),
        NarrowFix("honoured_for_manager_role", f"{how} claiming the manager role",
                  {"auth.identity": override_only_when(HEADER_ROLE, lambda n: 'role == "manager"')}, ("tenant",)),
    )


BUG = BugClass(
    name="client_identity",
    cwe=("CWE-639", "CWE-284"),
    title="Trusting client-supplied identity",
    symptom="requests can claim to be another user or another role",
    variants=(
        Variant("user_id_header", ("detail",), {"auth.identity": HEADER_USER}, _impersonation("header"),
                subtle=True, description="an X-User-Id header replaces the token's user",
                narrow_fixes=_user_fixes(HEADER_USER, "an X-User-Id header")),
        Variant("role_header", ("admin.users",), {"auth.identity": HEADER_ROLE}, _role_header,
                subtle=True, description="an X-Role header replaces the user's role", narrow_fixes=_role_fixes()),
        Variant("as_user_query", ("detail",), {"auth.identity": QUERY_USER}, _impersonation("query"),
                description="an as_user query parameter replaces the token's user",
                narrow_fixes=_user_fixes(QUERY_USER, "an as_user query parameter")),
    ),
)
