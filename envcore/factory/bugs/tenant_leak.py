"""Tenant isolation failure (CWE-639, CWE-668): a manager reaches records of another tenant.

Forbidden paths: a manager of another tenant reading the victim's record through every route the
broken code serves. ``can_read`` answers for the detail route and, when the app has it, the v1 alias
(a tenant check written into the detail route alone leaves the alias open). The tenant parameter is
read by the list route only. The tenant header is read for every request, so it is tried on the
listing, search, the detail route, the v1 alias, and on creating a record, which files the record
under the tenant the caller claims.
"""

from envcore.factory.bugs.base import (
    BugClass,
    NarrowFix,
    ProbeContext,
    Variant,
    denied,
    identity_override,
    inline_check,
    override_field,
    step,
)
from envcore.factory.bugs.client_identity import route_fixes
from envcore.factory.bugs.list_leak import scope_filter, scoped_records
from envcore.scenario.probes import BodyExcludes, StatusIn


def _manager_any_tenant(names, secure):
    role, t = names.attr("user", "role"), names.tenant
    strict = f'if {role} == "manager" and {names.attr(names.rec, t)} == {names.attr("user", t)}:'
    return [f'if {role} == "manager":' if line == strict else line for line in secure]


def _tenant_param(names, secure):
    t = names.tenant
    return [f"{t}: str | None = None"], [
        "scope = visible_scope(user)",
        f'if {t} is not None and {names.attr("user", "role")} == "manager":',
        "    # managers can switch between the workspaces they see in the UI",
        f"    scope = {scope_filter(names, 'tenant', t)}",
        scoped_records(names, "scope"),
        names.present_records,
    ]


def _tenant_header(names, secure):
    return identity_override(names, secure, [
        'switch_to = request.headers.get("x-tenant-id")',
        "if user is not None and switch_to:",
        *override_field(names, names.tenant, "switch_to"),
        "return user",
    ])


def _rival_reads(ctx: ProbeContext, **request) -> list:
    record = ctx.record("read")
    leaks = denied(ctx.title(record), *ctx.secrets(record))
    steps = [step(ctx.who("rival_manager"), "GET", ctx.detail(record), *leaks, **request)]
    if "legacy_alias" in ctx.spec.features:  # the alias asks the same helper / reads the same identity
        steps.append(step(ctx.who("rival_manager"), "GET", ctx.detail(record, legacy=True), *leaks, **request))
    return steps


def _detail(ctx: ProbeContext):
    return [
        ctx.security(
            f"a manager of another {ctx.names.tenant[:-3]} cannot read the victim's {ctx.names.s}",
            _rival_reads(ctx),
            "detail",
        )
    ]


def _rival_lists(ctx: ProbeContext, **request) -> list:
    n = ctx.names
    record = ctx.record("read")
    leak = BodyExcludes(texts=(ctx.title(record), *ctx.secrets(record)))
    steps = [step(ctx.who("rival_manager"), "GET", f"/api/{n.p}", leak, **request)]
    if "search" in ctx.spec.features and "headers" in request:  # the header reaches search too
        steps.append(step(ctx.who("rival_manager"), "GET", f"/api/{n.p}/search", leak,
                          query={"q": ctx.title(record).split()[-1]}, **request))
    return steps


def _param(ctx: ProbeContext):
    n = ctx.names
    return [
        ctx.security(
            f"a manager of another {n.tenant[:-3]} never sees the victim's {n.p} in a listing",
            _rival_lists(ctx, query={n.tenant: ctx.user("victim").tenant}),
            "list",
        )
    ]


def _header(ctx: ProbeContext):
    n = ctx.names
    victim = ctx.user("victim")
    switch = {"headers": {"X-Tenant-Id": victim.tenant}}
    planted = f"Filed under another {n.tenant[:-3]} {ctx.token('plant')}"
    return [
        ctx.security(
            f"a manager of another {n.tenant[:-3]} never sees the victim's {n.p} in a listing",
            _rival_lists(ctx, **switch),
            "list",
        ),
        ctx.security(
            f"an X-Tenant-Id header cannot open the victim's {n.s} to a manager of another {n.tenant[:-3]}",
            _rival_reads(ctx, **switch),
            "list",
        ),
        ctx.security(
            f"an X-Tenant-Id header cannot file a new {n.s} under another {n.tenant[:-3]}",
            [
                step(ctx.who("bystander"), "POST", f"/api/{n.p}", json_body={n.title: planted}, **switch),
                step(ctx.who("manager"), "GET", f"/api/{n.p}", StatusIn(codes=(200,)), BodyExcludes(texts=(planted,))),
            ],
            "list",
        ),
    ]


BUG = BugClass(
    name="tenant_leak",
    cwe=("CWE-639", "CWE-668"),
    title="Tenant isolation failure",
    symptom="staff of one organisation can see another organisation's data",
    requires_tenant=True,
    variants=(
        Variant("manager_any_tenant", ("detail",), {"policy.can_read": _manager_any_tenant}, _detail,
                requires_tenant=True, subtle=True, description="can_read lets any manager read any tenant's record",
                narrow_fixes=(
                    NarrowFix("fixed_in_detail_route", "reading through the v1 alias, which still asks the broken helper",
                              {"policy.can_read": _manager_any_tenant, "detail.check": inline_check("read")},
                              ("legacy_alias",)),
                    NarrowFix("fixed_in_alias_route", "reading through the detail route, which still asks the broken helper",
                              {"policy.can_read": _manager_any_tenant, "legacy.check": inline_check("read")},
                              ("legacy_alias",)),
                )),
        Variant("tenant_query_param", ("list",), {"list.filter": _tenant_param}, _param,
                requires_tenant=True, description="the list route takes the tenant from the query string"),
        Variant("tenant_header", ("list",), {"auth.identity": _tenant_header}, _header,
                requires_tenant=True, subtle=True, description="an X-Tenant-Id header switches the caller's tenant",
                narrow_fixes=route_fixes(_tenant_header, "an X-Tenant-Id header",
                                         "listing", "search", "record", "alias", "create")),
    ),
)
