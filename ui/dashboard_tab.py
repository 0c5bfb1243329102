"""The Dashboard tab: charts drawn from the same artifacts the evaluation and training write.

Every chart comes from episode logs through the two pure layers (:mod:`ui.data` turns records into
DataFrames, :mod:`ui.charts` turns DataFrames into Plotly figures); this module only wires them:

* a leaderboard of the chosen rollout sets (human play included), with solve and partial rates by
  bug class, tier or domain, each with its 95% bootstrap interval;
* the distribution of every reward component, per set;
* any two sets compared on the scenarios both played (paired differences with intervals, overall,
  by tier and by bug class);
* a scenario browser over the cache manifest; choosing a row opens it in the Play tab;
* the training curves of every run (:mod:`ui.training_panel`, from the Trackio databases under
  ``artifacts/trackio``);
* the failure analysis (:mod:`ui.failure_panel`, from ``artifacts/feedback``): categories by bug class,
  tier, agent or domain, example episodes that open in the Watch tab, and the sampling weights.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from envcore.agents.evaluate import compare, scenario_domains
from envcore.server.sessions import SessionHub
from ui import artifact_sets, charts, data, failure_panel, safe, training_panel
from ui.wiring import wire

DIMENSIONS = {"Bug class": "bug_class", "Tier": "tier", "Domain": "domain"}
RATE_METRICS = {"Full fix": "full_fix", "Partial fix": "partial", "Mean reward": "reward"}
DELTA_METRICS = {"Reward": "reward", "Full fix": "full_fix"}
ANY = "any"


def serving_weights(hub: SessionHub) -> dict[str, Any] | None:
    """The sampling weights the server's sampler uses, as a weights file's tables (``None``: uniform)."""
    weights = hub.runtime.sampler.weights
    tables = {"by_bug_class": dict(weights.by_bug_class), "by_tier": dict(weights.by_tier)}
    return tables if any(tables.values()) else None


def default_pair(sets: list[artifact_sets.RolloutSet]) -> tuple[str | None, str | None]:
    """What to compare first: a trained set (an evaluation before training rollouts, which play other
    scenarios) against the heuristic baseline, or failing that another evaluated baseline (the base
    model beside its adapter); with no trained set, the heuristic against doing nothing; failing
    those, the first two competitors (never the oracle)."""
    competitors = [s for s in sets if s.kind != "validation"]
    by_agent = {s.name.rsplit("/", 1)[-1]: s.name for s in competitors}
    trained_sets = sorted((s for s in competitors if s.kind == "trained"), key=lambda s: not s.evaluated)
    trained = trained_sets[0].name if trained_sets else None
    if trained:
        baselines = sorted((s for s in competitors if s.kind == "baseline"), key=lambda s: not s.evaluated)
        base = by_agent.get("heuristic") or (baselines[0].name if baselines else None)
        return base or next((s.name for s in competitors if s.name != trained), None), trained
    if "heuristic" in by_agent and "noop" in by_agent:
        return by_agent["noop"], by_agent["heuristic"]
    names = [s.name for s in competitors]
    return (names[0] if names else None), (names[1] if len(names) > 1 else None)


class DashboardController:
    """The Dashboard tab's actions; each returns a dict of named outputs (see :func:`build`)."""

    def __init__(self, hub: SessionHub, artifacts: Path) -> None:
        self.artifacts = artifacts
        self.cache = hub.runtime.cache
        self.domains = scenario_domains(self.cache)
        self.manifest = data.manifest_frame(self.cache.rows)
        self._frames: dict[tuple[Any, ...], pd.DataFrame] = {}
        self._lock = threading.Lock()
        self.training = training_panel.TrainingPanel(artifacts)
        self.failures = failure_panel.FailurePanel(artifacts, lambda: serving_weights(hub))

    def rollout_sets(self) -> dict[str, artifact_sets.RolloutSet]:
        return {s.name: s for s in artifact_sets.discover(self.artifacts)}

    def frame(self, names: list[str] | None) -> pd.DataFrame:
        """One row per episode of the chosen sets (cached until a log changes)."""
        sets = self.rollout_sets()
        # A request may send any list: only known sets, each once, key the cache (at most 17 entries).
        chosen = [sets[name] for name in dict.fromkeys(names or []) if name in sets]
        key = tuple((s.name, artifact_sets.file_version(s)) for s in chosen)
        with self._lock:
            frame = self._frames.get(key)
        if frame is None:
            frame = data.episode_frame({s.name: artifact_sets.load_records(s) for s in chosen}, self.domains)
            with self._lock:
                if len(self._frames) > 16:
                    self._frames.clear()
                self._frames[key] = frame
        return frame

    # ----- actions -----------------------------------------------------------------------------
    def refresh(self) -> dict[str, Any]:
        sets = list(self.rollout_sets().values())
        choices = [(s.label, s.name) for s in sets]
        names = [s.name for s in sets]
        base, other = default_pair(sets)
        return {"sets": gr.update(choices=choices, value=names),
                "base": gr.update(choices=choices, value=base), "other": gr.update(choices=choices, value=other),
                **self.training.refresh(), **self.failures.refresh(),
                **self.draw(names, "Bug class", "Full fix"), **self.delta(names, base, other, "Reward")}

    def draw(self, names: list[str] | None, dimension: str, metric: str) -> dict[str, Any]:
        frame = self.frame(names)
        by, measure = DIMENSIONS.get(dimension, "bug_class"), RATE_METRICS.get(metric, "full_fix")
        colors = self.colors()
        return {
            "leaderboard": data.leaderboard_display(data.set_summary(frame)),
            "rates": charts.rate_chart(data.rate_table(frame, by, measure), by=by, metric=measure, colors=colors),
            "components": charts.component_chart(data.component_frame(frame), colors=colors),
        }

    def colors(self) -> dict[str, str]:
        """One colour per rollout set, the same in every chart whichever sets are shown."""
        return charts.set_colors(self.rollout_sets())

    def delta(self, names: list[str] | None, base: str | None, other: str | None, metric: str) -> dict[str, Any]:
        measure = DELTA_METRICS.get(metric, "reward")
        if not base or not other or base == other:
            message = "Pick two different rollout sets to compare."
            return {"delta": charts.empty_figure(message), "delta_text": message}
        frame = self.frame(sorted({base, other}))
        table = data.paired_delta_table(frame, base, other, measure)
        sets = self.rollout_sets()
        result = compare(artifact_sets.load_records(sets[base]), artifact_sets.load_records(sets[other]))
        d = result["reward_difference"]
        a, b = safe.markdown(other), safe.markdown(base)
        text = (f"**{a}** against **{b}** on {result['scenarios']} scenarios both played: mean reward "
                + safe.markdown(f"{result['other_mean_reward']:+.3f} vs {result['base_mean_reward']:+.3f}, difference "
                                f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] (95% paired bootstrap); "
                                f"full fixes {result['full_fix']['other']:.0f} vs {result['full_fix']['base']:.0f}")
                + f" (only {a}: {result['full_fix']['only_other']}, only {b}: {result['full_fix']['only_base']})."
                if result["scenarios"] else f"{b} and {a} have no scenario in common.")
        return {"delta": charts.delta_chart(table, base=base, other=other, metric=measure, colors=self.colors()),
                "delta_text": text}

    def scenarios(self, split: str, tier: str, bug_class: str, domain: str, text: str) -> dict[str, Any]:
        frame = data.filter_manifest(self.manifest, split=split, tier=None if tier in (None, "", ANY) else int(tier),
                                     bug_class=bug_class, domain=domain, text=text or None)
        return {"browser": frame, "browser_count": f"{len(frame)} of {len(self.manifest)} scenarios"}


def build(hub: SessionHub, artifacts: Path) -> dict[str, Any]:
    """Lay out the Dashboard tab (inside an open ``gr.Tab``); returns its components by name."""
    ctrl = DashboardController(hub, artifacts)
    manifest = ctrl.manifest
    c: dict[str, Any] = {}
    c["sets"] = gr.CheckboxGroup([], label="Rollout sets shown", elem_id="dash-sets")
    c["leaderboard"] = gr.Dataframe(pd.DataFrame(), label="Leaderboard (oracle: validation only, not a competitor)",
                                    elem_id="dash-leaderboard")
    with gr.Row():
        c["dimension"] = gr.Radio(list(DIMENSIONS), value="Bug class", label="Break down by", elem_id="dash-dimension")
        c["metric"] = gr.Radio(list(RATE_METRICS), value="Full fix", label="Measure")
    c["rates"] = gr.Plot(label="Rates by slice, with 95% bootstrap intervals", elem_id="dash-rates")
    c["components"] = gr.Plot(label="Reward components", elem_id="dash-components")
    gr.Markdown("#### Compare two sets")
    with gr.Row():
        c["base"] = gr.Dropdown([], label="Baseline set", elem_id="dash-base")
        c["other"] = gr.Dropdown([], label="Compared set", elem_id="dash-other")
        c["delta_metric"] = gr.Radio(list(DELTA_METRICS), value="Reward", label="Difference in")
    c["delta_text"] = safe.markdown_component("", elem_id="dash-delta-text")
    c["delta"] = gr.Plot(label="Paired differences (compared minus baseline)", elem_id="dash-delta")
    c.update(training_panel.build())
    c.update(failure_panel.build())
    gr.Markdown("#### Scenario browser (choose a row to play it)")
    with gr.Row():
        c["f_split"] = gr.Dropdown([ANY, "train", "val", "test"], value=ANY, label="Split")
        c["f_tier"] = gr.Dropdown([ANY, "1", "2", "3"], value=ANY, label="Tier")
        c["f_bug"] = gr.Dropdown([ANY, *sorted(manifest["bug_class"].unique())], value=ANY, label="Bug class")
        c["f_domain"] = gr.Dropdown([ANY, *sorted(manifest["domain"].unique())], value=ANY, label="Domain")
        c["f_text"] = gr.Textbox(label="Id prefix or title contains")
    c["browser_count"] = gr.Markdown(f"{len(manifest)} of {len(manifest)} scenarios")
    c["browser"] = gr.Dataframe(manifest, label="Scenarios in the cache", elem_id="dash-browser", max_height=420)

    draw_inputs = ["sets", "dimension", "metric"]
    for trigger in draw_inputs:
        wire(c[trigger].input, ctrl.draw, c, draw_inputs, ["leaderboard", "rates", "components"])
    delta_inputs = ["sets", "base", "other", "delta_metric"]
    for trigger in delta_inputs[1:]:
        wire(c[trigger].input, ctrl.delta, c, delta_inputs, ["delta", "delta_text"])
    fail_inputs = ["fail_analysis", "fail_dimension"]
    for trigger in fail_inputs:
        wire(c[trigger].input, ctrl.failures.draw, c, fail_inputs, ["failures", "fail_chart", "fail_examples", "weights"])
    train_inputs = ["train_runs", "train_metrics"]
    for trigger in train_inputs:
        wire(c[trigger].input, ctrl.training.draw, c, train_inputs, ["train_curves", "train_text"])
    filters = ["f_split", "f_tier", "f_bug", "f_domain", "f_text"]
    for trigger in filters:
        wire(c[trigger].input, ctrl.scenarios, c, filters, ["browser", "browser_count"])
    c["controller"] = ctrl
    return c
