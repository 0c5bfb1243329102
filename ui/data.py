"""Episode records and manifest rows as pandas DataFrames: everything the dashboard tables and charts
are computed from, with no Gradio and no plotting here.

Choices:

* One row per *kept* episode: :func:`~envcore.agents.evaluate.latest_per_episode` drops abandoned
  episodes and keeps the last record per (agent, scenario, seed), exactly as the shipped summaries
  count them. Metric values come from :func:`~envcore.agents.evaluate.episode_metrics`, so a number
  on the dashboard is the number in ``summary.json`` and ``report.md``.
* An episode without a reward (an infrastructure error) is a row with ``graded`` False and NaN
  metrics: it is shown as an episode but never counted in a rate, like the reports do.
* Confidence intervals are :func:`~envcore.agents.evaluate.bootstrap_ci`'s 95% percentile bootstrap,
  seeded, fed the values in record order: the overall and per-group intervals of a set equal its
  ``summary.json`` ones for the same seed and sample count.
* Sets keep the order they are given in (the caller decides: trained first, validation last); groups
  and slices are sorted. Columns are fixed even when there is nothing to show, so an empty
  selection gives an empty table with the right headers rather than an error.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from envcore.agents.evaluate import BOOTSTRAP_SAMPLES, METRICS, bootstrap_ci, episode_metrics, latest_per_episode
from envcore.env.episode_log import EpisodeRecord

COMPONENT_PREFIX = "component:"
BASE_COLUMNS = ("set", "agent_id", "episode_id", "scenario_id", "bug_class", "tier", "domain", "outcome", "graded")
EPISODE_COLUMNS = BASE_COLUMNS + METRICS
""":func:`episode_frame`'s columns before the ``component:<name>`` ones."""

METRIC_LABELS = {
    "full_fix": "Full-fix rate",
    "partial": "Partial-fix rate",
    "security_pass": "Exploits refused",
    "regression_pass": "Legitimate use kept",
    "reward": "Mean reward",
    "steps": "Mean steps",
    "invalid_rate": "Invalid-action rate",
}
RATE_METRICS = frozenset({"full_fix", "partial", "security_pass", "regression_pass", "invalid_rate"})
"""Metrics that are shares in [0, 1] (shown as percentages); ``reward`` and ``steps`` are not."""
GROUPINGS = ("overall", "bug_class", "tier", "domain")
GROUP_LABELS = {"overall": "Overall", "bug_class": "Bug class", "tier": "Tier", "domain": "Domain"}

RATE_COLUMNS = ("set", "group", "mean", "low", "high", "n")
COMPONENT_COLUMNS = ("set", "component", "value")
DELTA_COLUMNS = ("slice", "n", "base", "other", "delta", "low", "high")
MANIFEST_COLUMNS = ("scenario_id", "split", "tier", "bug_class", "domain", "variant", "code_style", "traps",
                    "security", "regression", "trap", "visible_probes", "title")
SUMMARY_COLUMNS = ("set", "episodes", "graded", "full_fix", "partial", "reward", "steps", "invalid_rate")

_DTYPES = {"tier": "int64", "graded": "bool", **{metric: "float64" for metric in METRICS}}


def _empty(columns: Sequence[str], dtypes: Mapping[str, str] | None = None) -> pd.DataFrame:
    return pd.DataFrame({column: pd.Series(dtype=(dtypes or {}).get(column, "object")) for column in columns})


def episode_frame(sets: Mapping[str, Iterable[EpisodeRecord]], domains: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per kept episode of each set (see the module docstring): :data:`EPISODE_COLUMNS`, then
    one ``component:<name>`` column per reward component met (its ``value``, the share of the reward it
    contributed; NaN where the episode has no such component)."""
    rows: list[dict[str, Any]] = []
    components: dict[str, None] = {}  # insertion-ordered set: columns in the order components first appear
    for set_name, records in sets.items():
        for record in latest_per_episode(records):
            metrics = episode_metrics(record)
            row: dict[str, Any] = {
                "set": set_name, "agent_id": record.agent_id, "episode_id": record.episode_id,
                "scenario_id": record.scenario_id, "bug_class": record.bug_class, "tier": int(record.tier),
                "domain": (domains or {}).get(record.scenario_id, "unknown"), "outcome": record.outcome,
                "graded": metrics is not None,
                **{metric: (metrics or {}).get(metric, math.nan) for metric in METRICS},
            }
            if metrics is not None:
                for component in (record.reward_breakdown or {}).get("components", []):
                    column = COMPONENT_PREFIX + str(component.get("name"))
                    components.setdefault(column)
                    row[column] = float(component.get("value", math.nan))
            rows.append(row)
    if not rows:
        return _empty(EPISODE_COLUMNS, _DTYPES)
    frame = pd.DataFrame(rows, columns=[*EPISODE_COLUMNS, *components])
    return frame.astype({**_DTYPES, **{column: "float64" for column in components}})


def component_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if str(c).startswith(COMPONENT_PREFIX)]


def _set_order(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["set"]))


def _mean_ci(values: list[float], seed: int, samples: int) -> tuple[float, float, float]:
    low, high = bootstrap_ci(values, seed=seed, samples=samples)
    return (statistics.fmean(values) if values else math.nan), low, high


def rate_table(frame: pd.DataFrame, by: str, metric: str, *, seed: int = 0,
               samples: int = BOOTSTRAP_SAMPLES) -> pd.DataFrame:
    """Mean of ``metric`` per set and group of ``by`` (a column, or ``"overall"``: one group) over graded
    episodes, with its 95% bootstrap interval: :data:`RATE_COLUMNS`, sorted by group, then sets in the
    frame's order. ``group`` is a string (tiers read ``"1"``, ``"2"`` ...)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    if by != "overall" and by not in frame.columns:
        raise ValueError(f"cannot group by {by!r}: not a column")
    graded = frame[frame["graded"]]
    if graded.empty:
        return _empty(RATE_COLUMNS, {"mean": "float64", "low": "float64", "high": "float64", "n": "int64"})
    groups = pd.Series("overall", index=graded.index) if by == "overall" else graded[by].astype(str)
    order = {name: position for position, name in enumerate(_set_order(graded))}
    rows = []
    # sort=False keeps record order inside each group: the bootstrap then sees what summarize() sees.
    for (set_name, group), values in graded[metric].groupby([graded["set"], groups], sort=False):
        mean, low, high = _mean_ci(values.tolist(), seed, samples)
        rows.append({"set": set_name, "group": group, "mean": mean, "low": low, "high": high, "n": len(values)})
    rows.sort(key=lambda r: (r["group"], order[r["set"]]))
    return pd.DataFrame(rows, columns=list(RATE_COLUMNS))


def component_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Long format of the reward components of graded episodes: :data:`COMPONENT_COLUMNS`, one row per
    (episode, component present in it)."""
    columns = component_columns(frame)
    graded = frame[frame["graded"]]
    if graded.empty or not columns:
        return _empty(COMPONENT_COLUMNS, {"value": "float64"})
    long = graded[["set", *columns]].melt(id_vars="set", var_name="component", value_name="value")
    long = long.dropna(subset=["value"])
    long["component"] = long["component"].str.removeprefix(COMPONENT_PREFIX)
    return long.reset_index(drop=True)[list(COMPONENT_COLUMNS)]


def paired_delta_table(frame: pd.DataFrame, base: str, other: str, metric: str = "reward", *, seed: int = 0,
                       samples: int = BOOTSTRAP_SAMPLES) -> pd.DataFrame:
    """``other`` against ``base`` on the scenarios both have a graded episode of (the first one of each
    kept, as :func:`~envcore.agents.evaluate.compare` does): :data:`DELTA_COLUMNS`, one row per slice:
    ``overall``, ``tier N``, then ``bug class: X``. ``delta`` is the mean paired difference
    (other - base) and ``low``/``high`` its 95% bootstrap interval; pairs go in scenario-id order, so
    the overall reward row equals ``compare``'s interval."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; one of {', '.join(METRICS)}")
    empty = _empty(DELTA_COLUMNS, {"n": "int64", **{c: "float64" for c in DELTA_COLUMNS[2:]}})
    if frame.empty:
        return empty
    graded = frame[frame["graded"]]

    def side(name: str) -> pd.DataFrame:
        rows = graded[graded["set"] == name].drop_duplicates("scenario_id", keep="first")
        return rows[["scenario_id", "tier", "bug_class", metric]]

    pairs = side(base).merge(side(other)[["scenario_id", metric]], on="scenario_id", suffixes=("_base", "_other"))
    if pairs.empty:
        return empty
    pairs = pairs.sort_values("scenario_id", kind="stable")
    slices: list[tuple[str, pd.DataFrame]] = [("overall", pairs)]
    slices += [(f"tier {tier}", part) for tier, part in pairs.groupby("tier", sort=True)]
    slices += [(f"bug class: {bug}", part) for bug, part in pairs.groupby("bug_class", sort=True)]
    rows = []
    for label, part in slices:
        a, b = part[f"{metric}_base"].tolist(), part[f"{metric}_other"].tolist()
        delta, low, high = _mean_ci([y - x for x, y in zip(a, b)], seed, samples)
        rows.append({"slice": label, "n": len(part), "base": statistics.fmean(a), "other": statistics.fmean(b),
                     "delta": delta, "low": low, "high": high})
    return pd.DataFrame(rows, columns=list(DELTA_COLUMNS))


def manifest_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """A scenario cache's manifest rows as a table (:data:`MANIFEST_COLUMNS`), sorted by scenario id;
    ``traps`` comma-joined, ``security``/``regression``/``trap`` the probe counts."""
    table = []
    for row in rows:
        probes = row.get("probes") or {}
        table.append({
            "scenario_id": row.get("scenario_id", ""), "split": row.get("split", ""), "tier": int(row.get("tier", 0)),
            "bug_class": row.get("bug_class", ""), "domain": row.get("domain", "unknown"),
            "variant": row.get("variant", ""), "code_style": row.get("code_style", ""),
            "traps": ", ".join(row.get("traps") or ()),
            "security": int(probes.get("security", 0)), "regression": int(probes.get("regression", 0)),
            "trap": int(probes.get("trap", 0)), "visible_probes": int(row.get("visible_probes", 0)),
            "title": row.get("title", ""),
        })
    counts = {"tier": "int64", "security": "int64", "regression": "int64", "trap": "int64", "visible_probes": "int64"}
    if not table:
        return _empty(MANIFEST_COLUMNS, counts)
    return pd.DataFrame(table, columns=list(MANIFEST_COLUMNS)).sort_values("scenario_id").reset_index(drop=True)


def _any(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "any"))


def filter_manifest(frame: pd.DataFrame, *, split: str | None = None, tier: int | str | None = None,
                    bug_class: str | None = None, domain: str | None = None, text: str | None = None) -> pd.DataFrame:
    """The rows matching every filter given; ``None``, ``""`` or ``"any"`` leave a filter out. ``tier``
    may be an int or its string (a dropdown's value). ``text`` matches a scenario-id prefix or a
    title substring, case-insensitively."""
    mask = pd.Series(True, index=frame.index)
    for column, wanted in (("split", split), ("bug_class", bug_class), ("domain", domain)):
        if not _any(wanted):
            mask &= frame[column] == wanted
    if not _any(tier):
        mask &= frame["tier"].astype(str) == str(tier).strip()
    if not _any(text):
        needle = str(text).strip().lower()
        mask &= (frame["scenario_id"].str.lower().str.startswith(needle)
                 | frame["title"].str.lower().str.contains(needle, regex=False))
    return frame[mask].reset_index(drop=True)


def set_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """A leaderboard: one row per set (frame order), :data:`SUMMARY_COLUMNS`: episodes kept, how many
    were graded, and over the graded ones the full-fix and partial rates, mean reward, mean steps and
    invalid-action rate (NaN when none was graded)."""
    rows = []
    for set_name in _set_order(frame):
        rows_of_set = frame[frame["set"] == set_name]
        graded = rows_of_set[rows_of_set["graded"]]
        rows.append({"set": set_name, "episodes": len(rows_of_set), "graded": len(graded),
                     **{m: float(graded[m].mean()) if len(graded) else math.nan for m in SUMMARY_COLUMNS[3:]}})
    if not rows:
        return _empty(SUMMARY_COLUMNS, {"episodes": "int64", "graded": "int64",
                                        **{m: "float64" for m in SUMMARY_COLUMNS[3:]}})
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def leaderboard_display(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`set_summary` as people read it: rates as percentages, reward with three decimals and a
    sign, steps with one decimal, and readable headers (the numbers stay in :func:`set_summary`)."""
    def percent(value: float) -> str:
        return "" if math.isnan(value) else f"{value:.0%}"

    return pd.DataFrame({
        "set": summary["set"],
        "episodes": summary["episodes"],
        "graded": summary["graded"],
        "full fix": [percent(v) for v in summary["full_fix"]],
        "partial": [percent(v) for v in summary["partial"]],
        "mean reward": ["" if math.isnan(v) else f"{v:+.3f}" for v in summary["reward"]],
        "steps": ["" if math.isnan(v) else f"{v:.1f}" for v in summary["steps"]],
        "invalid steps": [percent(v) for v in summary["invalid_rate"]],
    })
