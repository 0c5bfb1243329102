"""The scorer: the environment's own grade, reported as Inspect scores.

A sample's score is the reward the environment gave its episode, in [-1, 1] (the verifier's hidden
security and regression probes, the gates, the costs; :mod:`envcore.env.reward`). Nothing is graded
here: the score's value is the final observation's reward, its metadata the verifier's resolution
(``full``, ``partial``, ``no``), the whole reward breakdown and how the episode ended, its answer the
diff that was graded, and its explanation the environment's closing text.

An episode the agent left unfinished (an Inspect limit stopped it, or a solver put in place of the
default one stopped without submitting) is ended here by the environment's own path for a harness's
budget running out (:class:`~envcore.env.actions.OutOfBudget`): what the app is now is submitted and
the whole step budget is charged, so stopping early never pays better than running out of steps.

**Infrastructure errors are not scores.** When the verifier could not run (reward ``None``: the
sandbox failed, not the model), the sample gets :meth:`Score.unscored <inspect_ai.scorer.Score.unscored>`:
NaN with reason ``scoring_failed`` and the error in its explanation. Inspect keeps it in the log, leaves
it out of every metric (never a 0 that would count against the model) and reports how many there were
as ``unscored_samples``. A sample whose episode could not even start (the server refused the reset,
the sandbox would not start) fails as an Inspect sample error instead, which ``inspect eval-retry``
runs again.

Metrics: the mean reward with its standard error, and the full-fix rate (the share of scored samples
the verifier resolved ``full``). Over several epochs :func:`mean_reward` (the task's reducer) averages
the rewards and records each sample's share of fully fixed epochs, which the full-fix rate averages.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from inspect_ai.scorer import (
    Metric,
    SampleScore,
    Score,
    Scorer,
    ScoreReducer,
    Target,
    mean,
    mean_score,
    metric,
    score_reducer,
    scorer,
    stderr,
)
from inspect_ai.solver import TaskState

from a01_repair_gym._session import EpisodeProgress, Episodes

ANSWER_CHARS = 20_000
"""The most of the graded diff a score carries as its answer."""

LIMIT_BUDGETS = {"token": "tokens", "message": "messages", "time": "time", "working": "working time",
                 "cost": "cost", "turn": "turns"}
"""The harness budget named to the environment when an Inspect limit stopped the agent."""


def _component(breakdown: dict[str, Any], name: str) -> float | None:
    for component in breakdown.get("components") or ():
        if component.get("name") == name:
            return float(component.get("measured", 0.0))
    return None


@metric
def full_fix_rate() -> Metric:
    """The share of scored samples the verifier resolved ``full`` (read from each score's metadata)."""

    def compute(scores: list[SampleScore]) -> float:
        values = [float((s.score.metadata or {}).get("full_fix", 0.0)) for s in scores]
        return statistics.fmean(values) if values else 0.0

    return compute


@scorer(metrics=[mean(), stderr(), full_fix_rate()])
def environment_reward(episodes: Episodes | None = None) -> Scorer:
    """The reward the environment gave the sample's episode; see the module docstring. ``episodes`` is
    the task's session table (``None`` when a log is rescored: only ended episodes are scored then)."""

    async def score(state: TaskState, target: Target) -> Score:
        progress = state.store_as(EpisodeProgress)
        session = episodes.session(state) if episodes is not None else None
        if not progress.done and session is not None:
            budget = LIMIT_BUDGETS.get(progress.limit or "", "solver")
            await episodes.step(state, {"tool": "out_of_budget", "budget": budget})  # type: ignore[union-attr]
        final = progress.final
        if final is None:
            return Score.unscored(reason="scoring_failed",
                                  explanation="the episode never ended, and there is no session left to end it")
        breakdown = final.get("reward_breakdown") or {}
        diff = await session.diff() if session is not None else None
        answer = diff[:ANSWER_CHARS] if diff is not None else None
        if final.get("reward") is None:
            error = final.get("error") or "the verifier could not run"
            return Score.unscored(reason="scoring_failed", answer=answer,
                                  explanation=f"infrastructure error, not the model's: {error}",
                                  metadata={"outcome": "infrastructure_error", "result": final.get("result")})
        resolution = breakdown.get("resolution")
        exhausted = bool(_component(breakdown, "budget_exhausted"))
        return Score(
            value=float(final["reward"]), answer=answer, explanation=final.get("text"),
            metadata={
                "resolution": resolution,
                "full_fix": 1.0 if resolution == "full" else 0.0,
                "outcome": "budget_exhausted" if exhausted else "submitted",
                "steps": _component(breakdown, "steps_used"),
                "invalid_actions": _component(breakdown, "invalid_actions"),
                "reward_breakdown": breakdown,
            },
        )

    return score


def _scored(score: Score) -> bool:
    return not (isinstance(score.value, float) and math.isnan(score.value))


@score_reducer
def mean_reward() -> ScoreReducer:
    """Inspect's mean over epochs, with ``full_fix`` in the metadata the share of epochs fully fixed
    (the metadata is otherwise the first epoch's, as Inspect's reducers keep it)."""
    reduce_mean = mean_score()

    def reduce(scores: list[Score]) -> Score:
        reduced = reduce_mean(scores)
        scored = [s for s in scores if _scored(s)]
        if not scored:
            return reduced
        share = statistics.fmean(float((s.metadata or {}).get("full_fix", 0.0)) for s in scored)
        return reduced.model_copy(update={"metadata": {**(reduced.metadata or {}), "full_fix": share,
                                                       "epochs_scored": len(scored)}})

    return reduce
