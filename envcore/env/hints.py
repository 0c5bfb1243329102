"""Hints for a person playing by hand: three, in order, each costing reward.

A hint is what a mentor would say when someone is stuck, from the scenario's own data: where the fix
belongs (:data:`HINTS` ``where``: the files the reference fix changes, the routes the bug is reached
through, and the function that handles each route, with its file and line), which lines are wrong (``lines``: the code the reference fix replaces, or the line
after which its missing check belongs, as the app ships it; never the fix itself; for a scenario whose
hidden suite may only be told in words, where to read and what to compare, naming no line, since the
lines come from its reference fix), and how to show the
bug (``exploit``: the first exploit of the hidden suite; for a scenario whose hidden suite may only be
told in words (:func:`~envcore.verifier.disclosure.disclosure_for`) its title, the route's template
and the seeded user it is sent as, never the request itself).

**A hint always tells more than the task.** The task text often names the route already ("the problem
is reachable through `GET /api/shared/{code}`"), and a one-file app's only file is in the file list the
player sees, so a hint made of the fix's files and the routes alone could repeat what the player was
told and still cost reward. The ``where`` hint therefore names each route's handler (its function, file
and line, read from the app's code with :mod:`ast`: the code as shipped, never the reference fix), and
the held-out ``lines`` hint names the handlers to read. :func:`news` says what a hint tells that the
task does not; every hint of every shipped scenario is checked to tell something (``tests/test_hints.py``).

Hints are not tools: agents never see them. Each one taken is recorded in the episode (and its log,
``hints``) and costs its :attr:`Hint.cost` at submit, as a ``hints`` term of the reward breakdown
(:mod:`envcore.env.reward`), so a human score says how much help it had.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlencode

from envcore.patching import PatchError, parse_patch
from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import ProbeKind
from envcore.scenario.splits import Disclosure

QUOTED_LINES = 8
"""Lines of the app quoted by the ``lines`` hint at most."""


@dataclass(frozen=True)
class Hint:
    key: str
    title: str
    cost: float
    """What taking it costs at submit (subtracted from the reward)."""
    words_cost: float | None = None
    """What it costs where the scenario's hidden suite is told in words only and the hint says less
    (``None``: the same)."""

    def cost_for(self, disclosure: Disclosure) -> float:
        return self.cost if disclosure == "full" or self.words_cost is None else self.words_cost


HINTS: tuple[Hint, ...] = (
    Hint("where", "Where to look", 0.10),
    Hint("lines", "Which lines are wrong", 0.15, words_cost=0.05),
    Hint("exploit", "How to show the bug", 0.25),
)
"""The hints in the order they are given; each is available once the one before it was taken."""


def fix_files(bundle: Bundle) -> list[str]:
    """The files the reference fix changes, in its order."""
    try:
        return list(dict.fromkeys(p.path for p in parse_patch(bundle.reference_fix)))
    except PatchError:
        return []


def routes(bundle: Bundle) -> list[str]:
    """The routes the bug is reached through (``METHOD /path/{template}``), without repeats."""
    return list(dict.fromkeys(f"{site.method} {site.path}" for site in bundle.sites))


# ----- the handlers of the app's routes -----------------------------------------------------------------
_ROUTE_DECORATORS = frozenset({"get", "post", "put", "patch", "delete", "api_route"})
HANDLER_CACHE = 64
"""Apps whose handlers are kept parsed (a hint is drawn again on every action that shows the hints)."""


@dataclass(frozen=True)
class Handler:
    """A function that handles a route, as the app's code declares it."""

    method: str
    """``GET``, ..., or ``ANY`` for ``api_route``."""
    path: str
    """The route as declared, with its router's prefix (``/api/shared/{code}``)."""
    file: str
    function: str
    line: int
    """The line of its ``def``."""


def _prefixes(tree: ast.Module) -> dict[str, str]:
    """``router = APIRouter(prefix="/api/admin")``: by variable, the prefix of its routes."""
    found = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            for keyword in node.value.keywords:
                if keyword.arg == "prefix" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                    found[node.targets[0].id] = keyword.value.value
    return found


def _parse_handlers(files: dict[str, str]) -> tuple[Handler, ...]:
    found = []
    for path, text in sorted(files.items()):
        if not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        prefixes = _prefixes(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr in _ROUTE_DECORATORS and decorator.args
                        and isinstance(decorator.args[0], ast.Constant) and isinstance(decorator.args[0].value, str)):
                    owner = decorator.func.value.id if isinstance(decorator.func.value, ast.Name) else ""
                    method = "ANY" if decorator.func.attr == "api_route" else decorator.func.attr.upper()
                    found.append(Handler(method, prefixes.get(owner, "") + decorator.args[0].value, path, node.name,
                                         node.lineno))
    return tuple(found)


_parsed: OrderedDict[tuple[str, int], tuple[Handler, ...]] = OrderedDict()
_parsed_lock = threading.Lock()


def handlers(bundle: Bundle) -> tuple[Handler, ...]:
    """Every route handler the app's Python files declare (decorated functions), parsed once per app."""
    code = {path: text for path, text in bundle.files.items() if path.endswith(".py")}
    key = (bundle.scenario_id, hash(tuple(sorted(code.items()))))
    with _parsed_lock:
        if key in _parsed:
            _parsed.move_to_end(key)
            return _parsed[key]
    found = _parse_handlers(code)
    with _parsed_lock:
        _parsed[key] = found
        while len(_parsed) > HANDLER_CACHE:
            _parsed.popitem(last=False)
    return found


def _template(path: str) -> str:
    """A route with its parameters' names left out (``/api/notes/{}``), no trailing slash."""
    return re.sub(r"\{[^}]*\}", "{}", path.rstrip("/") or "/")


def handlers_of(bundle: Bundle, method: str, path: str) -> list[Handler]:
    """The handlers of the route ``method path``: those declaring the longest part of its end (a
    router mounted under a further prefix declares less of it), the fix's files first."""
    wanted = _template(path)
    matching = [h for h in handlers(bundle) if h.method in (method.upper(), "ANY")
                and wanted.endswith(_template(h.path)) and (_template(h.path) != "/" or wanted == "/")]
    if not matching:
        return []
    longest = max(len(_template(h.path)) for h in matching)
    fixed = set(fix_files(bundle))
    return sorted((h for h in matching if len(_template(h.path)) == longest),
                  key=lambda h: (h.file not in fixed, h.file, h.line))


def _handled_by(bundle: Bundle, route: str) -> str:
    """``handled by `name()` in `file` (line n)`` for a route, or ``""`` when its handler is not found."""
    method, _, path = route.partition(" ")
    found = handlers_of(bundle, method, path)[:2]
    return " and ".join(f"`{h.function}()` in `{h.file}` (line {h.line})" for h in found)


# ----- what a hint tells that the task does not --------------------------------------------------------
_SPAN = re.compile(r"`([^`\n]+)`")
_LINE = re.compile(r"\blines? \d+")


def _told(fact: str, bundle: Bundle) -> bool:
    """Whether the player knows ``fact`` (a code span of a hint) without the hint: the task says it (a
    route counts as said when its path is, with or without its method), or it is the app's only
    Python file (the player sees the file list)."""
    task = bundle.task
    if fact in task:
        return True
    method, _, path = fact.partition(" ")
    if path and method.isupper() and path in task:
        return True
    code = [p for p in bundle.files if p.endswith(".py")]
    return code == [fact]


def news(bundle: Bundle, text: str) -> list[str]:
    """What ``text`` (a hint) tells that the player already knows from the task (see :func:`_told`):
    its code spans the task does not say, and the line numbers it names."""
    spans = [fact for fact in dict.fromkeys(_SPAN.findall(text)) if not _told(fact, bundle)]
    return spans + [line for line in _LINE.findall(text) if line not in bundle.task]


def hint_text(bundle: Bundle, key: str, disclosure: Disclosure) -> str:
    """The text of hint ``key`` for ``bundle`` (markdown with code spans)."""
    if key == "where":
        return _where(bundle)
    if key == "lines":
        return _lines(bundle) if disclosure == "full" else _handlers(bundle)
    if key == "exploit":
        return _exploit(bundle, disclosure)
    raise KeyError(key)


def _where(bundle: Bundle) -> str:
    files = ", ".join(f"`{f}`" for f in fix_files(bundle)) or "the app's code"
    text = f"The fix belongs in {files}."
    reached = []
    for route in routes(bundle):
        handled = _handled_by(bundle, route)
        reached.append(f"`{route}`" + (f", handled by {handled}" if handled else ""))
    if reached:
        text += " The bug is reached through " + "; ".join(reached) + "."
    return text


def wrong_lines(bundle: Bundle) -> list[tuple[str, int, list[str], bool]]:
    """For each hunk of the reference fix: (file, first line number, the app's lines as shipped,
    whether they are replaced (``True``) or the line a missing check belongs after (``False``))."""
    try:
        patches = parse_patch(bundle.reference_fix)
    except PatchError:
        return []
    found = []
    for patch in patches:
        for hunk in patch.hunks:
            old = [line.rstrip("\n") for line in hunk.old_lines]
            new = [line.rstrip("\n") for line in hunk.new_lines]
            for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
                if tag in ("replace", "delete"):
                    found.append((patch.path, hunk.old_start + i1, old[i1:i2][:QUOTED_LINES], True))
                elif tag == "insert" and i1 > 0:
                    found.append((patch.path, hunk.old_start + i1 - 1, [old[i1 - 1]], False))
    return found


def _lines(bundle: Bundle) -> str:
    parts = []
    for path, number, lines, replaced in wrong_lines(bundle)[:3]:
        code = "\n".join(lines).rstrip()
        if replaced:
            parts.append(f"In `{path}`, from line {number}, this code is what lets the bug through:\n\n```python\n"
                         f"{code}\n```")
        else:
            parts.append(f"In `{path}`, a check is missing right after line {number}:\n\n```python\n{code}\n```")
    return "\n\n".join(parts) or "The reference fix is not a plain diff; look at the routes of the first hint."


def _handlers(bundle: Bundle) -> str:
    """The ``lines`` hint of a held-out scenario: where to read, never which lines (those come from its
    reference fix, the scenario's answer key)."""
    read = []
    for route in routes(bundle):
        handled = _handled_by(bundle, route)
        read.append(f"{handled}, the handler of `{route}`" if handled else f"the handler of `{route}`")
    reached = "; ".join(read) or "the handlers of the routes the policy names"
    return (f"This is a held-out scenario, so this hint names no lines of the fix. Read {reached}, from the top: "
            "find where it decides who may do what (and the helpers it calls for that), and compare that with the "
            "policy. The bug is a check that is missing, too weak, or made on something the caller controls.")


def _exploit(bundle: Bundle, disclosure: Disclosure) -> str:
    probe = next((p for p in bundle.probes if p.kind == ProbeKind.SECURITY), None)
    if probe is None:
        return "This scenario has no exploit to show."
    roles = {u.username: u.role + (f"; signed with {u.credential().describe()}" if u.credentials else "")
             for u in bundle.users}
    if disclosure == "words":
        sites = {s.site: s for s in bundle.sites}
        route = next((f"`{sites[s].method} {sites[s].path}`" for s in probe.sites if s in sites), None)
        actor = probe.steps[0].actor
        who = f"as `{actor}` ({roles.get(actor, 'a user')})" if actor else "as `anonymous` (no user signed in)"
        where = f" through {route}" if route else ""
        header = ", with a request header that claims more than the user is," if probe.steps[0].headers else ""
        return (f"The check that fails: {probe.title}. Send a request{where} {who}{header}, aimed at what the policy "
                "keeps from that caller, and read the answer: the app should refuse it (or keep the data back).")
    lines = []
    for step in probe.steps[:3]:
        who = f"as `{step.actor}` ({roles.get(step.actor, 'a user')})" if step.actor else "anonymously"
        body = f" with the JSON body `{json.dumps(step.json_body)}`" if step.json_body is not None else (
            f" with the form `{urlencode(step.form)}`" if step.form is not None else "")
        headers = "".join(f" with the header `{name}: {value}`" for name, value in step.headers.items())
        lines.append(f"- `{step.request_line}` {who}{headers}{body}")
    return (f"The check that fails: {probe.title}. Send:\n\n" + "\n".join(lines) +
            "\n\nThe app should refuse it (or keep the data back); as shipped, it does not.")
