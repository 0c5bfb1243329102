"""How the Play tab teaches: the checklist, the hints taken, and the card shown after submit.

The data comes from the session facade (:meth:`~envcore.server.sessions.SessionHub.checklist`,
``hints``, ``debrief``); this module only turns it into Markdown. Everything in it that comes from a
scenario (titles, users, routes, the task; a bundle may be written by a language model or imported
with someone's app) or from the app under test (response bodies: the player's own code talking) is
escaped (:mod:`ui.safe`), so it shows as text and makes no element.

The card after submit answers what a player wants to know: what the bug was (its class, its CWEs with
their names, the scenario's own words), whether the patch fixed it and, if not, why, in the words of
the failure analysis (:mod:`envcore.feedback.categories`), the exploit replayed on the app as shipped
and as the player left it (each request in full for a training or validation scenario, in words for
a test-split one), and the reference fix as a coloured diff.
"""

from __future__ import annotations

import re
from typing import Any

from envcore.numbers import signed
from ui import diff_view, safe

CWE_NAMES = {
    "CWE-22": "Improper Limitation of a Pathname to a Restricted Directory ('Path Traversal')",
    "CWE-200": "Exposure of Sensitive Information to an Unauthorized Actor",
    "CWE-284": "Improper Access Control",
    "CWE-285": "Improper Authorization",
    "CWE-359": "Exposure of Private Personal Information to an Unauthorized Actor",
    "CWE-424": "Improper Protection of Alternate Path",
    "CWE-425": "Direct Request ('Forced Browsing')",
    "CWE-601": "URL Redirection to Untrusted Site ('Open Redirect')",
    "CWE-639": "Authorization Bypass Through User-Controlled Key",
    "CWE-668": "Exposure of Resource to Wrong Sphere",
    "CWE-862": "Missing Authorization",
    "CWE-863": "Incorrect Authorization",
    "CWE-915": "Improperly Controlled Modification of Dynamically-Determined Object Attributes",
}
"""The names MITRE gives the CWEs the bug classes map to."""
EXCERPT_CHARS = 240
_FENCE = re.compile(r"^```[a-z]*\n(.*?)\n```$", re.DOTALL | re.MULTILINE)


def bug_class_title(name: str) -> str:
    """The bug class in words (the factory's title when it knows the class; an imported one's name)."""
    try:
        from envcore.factory.bugs import get_bug_class

        return get_bug_class(name).title
    except (ImportError, KeyError, ValueError):
        return name.replace("_", " ").capitalize()


def cwe_markdown(cwe: str) -> str:
    number = cwe.removeprefix("CWE-")
    name = CWE_NAMES.get(cwe)
    label = safe.markdown(f"{cwe} {name}" if name else cwe)
    if number.isdigit():
        return f"[{label}](https://cwe.mitre.org/data/definitions/{number}.html)"
    return label


def checklist_markdown(items: list[dict[str, Any]]) -> str:
    """The checklist, one line an item: ticked or not, what to do, and the evidence."""
    if not items:
        return ""
    lines = ["**Your checklist** (ticked from your own steps)"]
    for item in items:
        mark = "✓" if item.get("done") else "○"
        note = f" — {safe.markdown(item['note'])}" if item.get("note") else ""
        lines.append(f"{mark} {safe.markdown(item.get('label', ''))}{note}")
    if any(item.get("pending") for item in items):
        lines.append("*checking your last request…*")
    return "  \n".join(lines)


def rich_text(text: str) -> str:
    """A hint's text: ``code`` spans and fenced code blocks kept, everything else escaped."""
    parts, last = [], 0
    for match in _FENCE.finditer(text):
        parts.append(safe.markdown_lines(text[last:match.start()], code_spans=True))
        parts.append(safe.fence(match.group(1), "python"))
        last = match.end()
    parts.append(safe.markdown_lines(text[last:], code_spans=True))
    return "\n\n".join(p for p in parts if p.strip())


def hints_markdown(hints: list[dict[str, Any]], next_hint: Any, disclosure: str = "full") -> str:
    """The hints taken so far (each with its cost), and what the next one would cost (for a scenario of
    ``disclosure``)."""
    lines = []
    for hint in hints:
        lines.append(f"**Hint {hint['level']}: {safe.markdown(hint['title'])}** (costs {hint['cost']:.2f} of the "
                     f"reward)\n\n{rich_text(hint.get('text', ''))}")
    if next_hint is not None:
        lines.append(f"*Next hint: {safe.markdown(next_hint.title)}, costs {next_hint.cost_for(disclosure):.2f} of the reward.*")
    elif hints:
        lines.append("*No more hints.*")
    return "\n\n".join(lines)


def _status(outcome: Any) -> tuple[str, str]:
    """(words, first status) of a probe outcome's steps."""
    if outcome is None:
        return "not run", ""
    statuses = [s.status for s in outcome.steps]
    shown = next((str(s) for s in statuses if s is not None), "no answer")
    return ("refused" if outcome.passed else "it worked"), shown


def _excerpt(step: Any) -> str:
    if step is None:
        return ""
    text = " ".join(str(step.body_excerpt or "").split())
    return text[:EXCERPT_CHARS] + ("…" if len(text) > EXCERPT_CHARS else "")


def replay_markdown(debrief: dict[str, Any]) -> str:
    """Each exploit, before and after the player's patch (in full or in words, as disclosure allows)."""
    replays = debrief.get("replays") or []
    if not replays:
        return "*The exploit could not be replayed this time.*"
    roles, sites = debrief.get("roles") or {}, debrief.get("sites") or {}
    full = debrief.get("disclosure") == "full"
    blocks = []
    for replay in replays:
        probe, before, after = replay["probe"], replay["before"], replay["after"]
        said_before, status_before = _status(before)
        said_after, status_after = _status(after)
        mark = "✓" if after is not None and after.passed else "✗"
        head = (f"{mark} **{safe.markdown(probe.title)}** — before your patch: {said_before} "
                f"({safe.code(status_before)}); after: {said_after} ({safe.code(status_after)})")
        if replay.get("after_load_error"):
            head += " — your patched app did not load"
        lines = [head]
        if full:
            for index, step in enumerate(probe.steps[:4]):
                who = f"as {safe.code(step.actor)} ({safe.markdown(roles.get(step.actor, 'user'))})" if step.actor \
                    else "anonymously"
                body = f" with {safe.code(step.json_body)}" if step.json_body is not None else ""
                body += "".join(f" with the header {safe.code(f'{k}: {v}')}" for k, v in step.headers.items())
                got_before = before.steps[index] if before is not None and index < len(before.steps) else None
                got_after = after.steps[index] if after is not None and index < len(after.steps) else None
                lines.append(f"- {safe.code(step.request_line)} {who}{body}  \n"
                             f"  before: {safe.code(getattr(got_before, 'status', None))} "
                             f"{safe.code(_excerpt(got_before)) if _excerpt(got_before) else ''}  \n"
                             f"  after: {safe.code(getattr(got_after, 'status', None))} "
                             f"{safe.code(_excerpt(got_after)) if _excerpt(got_after) else ''}")
            if len(probe.steps) > 4:
                lines.append(f"- … and {len(probe.steps) - 4} more spelling(s) of the same attack")
        else:
            route = next((sites[s] for s in probe.sites if s in sites), None)
            actors = list(dict.fromkeys(s.actor for s in probe.steps if s.actor))
            who = ", ".join(f"{safe.code(a)} ({safe.markdown(roles.get(a, 'user'))})" for a in actors) or "no user"
            where = f" through {safe.code(route)}" if route else ""
            lines.append(f"- sent{where} as {who}; the requests themselves stay hidden (a test-split scenario "
                         "is a held-out benchmark)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def debrief_markdown(debrief: dict[str, Any] | None) -> str:
    """The card after submit (without the reference fix, which :func:`reference_fix_html` draws)."""
    if not debrief:
        return ""
    category = debrief.get("category") or {}
    resolution = str(debrief.get("resolution") or "none").upper()
    reward = debrief.get("reward")
    score = f"reward {signed(reward)}" if isinstance(reward, (int, float)) else "no reward (the grader could not run)"
    if not category.get("failure", True) and category.get("name") == "solved":
        verdict = f"### ✓ Fixed: {safe.markdown(resolution)} ({score})"
    elif category.get("name") == "infrastructure":
        verdict = f"### The grader could not run ({score}): not your fault"
    else:
        detail = f" ({safe.markdown(category['detail'])})" if category.get("detail") else ""
        verdict = (f"### ✗ {safe.markdown(resolution)} fix ({score}): {safe.markdown(category.get('title', ''))}\n\n"
                   f"{safe.markdown(str(category.get('description', '')).capitalize())}{detail}.")
    hints = debrief.get("hints") or []
    if hints:
        verdict += (f"\n\n{len(hints)} hint(s) taken, costing {sum(h['cost'] for h in hints):.2f} of the reward.")
    if debrief.get("recorded") is False:
        verdict += ("\n\n_This episode was scored but not recorded on the leaderboard: your address has recorded "
                    "its share of episodes for today._")
    cwes = " · ".join(cwe_markdown(c) for c in debrief.get("cwe") or [])
    routes = ", ".join(safe.code(r) for r in debrief.get("routes") or [])
    what = (f"### What was wrong\n\n**{safe.markdown(bug_class_title(debrief.get('bug_class', '')))}** · {cwes}\n\n"
            f"{safe.markdown_lines(debrief.get('task', ''), code_spans=True)}")
    if routes:
        what += f"\n\nReached through {routes}."
    return "\n\n".join([verdict, what, "### The exploit, replayed before and after your patch", replay_markdown(debrief),
                        "### The reference fix"])


def reference_fix_html(debrief: dict[str, Any] | None) -> str:
    if not debrief:
        return diff_view.diff_html("", empty="The reference fix is shown after you submit.")
    if debrief.get("disclosure") == "words":
        return diff_view.diff_html("", empty="This is a held-out (test) scenario: its reference fix is not shown, so "
                                             "that it stays a fair test for everyone who plays it.")
    return diff_view.diff_html(debrief.get("reference_fix") or "", empty="This scenario has no reference fix.")
