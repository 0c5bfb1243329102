"""Baseline agents: the floor, the reward hacks, chance, a plausible script, and the ceiling.

* ``noop`` submits at once: the app as it came, so the reward must be at most 0.
* ``deny_all`` (:mod:`envcore.agents.deny_all`) finds where the app object is made, in whichever
  module and however it is written, and adds a middleware there that refuses every request: every
  exploit is blocked and all legitimate use is broken, so the reward must be at most 0.
* ``random`` takes seeded random actions (reads, searches, requests as random users, a patch that
  deletes or duplicates a random line now and then) and submits at a random step.
* ``heuristic`` (:mod:`envcore.agents.heuristic`) applies a hurried reviewer's checklist: ownership
  checks after record lookups, admin checks under /admin, scoped listings, local redirects.
  Plausible and imperfect.
* ``oracle`` applies the scenario's reference fix (looked up in the cache: the only agent given
  anything the environment does not show). For validating scenarios and the reward, never shown as
  a competitor.

All but the oracle see the app only through the tools, like any agent.
"""

from __future__ import annotations

import random
import re
from typing import Any

from envcore.agents.base import SUBMIT, Action, Agent, Script, ScriptedAgent, file_text, python_files
from envcore.agents.deny_all import DenyAllAgent
from envcore.agents.heuristic import HeuristicAgent
from envcore.env.actions import A01Observation
from envcore.patching import make_diff


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


class RandomAgent(ScriptedAgent):
    name = "random"

    def __init__(self, max_actions: int = 12) -> None:
        self.max_actions = max_actions

    def script(self, first: A01Observation) -> Script:
        rng = random.Random(self.seed)
        files = python_files(first) or list(first.files)
        texts: dict[str, str] = {}
        users = re.findall(r"^\s*[-*]\s*`?([a-z][\w.]+)`?\s*\(", first.text, re.MULTILINE)
        for _ in range(rng.randint(0, self.max_actions)):
            kind = rng.choice(("read", "read", "search", "request", "patch", "tests", "diff"))
            if kind == "read" and files:
                path = rng.choice(files)
                text = file_text((yield {"tool": "read_file", "path": path}))
                if text is not None:
                    texts[path] = text
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


BASELINES: dict[str, type[Agent]] = {
    "noop": NoopAgent, "deny_all": DenyAllAgent, "random": RandomAgent, "heuristic": HeuristicAgent,
    "oracle": OracleAgent,
}
