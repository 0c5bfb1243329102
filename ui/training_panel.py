"""The dashboard's training panel: every training run's metrics over its steps, and the three-stage tables.

The curves are read from the Trackio databases a training run writes (``artifacts/trackio/*.db``,
through :func:`envcore.training.metrics.read_metrics`, read-only, without importing Trackio) and
drawn by :func:`ui.charts.training_chart`: reward, the environment's full-fix and partial rates,
the format-error rate, episode length and each reward component, one line per run, several runs at
once. Beside them, each run's own summary (``artifacts/training/<run>/training.json``): seconds
per GRPO step, the environment's share of step time, and the run's description (the shipped tiny
run says it is a pipeline demonstration, not a skilled agent). A run with an SFT stage logs it to
Trackio as ``<run>-sft`` (its loss and token accuracy over SFT steps) beside the GRPO run, so both
stages' curves are drawn together; under them, every run's base → SFT → SFT+GRPO table
(:mod:`ui.stages_view`).

The table is cached per database version (path, modification time, size), so a run still writing
its database shows new steps on the next refresh.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from envcore.training.metrics import metric_names, read_metrics
from ui import charts, safe, stages_view

DEFAULT_METRICS = ("env/reward", "env/full_fix", "env/format_error_rate", "loss")
"""GRPO's reward, full-fix and format-error rates, and SFT's loss: both stages of a run, drawn at once."""
SFT_SUFFIX = "-sft"
CHART_ENTRIES = 32
NO_RUNS = ("No training run has been recorded yet: curves (reward, reward components and solve rates over steps) are "
           "drawn here from the Trackio database a training run writes under `artifacts/trackio/` "
           "(`python -m envcore train --config configs/train-tiny.yaml`).")


class TrainingPanel:
    """Reads the runs under ``artifacts`` and draws them; each action returns named outputs."""

    def __init__(self, artifacts: Path) -> None:
        self.artifacts = Path(artifacts)
        self._cached: tuple[Any, pd.DataFrame] | None = None
        self._charts: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def _version(self) -> tuple[tuple[str, int, int], ...]:
        folder = self.artifacts / "trackio"
        files = sorted(folder.glob("*.db")) if folder.is_dir() else []
        out = []
        for path in files:
            try:
                stat = path.stat()
            except OSError:
                continue
            out.append((str(path), stat.st_mtime_ns, stat.st_size))
        return tuple(out)

    def frame(self) -> pd.DataFrame:
        """Every metric row, with ``label`` = ``project/run`` (or just ``run`` when there is one project)."""
        version = self._version()
        with self._lock:
            if self._cached is not None and self._cached[0] == version:
                return self._cached[1]
        frame = read_metrics(self.artifacts / "trackio")  # an empty table when no database exists
        projects = frame["project"].nunique() if len(frame) else 0
        frame = frame.assign(label=frame["run"] if projects <= 1 else frame["project"] + "/" + frame["run"])
        with self._lock:
            self._cached = (version, frame)
        return frame

    def runs(self) -> list[str]:
        frame = self.frame()
        return sorted(frame["label"].unique()) if len(frame) else []

    def run_notes(self, runs: list[str]) -> str:
        """One line per shown run: steps logged, and its training summary when the run folder has one."""
        frame = self.frame()
        lines = []
        for label in runs:
            rows = frame[frame["label"] == label]
            run = str(rows["run"].iloc[0] if len(rows) else label)
            if run.endswith(SFT_SUFFIX):
                lines.append(self._sft_note(label, run, rows))
                continue
            steps = rows[rows["metric"].isin(("reward", "env/reward"))]["step"].nunique()
            line = f"- **{safe.markdown(label)}**: {steps} GRPO steps logged"
            summary = self._training_summary(run)
            if summary:
                timing = summary.get("timing", {})
                if timing.get("steps"):
                    line += safe.markdown(f"; {timing['seconds_per_step_median']:.2f} s per GRPO step (median), "
                                          f"environment {timing['env_share']:.1%} of step time")
                description = (summary.get("config", {}).get("description") or "").strip()
                if description:
                    line += f". {safe.markdown(description)}"
            lines.append(line)
        return "\n".join(lines)

    def _sft_note(self, label: str, run: str, rows: pd.DataFrame) -> str:
        """The SFT stage of run ``<run>`` (logged as ``<run>-sft``): steps, loss and seconds per step."""
        steps = rows[rows["metric"] == "loss"]["step"].nunique()
        line = f"- **{safe.markdown(label)}**: the SFT stage, {steps} steps logged"
        summary = self._training_summary(run[: -len(SFT_SUFFIX)]) or {}
        sft = (summary.get("stages") or {}).get("sft") or {}
        try:
            line += safe.markdown(f"; {int(sft['demonstrations'])} demonstrations, loss {float(sft['loss_first']):.3f} -> "
                                  f"{float(sft['loss_last']):.3f}, {float(sft['seconds_per_step']):.2f} s per step")
        except (KeyError, TypeError, ValueError):
            pass
        return line

    def _training_summary(self, run: str) -> dict[str, Any] | None:
        path = self.artifacts / "training" / run / "training.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    # ----- actions -------------------------------------------------------------------------------
    def refresh(self) -> dict[str, Any]:
        runs = self.runs()
        frame = self.frame()
        names = metric_names(frame[frame["label"].isin(runs)]) if runs else []
        chosen = [m for m in DEFAULT_METRICS if m in names] or names[:3]
        return {"train_runs": gr.update(choices=runs, value=runs), "train_metrics": gr.update(choices=names, value=chosen),
                **self.draw(runs, chosen)}

    def draw(self, runs: list[str] | None, metrics: list[str] | None) -> dict[str, Any]:
        all_runs = self.runs()
        if not all_runs:
            return {"train_curves": charts.empty_figure("No training run yet"), "train_text": NO_RUNS}
        runs = [r for r in runs or [] if r in all_runs]
        if not runs or not metrics:
            message = "Choose at least one run and one metric."
            return {"train_curves": charts.empty_figure(message), "train_text": message}
        figure = self.chart(runs, list(metrics), all_runs)
        text = f"Training runs from `artifacts/trackio` ({len(runs)} shown):\n\n{self.run_notes(runs)}"
        tables = stages_view.read_stage_tables(self.artifacts)
        if tables:
            text += "\n\n" + stages_view.stages_markdown(tables)
        return {"train_curves": figure, "train_text": text}


    def chart(self, runs: list[str], metrics: list[str], all_runs: list[str]) -> Any:
        """The curves of ``runs`` (known ones) for ``metrics``, cached per database version: only metric
        names the databases hold key the cache, so what a request sends cannot grow it."""
        frame = self.frame()
        known = set(frame["metric"]) if len(frame) else set()
        chosen = [m for m in dict.fromkeys(metrics) if m in known]
        key = (self._version(), tuple(runs), tuple(chosen))
        with self._lock:
            if key in self._charts:
                self._charts.move_to_end(key)
                return self._charts[key]
        figure = charts.training_chart(frame[frame["label"].isin(runs)], chosen, colors=charts.set_colors(all_runs))
        with self._lock:
            self._charts[key] = figure
            while len(self._charts) > CHART_ENTRIES:
                self._charts.popitem(last=False)
        return figure


def build(caption: str = "", *, heading: bool = True) -> dict[str, Any]:
    """Lay out the panel (inside an open layout block), under its own heading (``heading``: leave it to
    a section that names the panel already) and ``caption`` (how to read it); returns its components
    by name (the dashboard's controller owns the :class:`TrainingPanel` that fills them)."""
    c: dict[str, Any] = {}
    if heading:
        gr.Markdown("#### Training curves")
    if caption:
        gr.Markdown(caption, elem_classes=["a01-caption"])
    c["train_text"] = safe.markdown_component(NO_RUNS, elem_id="dash-training")
    with gr.Row():
        c["train_runs"] = gr.CheckboxGroup([], label="Runs", elem_id="dash-train-runs")
        c["train_metrics"] = gr.Dropdown([], multiselect=True, label="Metrics", elem_id="dash-train-metrics")
    c["train_curves"] = gr.Plot(label="Training metrics over steps (SFT and GRPO)", elem_id="dash-training-curves")
    return c
