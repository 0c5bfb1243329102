"""What of a verification may be shown, and to whom: the hidden suite of a held-out scenario stays hidden.

A report (:class:`~envcore.verifier.report.VerificationReport`) lists every probe with the requests it
sent and what it expected. For a scenario of the **test** split that list *is* the held-out benchmark:
shown once (in an episode log, on the Space after a submit), it could be replayed by any agent or
person who plays the scenario again. :func:`disclose` therefore rewrites the hidden probes of such a
report in words only: the probe's title (written without names or ids), whether it passed, and why
not in a sentence ("the exploit was not refused: the app answered 200"), never the request, the user
it was sent as, a token or a path. A trap probe keeps the name of its trap (a slug) but not the trap's
description, which its author may have written with routes in it. Visible probes, and every probe of a training or validation
scenario, are kept as they are. The counts, the resolution and the reward never change.

Every place that stores or shows a report outside the grader (the episode log, the Space's verdict)
goes through this one function.
"""

from __future__ import annotations

from typing import Literal, get_args

from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import Probe, ProbeKind
from envcore.scenario.spec import TrapKind
from envcore.verifier.report import ProbeResult, VerificationReport

Disclosure = Literal["full", "words"]


def disclosure_for(split: str | None) -> Disclosure:
    """How much of a hidden suite a scenario of ``split`` may show: all of it for ``train`` and ``val``,
    words only for ``test`` and for a split nobody knows."""
    return "full" if split in ("train", "val") else "words"


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


def why_in_words(result: ProbeResult, probe: Probe | None) -> str:
    """Why a probe failed, in a sentence that names no request, user, token or path."""
    answered = next((g for g in result.got if g[:3].isdigit()), None)
    status = f": the app answered {answered[:3]}" if answered else ": the app gave no answer" if result.got else ""
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
