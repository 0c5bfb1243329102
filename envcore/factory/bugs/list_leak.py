"""Listing and search leak (CWE-639, CWE-200): collection endpoints return other users' records."""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, step
from envcore.scenario.probes import BodyExcludes


def _list_unfiltered(names, secure):
    return [], [f"records = {names.list}()", "return [present(user, r) for r in records]"]


def _list_owner_param(names, secure):
    cast = "int(owner)" if names.id_type == "int" else "owner"
    return ["owner: str | None = None"], [
        "scope = visible_scope(user)",
        "if owner is not None:",
        "    # lets the web client show a colleague's board",
        f'    scope = {{"owner": {cast}}}',
        f"records = {names.list}(**scope)",
        "return [present(user, r) for r in records]",
    ]


def _search_unfiltered(names, secure):
    return [f"records = {names.search}(q)", "return [present(user, r) for r in records]"]


def _probes(*sites: str, owner_param: bool = False):
    def build(ctx: ProbeContext):
        n = ctx.names
        record = ctx.record("read")
        leak = BodyExcludes(texts=(ctx.title(record), *ctx.secrets(record)))
        attacker = ctx.who("attacker")
        out = []
        if "list" in sites:
            query = {"owner": ctx.user("victim").user_id} if owner_param else {}
            out.append(
                ctx.security(
                    f"listing {n.p} never shows the victim's records to another user",
                    [step(attacker, "GET", f"/api/{n.p}", leak, query=query)],
                    "list",
                )
            )
        if "search" in sites:
            marker = ctx.title(record).split()[-1]
            out.append(
                ctx.security(
                    f"searching {n.p} never returns the victim's records to another user",
                    [step(attacker, "GET", f"/api/{n.p}/search", leak, query={"q": marker})],
                    "search",
                )
            )
        return out

    return build


BUG = BugClass(
    name="list_leak",
    cwe=("CWE-639", "CWE-200"),
    title="Collection endpoint leaks other users' records",
    symptom="users see records of other people in their listings or search results",
    variants=(
        Variant("list_unfiltered", ("list",), {"list.filter": _list_unfiltered}, _probes("list"),
                description="the list route ignores the caller's scope"),
        Variant("list_owner_param", ("list",), {"list.filter": _list_owner_param}, _probes("list", owner_param=True),
                subtle=True, description="the list route trusts an owner filter from the query string"),
        Variant("search_unfiltered", ("search",), {"search.filter": _search_unfiltered}, _probes("search"),
                features=("search",), description="search ignores the caller's scope"),
        Variant("list_and_search_unfiltered", ("list", "search"),
                {"list.filter": _list_unfiltered, "search.filter": _search_unfiltered}, _probes("list", "search"),
                features=("search",), site_keys={"list": ("list.filter",), "search": ("search.filter",)},
                description="both list and search ignore the caller's scope"),
    ),
)
