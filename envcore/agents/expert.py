"""The expert: a scripted agent that plays like a careful reviewer, for demonstrations.

The oracle (:mod:`envcore.agents.baselines`) applies the reference fix in one step; it validates
scenarios but teaches nothing about *how* a repair is found. The expert plays the whole loop a
reviewer would, with the same tools an agent has, so its episodes can be learned from:

1. **read** where the bug lives: in each file the reference fix touches, the lines around every
   change (``READ_CONTEXT`` lines either side; the whole file when it is short), as a reviewer
   reads the handler and its helpers rather than every line of a large module;
2. **reproduce** the exploit: the first request of the scenario's first security probe, sent with
   ``http_request`` as the attacker it names, before anything is changed;
3. **patch** with ``edit_file``: one edit per changed region of the reference fix, each search text
   grown with context lines until it occurs exactly once (``apply_patch`` only for what an edit
   cannot express: a file the fix creates or deletes);
4. **run the visible tests** (``run_tests``);
5. **submit**.

Like the oracle, it is given the scenario cache to look up the reference fix and the probe it
reproduces: the only things it knows that the environment does not show. Everything it *does* goes
through the tools, so its episode is graded like any other: a demonstration is kept only when that
grade is a full fix (:mod:`envcore.training.demos`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from envcore.agents.base import Action, Script, ScriptedAgent
from envcore.env.actions import A01Observation
from envcore.patching import apply_patch, make_diff, parse_patch, split_lines

MERGE_GAP = 2
"""Changed regions at most this many unchanged lines apart become one edit."""
READ_CONTEXT = 12
"""Lines read either side of a change."""
WHOLE_FILE_LINES = 60
"""A file this short is read whole."""


@dataclass(frozen=True)
class Edit:
    path: str
    search: str
    replace: str


def _regions(old: list[str], new: list[str]) -> list[tuple[int, int, int, int]]:
    """The changed line ranges ``(i1, i2, j1, j2)`` of ``old`` -> ``new``, close ones merged."""
    regions: list[list[int]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if regions and i1 - regions[-1][1] <= MERGE_GAP:
            regions[-1][1], regions[-1][3] = i2, j2
        else:
            regions.append([i1, i2, j1, j2])
    return [(a, b, c, d) for a, b, c, d in regions]


def file_edits(path: str, old: str, new: str) -> list[Edit]:
    """``edit_file`` calls that turn ``old`` into ``new``, in the order they must be sent (last region
    first, so each one's line numbers are those of the text it is sent against). Each search text
    occurs exactly once in the file as it is when its edit is sent."""
    before, after = split_lines(old), split_lines(new)
    current = list(before)
    edits: list[Edit] = []
    for i1, i2, j1, j2 in reversed(_regions(before, after)):
        text = "".join(current)
        for context in range(0, len(current) + 1):
            lo, hi = max(i1 - context, 0), min(i2 + context, len(current))
            search = "".join(current[lo:hi])
            if search and text.count(search) == 1:
                break
        else:  # pragma: no cover - the whole file always occurs once
            raise ValueError(f"no unique search text for a change in {path}")
        replace = "".join(current[lo:i1] + after[j1:j2] + current[i2:hi])
        edits.append(Edit(path, search, replace))
        current[lo:hi] = split_lines(replace)
    if "".join(current) != new:  # pragma: no cover - the regions cover every difference
        raise ValueError(f"the edits of {path} do not reproduce the fixed file")
    return edits


def exploit_request(bundle: Any) -> Action | None:
    """The first request of the bundle's first security probe, as an ``http_request`` action."""
    for probe in bundle.probes:
        if probe.kind.value == "security" and probe.steps:
            step = probe.steps[0]
            path = step.path + (f"?{urlencode(step.query, safe='/.:{}')}" if step.query else "")
            action: Action = {"tool": "http_request", "method": step.method, "path": path}
            if step.actor:
                action["as_user"] = step.actor
            if step.headers:
                action["headers"] = dict(step.headers)
            if step.json_body is not None:
                action["json_body"] = step.json_body
            if step.form is not None:
                action["form"] = dict(step.form)
            return action
    return None


def read_windows(old: str, new: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of ``old`` to read before changing it into ``new``: every changed
    region with ``READ_CONTEXT`` lines either side, overlapping ranges merged; the whole file when short."""
    before = split_lines(old)
    if len(before) <= WHOLE_FILE_LINES:
        return [(1, max(len(before), 1))]
    windows: list[list[int]] = []
    for i1, i2, _, _ in _regions(before, split_lines(new)):
        start, end = max(i1 - READ_CONTEXT, 0) + 1, min(max(i2, i1 + 1) + READ_CONTEXT, len(before))
        if windows and start <= windows[-1][1] + 1:
            windows[-1][1] = max(windows[-1][1], end)
        else:
            windows.append([start, end])
    return [(a, b) for a, b in windows]


def expert_plan(bundle: Any) -> list[Action]:
    """Every action of the expert's episode on ``bundle`` but the submit, in order."""
    fixed = apply_patch(bundle.files, bundle.reference_fix)
    touched = sorted({p.old_path for p in parse_patch(bundle.reference_fix) if p.old_path in bundle.files})
    actions: list[Action] = []
    for path in touched:
        windows = read_windows(bundle.files[path], fixed.get(path, ""))
        if windows == [(1, len(split_lines(bundle.files[path])) or 1)]:
            actions.append({"tool": "read_file", "path": path})
        else:
            actions += [{"tool": "read_file", "path": path, "start_line": a, "end_line": b} for a, b in windows]
    exploit = exploit_request(bundle)
    if exploit is not None:
        actions.append(exploit)
    whole: dict[str, tuple[str, str]] = {}
    for path in sorted(set(bundle.files) | set(fixed)):
        old, new = bundle.files.get(path), fixed.get(path)
        if old == new:
            continue
        if old is None or new is None or not old:
            whole[path] = (old or "", new or "")
            continue
        actions += [{"tool": "edit_file", "path": e.path, "search": e.search, "replace": e.replace}
                    for e in file_edits(path, old, new)]
    if whole:
        diff = make_diff({p: o for p, (o, _) in whole.items() if o or p in bundle.files},
                         {p: n for p, (_, n) in whole.items() if p in fixed})
        actions.append({"tool": "apply_patch", "diff": diff})
    actions.append({"tool": "run_tests"})
    return actions


class ExpertAgent(ScriptedAgent):
    """See the module docstring. ``cache`` is where the reference fix is looked up (default: the
    newest shipped cache)."""

    name = "expert"

    def __init__(self, cache: Any = None) -> None:
        from envcore.cache import ScenarioCache

        self.cache = cache or ScenarioCache.open(None)

    def script(self, first: A01Observation) -> Script:
        bundle = self.cache.load(self.cache.resolve(first.scenario_id))
        for action in expert_plan(bundle):
            yield action
