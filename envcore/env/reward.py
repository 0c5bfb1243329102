"""The reward engine: one number at the end of an episode, from a table of named, pure components.

Each component is a pure function of :class:`RewardInputs` (the final verification report plus a
few counts about how the episode was played) returning its contribution. The engine sums them and
clips the total to ``[-1, 1]``; the breakdown (every component's value and what it measured) is
returned with the reward, and only when the episode ends. Nothing here runs before submit.

The shape follows SWE-bench's grading, with security probes as fail-to-pass and regression, trap and
guard probes as pass-to-pass, and gates that make lazy and wrong fixes unprofitable:

* **the app must load**: a patch that stops the app from importing or starting earns
  ``LOAD_FAILURE`` (-0.6) and nothing else is counted;
* **legitimate use must survive**: security credit is paid only when *every* regression and trap
  probe still passes. Otherwise the episode earns a penalty proportional to the legitimate use it
  broke. Deny-everyone, deleting the vulnerable route, refusing an intentionally public route or
  locking out an admin all fail some regression or trap probe (the scenario check proves this for
  every cached scenario), so they end at or below zero, never above leaving the app alone;
* **guards must hold** (scenarios with ``guard`` probes only): a guard is a security check the shipped
  app already passes. A patch that breaks one has opened a new hole, so it earns no security credit
  at all, and the ``guards_broken`` term charges ``GUARD_BROKEN_WEIGHT`` times the fraction of guards
  that fail. Such a patch always ends below leaving the app alone. Scenarios without guards have
  neither the term nor the gate, so their breakdowns are what they always were.

With every gate open, the security component pays the fraction of security probes (visible and
hidden) that now refuse the exploit, so fixing one of two vulnerable sites earns about half. Small
costs for steps, invalid actions, an oversized diff and running out of budget make a longer or
sloppier episode never pay more than a shorter one with the same patch; together they are capped so
a correct fix always scores at least 0.95 unless the step budget ran out.

Range: ``[-1, 1]``. 1 is a full fix in one step; 0 is the shipped app unchanged (or a patch that
changes nothing that matters); below 0 means the patch broke legitimate use, a guard or the app itself.
An infrastructure failure (the sandbox, not the agent) has reward ``None``: it is neither a success
nor a failure and must not be learned from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pydantic import BaseModel, ConfigDict

from envcore.scenario.probes import ProbeKind
from envcore.verifier.report import VerificationReport

LOAD_FAILURE = -0.6
"""What a patch that stops the app from loading earns (before costs)."""
BROKEN_USE_WEIGHT = 0.5
"""Penalty for legitimate use broken, times the fraction of regression and trap probes that fail."""
GUARD_BROKEN_WEIGHT = 0.5
"""Penalty for security the patch took away, times the fraction of guard probes that fail."""
STEP_COST_MAX = 0.02
"""What using the whole step budget costs; each step costs ``STEP_COST_MAX / max_steps``."""
INVALID_ACTION_COST = 0.005
INVALID_ACTION_COST_MAX = 0.02
DIFF_COST_MAX = 0.01
"""Cost of a diff much larger than the fix needs (see :func:`diff_size`)."""
BUDGET_EXHAUSTED_COST = 0.1
"""Cost of reaching the step budget without submitting (what was there is submitted)."""


@dataclass(frozen=True)
class RewardInputs:
    """Everything the reward depends on: the final verification and how the episode was played."""

    report: VerificationReport
    steps_used: int
    max_steps: int
    invalid_actions: int = 0
    diff_lines: int = 0
    """Lines added plus removed by the episode's final diff against the original app."""
    reference_lines: int = 0
    """The same count for the scenario's reference fix (the engine runs server-side; agents never see it)."""
    budget_exhausted: bool = False
    hints_taken: int = 0
    """Hints a person took while playing (:mod:`envcore.env.hints`; agents take none)."""
    hints_cost: float = 0.0
    """What those hints cost together."""


class RewardComponent(BaseModel):
    """One named term of the reward, as it appears in every breakdown, log and chart."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    value: float
    """What this component adds to the reward (negative for costs and penalties)."""
    measured: float
    """The quantity it is computed from (a pass rate, a count, a flag as 0/1)."""
    detail: str


class RewardBreakdown(BaseModel):
    """The reward and where it came from; returned only when the episode ends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reward: float | None
    """The sum of the components clipped to [-1, 1]; ``None`` for an infrastructure failure."""
    components: tuple[RewardComponent, ...] = ()
    resolution: str | None = None
    """FULL / PARTIAL / NO from the verifier (``None`` when it could not run)."""
    gates: dict[str, bool] = {}
    """Which gates were open: ``app_loads``, ``legit_use_kept`` and, for a scenario with guard probes,
    ``guards_hold``."""

    def value(self, name: str) -> float:
        return next(c.value for c in self.components if c.name == name)


def _app_loads(x: RewardInputs) -> bool:
    return x.report.outcome == "graded"


def _legit_use_kept(x: RewardInputs) -> bool:
    r = x.report
    return r.regression.passed == r.regression.total and r.trap.passed == r.trap.total


def _guards_hold(x: RewardInputs) -> bool:
    return x.report.guard.passed == x.report.guard.total


def _broken_guards(x: RewardInputs) -> list[str]:
    return [p.probe_id for p in x.report.probes if p.kind == ProbeKind.GUARD and not p.passed]


def security_blocked(x: RewardInputs) -> tuple[float, float, str]:
    """Fraction of security probes (visible and hidden) whose exploit is now refused; paid only when
    the app loads, every regression and trap probe still passes and every guard probe still holds."""
    rate = x.report.security.rate if x.report.security.total else 0.0
    paid = rate if _app_loads(x) and _legit_use_kept(x) and _guards_hold(x) else 0.0
    detail = f"{x.report.security.passed}/{x.report.security.total} exploits refused"
    if _app_loads(x) and not _guards_hold(x):
        detail += ("; not paid: a guard probe fails (guards_broken names it): security the app already had no "
                   "longer holds as its probe expects")
    return paid, rate, detail


def legit_use_broken(x: RewardInputs) -> tuple[float, float, str]:
    """Penalty for regression and trap probes that fail (legitimate use the patch broke)."""
    p2p = x.report.pass_to_pass
    if not _app_loads(x):
        return 0.0, 0.0, "not counted: the app did not load"
    failed = 1.0 - p2p.rate
    return -BROKEN_USE_WEIGHT * failed, failed, f"{p2p.total - p2p.passed}/{p2p.total} regression and trap probes fail"


def guards_broken(x: RewardInputs) -> tuple[float, float, str]:
    """Penalty for guard probes that fail: security the shipped app had and the patch took away.
    A term of the breakdown only for scenarios with guard probes."""
    guard = x.report.guard
    if not _app_loads(x):
        return 0.0, 0.0, "not counted: the app did not load"
    failed = 1.0 - guard.rate
    named = _broken_guards(x)
    detail = f"{guard.total - guard.passed}/{guard.total} guard probes fail" + (f": {', '.join(named)}" if named else "")
    return -GUARD_BROKEN_WEIGHT * failed, failed, detail


def app_loads(x: RewardInputs) -> tuple[float, float, str]:
    """A fixed penalty when the patched app does not import or start."""
    if _app_loads(x):
        return 0.0, 1.0, "the app loads"
    return LOAD_FAILURE, 0.0, f"the app does not load: {(x.report.load_error or '')[:200]}"


def steps_used(x: RewardInputs) -> tuple[float, float, str]:
    """A small cost per step, so a shorter episode with the same patch always earns more. An episode
    that ran out of a budget (steps, or a harness's tokens) is charged the whole step budget, so
    running a harness out of tokens early never costs less than running out of steps."""
    budget = max(x.max_steps, 1)
    charged = budget if x.budget_exhausted else min(x.steps_used, budget)
    return -STEP_COST_MAX * charged / budget, float(x.steps_used), f"{x.steps_used}/{budget} steps"


def invalid_actions(x: RewardInputs) -> tuple[float, float, str]:
    """A small cost per action refused (unknown tool, bad arguments, a diff that does not apply)."""
    cost = min(INVALID_ACTION_COST * x.invalid_actions, INVALID_ACTION_COST_MAX)
    return -cost, float(x.invalid_actions), f"{x.invalid_actions} invalid actions"


def diff_size(x: RewardInputs) -> tuple[float, float, str]:
    """A small cost for a diff far larger than the fix needs (more than twice the reference fix's
    changed lines plus 20), growing to ``DIFF_COST_MAX`` at twice that allowance."""
    allowance = 2 * x.reference_lines + 20
    excess = max(0, x.diff_lines - allowance)
    return -DIFF_COST_MAX * min(1.0, excess / allowance), float(x.diff_lines), f"{x.diff_lines} lines changed (allowance {allowance})"


def budget_exhausted(x: RewardInputs) -> tuple[float, float, str]:
    """A cost for running out of steps (or a harness's token budget) instead of submitting."""
    if x.budget_exhausted:
        return -BUDGET_EXHAUSTED_COST, 1.0, "the budget ran out; what was there was submitted"
    return 0.0, 0.0, "submitted within the budget"


Component = Callable[[RewardInputs], tuple[float, float, str]]
COMPONENTS: dict[str, Component] = {
    "security_blocked": security_blocked,
    "legit_use_broken": legit_use_broken,
    "app_loads": app_loads,
    "steps_used": steps_used,
    "invalid_actions": invalid_actions,
    "diff_size": diff_size,
    "budget_exhausted": budget_exhausted,
}
"""The reward's terms, by the name used in every breakdown, log and chart."""

GUARD_COMPONENT = ("guards_broken", guards_broken)
"""The term a scenario with guard probes adds after :data:`COMPONENTS` (others never show it)."""


def compute_reward(x: RewardInputs) -> RewardBreakdown:
    """The episode's reward and its breakdown (reward ``None`` on an infrastructure failure)."""
    report = x.report
    if report.outcome == "infrastructure_error":
        return RewardBreakdown(reward=None, resolution=None, gates={})
    parts = []
    for name, component in COMPONENTS.items():
        value, measured, detail = component(x)
        parts.append(RewardComponent(name=name, value=round(value, 6), measured=round(measured, 6), detail=detail))
    guarded = report.guard.total > 0
    if guarded:  # only a scenario with guards has this term: other breakdowns are unchanged
        name, component = GUARD_COMPONENT
        value, measured, detail = component(x)
        parts.append(RewardComponent(name=name, value=round(value, 6), measured=round(measured, 6), detail=detail))
    if x.hints_taken:  # only a person's episode has this term: agents' breakdowns are unchanged
        parts.append(RewardComponent(name="hints", value=round(-x.hints_cost, 6), measured=float(x.hints_taken),
                                     detail=f"{x.hints_taken} hint(s) taken, costing {x.hints_cost:.2f}"))
    total = max(-1.0, min(1.0, sum(p.value for p in parts)))
    return RewardBreakdown(
        reward=round(total, 6),
        components=tuple(parts),
        resolution=report.resolution.value if report.resolution else None,
        gates={"app_loads": _app_loads(x), "legit_use_kept": _legit_use_kept(x),
               **({"guards_hold": _guards_hold(x)} if guarded else {})},
    )


def reward_configuration() -> dict[str, object]:
    """What the reward is, as data a training run records: every weight and cost, the terms in
    order, and the SHA-256 of this module's source (a change to how a term is computed changes the
    configuration even when no constant moved)."""
    import hashlib
    from pathlib import Path

    constants = {name: globals()[name] for name in (
        "LOAD_FAILURE", "BROKEN_USE_WEIGHT", "GUARD_BROKEN_WEIGHT", "STEP_COST_MAX", "INVALID_ACTION_COST",
        "INVALID_ACTION_COST_MAX", "DIFF_COST_MAX", "BUDGET_EXHAUSTED_COST")}
    return {"constants": constants, "components": [*COMPONENTS, GUARD_COMPONENT[0], "hints"], "range": [-1.0, 1.0],
            "source_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}


def reward_configuration_hash(configuration: dict[str, object] | None = None) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of :func:`reward_configuration`."""
    import hashlib
    import json

    data = reward_configuration() if configuration is None else configuration
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
