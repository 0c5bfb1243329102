"""Tenant isolation failure (CWE-639, CWE-668): a manager reaches records of another tenant."""

from envcore.factory.codegen.parts import py
from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, denied, step
from envcore.scenario.probes import BodyExcludes


def _manager_any_tenant(names, secure):
    strict = f'if user["role"] == "manager" and record[{py(names.tenant)}] == user[{py(names.tenant)}]:'
    return ['if user["role"] == "manager":' if line == strict else line for line in secure]


def _tenant_param(names, secure):
    t = names.tenant
    return [f"{t}: str | None = None"], [
        "scope = visible_scope(user)",
        f'if {t} is not None and user["role"] == "manager":',
        "    # managers can switch between the workspaces they see in the UI",
        f'    scope = {{"tenant": {t}}}',
        f"records = {names.list}(**scope)",
        "return [present(user, r) for r in records]",
    ]


def _tenant_header(names, secure):
    tail = "return get_user_by_token(token.strip())"
    head = [line for line in secure if line != tail]
    return head + [
        "user = get_user_by_token(token.strip())",
        'switch_to = request.headers.get("x-tenant-id")',
        "if user is not None and switch_to:",
        f"    user = {{**user, {py(names.tenant)}: switch_to}}",
        "return user",
    ]


def _detail(ctx: ProbeContext):
    record = ctx.record("read")
    return [
        ctx.security(
            f"a manager of another {ctx.names.tenant[:-3]} cannot read the victim's {ctx.names.s}",
            [step(ctx.who("rival_manager"), "GET", ctx.detail(record), *denied(ctx.title(record), *ctx.secrets(record)))],
            "detail",
        )
    ]


def _listing(how: str):
    def build(ctx: ProbeContext):
        n = ctx.names
        record = ctx.record("read")
        tenant = ctx.user("victim").tenant
        kw = {"query": {n.tenant: tenant}} if how == "query" else {"headers": {"X-Tenant-Id": tenant}}
        return [
            ctx.security(
                f"a manager of another {n.tenant[:-3]} never sees the victim's {n.p} in a listing",
                [step(ctx.who("rival_manager"), "GET", f"/api/{n.p}",
                      BodyExcludes(texts=(ctx.title(record), *ctx.secrets(record))), **kw)],
                "list",
            )
        ]

    return build


BUG = BugClass(
    name="tenant_leak",
    cwe=("CWE-639", "CWE-668"),
    title="Tenant isolation failure",
    symptom="staff of one organisation can see another organisation's data",
    requires_tenant=True,
    variants=(
        Variant("manager_any_tenant", ("detail",), {"policy.can_read": _manager_any_tenant}, _detail,
                requires_tenant=True, subtle=True, description="can_read lets any manager read any tenant's record"),
        Variant("tenant_query_param", ("list",), {"list.filter": _tenant_param}, _listing("query"),
                requires_tenant=True, description="the list route takes the tenant from the query string"),
        Variant("tenant_header", ("list",), {"auth.identity": _tenant_header}, _listing("header"),
                requires_tenant=True, subtle=True, description="an X-Tenant-Id header switches the caller's tenant"),
    ),
)
