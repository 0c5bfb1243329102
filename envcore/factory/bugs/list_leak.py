"""Listing and search leak (CWE-639, CWE-200): collection endpoints return other users' records.

Forbidden paths: every caller outside the owner's scope lists or searches, through every collection
route that serves the broken scope, with every parameter that widens it: plain users and, in
multi-tenant domains, managers of another tenant (a fix that scopes plain users only lets managers
see every tenant), and the ``owner=`` filter whoever sends it.
"""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, let_through, step
from envcore.factory.codegen.parts import py
from envcore.scenario.probes import BodyExcludes

OWNER_TEST = "if owner is not None:"


def scoped_records(names, scope: str | None) -> str:
    """The line a listing loads its records with: every record, or those ``scope`` admits (store
    filters as keyword arguments, or an ORM ``where`` clause)."""
    if names.orm:
        return names.records_query(*([scope] if scope else []))
    return f"records = {names.list}(**{scope})" if scope else f"records = {names.list}()"


def scope_filter(names, kind: str, value: str) -> str:
    """A scope that admits the records of one owner (``kind="owner"``) or one tenant."""
    if names.orm:
        column = names.owner if kind == "owner" else names.tenant
        return f"{names.model}.{column} == {value}"
    return f"{{{py(kind)}: {value}}}"


def _list_unfiltered(names, secure):
    return [], [scoped_records(names, None), names.present_records]


def _list_owner_param(names, secure):
    cast = "int(owner)" if names.id_type == "int" else "owner"
    return ["owner: str | None = None"], [
        "scope = visible_scope(user)",
        OWNER_TEST,
        "    # lets the web client show a colleague's board",
        f"    scope = {scope_filter(names, 'owner', cast)}",
        scoped_records(names, "scope"),
        names.present_records,
    ]


def _search_unfiltered(names, secure):
    if names.orm:
        return [names.records_query(f"{names.model}.{names.title}.icontains(q)"), names.present_records]
    return [f"records = {names.search}(q)", "return [present(user, r) for r in records]"]


def _probes(*sites: str, owner_param: bool = False):
    def build(ctx: ProbeContext):
        n = ctx.names
        record = ctx.record("read")
        leak = BodyExcludes(texts=(ctx.title(record), *ctx.secrets(record)))
        query = {"owner": ctx.user("victim").user_id} if owner_param else {}
        out = []
        if "list" in sites:
            out.append(
                ctx.security(
                    f"listing {n.p} never shows the victim's records to other users",
                    [step(ctx.who(part), "GET", f"/api/{n.p}", leak, query=query) for part in ctx.intruders("read")],
                    "list",
                )
            )
        if "search" in sites:
            marker = ctx.title(record).split()[-1]
            out.append(
                ctx.security(
                    f"searching {n.p} never returns the victim's records to other users",
                    [step(ctx.who(part), "GET", f"/api/{n.p}/search", leak, query={"q": marker})
                     for part in ctx.intruders("read")],
                    "search",
                )
            )
        return out

    return build


def _unscoped_for(condition):
    """The caller's scope, dropped for callers matching ``condition``."""

    def widen(names, line: str) -> str:
        if names.orm:  # the where clause: no filter at all for them
            return line.replace("visible_scope(user)", f"true() if {condition(names)} else visible_scope(user)")
        return line.replace("**visible_scope(user)", f"**({{}} if {condition(names)} else visible_scope(user))")

    def mutate(names, secure):
        if isinstance(secure, tuple):  # the list route: (parameters, body)
            return secure[0], [widen(names, line) for line in secure[1]]
        return [widen(names, line) for line in secure]

    return mutate


def _owner_param_for(condition):
    """The owner filter, honoured only for callers matching ``condition``."""

    def mutate(names, secure):
        params, body = _list_owner_param(names, secure)
        return params, [f"if owner is not None and {condition(names)}:" if line == OWNER_TEST else line for line in body]

    return mutate


def _narrow(*keys: str):
    return let_through("read", lambda who: {key: _unscoped_for(who) for key in keys},
                       "listing every record", record=False)


BUG = BugClass(
    name="list_leak",
    cwe=("CWE-639", "CWE-200"),
    title="Collection endpoint leaks other users' records",
    symptom="users see records of other people in their listings or search results",
    variants=(
        Variant("list_unfiltered", ("list",), {"list.filter": _list_unfiltered}, _probes("list"),
                description="the list route ignores the caller's scope", narrow_fixes=_narrow("list.filter")),
        Variant("list_owner_param", ("list",), {"list.filter": _list_owner_param}, _probes("list", owner_param=True),
                subtle=True, description="the list route trusts an owner filter from the query string",
                narrow_fixes=let_through("read", lambda who: {"list.filter": _owner_param_for(who)},
                                         "listing another owner's records with owner=", record=False)),
        Variant("search_unfiltered", ("search",), {"search.filter": _search_unfiltered}, _probes("search"),
                features=("search",), description="search ignores the caller's scope",
                narrow_fixes=_narrow("search.filter")),
        Variant("list_and_search_unfiltered", ("list", "search"),
                {"list.filter": _list_unfiltered, "search.filter": _search_unfiltered}, _probes("list", "search"),
                features=("search",), site_keys={"list": ("list.filter",), "search": ("search.filter",)},
                description="both list and search ignore the caller's scope",
                narrow_fixes=_narrow("list.filter", "search.filter")),
    ),
)
