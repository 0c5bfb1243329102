"""The agent protocol: one observation in, one action out.

An :class:`Agent` is told when an episode begins (:meth:`Agent.begin`, with the first observation
and a seed for anything random) and is then asked for one action per step (:meth:`Agent.act`) until
the episode is done. An action is a wire action as a dict: a tool call (``{"tool": "read_file",
"path": ...}``), or for a language model its whole reply (``{"tool": "reply", "text": ...}``), which
the environment reads (so a format error is counted as an invalid action the same way everywhere). A
language model calling tools natively sends its first call as the tool call, and anything else as
such a reply (:mod:`envcore.agents.tool_calls`).

Agents see only what the environment shows them. The one exception is the oracle, which is given
the scenario cache to look up the reference fix; it exists to validate scenarios and the reward,
never as a competitor.

:class:`ScriptedAgent` turns a generator (yield an action, receive its observation) into an agent:
the natural way to write a baseline that reads files before it decides what to patch.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Generator
from typing import Any, ClassVar

from envcore.env.actions import LIMITS, A01Observation

Action = dict[str, Any]
SUBMIT: Action = {"tool": "submit"}


class Agent(ABC):
    """Plays episodes, one action per observation."""

    name: ClassVar[str] = "agent"

    def begin(self, observation: A01Observation, *, seed: int = 0) -> None:
        """A new episode starts with ``observation`` (the reset observation)."""

    @abstractmethod
    def act(self, observation: A01Observation) -> Action:
        """The next action, given the latest observation."""


Script = Generator[Action, A01Observation, None]


class ScriptedAgent(Agent):
    """An agent written as a generator: ``observation = yield action``. When the script ends, the
    agent submits."""

    def begin(self, observation: A01Observation, *, seed: int = 0) -> None:
        self.seed = seed
        self._script: Script | None = self.script(observation)
        self._started = False

    @abstractmethod
    def script(self, first: A01Observation) -> Script:
        """Yield actions; each ``yield`` returns the observation that answers it."""

    def act(self, observation: A01Observation) -> Action:
        if self._script is None:
            return SUBMIT
        try:
            action = self._script.send(observation) if self._started else next(self._script)
        except StopIteration:
            self._script = None
            return SUBMIT
        self._started = True
        return action


def python_files(first: A01Observation) -> list[str]:
    """The app's Python files, as the reset observation lists them, sorted."""
    return sorted(p for p in first.files if p.endswith(".py"))


def file_text(observation: A01Observation) -> str | None:
    """The whole file a ``read_file`` returned, exactly as it is (its last line break or the lack of
    one included), or ``None`` when the read was refused, returned only part of the file, or cut a
    line too long to show (a patch written from that text could not apply)."""
    result = observation.result
    if result is None or result.get("start_line", 1) != 1 or result.get("end_line") != result.get("total_lines"):
        return None
    return _page_text(result)


def _page_text(result: dict) -> str | None:
    """The text of one ``read_file`` page: its lines, and the file's last line break when the page
    ends the file; ``None`` when a line was cut."""
    if not result.get("total_lines"):
        return ""
    lines = result["content"].split("\n")
    if any(len(line) == LIMITS["line_chars"] and _CUT.search(line) for line in lines):
        return None
    ends_file = result.get("end_line") == result.get("total_lines")
    # servers before ``final_newline`` was reported: source files end with a line break
    return "\n".join(lines) + ("\n" if ends_file and result.get("final_newline", True) else "")


_CUT = re.compile(r" \.\.\.\[[\d,]+ characters; cut\]$")
"""The end of a line ``read_file`` cut (:func:`envcore.env.actions.clip`)."""


def read_whole(path: str) -> Generator[Action, A01Observation, str | None]:
    """Read ``path`` whole, a page at a time as the tool returns it (``text = yield from
    read_whole(path)`` in a script): its text exactly as it is, or ``None`` when a read was refused or
    a line was cut. A file that fits in one observation takes one ``read_file``, without a range."""
    parts: list[str] = []
    start = 1
    while True:
        action: Action = {"tool": "read_file", "path": path}
        if start > 1:
            action["start_line"] = start
        observation = yield action
        result = observation.result
        if result is None or result.get("start_line") != start:
            return None
        page = _page_text(result)
        if page is None:
            return None
        parts.append(page)
        end, total = result.get("end_line", 0), result.get("total_lines", 0)
        if end >= total:
            return "".join(parts)
        if end < start:  # no progress: never loop
            return None
        parts[-1] += "\n"
        start = end + 1
