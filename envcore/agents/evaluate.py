"""Held-out evaluation: which episodes to play, and what their records add up to.

:func:`evaluation_episodes` picks the first ``n`` scenarios of a split in a fixed order (so two
agents evaluated with the same arguments play exactly the same scenarios, which makes their
comparison paired). :func:`summarize` reads episode-log records and returns, overall and broken
down by bug class, tier and domain: the full-fix rate, the partial rate, the security and
regression pass rates and the mean reward, each with a 95% percentile-bootstrap confidence interval
(seeded, so a summary is reproducible). :func:`render_report` writes it as Markdown, and
:func:`compare` pairs two runs on their common scenarios (difference in mean reward with its
bootstrap interval, wins and losses in full fixes).

Rates come from each record's reward breakdown (what every producer writes, server-side or not):
``security_blocked`` measures the share of exploits refused and ``legit_use_broken`` the share of
regression and trap probes that fail; ``steps`` is the mean number of steps taken and
``invalid_rate`` the share of steps that were invalid actions (format errors included), which is
what separates a language model that cannot drive the tools from one that cannot fix the bug.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from envcore.agents.rollouts import EpisodeSpec
from envcore.env.episode_log import EpisodeRecord
from envcore.numbers import signed

METRICS = ("full_fix", "partial", "security_pass", "regression_pass", "reward", "steps", "invalid_rate")
BOOTSTRAP_SAMPLES = 2000


def evaluation_episodes(cache: Any, *, split: str | None, n: int | None) -> list[EpisodeSpec]:
    """The first ``n`` scenarios of ``split`` (all if ``n`` is None), sorted by id, one episode each."""
    ids = sorted(cache.ids(split=split) if split else cache.ids())
    chosen = ids if n is None else ids[:n]
    return [EpisodeSpec.of(index, scenario=scenario_id) for index, scenario_id in enumerate(chosen)]


def scenario_domains(cache: Any) -> dict[str, str]:
    """Each scenario's domain, from the cache's manifest (what :func:`summarize` groups by)."""
    return {row["scenario_id"]: row.get("domain", "unknown") for row in cache.rows}


def _component(record: EpisodeRecord, name: str) -> float | None:
    for component in (record.reward_breakdown or {}).get("components", []):
        if component.get("name") == name:
            return float(component.get("measured", 0.0))
    return None


def episode_metrics(record: EpisodeRecord) -> dict[str, float] | None:
    """One episode's values of :data:`METRICS`; ``None`` if it has no reward (infrastructure error)."""
    if record.reward is None:
        return None
    resolution = (record.reward_breakdown or {}).get("resolution")
    security = _component(record, "security_blocked")
    if (_component(record, "guards_broken") or 0.0) > 0:
        security = 0.0  # a patch that opened a new hole (a guard fails) refuses no exploit that counts
    broken = _component(record, "legit_use_broken")
    steps = _component(record, "steps_used")
    invalid = _component(record, "invalid_actions")
    steps = float(steps if steps is not None else len(record.steps))
    return {
        "full_fix": float(resolution == "full"),
        "partial": float(resolution == "partial"),
        "security_pass": security if security is not None else 0.0,
        "regression_pass": 1.0 - broken if broken is not None else 0.0,
        "reward": float(record.reward),
        "steps": steps,
        "invalid_rate": (invalid or 0.0) / steps if steps else 0.0,
    }


def bootstrap_ci(values: Sequence[float], *, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the mean of ``values`` (seeded: reproducible). The
    resamples are drawn as one NumPy index matrix, so the dashboard can afford intervals on every
    slice of every run on each click (2,000 resamples of 258 values: a few milliseconds)."""
    if not values:
        return (float("nan"), float("nan"))
    if len(values) == 1:
        return (float(values[0]), float(values[0]))
    data = np.asarray(values, dtype=float)
    indices = np.random.default_rng(seed).integers(0, len(data), size=(samples, len(data)))
    means = np.sort(data[indices].mean(axis=1))
    return (float(means[int(0.025 * (samples - 1))]), float(means[int(0.975 * (samples - 1))]))


def _stats(rows: list[dict[str, float]], seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"episodes": len(rows)}
    for metric in METRICS:
        values = [r[metric] for r in rows]
        low, high = bootstrap_ci(values, seed=seed)
        out[metric] = {"mean": statistics.fmean(values) if values else float("nan"), "ci95": [low, high]}
    return out


def latest_per_episode(records: Iterable[EpisodeRecord]) -> list[EpisodeRecord]:
    """One record per (agent, scenario, seed): the last one (a resumed run may have replayed one)."""
    chosen: dict[tuple[str, str, int | None], EpisodeRecord] = {}
    for record in records:
        if record.outcome != "abandoned":
            chosen[(record.agent_id, record.scenario_id, record.seed)] = record
    return list(chosen.values())


def summarize(records: Iterable[EpisodeRecord], *, domains: dict[str, str] | None = None, seed: int = 0) -> dict[str, Any]:
    """Overall and per bug class, tier and domain; see the module docstring."""
    kept = latest_per_episode(records)
    rows = [(r, m) for r in kept if (m := episode_metrics(r)) is not None]
    groups: dict[str, dict[str, list[dict[str, float]]]] = {"bug_class": defaultdict(list), "tier": defaultdict(list),
                                                             "domain": defaultdict(list)}
    for record, metrics in rows:
        groups["bug_class"][record.bug_class].append(metrics)
        groups["tier"][str(record.tier)].append(metrics)
        groups["domain"][(domains or {}).get(record.scenario_id, "unknown")].append(metrics)
    agents = sorted({r.agent_id for r in kept})
    return {
        "agents": agents,
        "episodes": len(kept),
        "infrastructure_errors": len(kept) - len(rows),
        "infrastructure_error_rate": round((len(kept) - len(rows)) / len(kept), 4) if kept else 0.0,
        "overall": _stats([m for _, m in rows], seed),
        "by": {name: {key: _stats(values, seed) for key, values in sorted(group.items())}
               for name, group in groups.items()},
    }


def _cell(stat: dict[str, Any], form: str = "percent") -> str:
    mean, (low, high) = stat["mean"], stat["ci95"]
    if form == "percent":
        return f"{mean:.0%} [{low:.0%}, {high:.0%}]"
    if form == "count":
        return f"{mean:.1f}"
    return f"{signed(mean)} [{signed(low)}, {signed(high)}]"


def _table(rows: dict[str, dict[str, Any]], label: str) -> list[str]:
    lines = [f"| {label} | episodes | full fix | partial | security pass | regression pass | mean reward | steps | invalid |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, stat in rows.items():
        lines.append(f"| {key} | {stat['episodes']} | {_cell(stat['full_fix'])} | {_cell(stat['partial'])} | "
                     f"{_cell(stat['security_pass'])} | {_cell(stat['regression_pass'])} | {_cell(stat['reward'], 'signed')} | "
                     f"{_cell(stat['steps'], 'count')} | {stat['invalid_rate']['mean']:.0%} |")
    return lines


def render_report(summary: dict[str, Any], *, title: str) -> str:
    """The summary as Markdown: overall, then by bug class, tier and domain (95% bootstrap intervals)."""
    rate = summary.get("infrastructure_error_rate", 0.0)
    lines = [f"# {title}", "", f"Agent(s): {', '.join(summary['agents']) or 'none'}; {summary['episodes']} episodes"
             f" ({summary['infrastructure_errors']} without a reward: infrastructure errors, not counted; "
             f"infrastructure-error rate {rate:.1%}, goal 0).",
             "Each cell: mean [95% bootstrap interval]; steps: mean steps taken; invalid: share of steps that were "
             "invalid actions (format errors included).", ""]
    lines += _table({"all": summary["overall"]}, "")
    for name, title_ in (("bug_class", "By bug class"), ("tier", "By tier"), ("domain", "By domain")):
        lines += ["", f"## {title_}", ""] + _table(summary["by"][name], name.replace("_", " "))
    return "\n".join(lines) + "\n"


def compare(base: Iterable[EpisodeRecord], other: Iterable[EpisodeRecord], *, seed: int = 0) -> dict[str, Any]:
    """``other`` against ``base``, paired on the scenarios both played (first record of each kept)."""
    def by_scenario(records: Iterable[EpisodeRecord]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for record in latest_per_episode(records):
            metrics = episode_metrics(record)
            if metrics is not None:
                out.setdefault(record.scenario_id, metrics)
        return out

    a, b = by_scenario(base), by_scenario(other)
    common = sorted(set(a) & set(b))
    differences = [b[s]["reward"] - a[s]["reward"] for s in common]
    low, high = bootstrap_ci(differences, seed=seed)
    return {
        "scenarios": len(common),
        "base_mean_reward": statistics.fmean(a[s]["reward"] for s in common) if common else float("nan"),
        "other_mean_reward": statistics.fmean(b[s]["reward"] for s in common) if common else float("nan"),
        "reward_difference": {"mean": statistics.fmean(differences) if differences else float("nan"), "ci95": [low, high]},
        "full_fix": {
            "base": sum(a[s]["full_fix"] for s in common), "other": sum(b[s]["full_fix"] for s in common),
            "only_other": sum(1 for s in common if b[s]["full_fix"] and not a[s]["full_fix"]),
            "only_base": sum(1 for s in common if a[s]["full_fix"] and not b[s]["full_fix"]),
        },
        "only_in_base": len(set(a) - set(b)),
        "only_in_other": len(set(b) - set(a)),
    }


def render_comparison(result: dict[str, Any], *, base: str, other: str) -> str:
    d = result["reward_difference"]
    f = result["full_fix"]
    return "\n".join([
        f"# {other} against {base}", "",
        f"Paired on {result['scenarios']} scenarios both played"
        f" ({result['only_in_base']} only in {base}, {result['only_in_other']} only in {other}).", "",
        "| | value |", "| --- | --- |",
        f"| mean reward, {base} | {signed(result['base_mean_reward'])} |",
        f"| mean reward, {other} | {signed(result['other_mean_reward'])} |",
        f"| difference ({other} - {base}) | {signed(d['mean'])} [{signed(d['ci95'][0])}, {signed(d['ci95'][1])}] (95% bootstrap) |",
        f"| full fixes, {base} / {other} | {f['base']:.0f} / {f['other']:.0f} |",
        f"| fixed only by {other} / only by {base} | {f['only_other']} / {f['only_base']} |",
    ]) + "\n"
