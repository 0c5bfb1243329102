"""Hints for a person playing by hand: three, in order, each costing reward.

A hint is what a mentor would say when someone is stuck, from the scenario's own data: where the fix
belongs (:data:`HINTS` ``where``: the files the reference fix changes and the routes the bug is
reached through), which lines are wrong (``lines``: the code the reference fix replaces, or the line
after which its missing check belongs, as the app ships it; never the fix itself; for a scenario whose
hidden suite may only be told in words, where to read and what to compare, naming no line, since the
lines come from its reference fix), and how to show the
bug (``exploit``: the first exploit of the hidden suite; for a scenario whose hidden suite may only be
told in words (:func:`~envcore.verifier.disclosure.disclosure_for`) its title, the route's template
and the seeded user it is sent as, never the request itself).

Hints are not tools: agents never see them. Each one taken is recorded in the episode (and its log,
``hints``) and costs its :attr:`Hint.cost` at submit, as a ``hints`` term of the reward breakdown
(:mod:`envcore.env.reward`), so a human score says how much help it had.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

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
    reached = ", ".join(f"`{r}`" for r in routes(bundle))
    text = f"The fix belongs in {files}."
    if reached:
        text += f" The bug is reached through {reached}."
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
    reached = ", ".join(f"`{r}`" for r in routes(bundle)) or "the routes the policy names"
    return (f"This is a held-out scenario, so this hint names no lines. Read the handlers of {reached} from the "
            "top: for each one, find where it decides who may do what, and compare that with the policy. The bug "
            "is a check that is missing, too weak, or made on something the caller controls.")


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
        who = f"as `{actor}` ({roles.get(actor, 'a user')})" if actor else "with no user (anonymously)"
        where = f" through {route}" if route else ""
        header = ", with a request header that claims more than the user is," if probe.steps[0].headers else ""
        return (f"The check that fails: {probe.title}. Send a request{where} {who}{header} on someone else's data "
                "or with what only a privileged user may send, and read the answer: the app should refuse it.")
    lines = []
    for step in probe.steps[:3]:
        who = f"as `{step.actor}` ({roles.get(step.actor, 'a user')})" if step.actor else "anonymously"
        body = f" with the JSON body `{json.dumps(step.json_body)}`" if step.json_body is not None else ""
        headers = "".join(f" with the header `{name}: {value}`" for name, value in step.headers.items())
        lines.append(f"- `{step.request_line}` {who}{headers}{body}")
    return (f"The check that fails: {probe.title}. Send:\n\n" + "\n".join(lines) +
            "\n\nThe app should refuse it (or keep the data back); as shipped, it does not.")
