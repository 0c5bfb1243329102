"""Trusting client-supplied identity (CWE-639, CWE-284): the caller says who they are and the app believes it."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, denied, step

RESOLVE_TAIL = "return get_user_by_token(token.strip())"


def _override(lines_after: list[str]):
    def mutate(names, secure):
        head = [line for line in secure if line != RESOLVE_TAIL]
        return head + ["user = get_user_by_token(token.strip())", *lines_after]

    return mutate


HEADER_USER = _override([
    "# the support gateway forwards the customer's id when staff act on their behalf",
    'acting_as = request.headers.get("x-user-id")',
    "if user is not None and acting_as:",
    "    return get_user(acting_as) or user",
    "return user",
])
HEADER_ROLE = _override([
    "# role override used by the internal admin console",
    'role = request.headers.get("x-role")',
    "if user is not None and role:",
    '    user = {**user, "role": role}',
    "return user",
])
QUERY_USER = _override([
    'acting_as = request.query_params.get("as_user")',
    "if user is not None and acting_as:",
    "    return get_user(acting_as) or user",
    "return user",
])


def _impersonate_header(ctx: ProbeContext):
    record = ctx.record("read")
    return [
        ctx.security(
            "an X-User-Id header cannot make a request act as the victim",
            [step(ctx.who("attacker"), "GET", ctx.detail(record), *denied(ctx.title(record), *ctx.secrets(record)),
                  headers={"X-User-Id": ctx.user("victim").user_id})],
            "detail",
        )
    ]


def _impersonate_query(ctx: ProbeContext):
    record = ctx.record("read")
    return [
        ctx.security(
            "an as_user query parameter cannot make a request act as the victim",
            [step(ctx.who("attacker"), "GET", ctx.detail(record), *denied(ctx.title(record), *ctx.secrets(record)),
                  query={"as_user": ctx.user("victim").user_id})],
            "detail",
        )
    ]


def _role_header(ctx: ProbeContext):
    return [
        ctx.security(
            "an X-Role header cannot grant administrator rights",
            [step(ctx.who("attacker"), "GET", "/api/admin/users", *denied(ctx.user("victim").email),
                  headers={"X-Role": "admin"})],
            "admin.users",
        )
    ]


BUG = BugClass(
    name="client_identity",
    cwe=("CWE-639", "CWE-284"),
    title="Trusting client-supplied identity",
    symptom="requests can claim to be another user or another role",
    variants=(
        Variant("user_id_header", ("detail",), {"auth.identity": HEADER_USER}, _impersonate_header,
                subtle=True, description="an X-User-Id header replaces the token's user"),
        Variant("role_header", ("admin.users",), {"auth.identity": HEADER_ROLE}, _role_header,
                subtle=True, description="an X-Role header replaces the user's role"),
        Variant("as_user_query", ("detail",), {"auth.identity": QUERY_USER}, _impersonate_query,
                description="an as_user query parameter replaces the token's user"),
    ),
)
