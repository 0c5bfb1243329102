"""The heuristic baseline: a hurried reviewer's checklist, applied mechanically.

The agent reads every Python file (in an app with more files than its step budget allows, the ones
with route handlers or the helpers below, found by one search, as many as the budget allows while
keeping two steps for the patch and the submit), then patches each one with four rules a reviewer
applies without understanding the app:

1. **Ownership after lookup.** In a handler whose route takes an id, after "load the record, 404 if
   it is missing", add the app's own ``can_read`` (reads) or ``can_modify`` (writes) check.
2. **Admin areas need an admin.** A handler whose path lies under ``/admin`` or ``/internal`` and
   that never mentions an admin check gets the app's own one, in the app's own style: a
   ``Depends(require_admin)`` parameter, an ``ensure_admin(user)`` call, or an ``@admin_required``
   decorator.
3. **Listings are scoped.** A GET handler without an id that calls a ``query_*``/``find_*`` store
   function without ``visible_scope`` passes ``**visible_scope(user)``.
4. **Redirects stay on site.** A ``RedirectResponse`` to a handler parameter is preceded by a check
   that the target is a local path.

Plausible and imperfect on purpose. It never reads the policy or sends a request, so it misses bugs
that live in the policy functions themselves (a ``can_read`` that forgets the tenant), trusted client
identity, mass assignment, path traversal and over-broad responses. It is fooled by what harder
tiers add: it guards *every* id route, so a colleague directory that must stay open to everyone
breaks, and a handler that already says "admin" somewhere (a check on one method only) is left
alone. It is the benchmark's "plausible script" line: better than chance, worse than the reference,
and worse as the tier rises.
"""

from __future__ import annotations

import ast
import re

from envcore.agents.base import Script, ScriptedAgent, file_text, python_files
from envcore.env.actions import LIMITS, A01Observation
from envcore.patching import make_diff

HELPERS = ("can_read", "can_modify", "visible_scope", "ensure_admin", "require_admin", "admin_required",
           "login_required", "current_user", "authenticate")
_DEFINED = re.compile(r"^(?:async\s+)?def (\w+)\(", re.MULTILINE)
_ID_ROUTE = re.compile(r"\{\w*id\w*\}")
_ADMIN_PATH = re.compile(r"/(?:admin|internal)\b")
_MISSING = re.compile(r"^(\s*)if (\w+) is None:\s*$")
_ROUTE_METHODS = ("get", "post", "put", "patch", "delete", "api_route")
_WORTH_READING = rf"^\s*(?:@[\w.]+\.(?:{'|'.join(_ROUTE_METHODS)})|(?:async )?def (?:{'|'.join(HELPERS)}))\("
"""The lines of the files the rules can change (route handlers) or use (the app's own helpers)."""


class HeuristicAgent(ScriptedAgent):
    name = "heuristic"

    RESERVED = 2
    """Steps kept for the patch and the submit."""

    def script(self, first: A01Observation) -> Script:
        texts: dict[str, str] = {}
        paths, steps_left = python_files(first), first.steps_left
        if len(paths) + self.RESERVED > steps_left:  # too many files to read them all: handlers and helpers first
            found = yield {"tool": "search_code", "query": _WORTH_READING, "regex": True,
                           "max_results": LIMITS["search_results"]}
            steps_left = found.steps_left
            paths = sorted({m["path"] for m in (found.result or {}).get("matches") or []})
        for path in paths:
            if steps_left <= self.RESERVED:
                break
            observation = yield {"tool": "read_file", "path": path}
            steps_left = observation.steps_left
            text = file_text(observation)
            if text is not None:
                texts[path] = text
        helpers = {name for text in texts.values() for name in _DEFINED.findall(text)} & set(HELPERS)
        changed = {}
        for path, text in texts.items():
            patched = review(text, helpers)
            if patched != text:
                changed[path] = patched
        if changed:
            yield {"tool": "apply_patch", "diff": make_diff({p: texts[p] for p in changed}, changed)}


def review(text: str, helpers: set[str]) -> str:
    """``text`` with every rule applied, using only the helpers the app defines (``helpers``)."""
    for rule in (add_ownership_checks, require_admin_areas, scope_listings, keep_redirects_local):
        text = rule(text, helpers)
    return text


# -- the handlers of a module ------------------------------------------------------------------------

class _Route:
    """One route handler: its function node, HTTP method (lower case) and full path."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, method: str, path: str) -> None:
        self.node, self.method, self.path = node, method, path

    def source(self, lines: list[str]) -> str:
        """The handler's text, decorators included."""
        start = min([self.node.lineno, *(d.lineno for d in self.node.decorator_list)])
        return "".join(lines[start - 1: self.node.end_lineno])

    def params(self) -> list[str]:
        args = self.node.args
        return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]


def _routes(tree: ast.Module) -> list[_Route]:
    prefixes: dict[str, str] = {}
    for node in ast.walk(tree):  # router = APIRouter(prefix="/api/admin")
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            for keyword in node.value.keywords:
                if keyword.arg == "prefix" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                    prefixes[node.targets[0].id] = keyword.value.value
    routes = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef)):
            continue
        for decorator in node.decorator_list:
            if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                    and decorator.func.attr in _ROUTE_METHODS and decorator.args
                    and isinstance(decorator.args[0], ast.Constant) and isinstance(decorator.args[0].value, str)):
                owner = decorator.func.value.id if isinstance(decorator.func.value, ast.Name) else ""
                method = decorator.func.attr
                if method == "api_route":
                    methods = [k.value for k in decorator.keywords if k.arg == "methods"]
                    names = [e.value for e in methods[0].elts if isinstance(e, ast.Constant)] if methods and isinstance(methods[0], ast.List) else []
                    method = "get" if names == ["GET"] else "post"
                routes.append(_Route(node, method, prefixes.get(owner, "") + decorator.args[0].value))
                break
    return routes


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _reachable(text: str, helpers: set[str]) -> set[str]:
    """The helpers this module can use: its own, or all of them when it imports from the module that
    defines them (``from ..security import ...``)."""
    if re.search(r"^from \S*security import [^\n(]+$", text, re.MULTILINE):
        return set(helpers)
    return set(_DEFINED.findall(text)) & helpers


def _apply(lines: list[str], inserts: list[tuple[int, str]], replaces: dict[int, str]) -> str:
    for index, line in replaces.items():
        lines[index] = line
    for at, snippet in sorted(inserts, key=lambda i: i[0], reverse=True):
        lines.insert(at, snippet)
    return "".join(lines)


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


# -- rule 1: ownership after lookup ------------------------------------------------------------------

def add_ownership_checks(text: str, helpers: set[str]) -> str:
    """``text`` with an ownership check after each "404 if missing" in a handler of an id route."""
    checks = _reachable(text, helpers) & {"can_read", "can_modify"}
    tree = _parse(text) if checks else None
    if tree is None:
        return text
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    for route in _routes(tree):
        body = route.source(lines)
        if not _ID_ROUTE.search(route.path) or "can_read(" in body or "can_modify(" in body or not re.search(r"\buser\b", body):
            continue
        check = "can_read" if route.method == "get" else "can_modify"
        if check not in checks:
            continue
        for index in range(route.node.lineno, (route.node.end_lineno or route.node.lineno) - 1):
            missing = _MISSING.match(lines[index].rstrip("\n"))
            if missing and index + 1 < len(lines) and "raise HTTPException" in lines[index + 1]:
                indent, record = missing.groups()
                inserts.append((index + 2, f"{indent}if not {check}(user, {record}):\n"
                                           f'{indent}    raise HTTPException(status_code=403, detail="not allowed")\n'))
                break
    if not inserts:
        return text
    new = _apply(lines, inserts, {})
    return _import_helpers(new, {c for c in checks if f"{c}(" in new})


# -- rule 2: admin areas need an admin ---------------------------------------------------------------

def require_admin_areas(text: str, helpers: set[str]) -> str:
    """``text`` with the app's admin check added to handlers under /admin or /internal that lack one."""
    usable = _reachable(text, helpers)
    tree = _parse(text) if usable & {"require_admin", "ensure_admin", "admin_required"} else None
    if tree is None:
        return text
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    replaces: dict[int, str] = {}
    needs: set[str] = set()
    for route in _routes(tree):
        body = route.source(lines)
        if not _ADMIN_PATH.search(route.path) or re.search(r"admin_required|require_admin|ensure_admin|[\"']admin[\"']", body):
            continue
        node = route.node
        def_line = next(i for i in range(node.lineno - 1, node.end_lineno or node.lineno) if re.match(r"\s*(async\s+)?def ", lines[i]))
        if "admin_required" in usable:
            decorators = [d for d in node.decorator_list if isinstance(d, ast.Name) and d.id == "login_required"]
            if decorators:
                index = decorators[0].lineno - 1
                replaces[index] = lines[index].replace("login_required", "admin_required")
            elif "request" in route.params():
                inserts.append((def_line, f"{_indent_of(lines[def_line])}@admin_required\n"))
            else:
                continue
            needs.add("admin_required")
        elif "require_admin" in usable:
            signature_end = node.body[0].lineno - 1
            signature = range(def_line, signature_end)
            hit = next((i for i in signature if "Depends(current_user)" in lines[i]), None)
            if hit is not None:
                replaces[hit] = lines[hit].replace("Depends(current_user)", "Depends(require_admin)")
            elif def_line == signature_end - 1 and lines[def_line].rstrip().endswith("):"):
                line = lines[def_line].rstrip("\n")
                head = line[: line.rindex(")")]
                sep = "" if head.endswith("(") else ", "
                replaces[def_line] = f"{head}{sep}user: dict = Depends(require_admin)):\n"
            else:
                continue
            needs.add("require_admin")
        else:
            login = next((i for i in range(def_line, node.end_lineno or def_line) if re.match(r"\s*user = authenticate\(", lines[i])), None)
            if login is not None:
                inserts.append((login + 1, f"{_indent_of(lines[login])}ensure_admin(user)\n"))
            elif "request" in route.params() and "authenticate" in usable:
                first = node.body[1] if (len(node.body) > 1 and isinstance(node.body[0], ast.Expr)
                                         and isinstance(node.body[0].value, ast.Constant)) else node.body[0]
                indent = _indent_of(lines[first.lineno - 1])
                inserts.append((first.lineno - 1, f"{indent}user = authenticate(request)\n{indent}ensure_admin(user)\n"))
                needs.add("authenticate")
            else:
                continue
            needs.add("ensure_admin")
    if not inserts and not replaces:
        return text
    new = _apply(lines, inserts, replaces)
    if "require_admin" in needs:
        new = _import_from_fastapi(new, "Depends")
    return _import_helpers(new, needs)


# -- rule 3: listings are scoped ---------------------------------------------------------------------

def scope_listings(text: str, helpers: set[str]) -> str:
    """``text`` with ``**visible_scope(user)`` passed to unscoped store queries in list handlers."""
    tree = _parse(text) if "visible_scope" in _reachable(text, helpers) else None
    if tree is None:
        return text
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (line index, column of the closing parenthesis, text)
    for route in _routes(tree):
        body = route.source(lines)
        if (route.method != "get" or _ID_ROUTE.search(route.path) or _ADMIN_PATH.search(route.path)
                or "visible_scope" in body or not re.search(r"\buser\b", body)):
            continue
        for call in ast.walk(route.node):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and re.match(r"(query|find)_\w+$", call.func.id) and call.end_lineno is not None
                    and not any(k.arg is None for k in call.keywords)):
                sep = ", " if call.args or call.keywords else ""
                edits.append((call.end_lineno - 1, (call.end_col_offset or 1) - 1, f"{sep}**visible_scope(user)"))
    if not edits:
        return text
    for index, column, snippet in sorted(edits, reverse=True):
        line = lines[index]
        lines[index] = line[:column] + snippet + line[column:]
    return _import_helpers("".join(lines), {"visible_scope"})


# -- rule 4: redirects stay on site ------------------------------------------------------------------

def keep_redirects_local(text: str, helpers: set[str]) -> str:
    """``text`` with a local-path check before each redirect to a handler parameter."""
    tree = _parse(text) if "RedirectResponse(" in text else None
    if tree is None:
        return text
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    for route in _routes(tree):
        params = set(route.params())
        for statement in route.node.body:
            for call in ast.walk(statement):
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "RedirectResponse"):
                    continue
                target = next((k.value for k in call.keywords if k.arg == "url"), call.args[0] if call.args else None)
                if not (isinstance(target, ast.Name) and target.id in params):
                    continue
                name, indent = target.id, _indent_of(lines[statement.lineno - 1])
                guard = f'if not {name}.startswith("/") or {name}.startswith("//") or "\\\\" in {name}:'
                if guard not in route.source(lines):  # already guarded the same way
                    inserts.append((statement.lineno - 1, f'{indent}{guard}\n{indent}    {name} = "/"\n'))
    return _apply(lines, inserts, {}) if inserts else text


# -- imports -----------------------------------------------------------------------------------------

def _import_helpers(text: str, names: set[str]) -> str:
    """Add ``names`` to the module's ``from ...security import`` line if it lacks them (and does not
    define them itself)."""
    match = re.search(r"^from (\S*security) import ([^\n(]+)$", text, re.MULTILINE)
    if match is None:
        return text
    have = {n.strip() for n in match.group(2).split(",")}
    missing = sorted(n for n in names if n not in have and n not in _DEFINED.findall(text))
    if not missing:
        return text
    line = f"from {match.group(1)} import {match.group(2).rstrip()}, {', '.join(missing)}"
    return text[: match.start()] + line + text[match.end():]


def _import_from_fastapi(text: str, name: str) -> str:
    match = re.search(r"^from fastapi import ([^\n(]+)$", text, re.MULTILINE)
    if match is None or name in {n.strip() for n in match.group(1).split(",")}:
        return text
    return text[: match.end()] + f", {name}" + text[match.end():]
