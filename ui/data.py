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
* The leaderboard ranks *entrants*, not files: every set is one entrant, except that the episodes
  of human players (agent id ``human:<name>``) are one entrant per player, named as the player named
  themselves, with anonymous players pooled (:func:`player_name`). Entrants are ranked by mean
  reward, then full-fix rate; the oracle's validation runs, training rollouts and entrants with fewer
  than :data:`MIN_RANKED_EPISODES` graded episodes are listed after the ranked ones, never ranked
  (:class:`SetInfo` says which), so one lucky episode never tops agents measured on hundreds.
* Every entrant shows under a name of its own: entrants that share their words are told apart in
  the name itself by what differs between them (the split, the cache, else where they come from;
  :func:`distinct_names`), never by a column off a phone's screen.
* Signed numbers go through :func:`envcore.numbers.signed`: a reward that rounds to zero reads
  ``+0.000``, never ``-0.000``.
* Every share that is drawn stacked (:func:`outcome_table`) is a count over *all* kept episodes of
  its row, with one category for every episode, those without a grade included: a stacked bar
  always reaches exactly 100%.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from envcore.agents.evaluate import BOOTSTRAP_SAMPLES, METRICS, bootstrap_ci, episode_metrics, latest_per_episode
from envcore.env.episode_log import EpisodeRecord
from envcore.numbers import signed

COMPONENT_PREFIX = "component:"
BASE_COLUMNS = ("set", "agent_id", "episode_id", "scenario_id", "bug_class", "tier", "domain", "outcome", "graded",
                "player")
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


HUMAN_PREFIX = "human:"
ANONYMOUS = "anonymous players"
"""The one leaderboard row that pools the human players who gave no name."""
_SESSION_PREFIX = re.compile(r"[A-Za-z0-9_-]{8}")
_WORDLIKE = re.compile(r"(?:[A-Z]?[a-z]+)+[_.-]?[0-9]*|[a-z]+[_.-]?[a-z0-9]*|[0-9]+")


def player_name(agent_id: str) -> str:
    """Who played a human episode: the name after ``human:``, :data:`ANONYMOUS` for a player who gave
    none, ``""`` for an episode that is not a human's.

    The Play tab writes ``human:<name>`` (the name reduced to ``[A-Za-z0-9_.-]``) or, with no name,
    ``human:anon-<the first 8 characters of the session token>``. Logs written before it said ``anon-``
    held the bare prefix, which the id does not tell from a name: for those, a session
    token is URL-safe base64: 8 characters that mix at least two of upper case, lower case and digits
    or ``_-``, in no word-like order, count as anonymous (about 96% of session prefixes do; the rest
    are listed as players with a token for a name), as do an empty name and one starting with
    ``anon``. A name that happens to look like a token (``xK3_q9Zp``) is pooled too: that is the price
    of not listing every anonymous session as a player."""
    if not agent_id.startswith(HUMAN_PREFIX):
        return ""
    name = agent_id[len(HUMAN_PREFIX):].strip()
    if not name or name.lower().startswith("anon"):
        return ANONYMOUS
    if _SESSION_PREFIX.fullmatch(name) and not _WORDLIKE.fullmatch(name):
        classes = (any(c.isupper() for c in name), any(c.islower() for c in name),
                   any(c.isdigit() or c in "_-" for c in name))
        if sum(classes) >= 2:
            return ANONYMOUS
    return name


def episode_frame(sets: Mapping[str, Iterable[EpisodeRecord]], domains: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per kept episode of each set (see the module docstring): :data:`EPISODE_COLUMNS`, then
    one ``component:<name>`` column per reward component met (its ``value``, the share of the reward it
    contributed; NaN where the episode has no such component). ``player`` is :func:`player_name` of
    the episode's agent (``""`` unless a human played it)."""
    rows: list[dict[str, Any]] = []
    components: dict[str, None] = {}  # insertion-ordered set: columns in the order components first appear
    for set_name, records in sets.items():
        for record in latest_per_episode(records):
            metrics = episode_metrics(record)
            row: dict[str, Any] = {
                "set": set_name, "agent_id": record.agent_id, "episode_id": record.episode_id,
                "scenario_id": record.scenario_id, "bug_class": record.bug_class, "tier": int(record.tier),
                "domain": (domains or {}).get(record.scenario_id, "unknown"), "outcome": record.outcome,
                "graded": metrics is not None, "player": player_name(record.agent_id),
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


SPLIT_ORDER = ("train", "val", "test", "test_styles", "external")
"""The order splits are offered in; which ones are offered comes from the cache (:func:`split_choices`)."""


def split_choices(manifest: pd.DataFrame) -> list[str]:
    """Every split the manifest has, the usual ones in :data:`SPLIT_ORDER`, any other after them in
    sorted order: a cache with a new split offers it without a change here."""
    present = {str(split) for split in manifest["split"].dropna().unique() if str(split)}
    return [s for s in SPLIT_ORDER if s in present] + sorted(present - set(SPLIT_ORDER))


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


STANDINGS = ("ranked", "unranked", "validation")
"""Where an entrant stands on the leaderboard, in display order."""


@dataclass(frozen=True)
class SetInfo:
    """What the leaderboard needs to know about a rollout set beyond its episodes."""

    label: str
    """The set in words (``Heuristic baseline (scripted) · evals/v2``): what it is, ``·``, where from."""
    kind: str = "other"
    """``trained``, ``baseline``, ``human``, ``validation`` or ``other`` (:data:`ui.artifact_sets.KINDS`)."""
    caveat: str = ""
    """Why its numbers say little about skill (a model too small to play), or ``""``."""
    standing: str = "ranked"
    """One of :data:`STANDINGS`: the oracle is ``validation``; training rollouts (not a held-out
    evaluation) are ``unranked``."""
    note: str = ""
    """Why it is not ranked, in words (shown beside it)."""
    split: str = ""
    """The scenarios it played: a split of the cache, ``trained`` for the scenarios its run trained
    on, ``""`` when unknown (:func:`ui.artifact_sets.played_on`)."""
    cache: str = ""
    """The scenario cache it played (``v5``), ``""`` when unknown."""

    @property
    def words(self) -> str:
        """What the set is, without where it comes from or its caveat."""
        return self.label.split(" · ")[0]

    @property
    def where(self) -> str:
        """Where the set comes from (``evals/v2``, ``this Space``), from its label."""
        parts = self.label.split(" · ")[1:]
        return " · ".join(p for p in parts if p != self.caveat)


LEADERBOARD_STATS = ("reward", "reward_low", "reward_high", "full_fix", "full_fix_low", "full_fix_high", "partial",
                     "steps", "invalid_rate")
LEADERBOARD_COLUMNS = ("entrant", "set", "player", "name", "where", "split", "cache", "kind", "standing", "rank", "note",
                       "caveat", "episodes", "graded", *LEADERBOARD_STATS)
"""``entrant`` keys a row (the set's name, or ``<set> · <player>`` for a human player); ``name`` is
its own among the rows ranked together (:func:`distinct_names`); ``rank`` is 1, 2 ... for ranked
entrants and 0 for the others; the ``*_low``/``*_high`` columns are 95% bootstrap intervals of the
mean over graded episodes."""
MIN_RANKED_EPISODES = 5
"""Fewer graded episodes than this and an entrant is listed with its n but not ranked. One human
episode at +0.897 (n = 1, an interval of zero width) used to rank first, above the heuristic's 322
episodes; with five, a player's interval is at least an interval, and one lucky repair is not a rank."""
SPLIT_WORDS = {"trained": "its training scenarios"}
"""How a split reads in a name when it tells two entrants apart (otherwise ``<split> split``)."""
PRIVATE_SPLIT = "private"
"""The split an evaluator generates from a secret seed at evaluation time (``eval --split private``):
scenarios nobody could have trained on, so its rows carry :data:`PRIVATE_BADGE`."""
PRIVATE_BADGE = "private split: unseen scenarios from a secret seed"
"""What the leaderboard and the headline say beside a row measured on the private split."""


def private_badge(split: str) -> str:
    """:data:`PRIVATE_BADGE` for a row measured on the private split, else ``""``."""
    return PRIVATE_BADGE if split == PRIVATE_SPLIT else ""


def _split_words(split: str) -> str:
    return SPLIT_WORDS.get(split, f"{split} split")


FACETS = (("split", _split_words), ("cache", lambda cache: f"cache {cache}"))
"""What tells two entrants of the same words apart, in the order the name says it."""


def distinct_names(items: Mapping[str, tuple[str, Any]]) -> dict[str, str]:
    """A name of its own for every key of ``items`` (``key -> (name, about)``, ``about`` with ``split``,
    ``cache`` and ``where`` attributes, a :class:`SetInfo` say). A name no other key has stays as it
    is; keys that share one get, after it, each known facet (:data:`FACETS`) whose known values differ
    among them (``Heuristic baseline (scripted) · cache v2`` and ``· cache v5``; ``r after SFT · test
    split`` and ``· test_styles split``), then, if still alike, where they come from, then the key."""
    names = {key: name for key, (name, _) in items.items()}

    def alike() -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for key, name in names.items():
            groups.setdefault(name, []).append(key)
        return {name: keys for name, keys in groups.items() if len(keys) > 1}

    for keys in alike().values():
        differing = [(attr, words) for attr, words in FACETS
                     if len({getattr(items[k][1], attr, "") for k in keys} - {""}) > 1]
        for key in keys:
            about = items[key][1]
            tags = [words(getattr(about, attr)) for attr, words in differing if getattr(about, attr, "")]
            names[key] = " · ".join([names[key], *tags])
    for fallback in (lambda key: getattr(items[key][1], "where", ""), lambda key: key):
        for keys in alike().values():
            for key in keys:
                if fallback(key):
                    names[key] = f"{names[key]} · {fallback(key)}"
    return names


def entrant_of(set_name: str, player: str) -> str:
    """The key of the leaderboard row an episode counts in: its set, or its set and human player."""
    return f"{set_name} · {player}" if player else set_name


def entrants(frame: pd.DataFrame) -> pd.Series:
    """:func:`entrant_of` for every row of an :func:`episode_frame`."""
    if frame.empty:
        return pd.Series([], dtype="object", index=frame.index)
    return pd.Series([entrant_of(s, p) for s, p in zip(frame["set"], frame["player"])], index=frame.index)


def _info(info: Mapping[str, SetInfo], set_name: str) -> SetInfo:
    return info.get(set_name) or SetInfo(label=set_name)


def _entrant_stats(rows: pd.DataFrame, seed: int, samples: int) -> dict[str, Any]:
    graded = rows[rows["graded"]]
    reward, reward_low, reward_high = _mean_ci(graded["reward"].tolist(), seed, samples)
    fix, fix_low, fix_high = _mean_ci(graded["full_fix"].tolist(), seed, samples)
    def mean(column: str) -> float:
        return float(graded[column].mean()) if len(graded) else math.nan

    return {"episodes": len(rows), "graded": len(graded), "reward": reward, "reward_low": reward_low,
            "reward_high": reward_high, "full_fix": fix, "full_fix_low": fix_low, "full_fix_high": fix_high,
            "partial": mean("partial"), "steps": mean("steps"), "invalid_rate": mean("invalid_rate")}


def _too_few(graded: int, least: int) -> str:
    if not graded:
        return "no graded episode"
    return f"{graded} episode{'s' if graded != 1 else ''}: too few to rank ({least} needed)"


def entrant_rows(frame: pd.DataFrame, info: Mapping[str, SetInfo], *, seed: int = 0,
                 samples: int = BOOTSTRAP_SAMPLES, min_episodes: int = MIN_RANKED_EPISODES) -> pd.DataFrame:
    """One unranked leaderboard row per entrant of ``frame`` (:data:`LEADERBOARD_COLUMNS`, ``rank`` 0),
    in frame order. A set's rows depend on its episodes alone, so a caller may compute them per set
    and :func:`rank_entrants` any selection of them. ``info`` describes each set (a set it does not
    name is ranked, labelled by its name); an entrant with fewer than ``min_episodes`` graded
    episodes (:data:`MIN_RANKED_EPISODES`) is listed, not ranked, and the note says why."""
    rows = []
    keys = entrants(frame)
    for entrant in dict.fromkeys(keys):
        part = frame[keys == entrant]
        set_name, player = part["set"].iloc[0], part["player"].iloc[0]
        about = _info(info, set_name)
        stats = _entrant_stats(part, seed, samples)
        standing, note = about.standing, about.note
        if standing == "ranked" and stats["graded"] < max(min_episodes, 1):
            standing, note = "unranked", _too_few(stats["graded"], max(min_episodes, 1))
        if player:
            sessions = part["agent_id"].nunique()
            name = (f"{ANONYMOUS} ({sessions} session{'s' if sessions != 1 else ''})" if player == ANONYMOUS
                    else f"{player} (human player)")
        else:
            name = about.words
        rows.append({"entrant": entrant, "set": set_name, "player": player, "name": name, "where": about.where,
                     "split": about.split, "cache": about.cache, "kind": about.kind, "standing": standing, "rank": 0, "note": note, "caveat": about.caveat,
                     **stats})
    if not rows:
        return _empty(LEADERBOARD_COLUMNS, {"rank": "int64", "episodes": "int64", "graded": "int64",
                                            **{c: "float64" for c in LEADERBOARD_STATS}})
    return pd.DataFrame(rows, columns=list(LEADERBOARD_COLUMNS))


def rank_entrants(rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`entrant_rows` (of one or several sets, concatenated) sorted and ranked: ranked entrants
    first, by mean reward then full-fix rate (higher first, then by name), numbered 1, 2 ...; then
    the unranked (training rollouts, too few episodes) and the validation runs, with rank 0. Names
    are made distinct among the rows given (:func:`distinct_names`)."""
    if rows.empty:
        return rows.reset_index(drop=True)
    facets = {row.entrant: (row.name, row) for row in rows.itertuples()}
    rows = rows.assign(name=rows["entrant"].map(distinct_names(facets)))

    def order(row: pd.Series) -> tuple[Any, ...]:
        reward, fix = row["reward"], row["full_fix"]
        return (STANDINGS.index(row["standing"]), -(reward if not math.isnan(reward) else -math.inf),
                -(fix if not math.isnan(fix) else -math.inf), row["name"], row["entrant"])

    ordered = sorted((row for _, row in rows.iterrows()), key=order)
    table = pd.DataFrame(ordered, columns=list(LEADERBOARD_COLUMNS)).reset_index(drop=True)
    ranked = table["standing"] == "ranked"
    table["rank"] = 0
    table.loc[ranked, "rank"] = range(1, int(ranked.sum()) + 1)
    return table.astype({"rank": "int64", "episodes": "int64", "graded": "int64"})


def leaderboard_table(frame: pd.DataFrame, info: Mapping[str, SetInfo], *, seed: int = 0,
                      samples: int = BOOTSTRAP_SAMPLES, min_episodes: int = MIN_RANKED_EPISODES) -> pd.DataFrame:
    """The ranked leaderboard of the module docstring (:data:`LEADERBOARD_COLUMNS`, one row per
    entrant): :func:`rank_entrants` of :func:`entrant_rows`."""
    return rank_entrants(entrant_rows(frame, info, seed=seed, samples=samples, min_episodes=min_episodes))


def pooled_stats(frame: pd.DataFrame, *, seed: int = 0, samples: int = BOOTSTRAP_SAMPLES) -> dict[str, Any]:
    """The leaderboard's numbers (episodes, graded, reward and full-fix rate with intervals ...) over
    every row of ``frame`` taken together, plus ``players``: the distinct human players in it."""
    humans = frame[frame["player"] != ""]
    named = humans.loc[humans["player"] != ANONYMOUS, "player"].nunique()
    anonymous = humans.loc[humans["player"] == ANONYMOUS, "agent_id"].nunique()  # one per session
    return {**_entrant_stats(frame, seed, samples), "players": int(named + anonymous)}


OUTCOMES = {
    "full_fix": "full fix",
    "partial": "partial fix",
    "not_fixed": "not fixed",
    "budget": "steps ran out",
    "not_graded": "not graded (infra error)",
}
"""How an episode ended, in stacking order: every kept episode is in exactly one of these. The words
are a legend's, short enough for two to a line on a phone: ``steps ran out`` is an episode whose step
budget ran out before it fixed the app, ``not graded`` one the grader could not run (an
infrastructure error)."""
OUTCOME_COLUMNS = ("entrant", "outcome", "count", "episodes", "share")


def outcome_of(graded: bool, full_fix: float, partial: float, outcome: str) -> str:
    """The :data:`OUTCOMES` key of one episode: ungraded first, then the resolution, then whether the
    step budget ran out."""
    if not graded:
        return "not_graded"
    if full_fix == 1.0:
        return "full_fix"
    if partial == 1.0:
        return "partial"
    return "budget" if outcome == "budget_exhausted" else "not_fixed"


def outcome_table(frame: pd.DataFrame, order: Sequence[str] | None = None) -> pd.DataFrame:
    """How each entrant's episodes ended: :data:`OUTCOME_COLUMNS`, one row per (entrant, outcome of
    :data:`OUTCOMES`), zeros included, so each entrant's shares sum to exactly 1 (counts over all its
    kept episodes). Entrants in ``order`` (e.g. the leaderboard's; those not in it are left out), or
    in frame order."""
    if frame.empty:
        return _empty(OUTCOME_COLUMNS, {"count": "int64", "episodes": "int64", "share": "float64"})
    keys = entrants(frame)
    kinds = pd.Series([outcome_of(g, f, p, o) for g, f, p, o in
                       zip(frame["graded"], frame["full_fix"], frame["partial"], frame["outcome"])], index=frame.index)
    counts = pd.crosstab(keys, kinds)
    shown = [e for e in (order if order is not None else dict.fromkeys(keys)) if e in counts.index]
    rows = []
    for entrant in shown:
        total = int(counts.loc[entrant].sum())
        for outcome in OUTCOMES:
            count = int(counts.loc[entrant].get(outcome, 0))
            rows.append({"entrant": entrant, "outcome": outcome, "count": count, "episodes": total,
                         "share": count / total})
    return pd.DataFrame(rows, columns=list(OUTCOME_COLUMNS))


COMPONENT_MEAN_COLUMNS = ("set", "component", "mean", "n")


def component_means(frame: pd.DataFrame) -> pd.DataFrame:
    """Each set's mean contribution of every reward component over its graded episodes (a component
    an episode lacks counts 0 there): :data:`COMPONENT_MEAN_COLUMNS`. The components of a set sum to
    its mean reward before clipping to [-1, 1]."""
    columns = component_columns(frame)
    graded = frame[frame["graded"]]
    if graded.empty or not columns:
        return _empty(COMPONENT_MEAN_COLUMNS, {"mean": "float64", "n": "int64"})
    means = graded[["set", *columns]].fillna(0.0).groupby("set", sort=False).mean()
    sizes = graded.groupby("set", sort=False).size()
    rows = [{"set": set_name, "component": column.removeprefix(COMPONENT_PREFIX), "mean": float(means.loc[set_name, column]),
             "n": int(sizes[set_name])} for set_name in means.index for column in columns]
    return pd.DataFrame(rows, columns=list(COMPONENT_MEAN_COLUMNS))


def _percent(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.0%}"


LEADERBOARD_HEADERS = ("#", "agent or player", "mean reward", "full fixes", "reward 95% CI", "full fixes 95% CI",
                       "partial", "episodes", "about")
"""The rank, who, and the two scores come first, so that a phone's width shows them without scrolling."""


def leaderboard_display(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`leaderboard_table` as people read it (:data:`LEADERBOARD_HEADERS`): the rank (``–`` for an
    entrant that is not ranked), the name, the mean reward and full-fix rate, their 95% intervals, the
    partial-fix rate, the episodes (and how many were graded, when not all), and, about it, whether it
    was measured on the private split (:data:`PRIVATE_BADGE`, first), where it comes from, its caveat
    and why it is not ranked (``validation: ...`` for the oracle). Cells are
    plain text (a table cell shows its text as it is), so a player's name needs no escaping here."""
    def episodes(row: Any) -> str:
        return str(row.episodes) if row.graded == row.episodes else f"{row.episodes} ({row.graded} graded)"

    def interval(low: float, high: float, show: Any) -> str:
        return "" if math.isnan(low) else f"[{show(low)}, {show(high)}]"

    rows = [[str(r.rank) if r.standing == "ranked" else "–", r.name,
             "" if math.isnan(r.reward) else signed(r.reward), _percent(r.full_fix),
             interval(r.reward_low, r.reward_high, signed), interval(r.full_fix_low, r.full_fix_high, _percent),
             _percent(r.partial), episodes(r),
             " · ".join(p for p in (private_badge(r.split), r.where, r.caveat, r.note) if p)]
            for r in table.itertuples()]
    return pd.DataFrame(rows, columns=list(LEADERBOARD_HEADERS))
