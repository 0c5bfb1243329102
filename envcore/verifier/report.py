"""What a verification says, and how probe outcomes become a resolution.

Grading is a chain of pure functions, SWE-bench style: probe outcomes → tallies per kind →
:class:`Resolution`. Security probes play *fail-to-pass* (they fail on the shipped app and must pass
after a fix); regression, trap and guard probes play *pass-to-pass* (they pass on the shipped app and
must keep passing). Regression and trap probes are legitimate use; guard probes are security the app
already had, so a fix that breaks one has opened a new hole and is no fix at all. Security is counted
by exploit: a probe that tries another's exploit again as another user (``repeats``) counts with it,
and the exploit is refused only when every intruder is refused:

* ``FULL``: every security, regression, trap and guard probe passes;
* ``PARTIAL``: some but not all exploits are refused, and every regression, trap and guard probe passes;
* ``NO``: anything else, including a broken guard and an app that does not load.

Three outcomes are kept apart: ``graded`` (the app ran and was judged), ``load_error`` (the app did
not load: the patch's fault, graded ``NO``), ``infrastructure_error`` (the sandbox failed: nobody's
fault, no resolution and reward ``None``, to be retried or dropped, never learned from).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import Probe, ProbeKind, ProbeOutcome, describe_fact, exploit_of


class Resolution(str, Enum):
    FULL = "full"
    PARTIAL = "partial"
    NO = "no"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProbeResult(_Model):
    """One probe's verdict with what it expected and what the app answered."""

    probe_id: str
    kind: ProbeKind
    visible: bool
    """Whether the agent can see this probe (visible probes are what ``run_tests`` runs)."""
    passed: bool
    expected: tuple[str, ...]
    """Each step as ``METHOD path as user: facts``."""
    got: tuple[str, ...]
    """Each step's answer: status and the start of the body, or why there was none."""
    failures: tuple[str, ...] = ()
    trap: str | None = None
    """For a trap probe: the name of the trap it backs (its kind when the trap has no name)."""
    trap_description: str | None = None
    """For a trap probe: what the trap says must keep working, in its author's words."""

    @model_serializer(mode="wrap")
    def _without_missing_trap(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Results of probes that back no trap dump as they did before traps were named in reports."""
        data = handler(self)
        for name in ("trap", "trap_description"):
            if data.get(name, ...) is None:
                del data[name]
        return data


class Tally(_Model):
    passed: int = 0
    total: int = 0

    @property
    def rate(self) -> float:
        """Pass rate; 1.0 for an empty set (nothing to fail), as in SWE-bench."""
        return self.passed / self.total if self.total else 1.0


class VerificationReport(_Model):
    """The result of :func:`envcore.verifier.verify`."""

    scenario_id: str
    outcome: Literal["graded", "load_error", "infrastructure_error"]
    resolution: Resolution | None
    """``None`` for an infrastructure error, and for a visible-only run (no security probes run)."""
    reward: float | None
    """The verifier's score: 1 for FULL, the security pass rate for PARTIAL, 0 for NO; ``None`` when
    there is no resolution. The environment's reward engine composes its own from this report."""
    probe_set: Literal["all", "visible"] = "all"
    security: Tally = Tally()
    regression: Tally = Tally()
    trap: Tally = Tally()
    guard: Tally = Tally()
    """Guard probes: security checks the shipped app passes and a fix must keep passing."""
    probes: tuple[ProbeResult, ...] = ()
    load_error: str | None = None
    infrastructure_error: str | None = None
    shadow: bool = False
    """Graded with shadow identities (fresh users, ids and tokens the agent never saw)."""
    containment: dict = Field(default_factory=dict)
    """The isolation layers the app ran under (see :mod:`envcore.sandbox.containment`)."""
    restarts: int = 0
    elapsed_ms: float = 0.0
    requests: int = 0

    @property
    def fail_to_pass(self) -> Tally:
        return self.security

    @property
    def pass_to_pass(self) -> Tally:
        """Legitimate use: regression and trap probes (guards are counted apart, as security)."""
        return Tally(passed=self.regression.passed + self.trap.passed, total=self.regression.total + self.trap.total)

    def summary(self) -> str:
        if self.outcome == "infrastructure_error":
            return f"{self.scenario_id}: infrastructure error ({self.infrastructure_error})"
        if self.outcome == "load_error":
            return f"{self.scenario_id}: NO (the app did not load: {self.load_error})"
        head = self.resolution.value.upper() if self.resolution else "visible probes"
        return (f"{self.scenario_id}: {head}; security {self.security.passed}/{self.security.total}, "
                f"regression {self.regression.passed}/{self.regression.total}, "
                f"traps {self.trap.passed}/{self.trap.total}"
                + (f", guards {self.guard.passed}/{self.guard.total}" if self.guard.total else "")
                + f" ({self.elapsed_ms:.1f} ms)")


class Tallies(NamedTuple):
    """What passed of each kind of probe in one grading."""

    security: Tally
    """Exploits refused: an exploit and its repeats by other intruders count once, and as refused
    only when every one of them is (:func:`envcore.scenario.probes.exploit_of`)."""
    regression: Tally
    trap: Tally
    guard: Tally


def tallies(outcomes: Sequence[ProbeOutcome], probes: Sequence[Probe], *, loaded: bool = True) -> Tallies:
    """The tallies of a run of ``probes``. Every probe counts: one without an outcome (the app did not
    load, the run stopped, or a grading lost track of it) counts as failed, never as not asked."""
    by_id = {o.probe_id: o for o in outcomes} if loaded else {}

    def of(kind: ProbeKind) -> Tally:
        chosen = [p for p in probes if p.kind == kind]
        if kind != ProbeKind.SECURITY:
            return Tally(passed=sum(p.id in by_id and by_id[p.id].passed for p in chosen), total=len(chosen))
        refused: dict[str, bool] = {}
        for p in chosen:
            exploit = exploit_of(p)
            refused[exploit] = refused.get(exploit, True) and p.id in by_id and by_id[p.id].passed
        return Tally(passed=sum(refused.values()), total=len(refused))

    return Tallies(*(of(k) for k in (ProbeKind.SECURITY, ProbeKind.REGRESSION, ProbeKind.TRAP, ProbeKind.GUARD)))


def graded_report(scenario_id: str, counts: Tallies, *, loaded: bool, probe_set: Literal["all", "visible"] = "all",
                  **details: Any) -> VerificationReport:
    """The report of a grading from its tallies: the resolution (for a run of every probe) and the
    verifier's score; ``details`` are the report's other fields (probes, load error, timings...)."""
    resolution = resolve(*counts) if probe_set == "all" else None
    return VerificationReport(scenario_id=scenario_id, outcome="graded" if loaded else "load_error",
                              resolution=resolution, reward=score(resolution, counts.security), probe_set=probe_set,
                              security=counts.security, regression=counts.regression, trap=counts.trap,
                              guard=counts.guard, **details)


NO_PROBES = Tally()
"""The tally of a kind a scenario has no probes of (nothing to fail)."""


def resolve(security: Tally, regression: Tally, trap: Tally, guard: Tally = NO_PROBES) -> Resolution:
    """SWE-bench's rule with security as fail-to-pass and regression, traps and guards as pass-to-pass."""
    p2p = all(t.passed == t.total for t in (regression, trap, guard))
    if security.total and security.passed == security.total and p2p:
        return Resolution.FULL
    if 0 < security.passed < security.total and p2p:
        return Resolution.PARTIAL
    return Resolution.NO


def score(resolution: Resolution | None, security: Tally) -> float | None:
    if resolution is None:
        return None
    return {Resolution.FULL: 1.0, Resolution.NO: 0.0}.get(resolution, security.rate)


def expected_steps(probe: Probe) -> tuple[str, ...]:
    """Each step of ``probe`` as ``METHOD path as user: facts``."""
    return tuple(
        f"{step.method} {step.path} as {step.actor or 'anonymous'}: " + "; ".join(describe_fact(f) for f in step.expect)
        for step in probe.steps
    )


def with_traps(results: tuple[ProbeResult, ...], bundle: Bundle) -> tuple[ProbeResult, ...]:
    """``results`` with each trap probe's trap named and described (from ``bundle``'s traps)."""
    backs = {p.id: p.trap for p in bundle.probes if p.kind == ProbeKind.TRAP and p.trap}
    named = []
    for result in results:
        trap = bundle.trap_named(backs.get(result.probe_id))
        named.append(result if trap is None else
                     result.model_copy(update={"trap": trap.key, "trap_description": trap.description}))
    return tuple(named)


def probe_result(probe: Probe, outcome: ProbeOutcome | None) -> ProbeResult:
    # model_construct: the values come from validated probes and outcomes; validating them again
    # would cost more than a request to the app.
    if outcome is None:
        return ProbeResult.model_construct(probe_id=probe.id, kind=probe.kind, visible=probe.visible, passed=False,
                           expected=expected_steps(probe), got=(), failures=("not run",))
    got = tuple(
        f"{step.status} {step.body_excerpt[:160]!r}" if step.status is not None else (step.failures[0] if step.failures else "no response")
        for step in outcome.steps
    )
    return ProbeResult.model_construct(probe_id=probe.id, kind=probe.kind, visible=probe.visible,
                                       passed=outcome.passed, expected=expected_steps(probe), got=got,
                                       failures=tuple(outcome.failures))
