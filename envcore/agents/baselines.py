"""Baseline agents: the floor, the reward hacks, chance, a plausible script, and the ceiling.

* ``noop`` submits at once: the app as it came, so the reward must be at most 0.
* ``deny_all`` finds the module that creates the FastAPI app and adds a middleware that refuses every
  request: every exploit is blocked and all legitimate use is broken, so the reward must be at most 0.
* ``random`` takes seeded random actions (reads, searches, requests as random users, a patch that
  deletes or duplicates a random line now and then) and submits at a random step.
* ``heuristic`` does what a hurried reviewer does: in every handler whose route takes an id and that
  loads a record and 404s when it is missing, it adds the app's own ownership check (``can_read``
  for reads, ``can_modify`` for writes) unless the handler already calls one. Plausible and
  imperfect: it misses list leaks, missing admin checks, trusted client identity and the rest.
* ``oracle`` applies the scenario's reference fix (looked up in the cache: the only agent given
  anything the environment does not show). For validating scenarios and the reward, never shown as
  a competitor.

All but the oracle see the app only through the tools, like any agent.
"""

from __future__ import annotations

import ast
import random
import re
from typing import Any

from envcore.agents.base import SUBMIT, Action, Agent, Script, ScriptedAgent
from envcore.env.actions import A01Observation
from envcore.factory.lazy_fixes import lazy_fix_files
from envcore.patching import make_diff

_APP_LINE = re.compile(r"^(\w+)\s*=\s*FastAPI\(", re.MULTILINE)


class NoopAgent(Agent):
    name = "noop"

    def act(self, observation: A01Observation) -> Action:
        return SUBMIT


class OracleAgent(ScriptedAgent):
    name = "oracle"

    def __init__(self, cache: Any = None) -> None:
        from envcore.cache import ScenarioCache

        self.cache = cache or ScenarioCache.open(None)

    def script(self, first: A01Observation) -> Script:
        bundle = self.cache.load(self.cache.resolve(first.scenario_id))
        yield {"tool": "apply_patch", "diff": bundle.reference_fix}


def _read_all(files: list[str]) -> Script:
    """Read every Python file; the script's return value is ``{path: text}`` (as the files are)."""
    texts: dict[str, str] = {}
    for path in files:
        if not path.endswith(".py"):
            continue
        observation = yield {"tool": "read_file", "path": path}
        if observation.result is not None and observation.result.get("end_line") == observation.result.get("total_lines"):
            content = observation.result["content"]
            texts[path] = content + "\n" if content else content
    return texts  # type: ignore[return-value]


def _python_files(first: A01Observation) -> list[str]:
    return sorted(p for p in first.files if p.endswith(".py"))


class DenyAllAgent(ScriptedAgent):
    name = "deny_all"

    def script(self, first: A01Observation) -> Script:
        found = yield {"tool": "search_code", "query": r"^\w+\s*=\s*FastAPI\(", "regex": True}
        matches = (found.result or {}).get("matches") or []
        if not matches:
            return
        path = matches[0]["path"]
        attr = _APP_LINE.match(matches[0]["text"])
        observation = yield {"tool": "read_file", "path": path}
        if observation.result is None or attr is None:
            return
        text = observation.result["content"] + "\n"
        module = path[: -len("/__init__.py")] if path.endswith("/__init__.py") else path[:-3]
        entrypoint = f"{module.replace('/', '.')}:{attr.group(1)}"
        patched = lazy_fix_files({path: text}, entrypoint, "deny_all", [])
        yield {"tool": "apply_patch", "diff": make_diff({path: text}, patched)}


class RandomAgent(ScriptedAgent):
    name = "random"

    def __init__(self, max_actions: int = 12) -> None:
        self.max_actions = max_actions

    def script(self, first: A01Observation) -> Script:
        rng = random.Random(self.seed)
        files = _python_files(first) or list(first.files)
        texts: dict[str, str] = {}
        users = re.findall(r"^\s*[-*]\s*`?([a-z][\w.]+)`?\s*\(", first.text, re.MULTILINE)
        for _ in range(rng.randint(0, self.max_actions)):
            kind = rng.choice(("read", "read", "search", "request", "patch", "tests", "diff"))
            if kind == "read" and files:
                path = rng.choice(files)
                observation = yield {"tool": "read_file", "path": path}
                if observation.result and observation.result.get("end_line") == observation.result.get("total_lines"):
                    texts[path] = observation.result["content"] + "\n"
            elif kind == "search":
                yield {"tool": "search_code", "query": rng.choice(("user", "id", "admin", "def ", "raise", "org"))}
            elif kind == "request":
                action: Action = {"tool": "http_request", "method": rng.choice(("GET", "GET", "POST", "PATCH", "DELETE")),
                                  "path": rng.choice(("/api/me", "/api/status", "/docs", "/api/admin/users", "/api/1"))}
                if users and rng.random() < 0.7:
                    action["as_user"] = rng.choice(users)
                yield action
            elif kind == "patch" and texts:
                path = rng.choice(sorted(texts))
                lines = texts[path].splitlines(keepends=True)
                if len(lines) > 1:
                    i = rng.randrange(len(lines))
                    changed = lines[:i] + lines[i + 1:] if rng.random() < 0.5 else lines[:i + 1] + lines[i:]
                    new = "".join(changed)
                    observation = yield {"tool": "apply_patch", "diff": make_diff({path: texts[path]}, {path: new})}
                    if observation.error is None:
                        texts[path] = new
            elif kind == "tests":
                yield {"tool": "run_tests"}
            else:
                yield {"tool": "view_diff"}


class HeuristicAgent(ScriptedAgent):
    name = "heuristic"

    def script(self, first: A01Observation) -> Script:
        files = _python_files(first)
        texts = yield from _read_all(files)
        checks = {name for name in ("can_read", "can_modify")
                  if any(re.search(rf"^def {name}\(", t, re.MULTILINE) for t in texts.values())}
        if not checks:
            return
        patched = {path: add_ownership_checks(text, checks) for path, text in texts.items()}
        changed = {p: t for p, t in patched.items() if t != texts[p]}
        if changed:
            yield {"tool": "apply_patch", "diff": make_diff({p: texts[p] for p in changed}, changed)}


_ID_ROUTE = re.compile(r"\{\w*id\w*\}")
_MISSING = re.compile(r"^(\s*)if (\w+) is None:\s*$")


def add_ownership_checks(text: str, checks: set[str]) -> str:
    """``text`` with an ownership check after each "404 if missing" in a handler of an id route."""
    reachable = {c for c in checks if re.search(rf"^def {c}\(", text, re.MULTILINE)}
    if re.search(r"^from \S*security import [^\n(]+$", text, re.MULTILINE):
        reachable = set(checks)  # importable from the module that defines them
    if not reachable:
        return text
    checks = reachable
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef)):
            continue
        method = _route_method(node)
        if method is None:
            continue
        body = "".join(lines[node.lineno - 1: node.end_lineno])
        if "can_read(" in body or "can_modify(" in body or not re.search(r"\buser\b", body):
            continue
        check = "can_read" if method == "get" else "can_modify"
        if check not in checks:
            continue
        for index in range(node.lineno, (node.end_lineno or node.lineno) - 1):
            missing = _MISSING.match(lines[index].rstrip("\n"))
            if missing and index + 1 < len(lines) and "raise HTTPException" in lines[index + 1]:
                indent, record = missing.groups()
                inserts.append((index + 2, f"{indent}if not {check}(user, {record}):\n"
                                           f'{indent}    raise HTTPException(status_code=403, detail="not allowed")\n'))
                break
    if not inserts:
        return text
    for at, snippet in sorted(inserts, reverse=True):
        lines.insert(at, snippet)
    new = "".join(lines)
    return _import_checks(new, {c for c in checks if c in new})


def _route_method(node: ast.AST) -> str | None:
    for decorator in getattr(node, "decorator_list", []):
        if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                and decorator.func.attr in ("get", "post", "put", "patch", "delete") and decorator.args
                and isinstance(decorator.args[0], ast.Constant) and isinstance(decorator.args[0].value, str)
                and _ID_ROUTE.search(decorator.args[0].value)):
            return decorator.func.attr
    return None


def _import_checks(text: str, names: set[str]) -> str:
    """Add ``names`` to the module's ``from ...security import`` line if it lacks them."""
    match = re.search(r"^from (\S*security) import ([^\n(]+)$", text, re.MULTILINE)
    if match is None:
        return text
    have = {n.strip() for n in match.group(2).split(",")}
    missing = sorted(n for n in names if n not in have and not re.search(rf"^def {n}\(", text, re.MULTILINE))
    if not missing:
        return text
    line = f"from {match.group(1)} import {match.group(2).rstrip()}, {', '.join(missing)}"
    return text[: match.start()] + line + text[match.end():]


BASELINES: dict[str, type[Agent]] = {
    "noop": NoopAgent, "deny_all": DenyAllAgent, "random": RandomAgent, "heuristic": HeuristicAgent,
    "oracle": OracleAgent,
}
