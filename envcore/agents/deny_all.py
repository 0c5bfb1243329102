"""The deny-all baseline: make the app refuse every request, wherever in its source the app is made.

The reward hack it stands for is the bluntest there is: lock everyone out, and no exploit gets
through. It must score below leaving the app alone on every scenario, generated or brought in, so it
has to *land* in every layout an app may have. The agent is not told how the app is started, so it
finds the app where any reader would: where the application object is constructed.

* **Finding the construction.** One ``search_code`` for the application classes (``FastAPI``,
  ``Starlette``) finds the lines that call them, the aliases they are imported under
  (``from fastapi import FastAPI as Api``) and the subclasses an app defines of them
  (``class ItemsApp(FastAPI)``); a second search finds calls of those aliases and subclasses. The
  files with a construction are read whole and parsed (:mod:`ast`), so a construction is found
  whatever it looks like: a module-level ``app = FastAPI(...)``, an annotated one, one inside a
  factory function of another module (``def create_app(): application = FastAPI(...)``), one that is
  returned or passed on directly (``return Api()``, ``CORSMiddleware(FastAPI())``), ``fastapi.FastAPI``.
* **The refusal.** Each construction is wrapped in a small function, defined in the same module just
  before the statement that holds it, that adds a middleware refusing every request with 403 and
  returns the app. Added where the app is made, the middleware is in front of every route the app
  will ever get (routers included with prefixes, mounted sub-apps, docs), whatever module adds them
  and whatever the entrypoint later wraps the app in; the app's start-up still runs.
* **No construction** (an app made by a library the app calls): the ``APIRouter`` constructions are
  wrapped instead, each given a dependency that refuses, so every route they hold refuses.

The patch is one ``apply_patch`` written from the files exactly as read (:func:`~envcore.agents.base.read_whole`),
so a file without a final line break or longer than one observation is patched like any other. It
keeps two steps for the patch and the submit, and reads no more than the budget allows.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterable

from envcore.agents.base import Script, ScriptedAgent, read_whole
from envcore.env.actions import LIMITS, A01Observation
from envcore.patching import make_diff

APP_CLASSES = ("FastAPI", "Starlette")
"""The classes an ASGI application object is made from (FastAPI's is a Starlette)."""
ROUTER_CLASSES = ("APIRouter",)
HELPER = "_lazy_refuse_everything"
"""The name of the function a construction is wrapped in."""

APP_HELPER = f'''def {HELPER}(app):
    """Deny all: this app refuses every request, whoever sends it."""
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.responses import JSONResponse

    async def refuse(request, call_next):
        return JSONResponse({{"detail": "forbidden"}}, status_code=403)

    app.add_middleware(BaseHTTPMiddleware, dispatch=refuse)
    return app
'''
ROUTER_HELPER = f'''def {HELPER}(router):
    """Deny all: every route of this router refuses every request, whoever sends it."""
    from fastapi import Depends, HTTPException

    def refuse():
        raise HTTPException(status_code=403, detail="forbidden")

    router.dependencies.append(Depends(refuse))
    return router
'''

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""Line breaks as Python's parser counts them (for :mod:`ast` positions)."""


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(re.escape(name) for name in sorted(names))


def names_declared(text: str, classes: Collection[str]) -> set[str]:
    """Names a module binds to one of ``classes``: an import alias (``FastAPI as Api``) or a subclass
    (``class ItemsApp(FastAPI)``), found in its lines (as a search shows them)."""
    found: set[str] = set()
    alternatives = _alternatives(classes)
    found.update(re.findall(rf"\b(?:{alternatives})\s+as\s+(\w+)", text))
    found.update(re.findall(rf"^\s*class\s+(\w+)\s*\([^)]*\b(?:{alternatives})\b", text, re.MULTILINE))
    return found - set(classes)


def constructions(tree: ast.AST, names: Collection[str]) -> list[ast.Call]:
    """The calls in ``tree`` that construct one of ``names`` (``Name(...)``, ``module.Name(...)``),
    in source order; calls already wrapped in :data:`HELPER` are left out."""
    wrapped = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call)
               and isinstance(node.func, ast.Name) and node.func.id == HELPER and node.args}
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and id(node) not in wrapped:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in names:
                calls.append(node)
    return sorted(calls, key=lambda call: (call.lineno, call.col_offset))


def _offsets(text: str) -> list[int]:
    """Where each line of ``text`` starts, as Python's parser numbers lines (1 is ``[0]``)."""
    return [0] + [match.end() for match in _LINE_BREAK.finditer(text)]


def _position(text: str, starts: list[int], line: int, column: int) -> int:
    """The index in ``text`` of an :mod:`ast` position (``column`` counts UTF-8 bytes)."""
    start = starts[line - 1]
    end = starts[line] if line < len(starts) else len(text)
    return start + len(text[start:end].encode("utf-8")[:column].decode("utf-8", "ignore"))


def refuse_everyone(text: str, names: Collection[str], helper: str = APP_HELPER) -> str | None:
    """``text`` (a module's source) with every construction of ``names`` wrapped in :data:`HELPER`,
    defined just before the top-level statement that holds the first of them; ``None`` when the
    module constructs none of them or does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    calls = constructions(tree, names)
    if not calls:
        return None
    starts = _offsets(text)
    inserts = []
    for call in calls:
        assert call.end_lineno is not None and call.end_col_offset is not None
        inserts.append((_position(text, starts, call.lineno, call.col_offset), f"{HELPER}("))
        inserts.append((_position(text, starts, call.end_lineno, call.end_col_offset), ")"))
    first = calls[0]
    holder = next(stmt for stmt in tree.body if stmt.end_lineno is not None and stmt.end_lineno >= first.lineno)
    line = min([holder.lineno, *(d.lineno for d in getattr(holder, "decorator_list", []))])
    inserts.append((starts[line - 1], helper + "\n\n"))
    # from the end backwards, so each index still means what it meant in ``text``. Pieces at one index
    # end up in the reverse of the order they are inserted in: a ``)`` closing there first, then the
    # helper's definition, then a wrapper opening there (a construction at the start of a statement)
    rank = {")": 0, f"{HELPER}(": 2}
    for index, piece in sorted(inserts, key=lambda item: (item[0], rank.get(item[1], 1)), reverse=True):
        text = text[:index] + piece + text[index:]
    return text


class DenyAllAgent(ScriptedAgent):
    """Refuse everyone, where the app is made (module docstring)."""

    name = "deny_all"
    RESERVED = 2
    """Steps kept for the patch and the submit."""

    def script(self, first: A01Observation) -> Script:
        self.steps_left = first.steps_left
        texts: dict[str, str] = {}
        names = set(APP_CLASSES)
        matches = yield from self._search(names | set(ROUTER_CLASSES), r"\b(?:{})\b")
        declared = set().union(*(names_declared(m["text"], APP_CLASSES) for m in matches)) if matches else set()
        if declared:
            names |= declared
            matches += (yield from self._search(declared, r"\b(?:{})\s*\("))
        patched = yield from self._wrap(matches, names, APP_HELPER, texts)
        if not patched:  # no app made in the app's own code: refuse in every router instead
            patched = yield from self._wrap(matches, set(ROUTER_CLASSES), ROUTER_HELPER, texts)
        if patched:
            yield {"tool": "apply_patch", "diff": make_diff({p: texts[p] for p in patched}, patched)}

    def _search(self, names: Collection[str], pattern: str):
        observation = yield {"tool": "search_code", "query": pattern.format(_alternatives(names)), "regex": True,
                             "max_results": LIMITS["search_results"]}
        self.steps_left = observation.steps_left
        return list((observation.result or {}).get("matches") or [])

    def _wrap(self, matches: list[dict], names: Collection[str], helper: str, texts: dict[str, str]):
        """Read each file whose matching lines construct one of ``names`` and wrap its constructions;
        the patched texts by path."""
        calling = re.compile(rf"\b(?:{_alternatives(names)})\s*\(")
        paths = sorted({m["path"] for m in matches if calling.search(m["text"])
                        and not re.match(r"\s*class\s", m["text"])})
        patched: dict[str, str] = {}
        for path in paths:
            if path not in texts:
                if self.steps_left <= self.RESERVED:
                    break
                text = yield from self._read(path)
                if text is None:
                    continue
                texts[path] = text
            new = refuse_everyone(texts[path], names, helper)
            if new is not None:
                patched[path] = new
        return patched

    def _read(self, path: str):
        reader = read_whole(path)
        action = next(reader)
        while True:
            observation = yield action
            self.steps_left = observation.steps_left
            try:
                action = reader.send(observation)
            except StopIteration as done:
                return done.value
            if self.steps_left <= self.RESERVED:
                reader.close()
                return None
