"""From a failure analysis to a plan for one agent: sampling weights and a factory job.

**Sampling weights** (:func:`sampling_weights`). Training learns most where the agent sometimes
succeeds, not where it always or never does. For every bug class and tier the agent played, the
plan takes the solve score ``p = (full + 0.5 x partial + 1) / (graded + 2)`` (Laplace-smoothed, so
that a few episodes do not claim certainty). The weight is then

    weight = floor + (1 - floor) x 4 p (1 - p)

- an edge slice (``p`` near 0.5) gets 1;
- an always-solved or never-solved slice falls towards ``floor`` (0.1), but never to 0, so it is
  still seen;
- a slice with fewer than ``min_episodes`` graded episodes keeps 1, because nothing is known about it.

The file is the one the curriculum sampler reads (``A01_WEIGHTS``, the training config's
``environment.weights``). A scenario's weight is its bug class's weight times its tier's weight.

**Factory job** (:func:`factory_job`). It asks the factory for more of what the agent fails at, as
changes to the factory config (``factory build --job``, ``feedback refresh``):

- **bug classes:** each class's weight is multiplied by ``0.5 + 2.5 x (1 - score)``, which gives 3x
  for a class never solved and 0.5x for one always solved;
- **tiers:** tier is not a factory setting. It follows from layout, traps and decoys. When the
  agent's weakest tier is 3, the job raises the trap rates, the decoy rate and the package layout's
  weight. When it is tier 1, the job lowers them;
- **code styles:** each value of each style axis (layout, auth, store, id type) is weighted like a
  bug class, by the agent's score on scenarios written in it;
- **traps:** each trap kind the agent sprang (over-restriction episodes) has its rate raised, in
  proportion to how often it was sprung.

The job records the parent cache version and the analysis it came from, and says why in words.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from envcore.feedback.analysis import STYLE_AXES, VALIDATION_AGENTS

WEIGHT_FLOOR = 0.1
MIN_EPISODES = 5


class PlanError(ValueError):
    """The analysis cannot give a plan for the agent asked (not in it, nothing graded)."""


def smoothed_score(stat: dict[str, Any]) -> float:
    return (stat["full"] + 0.5 * stat["partial"] + 1) / (stat["graded"] + 2)


def edge_weight(stat: dict[str, Any], *, floor: float = WEIGHT_FLOOR, min_episodes: int = MIN_EPISODES) -> float:
    if stat["graded"] < min_episodes:
        return 1.0
    p = smoothed_score(stat)
    return round(floor + (1 - floor) * 4 * p * (1 - p), 4)


def choose_agent(analysis: dict[str, Any], agent: str | None) -> str:
    agents = [a for a in analysis["solve_by_agent"] if a not in VALIDATION_AGENTS]
    if agent is None:
        if len(agents) != 1:
            raise PlanError(f"the analysis holds {len(agents)} agents ({', '.join(agents)}); name the one to plan for")
        return agents[0]
    if agent not in analysis["solve_by_agent"]:
        raise PlanError(f"agent {agent!r} is not in the analysis; it holds {', '.join(agents)}")
    return agent


def sampling_weights(analysis: dict[str, Any], agent: str, *, floor: float = WEIGHT_FLOOR,
                     min_episodes: int = MIN_EPISODES, source: str | None = None) -> dict[str, Any]:
    """The sampling-weights file for ``agent`` (see the module docstring)."""
    solve = analysis["solve_by_agent"][agent]
    if not solve["overall"]["graded"]:
        raise PlanError(f"agent {agent!r} has no graded episode in the analysis")
    return {
        "version": 1,
        "by_bug_class": {k: edge_weight(v, floor=floor, min_episodes=min_episodes) for k, v in solve["bug_class"].items()},
        "by_tier": {k: edge_weight(v, floor=floor, min_episodes=min_episodes) for k, v in solve["tier"].items()},
        "generated_by": {"command": "feedback plan", "agent": agent, "analysis": source, "floor": floor,
                         "min_episodes": min_episodes,
                         "rule": "floor + (1 - floor) * 4p(1 - p), p = (full + 0.5 partial + 1) / (graded + 2)"},
    }


def _multiplier(stat: dict[str, Any], min_episodes: int) -> float:
    if stat["graded"] < min_episodes:
        return 1.0
    return round(0.5 + 2.5 * (1 - smoothed_score(stat)), 3)


def factory_job(analysis: dict[str, Any], agent: str, base: Any, *, parent: str | None, source: str | None,
                min_episodes: int = MIN_EPISODES) -> dict[str, Any]:
    """The factory job for ``agent`` over the factory config ``base`` (see the module docstring)."""
    solve = analysis["solve_by_agent"][agent]
    reasons: list[str] = []
    config: dict[str, Any] = {}

    bug_classes = {}
    for name, weight in base.bug_classes.items():
        stat = solve["bug_class"].get(name)
        factor = _multiplier(stat, min_episodes) if stat else 1.0
        bug_classes[name] = round(weight * factor, 3)
    config["bug_classes"] = bug_classes
    weakest = sorted((s for s in solve["bug_class"].items() if s[1]["graded"] >= min_episodes),
                     key=lambda item: smoothed_score(item[1]))[:3]
    if weakest:
        reasons.append("more of the weakest bug classes: " + ", ".join(
            f"{k} ({v['full']}/{v['graded']} solved)" for k, v in weakest))

    tiers = {k: v for k, v in solve["tier"].items() if v["graded"] >= min_episodes}
    traps = base.traps.model_dump()
    decoy = base.decoy_rate
    layout = dict(base.code_styles.layout)
    if tiers:
        weakest_tier = min(tiers, key=lambda k: (smoothed_score(tiers[k]), -int(k)))
        if weakest_tier == "3":
            traps = {k: round(min(1.0, v * 1.5 + 0.1), 3) for k, v in traps.items()}
            decoy = round(min(1.0, decoy + 0.2), 3)
            layout["package"] = round(layout.get("package", 1.0) * 2, 3)
            reasons.append("harder scenarios (weakest at tier 3): more traps, decoys and package layouts")
        elif weakest_tier == "1":
            traps = {k: round(v * 0.5, 3) for k, v in traps.items()}
            decoy = round(decoy * 0.5, 3)
            layout["single_file"] = round(layout.get("single_file", 1.0) * 2, 3)
            reasons.append("easier scenarios (weakest at tier 1): fewer traps and decoys, more single-file apps")

    sprung = Counter(analysis.get("trap_springs", {}).get(agent, {}))
    total_sprung = sum(sprung.values())
    for kind, count in sprung.items():
        if kind in traps:
            traps[kind] = round(min(1.0, traps[kind] + 0.3 * count / total_sprung), 3)
    if sprung:
        reasons.append("more of the traps it springs: " + ", ".join(f"{k} ({n}x)" for k, n in sprung.most_common()))
    config["traps"] = traps
    config["decoy_rate"] = decoy

    styles: dict[str, dict[str, float]] = {}
    by_style = analysis.get("solve_by_style", {}).get(agent, {})
    for axis in STYLE_AXES:
        current = dict(getattr(base.code_styles, axis))
        if axis == "layout":
            current = layout
        for value in current:
            stat = by_style.get(axis, {}).get(value)
            if stat:
                current[value] = round(current[value] * _multiplier(stat, min_episodes), 3)
        styles[axis] = current
    config["code_styles"] = styles
    return {"config": config, "parent": parent, "analysis": source,
            "reason": f"for {agent}: " + ("; ".join(reasons) or "no slice with enough episodes to change")}


def render_plan(weights: dict[str, Any], job: dict[str, Any], agent: str) -> str:
    lines = [f"# Plan for {agent}", "", job["reason"], "", "## Sampling weights (edge of ability up, solved and hopeless down)",
             "", "| slice | weight |", "| --- | ---: |"]
    lines += [f"| bug class {k} | {v:.2f} |" for k, v in sorted(weights["by_bug_class"].items(), key=lambda x: -x[1])]
    lines += [f"| tier {k} | {v:.2f} |" for k, v in sorted(weights["by_tier"].items())]
    lines += ["", "## Factory job", "", "Bug class weights asked of the factory:", "", "| bug class | weight |",
              "| --- | ---: |"]
    lines += [f"| {k} | {v:.2f} |" for k, v in sorted(job["config"]["bug_classes"].items(), key=lambda x: -x[1])]
    lines += ["", f"Trap rates: {job['config']['traps']}; decoy rate {job['config']['decoy_rate']}.",
              f"Code styles: {job['config']['code_styles']}."]
    return "\n".join(lines) + "\n"
