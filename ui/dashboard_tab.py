"""The Dashboard tab: charts drawn from the same artifacts the evaluation and training write.

Every number comes from episode logs through the two pure layers (:mod:`ui.data` turns records into
DataFrames, :mod:`ui.charts` turns DataFrames into Plotly figures); this module only wires them.
The first view, about three screens on a desktop (five on a phone, where the charts stack), is what
a newcomer needs in a minute:

* a headline card: what the gym is, the best agent (never the oracle, which is validation; said so
  when the best is only a scripted baseline) and the human players, each with 95% bootstrap
  intervals and the number of episodes (:func:`headline_markdown`);
* a ranked leaderboard of the chosen rollout sets, by mean reward then full-fix rate, with friendly
  names (each its own), caveats and intervals, every human player in a row of their own (ranked from
  :data:`ui.data.MIN_RANKED_EPISODES` episodes), the oracle apart;
* a toggle that shows the runs hidden at first (:data:`HIDDEN_AT_FIRST`: pipeline checks, untrained
  models, older caches, other splits, training scenarios), and the sets one by one a click away;
* how each entrant's episodes ended (a stacked bar that sums to 100% of its episodes) beside where
  each set's reward comes from (the mean contribution of every reward component);
* solve and partial rates or mean reward by bug class, tier or domain: a heatmap of slices by sets,
  each cell's 95% interval on hover.

One click away, in closed sections: any two sets compared on the scenarios both played (paired
differences with intervals, overall, by tier and by bug class); the training curves of every run
(:mod:`ui.training_panel`); the failure analysis (:mod:`ui.failure_panel`); a scenario browser over
the cache manifest (the first :data:`BROWSER_ROWS` that match the filters, every split and tier of
the cache offered), where choosing a row opens it in the Play tab.

Choices:

* **About six entrants at first.** The sets shown at first (:func:`default_shown`) are the newest
  cache's baselines and oracle, the trained agents on the test split that are not pipeline checks,
  and the human players; every other set has a reason (:func:`hidden_reason`) and waits behind the
  toggle. The headline card speaks of the same sets, so its numbers are the leaderboard's.

* **One sentence per chart**, over it, says what it shows and how to read it.
* **Fresh after play.** The Space's own human log (``A01_HUMAN_LOG``, wherever it is) is a rollout set
  even outside the artifacts folder. Opening the tab (:meth:`DashboardController.on_open`, bound to the
  tab's ``select`` by :func:`bind_tab`) compares the logs' file versions with those the page last drew
  (a short string in a ``gr.State``) and redraws only when a log changed, so an episode a visitor just
  played is on the leaderboard when they look, and opening an unchanged dashboard costs a few ``stat``
  calls and no redraw.
* **Cheap toggles.** Everything derived (episode frames, leaderboards, rate tables, figures) is cached
  by the file versions of the logs it was computed from, in bounded LRU maps keyed only by known sets
  and choices. A dimension or measure toggle redraws only the rates chart; choosing sets redraws what
  depends on them, never the headline (computed over every set) nor the panels below. Actions served
  from those caches (the toggles, the failure panel's, opening the tab) skip Gradio's queue
  (:data:`ui.wiring.QUICK`). Figures are small: per-slice means and intervals, mean contributions,
  never one point per episode (the box plots they replace sent about 330 kB per click).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from envcore.agents.evaluate import compare, scenario_domains
from envcore.numbers import signed
from envcore.server.sessions import SessionHub
from ui import artifact_sets, charts, data, failure_panel, safe, stages_view, training_panel
from ui.artifact_sets import default_pair
from ui.wiring import QUICK, wire

DIMENSIONS = {"Bug class": "bug_class", "Tier": "tier", "Domain": "domain"}
RATE_METRICS = {"Full fix": "full_fix", "Partial fix": "partial", "Mean reward": "reward"}
DELTA_METRICS = {"Reward": "reward", "Full fix": "full_fix"}
ANY = "any"
SCRIPTED = frozenset(artifact_sets.AGENT_WORDS) - {"oracle"}
"""The scripted baselines (no model): a best agent among them is said to be only a scripted baseline."""
FRAME_ENTRIES = 17
"""Episode frames kept, one per rollout set at one file version of its log: the heavy ones."""
DERIVED_ENTRIES = 256
"""Things derived from them kept: per set, its leaderboard rows and rate tables; per selection of
sets (at their file versions), its frame, leaderboard and figures; the headline."""
BROWSER_ROWS = 100
"""Rows the scenario browser lists. The page keeps every component's value in its state and copies
it on every event: a table of the whole cache (a thousand rows) added about 0.1 s to every click on
the page, toggles included."""
LEADERBOARD_WIDTHS = ("40px", "224px", "84px", "76px", "152px", "120px", "80px", "96px", "350px")
"""Column widths of the leaderboard (:data:`ui.data.LEADERBOARD_HEADERS`): a phone shows the rank, the
name (each its own, with what tells alike ones apart; pinned when the table scrolls sideways) and the
mean reward's value; the rest is a sideways scroll away. Each is wide enough for the longest word of its
header (``partial`` broke into ``partia`` / ``l`` at 60 pixels), and all of them for a desktop's width."""
CHART_MIN_WIDTH = 480
"""Below this width the outcome and component charts stack instead of standing side by side."""

INTRO = ("Agents, and you in the **Play** tab, repair **Broken Access Control** bugs (OWASP A01) in generated "
         "FastAPI apps, graded on held-out scenarios by replaying the exploit (it must now be refused) and the app's "
         "legitimate use (it must still work): reward 1 is a full fix, 0 the app as it was, below 0 a repair that "
         "broke it. Brackets: 95% bootstrap intervals; n: episodes.")
CAPTIONS = {
    "leaderboard": ("**Leaderboard.** By mean reward, then full fixes; a player is ranked from "
                    f"{data.MIN_RANKED_EPISODES} episodes; the oracle plays the reference fix, validating the grader."),
    "outcomes": ("**How the episodes ended.** One bar per leaderboard row: full fixes, partial fixes, no fix, "
                 "steps run out; each sums to 100% of its episodes."),
    "rates": ("**Where each set succeeds.** The measure per slice (a row) and set (a column); the darker, the "
              "higher. Hover a cell for its 95% interval and n."),
    "components": ("**Where the reward comes from.** Each set's mean reward (the diamond, with its interval), "
                   "split into what adds (exploits refused) and what takes (use broken, steps)."),
    "delta": ("**Two sets on the same scenarios.** Each point is the mean paired difference (compared minus "
              "baseline) overall, by tier and by bug class; right of the dashed zero line the compared set did "
              "better, and a whisker that crosses it means no clear difference."),
    "training": ("**Training curves.** Each metric over its run's steps, one line per run: a run's SFT stage "
                 "(`<run>-sft`: its loss falling) and its GRPO stage (reward, full fixes, format errors). A rising "
                 "reward or full-fix line is learning; a flat one is not. Below: each run's base → SFT → SFT+GRPO table."),
    "failures": ("**Why episodes fail.** For each slice, the share of graded episodes solved or failed in each "
                 "way (no patch, over-restriction, wrong site ...); every bar sums to 100%."),
}


def serving_weights(hub: SessionHub) -> dict[str, Any] | None:
    """The sampling weights the server's sampler uses, as a weights file's tables (``None``: uniform)."""
    weights = hub.runtime.sampler.weights
    tables = {"by_bug_class": dict(weights.by_bug_class), "by_tier": dict(weights.by_tier)}
    return tables if any(tables.values()) else None


def set_info(rollout_set: artifact_sets.RolloutSet) -> data.SetInfo:
    """How the leaderboard treats a set: the oracle is validation; a training run's own rollouts (no
    evaluation summary: training scenarios, not held-out ones) and its stages evaluated on the
    scenarios it trained on are listed, not ranked."""
    standing, note = "ranked", ""
    if rollout_set.kind == "validation":
        standing, note = "validation", "validation: plays the reference fix"
    elif rollout_set.kind == "trained" and not rollout_set.evaluated:
        standing, note = "unranked", "training rollouts, not a held-out evaluation"
    elif artifact_sets.plays_learned_scenarios(rollout_set):
        standing, note = "unranked", "the scenarios its run trained on, not a held-out evaluation"
    return data.SetInfo(label=rollout_set.label, kind=rollout_set.kind, caveat=rollout_set.caveat,
                        standing=standing, note=note, split=rollout_set.split, cache=rollout_set.cache)


def short_words(words: str) -> str:
    """What a set is in a word or two, for a heatmap's column: its words before an explanation in
    brackets or after a colon (``Heuristic baseline (scripted)`` -> ``Heuristic baseline``,
    ``Oracle: the reference fix (validation only)`` -> ``Oracle``)."""
    return re.split(r" \(|: ", words, maxsplit=1)[0].strip() or words


def display_names(info: dict[str, data.SetInfo], shown: list[str] | None = None, *,
                  short: bool = False) -> dict[str, str]:
    """Each set's name in the charts: its words (:func:`short_words` with ``short``), made distinct
    among the ``shown`` sets (default: every set in ``info``) by what tells alike ones apart
    (:func:`ui.data.distinct_names`: the split, the cache, where they come from). Caveats are not
    part of a name: the leaderboard says them, beside it."""
    names = [n for n in (shown if shown is not None else info) if n in info]
    return data.distinct_names({n: (short_words(info[n].words) if short else info[n].words, info[n]) for n in names})


_CACHE_RUN = re.compile(r"^evals/v(\d+)/(.+)$")
MAIN_SPLIT = "test"
"""The split the leaderboard ranks on: runs on other splits (held-out styles, external apps) are
measured on other scenarios, and wait behind the toggle."""


def _superseded(rollout_set: artifact_sets.RolloutSet, sets: list[artifact_sets.RolloutSet]) -> bool:
    """An agent evaluated on several caches (``evals/v2/heuristic``, ``evals/v5/heuristic``): a run on
    an older one."""
    match = _CACHE_RUN.match(rollout_set.name)
    if not match:
        return False
    newest = max(int(m.group(1)) for m in map(_CACHE_RUN.match, (s.name for s in sets)) if m and m.group(2) == match.group(2))
    return int(match.group(1)) < newest


def _untrained_model(rollout_set: artifact_sets.RolloutSet) -> bool:
    """A model played as it came, with no adapter and no training of its own (a run's base)."""
    return rollout_set.kind == "baseline" and bool(rollout_set.model) \
        and rollout_set.name.rsplit("/", 1)[-1] not in artifact_sets.AGENT_WORDS


HIDDEN_AT_FIRST: tuple[tuple[str, Callable[[artifact_sets.RolloutSet, list[artifact_sets.RolloutSet]], bool]], ...] = (
    ("training scenarios", lambda s, sets: set_info(s).standing == "unranked"),
    ("pipeline checks", lambda s, sets: bool(s.caveat)),
    ("untrained models", lambda s, sets: _untrained_model(s)),
    ("older caches", _superseded),
    ("other splits", lambda s, sets: s.split not in ("", MAIN_SPLIT, data.PRIVATE_SPLIT)),
)
"""Why a set is not shown at first, in the toggle's words; the first that applies is its reason. What
is left: the newest cache's scripted baselines and oracle, the trained agents on the test split
that are not pipeline checks, and the human players (about six rows). Runs on the private split
stay: it is drawn with the test split's mix, and the leaderboard badges them (:data:`ui.data.PRIVATE_BADGE`)."""


def hidden_reason(rollout_set: artifact_sets.RolloutSet, sets: list[artifact_sets.RolloutSet]) -> str:
    """Why ``rollout_set`` waits behind the toggle (:data:`HIDDEN_AT_FIRST`), ``""`` when it is shown."""
    return next((reason for reason, test in HIDDEN_AT_FIRST if test(rollout_set, sets)), "")


def default_shown(sets: list[artifact_sets.RolloutSet]) -> list[str]:
    """The sets shown at first, in the page's order: those with no :func:`hidden_reason`."""
    return [s.name for s in sets if not hidden_reason(s, sets)]


def toggle_label(sets: list[artifact_sets.RolloutSet]) -> str:
    """The toggle's words: how many runs it shows, and why they were hidden."""
    reasons = [hidden_reason(s, sets) for s in sets]
    hidden = [r for r in reasons if r]
    if not hidden:
        return "Show every run (all are shown)"
    kinds = ", ".join(reason for reason, _ in HIDDEN_AT_FIRST if reason in hidden)
    return f"Show {len(hidden)} more runs: {kinds}"


# ----- the headline card -------------------------------------------------------------------------------
def _percent(value: float) -> str:
    return f"{value:.0%}"


def _ci(mean: float, low: float, high: float, show: Callable[[float], str]) -> str:
    return f"{show(mean)} [{show(low)}, {show(high)}]"


def _scores(row: Any) -> str:
    """``full fixes 24% [19%, 29%], mean reward +0.225 [+0.180, +0.270], n = 258`` (escaped)."""
    return safe.markdown(f"full fixes {_ci(row['full_fix'], row['full_fix_low'], row['full_fix_high'], _percent)}, "
                         f"mean reward {_ci(row['reward'], row['reward_low'], row['reward_high'], signed)}, "
                         f"n = {row['graded']}")


def _who(row: Any) -> str:
    about = " · ".join(p for p in (data.private_badge(row["split"]), row["where"]) if p)
    where = f" ({safe.markdown(about)})" if about else ""
    return f"**{safe.markdown(row['name'])}**{where}"


def headline_markdown(board: pd.DataFrame, humans: dict[str, Any], scripted: set[str], learning: str = "") -> str:
    """The headline card: :data:`INTRO`, then the best agent, what training did (``learning``:
    :func:`ui.stages_view.learning_line`, already escaped), the human players and the validation run,
    from ``board`` (:func:`ui.data.leaderboard_table` over every set) and ``humans``
    (:func:`ui.data.pooled_stats` over every human episode). ``scripted`` names the sets played by a
    scripted baseline. Every name is escaped: sets are folders and players name themselves."""
    lines = [f"### The A01 repair gym in 30 seconds\n\n{INTRO}"]
    ranked = board[board["standing"] == "ranked"]
    agents = ranked[ranked["player"] == ""]
    if agents.empty:
        lines.append("**Best agent:** no agent has a graded episode yet.")
    else:
        best = agents.iloc[0]
        text = f"**Best agent:** {_who(best)}: {_scores(best)}."
        if best["kind"] != "trained":
            kind = "a scripted baseline" if best["set"] in scripted else "an untrained baseline"
            trained = agents[agents["kind"] == "trained"]
            text += f" It is only {kind}: no trained agent beats it yet."
            if not trained.empty:
                top = trained.iloc[0]
                verb = f"is a {safe.markdown(top['caveat'])}:" if top["caveat"] else "scores"
                text += (f" The best trained agent, {_who(top)}, {verb} mean reward "
                         + safe.markdown(f"{_ci(top['reward'], top['reward_low'], top['reward_high'], signed)}, "
                                         f"n = {top['graded']}") + ".")
        elif best["caveat"]:
            text += f" Caveat: {safe.markdown(best['caveat'])}."
        lines.append(text)
    if learning:
        lines.append(learning)
    if not humans["graded"]:
        lines.append("**Human players:** no human episodes yet: play one in the Play tab.")
    elif humans["graded"] < data.MIN_RANKED_EPISODES:  # an interval over one or two episodes says nothing
        players, graded = humans["players"], humans["graded"]
        lines.append(f"**Human players** ({players} player{'s' if players != 1 else ''}): "
                     + safe.markdown(f"{graded} episode{'s' if graded != 1 else ''} so far, mean reward "
                                     f"{signed(humans['reward'])}, full fixes {humans['full_fix']:.0%}")
                     + f"; a player is ranked from {data.MIN_RANKED_EPISODES} episodes.")
    else:
        players = humans["players"]
        text = (f"**Human players** ({players} player{'s' if players != 1 else ''}, all together): "
                + safe.markdown(f"full fixes {_ci(humans['full_fix'], humans['full_fix_low'], humans['full_fix_high'], _percent)}, "
                                f"mean reward {_ci(humans['reward'], humans['reward_low'], humans['reward_high'], signed)}, "
                                f"n = {humans['graded']}"))
        people = ranked[ranked["player"] != ""]
        if not people.empty:
            top = people.iloc[0]
            text += f"; best: **{safe.markdown(top['player'])}**, " + safe.markdown(
                f"mean reward {signed(top['reward'])} over {top['graded']} episode{'s' if top['graded'] != 1 else ''}")
        lines.append(text + ".")
    validation = board[(board["standing"] == "validation") & (board["graded"] > 0)]
    if not validation.empty:
        oracle = validation.iloc[0]
        lines.append(f"**Validation:** {_who(oracle)}: "
                     + safe.markdown(f"{oracle['full_fix']:.0%} full fixes over {oracle['graded']} scenarios")
                     + ", so the grader accepts the intended repair; not ranked.")
    return "\n\n".join(lines)


# ----- the controller ----------------------------------------------------------------------------------
class DashboardController:
    """The Dashboard tab's actions; each returns a dict of named outputs (see :func:`build`)."""

    def __init__(self, hub: SessionHub, artifacts: Path) -> None:
        self.artifacts = Path(artifacts)
        self.cache = hub.runtime.cache
        self.domains = scenario_domains(self.cache)
        self.manifest = data.manifest_frame(self.cache.rows)
        self.human_log = artifact_sets.logged_to(hub.runtime)
        self._frames: OrderedDict[tuple[Any, ...], pd.DataFrame] = OrderedDict()
        self._derived: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self.training = training_panel.TrainingPanel(artifacts)
        self.failures = failure_panel.FailurePanel(artifacts, lambda: serving_weights(hub))

    # ----- what there is to show ---------------------------------------------------------------
    def rollout_sets(self) -> dict[str, artifact_sets.RolloutSet]:
        """Every rollout set under the artifacts folder, and the Space's own human log wherever it is."""
        return {s.name: s for s in artifact_sets.discover(self.artifacts, human_log=self.human_log)}

    @staticmethod
    def version(sets: dict[str, artifact_sets.RolloutSet]) -> str:
        """The file versions of every set's log, as a short string a page keeps (``gr.State``)."""
        return repr(hash(tuple((name, artifact_sets.file_version(s)) for name, s in sorted(sets.items()))))

    def _memo(self, key: tuple[Any, ...], compute: Callable[[], Any], *, frames: bool = False) -> Any:
        """``compute()`` cached under ``key``, in an LRU of :data:`FRAME_ENTRIES` episode frames (with
        ``frames``) or of :data:`DERIVED_ENTRIES` things derived from them. Keys hold file versions and
        known names only, so what a request sends cannot grow them."""
        cache, bound = (self._frames, FRAME_ENTRIES) if frames else (self._derived, DERIVED_ENTRIES)
        with self._lock:
            if key in cache:
                cache.move_to_end(key)
                return cache[key]
        # Computed outside the lock: a slow first draw must not block every other visitor.
        value = compute()
        with self._lock:
            cache[key] = value
            while len(cache) > bound:
                cache.popitem(last=False)
        return value

    def _key(self, names: list[str] | None, sets: dict[str, artifact_sets.RolloutSet]) -> tuple[Any, ...]:
        # A request may send any list: only known sets, each once, in the page's order, key the caches.
        wanted = set(names or [])
        return tuple((name, artifact_sets.file_version(sets[name])) for name in sets if name in wanted)

    def set_frame(self, rollout_set: artifact_sets.RolloutSet) -> pd.DataFrame:
        """One row per kept episode of one set, cached per file version of its log: a visitor's new
        episode re-reads the human log alone, never the evaluation runs."""
        key = (rollout_set.name, artifact_sets.file_version(rollout_set))
        return self._memo(key, lambda: data.episode_frame({rollout_set.name: artifact_sets.load_records(rollout_set)},
                                                          self.domains), frames=True)

    def frame(self, names: list[str] | None, sets: dict[str, artifact_sets.RolloutSet] | None = None) -> pd.DataFrame:
        """One row per episode of the chosen sets, in the page's order (their frames put together)."""
        sets = self.rollout_sets() if sets is None else sets
        key = self._key(names, sets)

        def compute() -> pd.DataFrame:
            parts = [self.set_frame(sets[name]) for name, _ in key]
            return pd.concat(parts, ignore_index=True) if parts else data.episode_frame({})

        return self._memo(("frame", key), compute)

    def info(self, sets: dict[str, artifact_sets.RolloutSet]) -> dict[str, data.SetInfo]:
        return {name: set_info(s) for name, s in sets.items()}

    def board(self, names: list[str] | None, sets: dict[str, artifact_sets.RolloutSet]) -> pd.DataFrame:
        """The leaderboard of the chosen sets (:func:`ui.data.rank_entrants`), from each set's rows,
        computed (with their bootstrap intervals) once per file version of its log."""
        key = self._key(names, sets)

        def rows(name: str) -> pd.DataFrame:
            about = set_info(sets[name])
            return self._memo(("rows", name, artifact_sets.file_version(sets[name]), about),
                              lambda: data.entrant_rows(self.set_frame(sets[name]), {name: about}))

        def compute() -> pd.DataFrame:
            parts = [rows(name) for name, _ in key]
            return data.rank_entrants(pd.concat(parts, ignore_index=True) if parts else data.entrant_rows(
                data.episode_frame({}), {}))

        return self._memo(("board", key), compute)

    def set_rates(self, rollout_set: artifact_sets.RolloutSet, by: str, measure: str) -> pd.DataFrame:
        """:func:`ui.data.rate_table` of one set, cached per file version of its log (intervals per
        set and slice do not depend on the other sets shown)."""
        key = ("rates-of", rollout_set.name, artifact_sets.file_version(rollout_set), by, measure)
        return self._memo(key, lambda: data.rate_table(self.set_frame(rollout_set), by, measure))

    def colors(self, sets: dict[str, artifact_sets.RolloutSet] | None = None) -> dict[str, str]:
        """One colour per rollout set, the same in every chart whichever sets are shown."""
        return charts.set_colors(self.rollout_sets() if sets is None else sets)

    # ----- actions -----------------------------------------------------------------------------
    def refresh(self) -> dict[str, Any]:
        """The page load: every output of the tab."""
        sets = self.rollout_sets()
        listed = list(sets.values())
        choices = [(s.label, s.name) for s in listed]
        names = default_shown(listed)
        base, other = default_pair(listed)
        return {"sets": gr.update(choices=choices, value=names),
                "show_all": gr.update(value=False, label=toggle_label(listed)),
                "base": gr.update(choices=choices, value=base), "other": gr.update(choices=choices, value=other),
                **self.training.refresh(), **self.failures.refresh(),
                **self._everything(sets, names, "Bug class", "Full fix", base, other, "Reward")}

    def _everything(self, sets: dict[str, artifact_sets.RolloutSet], names: list[str], dimension: str, metric: str,
                    base: str | None, other: str | None, delta_metric: str) -> dict[str, Any]:
        return {"headline": self.headline(sets), "seen": self.version(sets),
                **self.draw(names, dimension, metric, sets=sets), **self.delta(names, base, other, delta_metric)}

    def headline(self, sets: dict[str, artifact_sets.RolloutSet] | None = None) -> str:
        """The headline card over the sets shown at first (:func:`default_shown`, whatever the page
        shows now), so that its numbers are those of the leaderboard under it; cached per file versions."""
        sets = self.rollout_sets() if sets is None else sets
        names = default_shown(list(sets.values()))

        def compute() -> str:
            frame = self.frame(names, sets)
            humans = frame[frame["set"].isin([n for n, s in sets.items() if s.kind == "human"])]
            scripted = {n for n in sets if n.rsplit("/", 1)[-1] in SCRIPTED}
            learning = stages_view.learning_line(stages_view.read_stage_tables(self.artifacts))
            return headline_markdown(self.board(names, sets), data.pooled_stats(humans), scripted, learning)

        return self._memo(("headline", self._key(names, sets), stages_view.files_version(self.artifacts)), compute)

    def on_open(self, seen: str | None, names: list[str] | None, dimension: str, metric: str, base: str | None,
                other: str | None, delta_metric: str) -> dict[str, Any]:
        """The tab was opened: redraw what depends on the rollout logs when one changed since the page
        last drew them (``seen``), say a visitor just finished an episode; otherwise nothing."""
        sets = self.rollout_sets()
        if seen == self.version(sets):
            return {}
        listed = list(sets.values())
        choices = [(s.label, s.name) for s in listed]
        shown = [name for name in names or [] if name in sets]
        if not shown:
            shown = default_shown(listed)
        elif any(s.kind == "human" for s in listed) and not any(sets[n].kind == "human" for n in shown):
            shown += [s.name for s in listed if s.kind == "human"]  # the page that played sees its episode
        return {"sets": gr.update(choices=choices, value=shown), "base": gr.update(choices=choices),
                "other": gr.update(choices=choices),
                **self._everything(sets, shown, dimension, metric, base, other, delta_metric)}

    def show_all(self, every: bool, dimension: str, metric: str) -> dict[str, Any]:
        """The toggle: every set (``every``), or those shown at first; the leaderboard and the charts."""
        sets = self.rollout_sets()
        names = list(sets) if every else default_shown(list(sets.values()))
        return {"sets": gr.update(value=names), **self.draw(names, dimension, metric, sets=sets)}

    def draw(self, names: list[str] | None, dimension: str, metric: str, *,
             sets: dict[str, artifact_sets.RolloutSet] | None = None) -> dict[str, Any]:
        """The chosen sets changed: the leaderboard and every chart of them."""
        sets = self.rollout_sets() if sets is None else sets
        key = self._key(names, sets)

        def compute() -> dict[str, Any]:
            board = self.board(names, sets)
            shown = display_names(self.info(sets), [name for name, _ in key])
            rows = dict(zip(board["entrant"], board["name"]))  # the leaderboard's names, each its own
            frame = self.frame(names, sets)
            order = list(dict.fromkeys(board["set"]))  # sets in leaderboard order, best first
            means = data.component_means(frame)
            means = means.set_index("set").loc[[s for s in order if s in set(means["set"])]].reset_index()
            rewards = pd.concat([self.set_rates(sets[name], "overall", "reward") for name in order] or
                                [data.rate_table(frame, "overall", "reward")], ignore_index=True)
            return {"leaderboard": data.leaderboard_display(board),
                    "outcomes": charts.outcome_chart(data.outcome_table(frame, list(board["entrant"])), names=rows),
                    "components": charts.component_chart(means, rewards=rewards, names=shown)}

        # Colours and display names depend on every set there is, not only the chosen ones.
        return {**self._memo(("draw", key, tuple(sets)), compute), **self.rates(names, dimension, metric, sets=sets)}

    def rates(self, names: list[str] | None, dimension: str, metric: str, *,
              sets: dict[str, artifact_sets.RolloutSet] | None = None) -> dict[str, Any]:
        """A dimension or measure toggle: the rates chart alone."""
        sets = self.rollout_sets() if sets is None else sets
        by, measure = DIMENSIONS.get(dimension, "bug_class"), RATE_METRICS.get(metric, "full_fix")
        key = self._key(names, sets)

        def compute() -> Any:
            board = self.board(names, sets)
            graded = board.groupby("set", sort=False)["graded"].sum()
            # best set first; a set of one or two episodes (a visitor's first) has no rate per slice worth a column
            order = [name for name in dict.fromkeys(board["set"]) if graded[name] >= data.MIN_RANKED_EPISODES]
            parts = [self.set_rates(sets[name], by, measure) for name in order]
            table = pd.concat(parts, ignore_index=True) if parts else data.rate_table(data.episode_frame({}), by, measure)
            return charts.rate_chart(table, by=by, metric=measure,
                                     names=display_names(self.info(sets), [name for name, _ in key], short=True))

        return {"rates": self._memo(("rates", key, tuple(sets), by, measure), compute)}

    def delta(self, names: list[str] | None, base: str | None, other: str | None, metric: str) -> dict[str, Any]:
        measure = DELTA_METRICS.get(metric, "reward")
        if not base or not other or base == other:
            message = "Pick two different rollout sets to compare."
            return {"delta": charts.empty_figure(message), "delta_text": message}
        sets = self.rollout_sets()
        if base not in sets or other not in sets:
            message = "Pick two rollout sets that exist."
            return {"delta": charts.empty_figure(message), "delta_text": message}
        key = ("delta", base, artifact_sets.file_version(sets[base]), other, artifact_sets.file_version(sets[other]),
               measure, tuple(sets))
        return self._memo(key, lambda: self._delta(sets, base, other, measure))

    def _delta(self, sets: dict[str, artifact_sets.RolloutSet], base: str, other: str, measure: str) -> dict[str, Any]:
        shown = display_names(self.info(sets))
        frame = self.frame([base, other], sets)
        table = data.paired_delta_table(frame, base, other, measure)
        result = compare(artifact_sets.load_records(sets[base]), artifact_sets.load_records(sets[other]))
        d = result["reward_difference"]
        a, b = safe.markdown(shown[other]), safe.markdown(shown[base])
        text = (f"**{a}** against **{b}** on {result['scenarios']} scenarios both played: mean reward "
                + safe.markdown(f"{signed(result['other_mean_reward'])} vs {signed(result['base_mean_reward'])}, "
                                f"difference {_ci(d['mean'], d['ci95'][0], d['ci95'][1], signed)} (95% paired bootstrap); "
                                f"full fixes {result['full_fix']['other']:.0f} vs {result['full_fix']['base']:.0f}")
                + f" (only {a}: {result['full_fix']['only_other']}, only {b}: {result['full_fix']['only_base']})."
                if result["scenarios"] else f"{b} and {a} have no scenario in common.")
        return {"delta": charts.delta_chart(table, base=base, other=other, metric=measure, colors=self.colors(sets),
                                            names=shown),
                "delta_text": text}

    def scenarios(self, split: str, tier: str, bug_class: str, domain: str, text: str) -> dict[str, Any]:
        frame = data.filter_manifest(self.manifest, split=split, tier=None if tier in (None, "", ANY) else int(tier),
                                     bug_class=bug_class, domain=domain, text=text or None)
        return {"browser": frame.head(BROWSER_ROWS), "browser_count": browser_count(len(frame), len(self.manifest))}


def browser_count(matching: int, total: int) -> str:
    """What the scenario browser lists: how many match, and that only the first ones are shown."""
    shown = f"; the first {BROWSER_ROWS} are listed: filter to narrow" if matching > BROWSER_ROWS else ""
    return f"{matching} of {total} scenarios{shown}"


def _caption(name: str) -> None:
    gr.Markdown(CAPTIONS[name], elem_classes=["a01-caption"])


def build(hub: SessionHub, artifacts: Path) -> dict[str, Any]:
    """Lay out the Dashboard tab (inside an open ``gr.Tab``); returns its components by name. The
    first view (headline, leaderboard and its toggle, the outcome, component and rate charts) is
    open; the comparison, training, failure and scenario panels are closed sections, a click away."""
    ctrl = DashboardController(hub, artifacts)
    manifest = ctrl.manifest
    c: dict[str, Any] = {}
    c["headline"] = safe.markdown_component(f"### The A01 repair gym in 30 seconds\n\n{INTRO}", elem_id="dash-headline",
                                            container=True)
    c["seen"] = gr.State("")
    _caption("leaderboard")
    c["leaderboard"] = gr.Dataframe(pd.DataFrame(columns=list(data.LEADERBOARD_HEADERS)), label="Leaderboard",
                                    elem_id="dash-leaderboard", interactive=False, wrap=True, max_height=560,
                                    column_widths=list(LEADERBOARD_WIDTHS), show_label=False, buttons=[],
                                    pinned_columns=2)  # who it is stays in view when a phone scrolls sideways
    with gr.Row(equal_height=False):  # side by side on a desktop, one under the other on a phone
        with gr.Column(scale=2, min_width=CHART_MIN_WIDTH):
            c["show_all"] = gr.Checkbox(False, label="Show the runs hidden at first", elem_id="dash-show-all",
                                        container=False)
        with gr.Column(scale=1, min_width=CHART_MIN_WIDTH // 2):
            with gr.Accordion("Choose the rollout sets one by one", open=False, elem_id="dash-sets-section"):
                c["sets"] = gr.CheckboxGroup([], label="Rollout sets shown in the leaderboard and the charts below",
                                             elem_id="dash-sets")
    with gr.Row(equal_height=False):
        with gr.Column(min_width=CHART_MIN_WIDTH):
            _caption("outcomes")
            c["outcomes"] = gr.Plot(label="How the episodes ended", elem_id="dash-outcomes", show_label=False)
        with gr.Column(min_width=CHART_MIN_WIDTH):
            _caption("components")
            c["components"] = gr.Plot(label="Reward components", elem_id="dash-components", show_label=False)
    with gr.Row(equal_height=False):  # the caption beside its toggles on a desktop, over them on a phone
        with gr.Column(scale=3, min_width=CHART_MIN_WIDTH // 2):
            _caption("rates")
        with gr.Column(scale=3, min_width=CHART_MIN_WIDTH // 2):
            c["dimension"] = gr.Radio(list(DIMENSIONS), value="Bug class", label="Break down by",
                                      elem_id="dash-dimension")
        with gr.Column(scale=4, min_width=CHART_MIN_WIDTH // 2):
            c["metric"] = gr.Radio(list(RATE_METRICS), value="Full fix", label="Measure", elem_id="dash-metric")
    c["rates"] = gr.Plot(label="Rates by slice, with 95% bootstrap intervals", elem_id="dash-rates", show_label=False)
    with gr.Accordion("Compare two sets on the scenarios both played", open=False, elem_id="dash-compare-section"):
        _caption("delta")
        with gr.Row():
            c["base"] = gr.Dropdown([], label="Baseline set", elem_id="dash-base")
            c["other"] = gr.Dropdown([], label="Compared set", elem_id="dash-other")
            c["delta_metric"] = gr.Radio(list(DELTA_METRICS), value="Reward", label="Difference in")
        c["delta_text"] = safe.markdown_component("", elem_id="dash-delta-text")
        c["delta"] = gr.Plot(label="Paired differences (compared minus baseline)", elem_id="dash-delta",
                             show_label=False)
    with gr.Accordion("Training runs: curves and the base → SFT → SFT+GRPO tables", open=False,
                      elem_id="dash-training-section"):
        c.update(training_panel.build(caption=CAPTIONS["training"], heading=False))
    with gr.Accordion("Why episodes fail: the failure analysis", open=False, elem_id="dash-failures-section"):
        c.update(failure_panel.build(caption=CAPTIONS["failures"]))
    with gr.Accordion("Scenario browser (choose a row to play it)", open=False, elem_id="dash-browser-section"):
        with gr.Row():
            c["f_split"] = gr.Dropdown([ANY, *data.split_choices(manifest)], value=ANY, label="Split", elem_id="dash-f-split")
            c["f_tier"] = gr.Dropdown([ANY, *sorted({str(t) for t in manifest["tier"]}, key=int)], value=ANY,
                                      label="Tier", elem_id="dash-f-tier")
            c["f_bug"] = gr.Dropdown([ANY, *sorted(manifest["bug_class"].unique())], value=ANY, label="Bug class")
            c["f_domain"] = gr.Dropdown([ANY, *sorted(manifest["domain"].unique())], value=ANY, label="Domain")
            c["f_text"] = gr.Textbox(label="Id prefix or title contains")
        c["browser_count"] = gr.Markdown(browser_count(len(manifest), len(manifest)))
        c["browser"] = gr.Dataframe(manifest.head(BROWSER_ROWS), label="Scenarios in the cache", elem_id="dash-browser",
                                    max_height=420)

    draw_inputs = ["sets", "dimension", "metric"]
    wire(c["sets"].input, ctrl.draw, c, draw_inputs, ["leaderboard", "outcomes", "rates", "components"])
    wire(c["show_all"].input, ctrl.show_all, c, ["show_all", "dimension", "metric"],
         ["sets", "leaderboard", "outcomes", "rates", "components"])
    for trigger in ("dimension", "metric"):  # served from caches in milliseconds: no queue
        wire(c[trigger].input, ctrl.rates, c, draw_inputs, ["rates"], **QUICK)
    delta_inputs = ["sets", "base", "other", "delta_metric"]
    for trigger in delta_inputs[1:]:
        wire(c[trigger].input, ctrl.delta, c, delta_inputs, ["delta", "delta_text"])
    fail_inputs = ["fail_analysis", "fail_dimension"]
    for trigger in fail_inputs:  # an analysis read once per file version: milliseconds, no queue
        wire(c[trigger].input, ctrl.failures.draw, c, fail_inputs, ["failures", "fail_chart", "fail_examples", "weights"],
             **QUICK)
    train_inputs = ["train_runs", "train_metrics"]
    for trigger in train_inputs:
        wire(c[trigger].input, ctrl.training.draw, c, train_inputs, ["train_curves", "train_text"])
    filters = ["f_split", "f_tier", "f_bug", "f_domain", "f_text"]
    for trigger in filters:
        wire(c[trigger].input, ctrl.scenarios, c, filters, ["browser", "browser_count"])
    c["controller"] = ctrl
    return c


OPEN_INPUTS = ["seen", "sets", "dimension", "metric", "base", "other", "delta_metric"]
OPEN_CHANGES = ["sets", "base", "other", "headline", "seen", "leaderboard", "outcomes", "rates", "components",
                "delta", "delta_text"]


def bind_tab(tab: Any, components: dict[str, Any]) -> None:
    """Redraw the dashboard when its ``tab`` is selected and a rollout log changed since the page drew
    it (:meth:`DashboardController.on_open`): after a visitor plays, their episode is there."""
    wire(tab.select, components["controller"].on_open, components, OPEN_INPUTS, OPEN_CHANGES, **QUICK)

