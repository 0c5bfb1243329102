"""The Watch tab: recorded rollouts scrubbed step by step, two sets side by side, or an agent playing live.

Any episode log under ``artifacts/`` is a rollout set (:mod:`ui.artifact_sets`): the shipped
baseline runs, trained adapters' evaluations, human play. Each set is named in words, and a set whose
numbers say little about skill (a model too small to play) carries its caveat above its side.

Choices:

* **The first view tells a story on a held-out scenario** (:func:`opening`). A newcomer should see,
  within a minute, two agents that differ on an app neither trained on, and where they part. So the
  tab opens on a pair and a scenario of a held-out split (any split but ``train``: test, test_styles,
  external, val) where one agent fixed the bug and the other did not: a trained model against its base
  model when one ships that fixes held-out scenarios its base does not (the stage with the most such
  scenarios), else the heuristic against a baseline of the same evaluation (No-op, else Deny-all);
  never a run on the scenarios its model trained on, never the oracle. It opens at the step that
  decides it (:func:`ui.rollout_view.deciding_step`: the better episode's last code change, after
  which its app is the one that was graded), and a one-line banner above everything says who fixed
  what, readable on a phone without opening a dropdown (:func:`story_markdown`). With no such pair it
  falls back to :func:`ui.artifact_sets.default_pair` on the scenario where the two differ most. The
  scenario list of two sets holds the scenarios both played, biggest difference first
  (:func:`ui.rollout_view.pair_choices`); two sets that share no scenario list the first set's.
* **Nothing is a warning that is not one.** A step the environment refused is said in the side's title
  in plain words (part of how the episode went), not with a warning sign; a warning box is kept for a
  set whose numbers say little about skill (its caveat). The start of an episode says so in its action
  pane instead of leaving it blank, and long actions and observations wrap (no sideways scrolling on a
  phone).
* **Every attempt is reachable.** A set may hold several episodes of one scenario; each side has an
  *Attempt* list (``2 of 3 · agent · when · outcome``), the attempt the dashboard counts chosen by
  default. Attempts are indexed once per file version of a log (:func:`ui.rollout_view.index_attempts`),
  so stepping never re-reads a log.
* **A link opens one episode at one step.** The tab shows the link of what is on screen:
  ``?set=<set>&scenario=<id>&attempt=<n>&step=<k>`` with ``&vs=<set>&vs_attempt=<n>`` when a second
  set is shown beside it. Set names and scenario ids are stable, and an attempt number stays the same
  while a log grows (records are only appended), so the link keeps pointing at the same episode.
  ``?episode=<episode id>`` (every record has one) also works, found in whichever set holds it; it
  survives a log being rewritten in another order. Opening the page with such a link selects the
  Watch tab there (:func:`wire_page_load`); whatever in it is unknown or malformed is named in a
  message beside the set pickers and the rest of the link still applies. Nothing a link says is
  shown unescaped or kept: only names that exist on disk key a cache.
* **Live agents stream.** "Run an agent live" attaches an agent to a server-side session of the facade
  (:meth:`~envcore.server.sessions.SessionHub.live_agents`: the scripted baselines always, a local
  model, trained adapter or endpoint when configured). *Next action* plays one step; *Run to the end*
  is a generator (:meth:`WatchController.live_run`): the view is sent after every step with a status
  line (``step 3 of at most 40, running…``), and *Stop* cancels it and leaves the episode where it
  stopped, so Next action or Run to the end go on from there. A scripted agent plays in
  milliseconds, too fast to follow, so steps are paced at least ``A01_UI_LIVE_PACE_S`` seconds apart
  (default 0.5; 0 for none). A step that fails (the agent raised, the session ended) is a message in
  the live message slot, never an error overlay. A run holds one worker of the page's queue and no
  lock of the page: the other controls and tabs stay usable while it plays.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import gradio as gr

from envcore.env.environment import ResetError
from envcore.env.episode_log import EpisodeRecord, is_outcome_only
from envcore.numbers import signed
from envcore.server.sessions import SessionError, SessionHub, Visitor
from envcore.settings import seconds
from ui import artifact_sets, diff_view, rollout_view, safe
from ui.wiring import NOTICE, QUICK, REFUSED, UserError, bind, wire, wire_stream

log = logging.getLogger(__name__)

NONE = ""
SIDES = ("left", "right", "live")
SIDE_FIELDS = ("title", "action", "observation", "transcript", "outcome", "breakdown", "diff")
"""The components of one side of the viewer (``left_title`` ...), all redrawn when its step changes."""
EMPTY_SIDE = "Pick a rollout set and a scenario."
START_ACTION = "(the episode starts here: Step forward shows its first action)"
"""The action pane at the start of an episode, where no action was taken yet (a blank pane reads as broken)."""
SCENARIO_LABELS = {True: "Scenario (both sets' results; biggest difference first)",
                   False: "Scenario (outcome and reward of the first set)"}
ORDINALS = {"left": "First set", "right": "Second set"}
CAVEATS = {artifact_sets.PIPELINE_CHECK: (
    "**Pipeline check, not a skilled agent.** This model is far too small to play the game (under "
    f"{artifact_sets.PIPELINE_CHECK_PARAMETERS // 1_000_000} million parameters): its episodes show that "
    "the pipeline runs end to end, not what training can teach."),
    artifact_sets.SMALL_STAGE: (
    "**A tiny model taught a few apps.** A stage of a run that trained a model of under "
    f"{artifact_sets.PIPELINE_CHECK_PARAMETERS // 1_000_000} million parameters from scratch on a handful of "
    "scenarios: on those it can repair what it was shown; on apps it has not seen it is expected to fail.")}
"""What a set's caveat means, shown above its side (a caveat not listed here is shown as it is)."""
ATTEMPT_CHOICES = 200
"""At most this many attempts (the newest) are listed per scenario; older ones open by link."""
LINK_KEYS = ("set", "scenario", "attempt", "step", "vs", "vs_attempt", "episode")
"""The query parameters of a link to one episode (see the module docstring)."""
LINK_CHARS = 200
"""A link's parameter is cut to this many characters before it is looked up or quoted in a message."""
DEFAULT_PACE_S = 0.5


def pace_from_env() -> float:
    """``A01_UI_LIVE_PACE_S``: the least number of seconds between two steps of a live run."""
    return seconds("A01_UI_LIVE_PACE_S", DEFAULT_PACE_S, maximum=60)


def _attempt_number(value: Any) -> int | None:
    """An attempt as a dropdown or a link sends it ("3"); ``None`` for nothing or anything else."""
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None  # "²".isdigit()


def link_query(left: str | None, right: str | None, scenario: str | None, left_attempt: int | None,
               right_attempt: int | None, step: int) -> str:
    """The query string of a link to what is on screen (``?set=...&scenario=...``), or ``""``."""
    if not left or not scenario:
        return ""
    params: dict[str, Any] = {"set": left, "scenario": scenario}
    if left_attempt:
        params["attempt"] = left_attempt
    params["step"] = step
    if right:
        params["vs"] = right
        if right_attempt:
            params["vs_attempt"] = right_attempt
    return "?" + urlencode(params, safe="/")


def link_markdown(query: str) -> str:
    """The link shown under the step controls. ``urlencode`` leaves only letters, digits, ``_.-~/``
    and its own ``%``, ``=`` and ``&`` in the query, so nothing a set or scenario name holds can close
    the link or make markup."""
    if not query:
        return ""
    return f"[Link to this episode at this step]({query}) (copy it to share: it opens the page here)"


# ----- the first view: a held-out scenario two agents part on ----------------------------------------
TRAINING_SPLIT = "train"
"""The one split that is not held out: a scenario of any other split is one no model trained on."""
BASELINES = ("noop", "deny_all")
"""What the heuristic is compared with when no trained model fixes a held-out scenario, in order."""
WHO = {"heuristic": "the heuristic", "noop": "doing nothing (No-op)", "deny_all": "denying everything (Deny-all)",
       "random": "random actions", "oracle": "the oracle (the reference fix)"}
"""The scripted agents as the banner names them (a set's folder name); any other set by its label."""


@dataclass(frozen=True)
class Opening:
    """What the tab opens on: ``left`` (the agent that did worse), ``right`` (the one that fixed it),
    the scenario, and the step that decides it."""

    left: str
    right: str
    scenario: str
    step: int


def _stage_base(trained: artifact_sets.RolloutSet, by_name: Mapping[str, artifact_sets.RolloutSet]
                ) -> artifact_sets.RolloutSet | None:
    """The untrained stage beside a trained stage of a three-stage table (``training/<run>/eval/<slice>/sft``
    beside ``.../<slice>/base``), for a model whose base :func:`~ui.artifact_sets.base_of` cannot
    name (its evaluation names a model folder that was renamed when it shipped)."""
    parts = trained.name.split("/")
    if len(parts) < 3 or parts[-3] != "eval" or parts[-1] == "base" or parts[-1] not in artifact_sets.STAGE_WORDS:
        return None
    base = by_name.get("/".join([*parts[:-1], "base"]))
    return base if base is not None and base.evaluated and base.kind != "validation" else None


def candidate_pairs(sets: list[artifact_sets.RolloutSet]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(trained, scripted)``: every (base, trained) pair of evaluations (a stage evaluated on the
    scenarios it trained on left out), and every (baseline, heuristic) pair of one evaluation folder,
    No-op before Deny-all."""
    competitors = [s for s in sets if s.kind != "validation"]
    by_name = {s.name: s for s in competitors}
    trained = []
    for s in competitors:
        if s.kind != "trained" or not s.evaluated or artifact_sets.plays_learned_scenarios(s):
            continue
        base = artifact_sets.base_of(s, competitors) or _stage_base(s, by_name)
        if base is not None:
            trained.append((base.name, s.name))
    scripted = []
    for s in competitors:
        folder, _, leaf = s.name.rpartition("/")
        if leaf == "heuristic":
            scripted += [(f"{folder}/{b}", s.name) for b in BASELINES if f"{folder}/{b}" in by_name]
    return trained, scripted


def parted_scenarios(left: Mapping[str, EpisodeRecord], right: Mapping[str, EpisodeRecord],
                     split_of: Callable[[EpisodeRecord], str | None]) -> list[str]:
    """The held-out scenarios both played where ``right`` got further than ``left`` (a fix against
    none, or a full fix against a partial one): the biggest step up first, then as
    :func:`~ui.rollout_view.pair_order` orders them (the biggest difference in reward, then the
    shorter episodes, then by id)."""
    order = {sid: n for n, sid in enumerate(rollout_view.pair_order(dict(left), dict(right)))}
    won = [sid for sid in order if split_of(right[sid]) not in (None, TRAINING_SPLIT)
           and rollout_view.resolution_rank(right[sid]) > rollout_view.resolution_rank(left[sid])]
    step_up = {sid: rollout_view.resolution_rank(right[sid]) - rollout_view.resolution_rank(left[sid]) for sid in won}
    return sorted(won, key=lambda sid: (-step_up[sid], order[sid]))


def opening(sets: list[artifact_sets.RolloutSet], shown: Callable[[str], Mapping[str, EpisodeRecord]],
            split_of: Callable[[EpisodeRecord], str | None]) -> Opening | None:
    """The pair, held-out scenario and step the tab opens on (see the module docstring), or ``None``
    when no pair parts on a held-out scenario. ``shown(name)``: a set's records by scenario."""
    trained, scripted = candidate_pairs(sets)
    for group in (trained, scripted):
        found = []
        for left, right in group:
            records_left, records_right = shown(left), shown(right)
            parted = parted_scenarios(records_left, records_right, split_of)
            if parted:
                first = parted[0]
                step_up = (rollout_view.resolution_rank(records_right[first])
                           - rollout_view.resolution_rank(records_left[first]))
                found.append(((-step_up, -len(parted), right, left), left, right, first))
        if found:
            _, left, right, scenario = min(found)
            step = rollout_view.deciding_step(shown(left)[scenario], shown(right)[scenario])
            return Opening(left, right, scenario, step)
    return None


class ScenarioRows:
    """The manifest rows of every scenario cache under ``root`` (``<root>/<version>/manifest.json``), by
    scenario id, read once per manifest file version: a scenario's title and split for the banner.
    A record names the cache it was played on; a scenario id is a content hash, the same in any cache."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._key: tuple[Any, ...] | None = None
        self._rows: dict[str, dict[str, Any]] = {}

    def _manifests(self) -> list[tuple[Path, int, int]]:
        found = []
        for path in sorted(self.root.glob("*/manifest.json")):
            try:
                stat = path.stat()
            except OSError:
                continue
            found.append((path, stat.st_mtime_ns, stat.st_size))
        return found

    def rows(self) -> dict[str, dict[str, Any]]:
        manifests = self._manifests()
        key = tuple(manifests)
        with self._lock:
            if key == self._key:
                return self._rows
        rows: dict[str, dict[str, Any]] = {}
        for path, _, _ in manifests:  # oldest version first: a newer cache's row wins
            try:
                scenarios = json.loads(path.read_text()).get("scenarios", [])
            except (OSError, ValueError, AttributeError):
                continue
            for row in scenarios if isinstance(scenarios, list) else []:
                if isinstance(row, dict) and isinstance(row.get("scenario_id"), str):
                    rows[row["scenario_id"]] = row
        with self._lock:
            self._key, self._rows = key, rows
        return rows

    def row(self, scenario_id: str | None) -> dict[str, Any]:
        return self.rows().get(scenario_id or "", {})


def who(rollout_set: artifact_sets.RolloutSet | None, record: EpisodeRecord | None) -> str:
    """A set's agent as the banner names it: a scripted agent in words, any other by its set's label
    (without where it comes from and its caveat)."""
    if rollout_set is None:
        return record.agent_id if record is not None else "?"
    leaf = rollout_set.name.rpartition("/")[2]
    if rollout_set.kind in ("baseline", "validation") and leaf in WHO:
        return WHO[leaf]
    return rollout_set.label.split(" · ")[0]


def _how(record: EpisodeRecord) -> str:
    """How the better episode got there: the patch that decided it, or its last step."""
    step = rollout_view.decided_at(record)
    if rollout_view.last_code_change(record):
        return f"with the patch at step {step}"
    if record.steps and (record.steps[-1].observation.get("tool") or record.steps[-1].action.get("tool")) == "submit":
        return f"submitting at step {step}"
    return f"by step {step}" if step else "(its steps are not shown)"


def _why_not(record: EpisodeRecord) -> str:
    """A word on the worse episode when its steps say it plainly."""
    steps = record.steps
    refused = sum(1 for entry in steps if entry.observation.get("error"))
    if refused * 2 > len(steps):
        return f" (the environment refused {refused} of its {len(steps)} actions)"
    if record.outcome == "submitted" and not record.diff.strip() and steps:
        return " (it submitted the app unchanged)"
    return ""


FIXED = {2: "fixed it", 1: "partly fixed it", 0: "did better"}


def story_markdown(row: Mapping[str, Any], left: tuple[str, EpisodeRecord | None],
                   right: tuple[str, EpisodeRecord | None]) -> str:
    """The banner: on which scenario (its title and split), who fixed it, when, and how the other did,
    in one line. ``left`` and ``right``: (who, record) of each side. Empty with nothing to tell. Every
    word from a log or a manifest is escaped (a forged log's resolution is any text)."""
    (left_who, left_record), (right_who, right_record) = left, right
    shown = left_record or right_record
    if shown is None:
        return ""
    title = row.get("title") or f"scenario {shown.scenario_id[:8]} ({shown.bug_class}, tier {shown.tier})"
    split = shown.split or row.get("split")
    where = f"**On {safe.markdown(title)}**" + (
        f" ({safe.markdown(split)} split{'' if split == TRAINING_SPLIT else ', held out'})" if split else "")

    def badge(record: EpisodeRecord) -> str:
        return safe.markdown(rollout_view.badge(record))

    if left_record is None or right_record is None:
        only_who, only = (left_who, left_record) if left_record is not None else (right_who, right_record)
        assert only is not None
        return f"{where}: {safe.markdown(only_who)} ended {badge(only)} {_how(only)}."
    better = rollout_view.better_of(left_record, right_record)
    if better is None:
        return (f"{where}: both ended alike, {safe.markdown(left_who)} {badge(left_record)} and "
                f"{safe.markdown(right_who)} {badge(right_record)}.")
    sides = ((left_who, left_record), (right_who, right_record))
    (win_who, win), (lose_who, lose) = sides if better == "left" else sides[::-1]
    verb = FIXED[rollout_view.resolution_rank(win)]
    return (f"{where}: **{safe.markdown(win_who)}** {verb}, {badge(win)}, {_how(win)}; "
            f"{safe.markdown(lose_who)} scored {badge(lose)}{_why_not(lose)}.")

class WatchController:
    """The Watch tab's actions; each returns a dict of named outputs (see :func:`build`)."""

    def __init__(self, hub: SessionHub, artifacts: Path, *, pace_s: float = 0.0) -> None:
        self.hub = hub
        self.artifacts = artifacts
        self.pace_s = pace_s
        self._by_scenario: dict[tuple[str, Any], rollout_view.AttemptIndex] = {}
        self._lock = threading.Lock()
        self._stops: dict[str, threading.Event] = {}
        """A live run's stop flag by session id, while it runs (:meth:`live_run`, :meth:`live_stop`)."""
        self.scenario_rows = ScenarioRows(artifacts / "scenarios")
        self._opening: tuple[Any, Opening | None] | None = None
        """The last :meth:`opening`, with the file versions of the sets it was found in."""

    # ----- rollout sets ------------------------------------------------------------------------
    def rollout_sets(self) -> dict[str, artifact_sets.RolloutSet]:
        return {s.name: s for s in artifact_sets.discover(self.artifacts)}

    def set_choices(self) -> list[tuple[str, str]]:
        return [(s.label, s.name) for s in self.rollout_sets().values()]

    def attempts(self, name: str | None, sets: Mapping[str, artifact_sets.RolloutSet] | None = None
                 ) -> rollout_view.AttemptIndex:
        """Every episode of the set ``name`` by scenario and attempt, indexed once per file version."""
        if not name:
            return rollout_view.index_attempts([])
        rollout_set = (self.rollout_sets() if sets is None else sets).get(name)
        if rollout_set is None:
            raise UserError(f"no rollout set {name[:LINK_CHARS]!r} under {self.artifacts}")
        key = (name, artifact_sets.file_version(rollout_set))
        with self._lock:
            index = self._by_scenario.get(key)
        if index is None:
            index = rollout_view.index_attempts(artifact_sets.load_records(rollout_set))
            with self._lock:
                self._by_scenario = {k: v for k, v in self._by_scenario.items() if k[0] != name}
                self._by_scenario[key] = index
        return index

    def split_of(self, record: EpisodeRecord) -> str | None:
        """The split of the scenario a record played: as the record says, else as its cache's manifest does."""
        return record.split or self.scenario_rows.row(record.scenario_id).get("split")

    def opening(self, sets: Mapping[str, artifact_sets.RolloutSet] | None = None) -> Opening | None:
        """What the tab opens on (:func:`opening`), found once per version of the sets' files."""
        sets = self.rollout_sets() if sets is None else sets
        key = tuple((name, artifact_sets.file_version(s)) for name, s in sets.items())
        with self._lock:
            memo = self._opening
        if memo is not None and memo[0] == key:
            return memo[1]
        found = opening(list(sets.values()), lambda name: self.attempts(name, sets).shown_records(), self.split_of)
        with self._lock:
            self._opening = (key, found)
        return found

    def story(self, left: str | None, right: str | None, records: Mapping[str, EpisodeRecord | None],
              sets: Mapping[str, artifact_sets.RolloutSet]) -> str:
        """The banner over the episodes shown (:func:`story_markdown`)."""
        shown = records.get("left") or records.get("right")
        row = self.scenario_rows.row(shown.scenario_id) if shown is not None else {}
        return story_markdown(row, (who(sets.get(left or ""), records.get("left")), records.get("left")),
                              (who(sets.get(right or ""), records.get("right")), records.get("right")))

    def records(self, name: str | None) -> dict[str, EpisodeRecord]:
        """The record shown by default for each scenario of the set (:func:`~ui.rollout_view.shown_records`)."""
        return self.attempts(name).shown_records()

    def find_episode(self, episode_id: str) -> tuple[str, str, int] | None:
        """``(set, scenario, attempt)`` of the episode with this id, in the first set holding it."""
        sets = self.rollout_sets()
        for name in sets:
            found = self.attempts(name, sets).episodes.get(episode_id)
            if found is not None:
                return name, found[0], found[1]
        return None

    # ----- what is on screen -------------------------------------------------------------------
    def _scenarios(self, left: rollout_view.AttemptIndex, right: rollout_view.AttemptIndex | None
                   ) -> list[tuple[str, str]]:
        """The scenario list: both sets' scenarios, biggest difference first; else the first set's."""
        left_shown = left.shown_records()
        if right is not None:
            right_shown = right.shown_records()
            if left_shown.keys() & right_shown.keys():
                return rollout_view.pair_choices(left_shown, right_shown)
        return rollout_view.scenario_choices(left_shown.values())

    def _about(self, side: str, rollout_set: artifact_sets.RolloutSet | None) -> str:
        if rollout_set is None:
            return f"#### {ORDINALS[side]}"
        words = rollout_set.label.removesuffix(f" · {rollout_set.caveat}") if rollout_set.caveat else rollout_set.label
        text = f"#### {ORDINALS[side]}: {safe.markdown(words)}"
        if rollout_set.caveat:
            text += f"\n\n> ⚠️ {CAVEATS.get(rollout_set.caveat) or safe.markdown(rollout_set.caveat)}"
        return text

    def _attempt_update(self, index: rollout_view.AttemptIndex, scenario: str | None, attempt: int | None) -> Any:
        played = index.attempts.get(scenario or "", ())
        if not played:
            return gr.update(choices=[], value=None, interactive=False)
        chosen = attempt if attempt is not None and 1 <= attempt <= len(played) else index.shown[scenario or ""]
        choices = rollout_view.attempt_choices(played, ATTEMPT_CHOICES)
        if str(chosen) not in {value for _, value in choices}:  # an old attempt opened by link
            choices.append((rollout_view.attempt_label(played[chosen - 1], chosen, len(played)), str(chosen)))
        return gr.update(choices=choices, value=str(chosen), interactive=len(played) > 1)

    def _select(self, left: str | None, right: str | None, scenario: str | None = None, *,
                left_attempt: int | None = None, right_attempt: int | None = None, index: int | None = 0,
                sets_changed: bool = False) -> dict[str, Any]:
        """Everything a choice of sets shows: the scenario list (``scenario`` kept if the sets have it,
        else the most telling one), both sides' headings and attempts, and the view at ``index``
        (``None``: at the step where the two episodes part, :func:`ui.rollout_view.deciding_step`)."""
        sets = self.rollout_sets()
        right = NONE if not right or right == left else right  # one set twice shows nothing more
        left_index = self.attempts(left, sets)
        right_index = self.attempts(right, sets) if right else None
        choices = self._scenarios(left_index, right_index)
        ids = [sid for _, sid in choices]
        if scenario not in ids:
            scenario = ids[0] if ids else None
        if index is None:
            index = rollout_view.deciding_step(left_index.record(scenario or "", left_attempt),
                                               right_index.record(scenario or "", right_attempt) if right_index else None)
        paired = right_index is not None and bool(left_index.attempts.keys() & right_index.attempts.keys())
        out: dict[str, Any] = {
            "right_set": gr.update(value=right),
            "right_column": gr.update(visible=bool(right)),
            "scenario": gr.update(choices=choices, value=scenario, label=SCENARIO_LABELS[paired]),
            "left_about": self._about("left", sets.get(left or "")),
            "right_about": self._about("right", sets.get(right) if right else None),
            "left_attempt": self._attempt_update(left_index, scenario, left_attempt),
            "right_attempt": (self._attempt_update(right_index, scenario, right_attempt) if right_index
                              else gr.update(choices=[], value=None, interactive=False)),
        }
        if sets_changed:
            choices_all = [(s.label, s.name) for s in sets.values()]
            out["left_set"] = gr.update(choices=choices_all, value=left)
            out["right_set"] = gr.update(choices=[("(none)", NONE), *choices_all], value=right)
        out.update(self.show(left, right, scenario, index, left_attempt, right_attempt))
        return out

    # ----- actions -----------------------------------------------------------------------------
    def refresh(self) -> dict[str, Any]:
        """The sets as they are on disk, opened on a held-out scenario two agents part on, at the step
        that decides it (:meth:`opening`); else on :func:`~ui.artifact_sets.default_pair`, on the
        scenario where they differ most, at the step where they part."""
        sets = self.rollout_sets()
        found = self.opening(sets)
        if found is not None:
            return self._select(found.left, found.right, found.scenario, index=found.step, sets_changed=True)
        left, right = artifact_sets.default_pair(list(sets.values()))
        return self._select(left, right or NONE, index=None, sets_changed=True)

    def pick_sets(self, left: str | None, right: str | None) -> dict[str, Any]:
        return self._select(left, right)

    def open_episode(self, name: str, scenario: str) -> dict[str, Any]:
        """Show ``scenario`` of the set ``name`` alone, from its start (a link from the dashboard)."""
        out = self._select(name, NONE, scenario)
        return {"left_set": gr.update(value=name), **out}

    def show(self, left: str | None, right: str | None, scenario: str | None, index: float | None,
             left_attempt: Any = None, right_attempt: Any = None) -> dict[str, Any]:
        """Both sides at step ``index`` (clamped to the longer episode) of the chosen attempts."""
        try:
            index = max(int(index or 0), 0)
        except (TypeError, ValueError, OverflowError):  # a request may send any number, inf and nan too
            index = 0
        sets = self.rollout_sets()
        out: dict[str, Any] = {}
        total = 0
        attempts: dict[str, int | None] = {}
        records: dict[str, EpisodeRecord | None] = {}
        for side, name, attempt in (("left", left, left_attempt), ("right", right, right_attempt)):
            record, attempts[side] = None, None
            if name:
                played = self.attempts(name, sets)
                number = _attempt_number(attempt)
                if number is None or not 1 <= number <= len(played.attempts.get(scenario or "", ())):
                    number = played.shown.get(scenario or "")
                record = played.record(scenario or "", number)
                attempts[side] = number if record is not None else None
            records[side] = record
            out.update(side_outputs(side, record, index, name))
            if record is not None:
                total = max(total, rollout_view.step_count(record))
        index = min(index, total)
        out["index"] = gr.update(maximum=max(total, 1), value=index)
        shown_right = right if attempts["right"] else None
        out["link"] = link_markdown(link_query(left, shown_right, scenario if attempts["left"] else None,
                                               attempts["left"], attempts["right"], index))
        out["story"] = self.story(left, right, records, sets)
        return out

    def show_start(self, left: str | None, right: str | None, scenario: str | None) -> dict[str, Any]:
        """``scenario`` from its first step, each side on its default attempt (a scenario was picked)."""
        sets = self.rollout_sets()
        left_index = self.attempts(left, sets)
        right_index = self.attempts(right, sets) if right else None
        return {"left_attempt": self._attempt_update(left_index, scenario, None),
                "right_attempt": (self._attempt_update(right_index, scenario, None) if right_index
                                  else gr.update(choices=[], value=None, interactive=False)),
                **self.show(left, right, scenario, 0)}

    def show_attempt(self, left: str | None, right: str | None, scenario: str | None, left_attempt: Any,
                     right_attempt: Any) -> dict[str, Any]:
        """The chosen attempts from their first step (an attempt was picked)."""
        return self.show(left, right, scenario, 0, left_attempt, right_attempt)

    def show_step(self, left: str | None, right: str | None, scenario: str | None, index: float | None,
                  left_attempt: Any = None, right_attempt: Any = None) -> dict[str, Any]:
        """Both sides at step ``index`` of the episodes already shown: what a step changes only (the
        outcome, breakdown and diff belong to the episode and stay as drawn)."""
        shown = self.show(left, right, scenario, index, left_attempt, right_attempt)
        return {name: value for name, value in shown.items() if name in STEP_VIEW}

    def move(self, left: str | None, right: str | None, scenario: str | None, index: float | None,
             delta: int, left_attempt: Any = None, right_attempt: Any = None) -> dict[str, Any]:
        try:
            index = max(int(index or 0) + delta, 0)
        except (TypeError, ValueError, OverflowError):
            index = 0
        return self.show_step(left, right, scenario, index, left_attempt, right_attempt)  # show clamps to the end

    def step_back(self, left: str | None, right: str | None, scenario: str | None, index: float | None,
                  left_attempt: Any = None, right_attempt: Any = None) -> dict[str, Any]:
        return self.move(left, right, scenario, index, -1, left_attempt, right_attempt)

    def step_forward(self, left: str | None, right: str | None, scenario: str | None, index: float | None,
                     left_attempt: Any = None, right_attempt: Any = None) -> dict[str, Any]:
        return self.move(left, right, scenario, index, +1, left_attempt, right_attempt)

    # ----- a link to one episode ---------------------------------------------------------------
    def open_link(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The page opened with ``params`` (its query string): with none of :data:`LINK_KEYS`, the
        default view; else the Watch tab on the episode and step they name, and a message naming
        whatever in them was not found (the rest still applies)."""
        given = {k: str(params[k])[:LINK_CHARS] for k in LINK_KEYS if params.get(k) not in (None, "")}
        if not given:
            return self.refresh()
        problems: list[str] = []
        sets = self.rollout_sets()
        left, scenario, attempt = given.get("set"), given.get("scenario"), given.get("attempt")
        if "episode" in given:
            found = self.find_episode(given["episode"])
            if found is None:
                problems.append(f"no episode {given['episode']!r} in any rollout set")
            else:
                left, scenario, number = found
                attempt = str(number)
        if left is not None and left not in sets:
            problems.append(f"no rollout set {left!r}")
            left = None
        if left is None:
            out = self.refresh()
            problems.append("showing the default pair instead" if problems else
                            "it names no rollout set (set=...): showing the default pair")
            return {**out, "tabs": gr.Tabs(selected="watch"), REFUSED: "This link: " + "; ".join(problems) + "."}
        right = given.get("vs")
        if right is not None and right not in sets:
            problems.append(f"no rollout set {right!r} to show beside it")
            right = None
        played = self.attempts(left, sets)
        if scenario is not None and scenario not in played.attempts:
            problems.append(f"{sets[left].label!r} has no episode of scenario {scenario!r}")
            scenario, attempt = None, None
        left_attempt = _attempt_number(attempt)
        count = len(played.attempts.get(scenario or "", ()))
        if attempt is not None and scenario is not None and (left_attempt is None or not 1 <= left_attempt <= count):
            problems.append(f"no attempt {attempt!r} of that scenario (it has {count})")
            left_attempt = None
        right_attempt = _attempt_number(given.get("vs_attempt"))
        if right and "vs_attempt" in given and scenario is not None:
            other = len(self.attempts(right, sets).attempts.get(scenario, ()))
            if right_attempt is None or not 1 <= right_attempt <= other:
                problems.append(f"no attempt {given['vs_attempt']!r} of it beside (it has {other})")
                right_attempt = None
        step = given.get("step", "0")
        index = _attempt_number(step)  # the same rule: a small whole number
        if index is None:
            problems.append(f"the step {step!r} is not a number: showing the start")
            index = 0
        out = self._select(left, right or NONE, scenario, left_attempt=left_attempt, right_attempt=right_attempt,
                           index=index, sets_changed=True)
        shown = out["index"]["value"]
        if index > shown:
            problems.append(f"the episode has {shown} steps: showing the last")
        out["tabs"] = gr.Tabs(selected="watch")
        if problems:
            out[REFUSED] = "This link: " + "; ".join(problems) + "."
        return out

    # ----- live --------------------------------------------------------------------------------
    def live_choices(self) -> list[tuple[str, str]]:
        return [(agent.label, name) for name, agent in self.hub.live_agents().items()]

    def start_live(self, sid: str | None, agent: str | None, scenario: str | None, *,
                   visitor: Visitor | None = None) -> dict[str, Any]:
        if not agent:
            raise UserError("Pick an agent to run.")
        if not scenario:
            raise UserError("Pick a scenario above first: the agent plays the scenario shown.")
        self._request_stop(sid)  # a run still playing the session's last episode stops first
        opened = None
        try:
            if not self.hub.is_open(sid):
                sid = opened = self.hub.open(kind="live", visitor=visitor)
            assert sid is not None
            self.hub.start_agent(sid, agent, scenario=scenario, seed=0)
        except (SessionError, ResetError) as exc:
            if opened:  # a session opened for an agent that could not start must not keep its slot
                self.hub.close(opened)
            served = self.hub.runtime.cache
            if scenario not in served.ids():  # a run of another cache: say so in words, not a path
                raise UserError(f"Scenario {scenario} is not one this Space serves: the run shown was played on "
                                f"another scenario cache. Pick a run played on cache {served.root.name} to watch an "
                                "agent play its scenarios live.") from None
            raise UserError(str(exc)) from None
        ready = "Ready: press Next action for one step, or Run to the end."
        return {"live_sid": sid, **self._live_view(sid, ready)}

    def _live_session(self, sid: str | None) -> str:
        if not sid or not self.hub.is_open(sid):
            raise UserError("No agent is playing here yet (or its session expired): pick an agent and press Start.")
        return str(sid)

    def _agent_step(self, sid: str) -> bool:
        """Play one action of the session's agent; whether the episode is over. A failure, the agent's
        or the session's, is a :class:`UserError` saying so (the episode stays where it was)."""
        try:
            _, observation = self.hub.agent_step(sid)
        except SessionError as exc:
            raise UserError(str(exc)) from None
        except Exception as exc:  # the agent's own code (a model, an endpoint) failed: a message, not a crash
            log.exception("live agent step failed in session %s", sid[:8])
            raise UserError(f"The agent failed on this step ({type(exc).__name__}: {str(exc)[:300]}); "
                            "the episode stays where it was.") from None
        return bool(observation.done)

    def live_step(self, sid: str | None) -> dict[str, Any]:
        sid = self._live_session(sid)
        self._agent_step(sid)
        return self._live_view(sid)

    def live_run(self, sid: str | None) -> Iterator[dict[str, Any]]:
        """Play the live agent to the end of its episode, one view per step (a generator Gradio streams).
        Checked at once: a :class:`UserError` before anything plays when there is no agent or its
        episode is over. A step that fails ends the run with the view so far and the failure as a
        refusal; :meth:`live_stop` (or a new Start) ends it between two steps with a "stopped" view."""
        sid = self._live_session(sid)
        try:
            record = self.hub.record(sid)
        except SessionError as exc:
            raise UserError(str(exc)) from None
        if record is None:
            raise UserError("No agent is playing here yet: pick an agent and press Start.")
        if record.outcome != "abandoned":  # a record of an episode still running says "abandoned"
            raise UserError("This episode is over: press Start for a new one.")
        stop = threading.Event()
        with self._lock:
            previous = self._stops.get(sid)
            self._stops[sid] = stop
        if previous is not None:
            previous.set()  # one run per session: the older one stops between its steps
        return self._run(sid, stop)

    def _run(self, sid: str, stop: threading.Event) -> Iterator[dict[str, Any]]:
        try:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    done = self._agent_step(sid)
                except UserError as exc:
                    yield {**self._live_view(sid, "Stopped: the step failed (see the message)."), REFUSED: str(exc)}
                    return
                if done:
                    yield self._live_view(sid)
                    return
                yield self._live_view(sid, running=True)
                stop.wait(max(self.pace_s - (time.monotonic() - began), 0.0))
            yield self._live_view(sid)
        finally:
            with self._lock:
                if self._stops.get(sid) is stop:
                    del self._stops[sid]

    def _request_stop(self, sid: str | None) -> bool:
        with self._lock:
            stop = self._stops.get(sid or "")
        if stop is not None:
            stop.set()
        return stop is not None

    def live_stop(self, sid: str | None) -> dict[str, Any]:
        """Stop a run to the end between two steps (the page also cancels its stream) and show where
        the episode stands; it can go on with Next action or Run to the end."""
        sid = self._live_session(sid)
        running = self._request_stop(sid)
        # The record is read under the session's lock, so a step in flight is finished and shown.
        view = self._live_view(sid)
        if not running:
            view[NOTICE] = "Nothing was running."
        return view

    def _live_view(self, sid: str, status: str | None = None, *, running: bool = False) -> dict[str, Any]:
        try:
            record = self.hub.record(sid)
        except SessionError as exc:
            raise UserError(str(exc)) from None
        out = side_outputs("live", record, rollout_view.step_count(record) if record else 0, "live")
        if record is not None and record.outcome == "abandoned":  # what a record of a running episode says
            out["live_outcome"] = (f"_Still playing: {rollout_view.step_count(record)} of at most {record.max_steps} "
                                   "steps; how it went is told when the episode ends._")
        out["live_status"] = status or live_status(record, running=running)
        return out


def live_status(record: EpisodeRecord | None, *, running: bool) -> str:
    """The line above a live episode: where it stands, whether it is running, how it ended."""
    if record is None:
        return ""
    steps = rollout_view.step_count(record)
    if running:
        return f"**Running:** step {steps} of at most {record.max_steps}… (Stop pauses it)"
    if record.outcome == "abandoned":  # still playing
        return (f"**Paused** at step {steps} of at most {record.max_steps}: Next action plays one more, Run to "
                "the end goes on from here.")
    reward = signed(record.reward) if record.reward is not None else "none"
    return (f"**Over** after {steps} steps ({safe.markdown(record.outcome.replace('_', ' '))}): reward {reward}. "
            "The outcome, reward breakdown and diff are below.")


def side_outputs(side: str, record: EpisodeRecord | None, index: int, name: str | None) -> dict[str, Any]:
    """The named outputs of one side of the viewer for ``record`` at step ``index``."""
    if record is None:
        message = EMPTY_SIDE if not name else "This set has no episode of the chosen scenario."
        return {f"{side}_title": message, f"{side}_action": "", f"{side}_observation": "",
                f"{side}_transcript": "", f"{side}_outcome": "",
                f"{side}_breakdown": "", f"{side}_diff": diff_view.diff_html("", empty="")}
    view = rollout_view.step_view(record, index)
    title = f"**{safe.markdown(record.agent_id)}** · {safe.markdown(view.title)}"
    if index > view.total > 0:  # the other side plays on
        title += " · _its episode ended here_"
    if view.error:  # part of how the episode went, not a warning to the visitor
        title += f"\n\n_The environment refused this action:_ {safe.markdown(view.error)}"
    answer_key = is_outcome_only(record)
    if answer_key:
        title += ("\n\n_A held-out scenario: this run is shown as its outcome only, since its patch is the "
                  "scenario's reference fix._")
    return {
        f"{side}_title": title,
        f"{side}_action": view.action_json or START_ACTION,
        f"{side}_observation": view.observation_text,
        f"{side}_transcript": view.transcript_markdown or "_No HTTP requests yet._",
        f"{side}_outcome": rollout_view.outcome_markdown(record),
        f"{side}_breakdown": rollout_view.breakdown_markdown(record.reward_breakdown),
        f"{side}_diff": diff_view.diff_html(record.diff, empty="(not shown: the reference fix of a held-out scenario)"
                                            if answer_key else "(no changes)"),
    }


def _side(c: dict[str, Any], side: str, heading: str) -> None:
    if side == "live":
        gr.Markdown(f"#### {heading}")
    else:
        c[f"{side}_about"] = safe.markdown_component(f"#### {heading}", elem_id=f"watch-{side}-about")
        c[f"{side}_attempt"] = gr.Dropdown([], label="Attempt (every episode of this scenario in the set)",
                                           interactive=False, elem_id=f"watch-{side}-attempt")
    c[f"{side}_title"] = safe.markdown_component(EMPTY_SIDE, elem_id=f"watch-{side}-title")
    # wrap_lines: a long action (a model's reply of one unbroken line) wraps instead of scrolling sideways.
    # No line numbers: Gradio sizes a code box by the height of its first line number, which is the whole
    # wrapped line's height, so a wrapped box grew to many times its content.
    wrapped = {"wrap_lines": True, "show_line_numbers": False}
    c[f"{side}_action"] = gr.Code("", language="json", label="Action", lines=3, max_lines=16,
                                  elem_id=f"watch-{side}-action", **wrapped)
    c[f"{side}_observation"] = gr.Code("", language=None, label="Observation", lines=6, max_lines=24,
                                       elem_id=f"watch-{side}-observation", **wrapped)
    with gr.Accordion("HTTP transcript so far", open=False):
        c[f"{side}_transcript"] = safe.markdown_component("", elem_id=f"watch-{side}-transcript")
    with gr.Accordion("Outcome, reward breakdown and final diff", open=side == "live"):
        c[f"{side}_outcome"] = safe.markdown_component("", elem_id=f"watch-{side}-outcome")
        c[f"{side}_breakdown"] = safe.markdown_component("", elem_id=f"watch-{side}-breakdown",
                                                         elem_classes=["a01-table", "a01-breakdown"])
        gr.Markdown("Final diff")
        c[f"{side}_diff"] = gr.HTML(diff_view.diff_html("", empty=""), elem_id=f"watch-{side}-diff")


EPISODE_FIELDS = ("outcome", "breakdown", "diff")
"""A side's fields that belong to the episode, not to the step shown."""
VIEW = [f"{side}_{field}" for side in ("left", "right") for field in SIDE_FIELDS] + ["index", "link", "story"]
"""What a new episode on either side changes: both sides, the step slider, the link and the banner."""
STEP_VIEW = [name for name in VIEW if name.rpartition("_")[2] not in EPISODE_FIELDS and name != "story"]
"""What a step changes: each side's step (not its episode's outcome, breakdown and diff: redrawing a
table nobody changed cost more than the step)."""
PICKED = ["left_attempt", "right_attempt", *VIEW]
"""What a scenario changes: also each side's attempts."""
SELECTED = ["right_set", "right_column", "scenario", "left_about", "right_about", *PICKED]
"""What a choice of sets changes: also the scenario list and the sides' headings."""
EVERYTHING = ["left_set", *SELECTED]
LIVE = ["live_status", *(f"live_{field}" for field in SIDE_FIELDS)]


def build(hub: SessionHub, artifacts: Path, *, pace_s: float | None = None) -> dict[str, Any]:
    """Lay out the Watch tab (inside an open ``gr.Tab``); returns its components by name and its
    ``controller``. ``pace_s``: the least seconds between live steps (default ``A01_UI_LIVE_PACE_S``)."""
    ctrl = WatchController(hub, artifacts, pace_s=pace_from_env() if pace_s is None else pace_s)
    c: dict[str, Any] = {}
    c["story"] = safe.markdown_component("", elem_id="watch-story", elem_classes=["a01-story"])
    with gr.Row():
        # min_width: on a phone each picker takes a line of its own, its set's name readable
        c["left_set"] = gr.Dropdown([], label="Rollout set", elem_id="watch-left-set", min_width=300)
        c["right_set"] = gr.Dropdown([], label="Side by side with (optional)", elem_id="watch-right-set",
                                     min_width=300)
        c["reload"] = gr.Button("Reload sets", scale=0)
    c["msg"] = safe.markdown_component("", elem_id="watch-msg", elem_classes=["a01-msg"])
    c["scenario"] = gr.Dropdown([], label=SCENARIO_LABELS[True], elem_id="watch-scenario")
    with gr.Row():
        c["back"] = gr.Button("◀ Step back", elem_id="watch-back")
        c["index"] = gr.Slider(0, 1, value=0, step=1, label="Step (0 is the start)", elem_id="watch-index")
        c["forward"] = gr.Button("Step forward ▶", elem_id="watch-forward")
    c["link"] = safe.markdown_component("", elem_id="watch-link")
    with gr.Row():
        with gr.Column():
            _side(c, "left", ORDINALS["left"])
        with gr.Column() as c["right_column"]:  # hidden while no second set is chosen
            _side(c, "right", ORDINALS["right"])
    with gr.Accordion("Run an agent live on this scenario", open=False, elem_id="watch-live"):
        c["live_sid"] = gr.State(None, delete_callback=hub.close)  # idle time: the hub's (see play_tab)
        with gr.Row():
            c["live_agent"] = gr.Dropdown(ctrl.live_choices(), label="Agent", elem_id="watch-live-agent")
            c["live_start"] = gr.Button("Start", variant="primary", elem_id="watch-live-start")
            c["live_step"] = gr.Button("Next action", elem_id="watch-live-step")
            c["live_run"] = gr.Button("Run to the end", elem_id="watch-live-run")
            c["live_stop"] = gr.Button("Stop", variant="stop", elem_id="watch-live-stop")
        c["live_status"] = safe.markdown_component("", elem_id="watch-live-status")
        c["live_msg"] = safe.markdown_component("", elem_id="watch-live-msg", elem_classes=["a01-msg"])
        _side(c, "live", "Live episode")

    view_inputs = ["left_set", "right_set", "scenario", "index", "left_attempt", "right_attempt"]
    wire(c["reload"].click, ctrl.refresh, c, [], EVERYTHING, at="msg", **QUICK)
    wire(c["left_set"].input, ctrl.pick_sets, c, ["left_set", "right_set"], SELECTED, at="msg", **QUICK)
    wire(c["right_set"].input, ctrl.pick_sets, c, ["left_set", "right_set"], SELECTED, at="msg", **QUICK)
    wire(c["scenario"].input, ctrl.show_start, c, ["left_set", "right_set", "scenario"], PICKED, at="msg", **QUICK)
    for side in ("left", "right"):
        wire(c[f"{side}_attempt"].input, ctrl.show_attempt, c,
             ["left_set", "right_set", "scenario", "left_attempt", "right_attempt"], VIEW, at="msg", **QUICK)
    wire(c["index"].release, ctrl.show_step, c, view_inputs, STEP_VIEW, at="msg", **QUICK)
    wire(c["back"].click, ctrl.step_back, c, view_inputs, STEP_VIEW, at="msg", **QUICK)
    wire(c["forward"].click, ctrl.step_forward, c, view_inputs, STEP_VIEW, at="msg", **QUICK)
    wire(c["live_start"].click, ctrl.start_live, c, ["live_sid", "live_agent", "scenario"], ["live_sid", *LIVE],
         at="live_msg", visitor=True)
    wire(c["live_step"].click, ctrl.live_step, c, ["live_sid"], LIVE, at="live_msg", **QUICK)
    # The run streams (a view per step) and draws no progress overlay: the status line says how far
    # it is, and nothing on the page waits for it. Stop cancels the stream and shows where it stopped.
    run = wire_stream(c["live_run"].click, ctrl.live_run, c, ["live_sid"], LIVE, at="live_msg",
                      show_progress="hidden")
    stop_declared = {name: c[name] for name in [*LIVE, "live_msg"]}
    c["live_stop"].click(bind(ctrl.live_stop, stop_declared, at="live_msg"), [c["live_sid"]],
                         list(stop_declared.values()), cancels=[run], show_progress="hidden")
    c["controller"] = ctrl
    return c


def wire_page_load(demo: gr.Blocks, c: dict[str, Any], tabs: gr.Tabs) -> None:
    """Fill the Watch tab when a page opens: from the link in the page's address when it has one
    (:meth:`WatchController.open_link`, which then selects the Watch tab in ``tabs``), else the
    default pair. What the link gets wrong is said in the tab's message, never as an error overlay."""
    ctrl: WatchController = c["controller"]
    declared = {**{name: c[name] for name in [*EVERYTHING, "msg"]}, "tabs": tabs}
    opened = bind(ctrl.open_link, declared, at="msg")

    def page_opened(request: gr.Request) -> Any:
        return opened(dict(request.query_params) if request is not None else {})

    demo.load(page_opened, None, list(declared.values()), show_progress="hidden")
