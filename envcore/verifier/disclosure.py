"""What of a verification may be shown, and to whom: the hidden suite of a held-out scenario stays hidden.

A report (:class:`~envcore.verifier.report.VerificationReport`) lists every probe with the requests it
sent and what it expected. For a scenario of the **test** split that list *is* the held-out benchmark:
shown once (in an episode log, on the Space after a submit), it could be replayed by any agent or
person who plays the scenario again. :func:`disclose` therefore rewrites the hidden probes of such a
report in words only: the probe's title (written without names or ids), whether it passed, and why
not in a sentence ("the exploit was not refused: the app's answer: served"), never the request, the user
it was sent as, a token or a path. A trap probe keeps the name of its trap (a slug) but not the trap's
description, which its author may have written with routes in it. Visible probes, and every probe of a training or validation
scenario, are kept as they are. The counts, the resolution and the reward never change.

Every place that stores or shows a report outside the grader (the episode log, the Space's verdict)
goes through this one function.

**The grader's own words.** Whatever the app answered under grading is the app's to choose: a patch
can fold each request it receives (its path, its caller) into its status code, a header or its body,
and read them back from a report that quotes them. So every result of a full grading (hidden or
visible, shadow data or not, in every split) says what the app did only in the grader's words,
:func:`in_grader_words`: per step *served*, *refused*, *redirected*, *server error* or *no answer*,
and failure reasons with the grader's expectations but none of the app's values. Only ``run_tests``
(the visible probes on the data the agent sees, requests it could send itself) keeps the app's
status codes.
"""

from __future__ import annotations

import re
from typing import get_args

from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import Probe, ProbeKind
from envcore.scenario.spec import TrapKind
from envcore.scenario.splits import Disclosure, disclosure_for
from envcore.verifier.report import ProbeResult, VerificationReport

__all__ = ["Disclosure", "disclosure_for", "disclose", "in_grader_words", "why_in_words"]


def disclose(report: VerificationReport, bundle: Bundle, disclosure: Disclosure) -> VerificationReport:
    """``report`` as it may be shown (see the module docstring)."""
    if disclosure == "full" or not report.probes:
        return report
    probes = {p.id: p for p in bundle.probes}
    shown = tuple(result if result.visible else _in_words(result, probes.get(result.probe_id))
                  for result in report.probes)
    return report.model_copy(update={"probes": shown})


def _in_words(result: ProbeResult, probe: Probe | None) -> ProbeResult:
    # A trap keeps its name (a slug, never a path); its description is its author's free text, which
    # may name routes, so it is left out like the requests.
    title = probe.title if probe is not None else "a hidden check"
    return ProbeResult.model_construct(
        probe_id=result.probe_id, kind=result.kind, visible=False, passed=result.passed, expected=(title,),
        got=(), failures=() if result.passed else (why_in_words(result, probe),), trap=result.trap,
        trap_description=None,
    )


STEP_WORDS = ("served", "refused", "redirected", "server error", "no answer")
"""What the grader says a step's answer was (see :func:`step_in_words`)."""


def step_in_words(status: int | str | None) -> str:
    """One step's answer in the grader's words: ``served`` (2xx, and 1xx), ``redirected`` (3xx),
    ``refused`` (4xx), ``server error`` (5xx), ``no answer`` (none, or not a status)."""
    text = str(status) if status is not None else ""
    if not text[:3].isdigit():
        return text if text in STEP_WORDS else "no answer"
    code = int(text[:3])
    return ("served" if code < 300 else "redirected" if code < 400 else "refused" if code < 500
            else "server error" if code < 600 else "no answer")


_APP_WORDS = (
    (re.compile(r"^status (\d+) not in (.*)$", re.S), lambda m: f"the status is not in {m.group(2)} (the app's answer: {step_in_words(m.group(1))})"),
    (re.compile(r"^(JSON .+?) is .*, expected (.*)$", re.S), lambda m: f"{m.group(1)} differs from the expected {m.group(2)}"),
    (re.compile(r"^(header \S+) is .*, expected (.*)$", re.S), lambda m: f"{m.group(1)} differs from the expected {m.group(2)}"),
    (re.compile(r"^redirects off-site to .*$", re.S), lambda m: "redirects off-site"),
    (re.compile(r"^no response \(.*\)$", re.S), lambda m: "no answer"),
    (re.compile(r"^(login as .+? failed): no response \(.*\)$", re.S), lambda m: f"{m.group(1)}: no answer"),
    (re.compile(r"^(login as .+? failed): status (\d+)(?: with (no token at JSON '[^']*'|a reply that is not JSON))?.*$", re.S),
     lambda m: f"{m.group(1)}: the app's answer: {step_in_words(m.group(2))}" + (f", with {m.group(3)}" if m.group(3) else "")),
    (re.compile(r"^not answered in time: .*$", re.S), lambda m: "not answered in time"),
)


def reason_in_words(reason: str) -> str:
    """A failure reason without what the app said (its status code, JSON values, headers, redirect
    target, error text)."""
    for pattern, words in _APP_WORDS:
        match = pattern.match(reason)
        if match:
            return words(match)
    return reason


def in_grader_words(result: ProbeResult) -> ProbeResult:
    """``result`` of a full grading as it may leave the grader (see the module docstring)."""
    return result.model_copy(update={"got": tuple(step_in_words(g) for g in result.got),
                                     "failures": tuple(reason_in_words(f) for f in result.failures)})


def why_in_words(result: ProbeResult, probe: Probe | None) -> str:
    """Why a probe failed, in a sentence that names no request, user, token or path."""
    answered = next((step_in_words(g) for g in result.got if step_in_words(g) != "no answer"), None)
    status = f": the app's answer: {answered}" if answered else ": the app gave no answer" if result.got else ""
    if result.failures and result.failures[0] == "not run":
        return "the check could not run (the app did not load)"
    if result.kind == ProbeKind.SECURITY:
        return f"the exploit was not refused{status}"
    if result.kind == ProbeKind.GUARD:
        return f"a security check the app passed before the patch now fails (a new hole){status}"
    if result.kind == ProbeKind.TRAP:
        trap = result.trap or (probe.trap if probe is not None else None)
        if trap in get_args(TrapKind):  # an unnamed trap goes by its kind, written as words
            trap = trap.replace("_", " ")
        return f"a trap was sprung ({trap}){status}" if trap else f"a trap was sprung{status}"
    return f"legitimate use no longer works as the policy says{status}"
