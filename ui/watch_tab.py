"""The Watch tab: scrub through recorded rollouts, two sets side by side, or an agent playing live.

Any episode log under ``artifacts/`` is a rollout set (:mod:`ui.artifact_sets`): the shipped
baseline runs, trained adapters' evaluations, human play. Pick one set (and optionally a second: the
scenario list then holds the scenarios both played, so a baseline and a trained agent are compared
on the same scenario), pick a scenario, and step forward and back; each side shows the action, the
observation, the HTTP transcript so far, and the episode's outcome, reward breakdown and final diff.

"Run an agent live" attaches an agent to a server-side session of the facade and plays one action
per click (or to the end), shown with the same view; the scripted baselines are always offered, a
local model, trained adapter or endpoint when one is configured
(:meth:`~envcore.server.sessions.SessionHub.live_agents`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gradio as gr

from envcore.env.environment import ResetError
from envcore.env.episode_log import EpisodeRecord
from envcore.server.sessions import SessionError, SessionHub, Visitor
from ui import artifact_sets, diff_view, rollout_view, safe
from ui.wiring import UserError, wire

NONE = ""
SIDES = ("left", "right", "live")
SIDE_FIELDS = ("title", "action", "observation", "transcript", "outcome", "breakdown", "diff")
"""The components of one side of the viewer (``left_title`` ...), all redrawn when its step changes."""
EMPTY_SIDE = "Pick a rollout set and a scenario."


class WatchController:
    """The Watch tab's actions; each returns a dict of named outputs (see :func:`build`)."""

    def __init__(self, hub: SessionHub, artifacts: Path) -> None:
        self.hub = hub
        self.artifacts = artifacts
        self._by_scenario: dict[tuple[str, Any], dict[str, EpisodeRecord]] = {}
        self._lock = threading.Lock()

    # ----- rollout sets ------------------------------------------------------------------------
    def rollout_sets(self) -> dict[str, artifact_sets.RolloutSet]:
        return {s.name: s for s in artifact_sets.discover(self.artifacts)}

    def set_choices(self) -> list[tuple[str, str]]:
        return [(s.label, s.name) for s in self.rollout_sets().values()]

    def records(self, name: str | None) -> dict[str, EpisodeRecord]:
        """The record shown for each scenario of the set (:func:`~ui.rollout_view.shown_records`)."""
        if not name:
            return {}
        rollout_set = self.rollout_sets().get(name)
        if rollout_set is None:
            raise UserError(f"no rollout set {name!r} under {self.artifacts}")
        key = (name, artifact_sets.file_version(rollout_set))
        with self._lock:
            table = self._by_scenario.get(key)
            if table is None:
                table = rollout_view.shown_records(artifact_sets.load_records(rollout_set))
                self._by_scenario = {k: v for k, v in self._by_scenario.items() if k[0] != name}
                self._by_scenario[key] = table
        return table

    # ----- actions -----------------------------------------------------------------------------
    def refresh(self) -> dict[str, Any]:
        choices = self.set_choices()
        first = choices[0][1] if choices else None
        return {"left_set": gr.update(choices=choices, value=first),
                "right_set": gr.update(choices=[("(none)", NONE), *choices], value=NONE),
                **self.pick_sets(first, NONE)}

    def pick_sets(self, left: str | None, right: str | None) -> dict[str, Any]:
        left_records = self.records(left)
        right_records = self.records(right)
        shown = [r for sid, r in left_records.items() if not right_records or sid in right_records]
        choices = rollout_view.scenario_choices(shown)
        value = choices[0][1] if choices else None
        return {"scenario": gr.update(choices=choices, value=value), **self.show(left, right, value, 0)}

    def open_episode(self, name: str, scenario: str) -> dict[str, Any]:
        """Show ``scenario`` of the set ``name`` alone, from its start (a link from the dashboard)."""
        choices = rollout_view.scenario_choices(list(self.records(name).values()))
        return {"left_set": gr.update(value=name), "right_set": gr.update(value=NONE),
                "scenario": gr.update(choices=choices, value=scenario), **self.show(name, NONE, scenario, 0)}

    def show(self, left: str | None, right: str | None, scenario: str | None, index: float | None) -> dict[str, Any]:
        index = int(index or 0)
        out: dict[str, Any] = {}
        total = 0
        for side, name in (("left", left), ("right", right)):
            record = self.records(name).get(scenario or "") if name else None
            out.update(side_outputs(side, record, index, name))
            if record is not None:
                total = max(total, rollout_view.step_count(record))
        out["index"] = gr.update(maximum=max(total, 1), value=min(index, total))
        return out

    def show_start(self, left: str | None, right: str | None, scenario: str | None) -> dict[str, Any]:
        """``scenario`` from its first step (a scenario was picked)."""
        return self.show(left, right, scenario, 0)

    def move(self, left: str | None, right: str | None, scenario: str | None, index: float | None,
             delta: int) -> dict[str, Any]:
        return self.show(left, right, scenario, max(int(index or 0) + delta, 0))  # show clamps to the end

    def step_back(self, left: str | None, right: str | None, scenario: str | None, index: float | None) -> dict[str, Any]:
        return self.move(left, right, scenario, index, -1)

    def step_forward(self, left: str | None, right: str | None, scenario: str | None,
                     index: float | None) -> dict[str, Any]:
        return self.move(left, right, scenario, index, +1)

    # ----- live --------------------------------------------------------------------------------
    def live_choices(self) -> list[tuple[str, str]]:
        return [(agent.label, name) for name, agent in self.hub.live_agents().items()]

    def start_live(self, sid: str | None, agent: str | None, scenario: str | None, *,
                   visitor: Visitor | None = None) -> dict[str, Any]:
        if not agent:
            raise UserError("Pick an agent to run.")
        if not scenario:
            raise UserError("Pick a scenario above first: the agent plays the scenario shown.")
        opened = None
        try:
            if not self.hub.is_open(sid):
                sid = opened = self.hub.open(kind="live", visitor=visitor)
            assert sid is not None
            self.hub.start_agent(sid, agent, scenario=scenario, seed=0)
        except (SessionError, ResetError) as exc:
            if opened:  # a session opened for an agent that could not start must not keep its slot
                self.hub.close(opened)
            raise UserError(str(exc)) from None
        return {"live_sid": sid, **self._live_view(sid)}

    def _live_session(self, sid: str | None) -> str:
        if not sid or not self.hub.is_open(sid):
            raise UserError("No agent is playing here yet (or its session expired): pick an agent and press Start.")
        return str(sid)

    def live_step(self, sid: str | None) -> dict[str, Any]:
        sid = self._live_session(sid)
        try:
            self.hub.agent_step(str(sid))
        except SessionError as exc:
            raise UserError(str(exc)) from None
        return self._live_view(str(sid))

    def live_run(self, sid: str | None) -> dict[str, Any]:
        sid = self._live_session(sid)
        try:
            while True:
                _, observation = self.hub.agent_step(str(sid))
                if observation.done:
                    break
        except SessionError as exc:
            raise UserError(str(exc)) from None
        return self._live_view(str(sid))

    def _live_view(self, sid: str) -> dict[str, Any]:
        record = self.hub.record(sid)
        return side_outputs("live", record, rollout_view.step_count(record) if record else 0, "live")


def side_outputs(side: str, record: EpisodeRecord | None, index: int, name: str | None) -> dict[str, Any]:
    """The named outputs of one side of the viewer for ``record`` at step ``index``."""
    if record is None:
        message = EMPTY_SIDE if not name else "This set has no episode of the chosen scenario."
        return {f"{side}_title": message, f"{side}_action": "", f"{side}_observation": "",
                f"{side}_transcript": "", f"{side}_outcome": "",
                f"{side}_breakdown": rollout_view.breakdown_frame(None), f"{side}_diff": diff_view.diff_html("", empty="")}
    view = rollout_view.step_view(record, index)
    title = f"**{safe.markdown(record.agent_id)}** · {safe.markdown(view.title)}"
    if view.error:
        title += f"\n\n⚠️ refused: {safe.markdown(view.error)}"
    return {
        f"{side}_title": title,
        f"{side}_action": view.action_json,
        f"{side}_observation": view.observation_text,
        f"{side}_transcript": view.transcript_markdown or "_No HTTP requests yet._",
        f"{side}_outcome": rollout_view.outcome_markdown(record),
        f"{side}_breakdown": rollout_view.breakdown_frame(record.reward_breakdown),
        f"{side}_diff": diff_view.diff_html(record.diff, empty="(no changes)"),
    }


def _side(c: dict[str, Any], side: str, heading: str) -> None:
    gr.Markdown(f"#### {heading}")
    c[f"{side}_title"] = safe.markdown_component(EMPTY_SIDE, elem_id=f"watch-{side}-title")
    c[f"{side}_action"] = gr.Code("", language="json", label="Action", lines=4, elem_id=f"watch-{side}-action")
    c[f"{side}_observation"] = gr.Code("", language=None, label="Observation", lines=10, max_lines=24,
                                       elem_id=f"watch-{side}-observation")
    with gr.Accordion("HTTP transcript so far", open=False):
        c[f"{side}_transcript"] = safe.markdown_component("", elem_id=f"watch-{side}-transcript")
    with gr.Accordion("Outcome, reward breakdown and final diff", open=side == "live"):
        c[f"{side}_outcome"] = safe.markdown_component("", elem_id=f"watch-{side}-outcome")
        c[f"{side}_breakdown"] = gr.Dataframe(rollout_view.breakdown_frame(None), label="Reward breakdown", wrap=True)
        gr.Markdown("Final diff")
        c[f"{side}_diff"] = gr.HTML(diff_view.diff_html("", empty=""), elem_id=f"watch-{side}-diff")


def build(hub: SessionHub, artifacts: Path, *, ttl_s: float) -> dict[str, Any]:
    """Lay out the Watch tab (inside an open ``gr.Tab``); returns its components by name."""
    ctrl = WatchController(hub, artifacts)
    c: dict[str, Any] = {}
    with gr.Row():
        c["left_set"] = gr.Dropdown([], label="Rollout set", elem_id="watch-left-set")
        c["right_set"] = gr.Dropdown([], label="Side by side with (optional)", elem_id="watch-right-set")
        c["reload"] = gr.Button("Reload sets", scale=0)
    c["scenario"] = gr.Dropdown([], label="Scenario (outcome and reward of the first set)", elem_id="watch-scenario")
    with gr.Row():
        c["back"] = gr.Button("◀ Step back", elem_id="watch-back")
        c["index"] = gr.Slider(0, 1, value=0, step=1, label="Step (0 is the start)", elem_id="watch-index")
        c["forward"] = gr.Button("Step forward ▶", elem_id="watch-forward")
    with gr.Row():
        with gr.Column():
            _side(c, "left", "First set")
        with gr.Column():
            _side(c, "right", "Second set")
    with gr.Accordion("Run an agent live on this scenario", open=False):
        c["live_sid"] = gr.State(None, time_to_live=ttl_s, delete_callback=hub.close)
        with gr.Row():
            c["live_agent"] = gr.Dropdown(ctrl.live_choices(), label="Agent", elem_id="watch-live-agent")
            c["live_start"] = gr.Button("Start", variant="primary", elem_id="watch-live-start")
            c["live_step"] = gr.Button("Next action", elem_id="watch-live-step")
            c["live_run"] = gr.Button("Run to the end", elem_id="watch-live-run")
        c["live_msg"] = safe.markdown_component("", elem_id="watch-live-msg", elem_classes=["a01-msg"])
        _side(c, "live", "Live episode")

    view = [f"{side}_{field}" for side in ("left", "right") for field in SIDE_FIELDS] + ["index"]
    picked = ["scenario", *view]
    live = ["live_sid", *(f"live_{field}" for field in SIDE_FIELDS)]
    view_inputs = ["left_set", "right_set", "scenario", "index"]
    wire(c["reload"].click, ctrl.refresh, c, [], ["left_set", "right_set", *picked])
    wire(c["left_set"].input, ctrl.pick_sets, c, ["left_set", "right_set"], picked)
    wire(c["right_set"].input, ctrl.pick_sets, c, ["left_set", "right_set"], picked)
    wire(c["scenario"].input, ctrl.show_start, c, ["left_set", "right_set", "scenario"], view)
    wire(c["index"].release, ctrl.show, c, view_inputs, view)
    wire(c["back"].click, ctrl.step_back, c, view_inputs, view)
    wire(c["forward"].click, ctrl.step_forward, c, view_inputs, view)
    wire(c["live_start"].click, ctrl.start_live, c, ["live_sid", "live_agent", "scenario"], live, at="live_msg",
         visitor=True)
    wire(c["live_step"].click, ctrl.live_step, c, ["live_sid"], live, at="live_msg")
    wire(c["live_run"].click, ctrl.live_run, c, ["live_sid"], live, at="live_msg")
    c["controller"] = ctrl
    return c
