"""The dashboard's failure-analysis panel: why episodes failed, and the sampling weights in use.

It reads what ``python -m envcore feedback analyze`` and ``feedback plan`` write under
``artifacts/feedback/`` (each analysis folder's ``analysis.json``; each plan's ``weights.json``):

- a stacked bar chart of the failure categories by bug class, tier, agent or domain, using
  :func:`ui.charts.failure_chart`, with one colour per category everywhere; each bar sums to 100%
  of the slice's graded episodes (:meth:`FailurePanel.category_table`);
- the example episodes of every category. Choosing a row opens that episode in the Watch tab, when
  its log is a rollout set the Space shows; the link is made by the log's path;
- the sampling weights: those the server samples with (``A01_WEIGHTS``, uniform when unset) beside
  every planned weights file.

Analyses are cached per file version (path, modification time, size), one entry per analysis on
disk: a name a request makes up is not read.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from ui import artifact_sets, charts, safe

DIMENSIONS = {"Bug class": "bug_class", "Tier": "tier", "Agent": "agent", "Domain": "domain"}
CHART_ENTRIES = 32
EXAMPLE_COLUMNS = ["category", "agent", "scenario_id", "seed", "bug_class", "tier", "detail", "rollout set"]
NO_ANALYSIS = ("No failure analysis has been written yet: run `python -m envcore feedback analyze --logs artifacts/evals/v2 "
               "--out artifacts/feedback/<name>` and the categories by bug class, tier and agent, with example "
               "episodes, appear here.")


class FailurePanel:
    def __init__(self, artifacts: Path, serving_weights: Any = None) -> None:
        self.artifacts = Path(artifacts)
        self.serving_weights = serving_weights
        self._cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
        self._charts: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def folder(self) -> Path:
        return self.artifacts / "feedback"

    def analyses(self) -> list[str]:
        """Analysis names: their folder relative to ``artifacts/feedback``."""
        if not self.folder.is_dir():
            return []
        return sorted(p.parent.relative_to(self.folder).as_posix() for p in self.folder.rglob("analysis.json"))

    def load(self, name: str) -> dict[str, Any] | None:
        """The analysis called ``name`` (one of :meth:`analyses`; any other name, a path a request made
        up included, is ``None`` and reads nothing), cached per file version."""
        if name not in self.analyses():
            return None
        path = self.folder / name / "analysis.json"
        try:
            stat = path.stat()
        except OSError:
            return None
        version = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._cache.get(name)
            if cached and cached[0] == version:
                return cached[1]
        try:
            analysis = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        with self._lock:
            self._cache[name] = (version, analysis)
        return analysis

    # ----- tables -------------------------------------------------------------------------------
    @staticmethod
    def category_table(analysis: dict[str, Any], dimension: str) -> pd.DataFrame:
        """Rows ``slice``, ``category``, ``share``, ``count``, ``graded``: for every slice of
        ``dimension``, every category met in any slice (zeros included), in the analysis's order.

        Shares are recomputed from the counts, over the slice's episodes in categories that are not
        excluded (infrastructure failures are not the agent's), and a count under a name the
        analysis does not list goes to ``other``: each slice's shares sum to exactly 1, whatever
        the file's own rates say."""
        excluded = {c["name"] for c in analysis["categories"] if c["excluded"]}
        order = [c["name"] for c in analysis["categories"] if not c["excluded"]]
        if "other" not in order:
            order.append("other")
        counts: dict[str, dict[str, int]] = {}
        for key, stat in analysis["by"].get(dimension, {}).items():
            kept: dict[str, int] = {}
            for name, count in (stat.get("counts") or {}).items():
                if name in excluded or not count:
                    continue
                bucket = name if name in order else "other"
                kept[bucket] = kept.get(bucket, 0) + int(count)
            counts[str(key)] = kept
        met = [name for name in order if any(kept.get(name) for kept in counts.values())]
        rows = []
        for key, kept in counts.items():
            graded = sum(kept.values())
            if not graded:
                continue
            for name in met:
                rows.append({"slice": key, "category": name, "share": kept.get(name, 0) / graded,
                             "count": kept.get(name, 0), "graded": graded})
        return pd.DataFrame(rows, columns=["slice", "category", "share", "count", "graded"])

    def set_names(self) -> dict[str, str]:
        """Resolved log path -> the Space's rollout-set name (what Watch opens)."""
        return {str(s.path.resolve()): s.name for s in artifact_sets.discover(self.artifacts)}

    def log_path(self, log: str) -> Path:
        """An example's log: as written, or relative to the project (an analysis run from the project
        root names ``artifacts/...``; the page may run from elsewhere)."""
        path = Path(log)
        if path.is_absolute() or path.exists():
            return path
        return self.artifacts.parent / path

    def example_table(self, analysis: dict[str, Any]) -> pd.DataFrame:
        titles = {c["name"]: c["title"] for c in analysis["categories"]}
        names = self.set_names()
        rows = []
        for category, items in analysis.get("examples", {}).items():
            for item in items:
                shown_set = names.get(str(self.log_path(item["log"]).resolve()), "")
                rows.append([titles.get(category, category), item["agent"], item["scenario_id"], item["seed"],
                             item["bug_class"], item["tier"], item["detail"], shown_set])
        return pd.DataFrame(rows, columns=EXAMPLE_COLUMNS)

    def weights_table(self) -> pd.DataFrame:
        sources: list[tuple[str, dict[str, Any]]] = []
        serving = self.serving_weights() if callable(self.serving_weights) else self.serving_weights
        sources.append(("serving now" + ("" if serving else " (uniform: A01_WEIGHTS unset)"), serving or {}))
        if self.folder.is_dir():
            for path in sorted(self.folder.rglob("weights.json")):
                try:
                    sources.append((f"planned: {path.parent.relative_to(self.folder).as_posix()}", json.loads(path.read_text())))
                except (OSError, ValueError):
                    continue
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for label, data in sources:
            for kind, key in (("bug class", "by_bug_class"), ("tier", "by_tier")):
                for slice_, weight in (data.get(key) or {}).items():
                    rows.setdefault((kind, str(slice_)), {"slice": f"{kind} {slice_}"})[label] = round(float(weight), 3)
        labels = [label for label, _ in sources]
        frame = pd.DataFrame(list(rows.values()), columns=["slice", *labels])
        return frame.fillna(1.0) if len(frame) else frame

    # ----- actions ------------------------------------------------------------------------------
    def refresh(self) -> dict[str, Any]:
        names = self.analyses()
        value = names[0] if names else None
        return {"fail_analysis": gr.update(choices=names, value=value), **self.draw(value, "Bug class")}

    def draw(self, name: str | None, dimension: str) -> dict[str, Any]:
        weights = self.weights_table()
        analysis = self.load(name) if name else None
        if analysis is None:
            return {"failures": NO_ANALYSIS, "fail_chart": charts.empty_figure("No failure analysis yet"),
                    "fail_examples": pd.DataFrame(columns=EXAMPLE_COLUMNS), "weights": weights}
        by = DIMENSIONS.get(dimension, "bug_class")
        titles = {c["name"]: c["title"] for c in analysis["categories"]}
        overall = analysis["overall"]
        top = sorted(((n, c) for c, n in overall["counts"].items() if n and c not in ("solved", "infrastructure")),
                     reverse=True)[:3]
        text = (f"**{safe.markdown(name)}**: "
                + safe.markdown(f"{overall['episodes']} episodes from {len(analysis['sets'])} log(s), cache "
                                f"{analysis.get('cache')}; {overall['counts'].get('solved', 0)} solved; most common "
                                "failures: " + ", ".join(f"{titles.get(c, c)} ({n})" for n, c in top)
                                + f"; {overall['counts'].get('infrastructure', 0)} infrastructure failures, not "
                                "counted. Choose an example row to watch that episode."))
        return {"failures": text, "fail_chart": self.chart(name, analysis, by, titles),
                "fail_examples": self.example_table(analysis), "weights": weights}

    def chart(self, name: str, analysis: dict[str, Any], by: str, titles: dict[str, str]) -> Any:
        """The categories chart of the analysis ``name`` (as :meth:`load` read it) by ``by`` (one of
        :data:`DIMENSIONS`' values), cached per file version: building a Plotly figure costs tens of
        milliseconds, a toggle back and forth nothing."""
        with self._lock:
            version = self._cache[name][0] if name in self._cache else None
            key = (name, version, by)  # the analysis as read for this file version
            if version is not None and key in self._charts:
                self._charts.move_to_end(key)
                return self._charts[key]
        figure = charts.failure_chart(self.category_table(analysis, by), by=by, titles=titles)
        with self._lock:
            self._charts[key] = figure
            while len(self._charts) > CHART_ENTRIES:
                self._charts.popitem(last=False)
        return figure

    @staticmethod
    def example_link(row: list[Any]) -> tuple[str, str] | None:
        """(rollout set, scenario id) of an example row, or ``None`` when its log is not shown."""
        if len(row) < len(EXAMPLE_COLUMNS):
            return None
        scenario, shown_set = row[EXAMPLE_COLUMNS.index("scenario_id")], row[EXAMPLE_COLUMNS.index("rollout set")]
        return (str(shown_set), str(scenario)) if shown_set and scenario else None


def build(caption: str = "") -> dict[str, Any]:
    """Lay out the panel under ``caption`` (how to read it); returns its components by name (the
    dashboard's controller owns the :class:`FailurePanel` that fills them)."""
    c: dict[str, Any] = {}
    gr.Markdown("#### Failure analysis")
    if caption:
        gr.Markdown(caption, elem_classes=["a01-caption"])
    c["failures"] = safe.markdown_component(NO_ANALYSIS, elem_id="dash-failures")
    with gr.Row():
        c["fail_analysis"] = gr.Dropdown([], label="Analysis (artifacts/feedback)", elem_id="dash-fail-analysis")
        c["fail_dimension"] = gr.Radio(list(DIMENSIONS), value="Bug class", label="Break down by",
                                       elem_id="dash-fail-dimension")
    c["fail_chart"] = gr.Plot(label="Failure categories", elem_id="dash-fail-chart", show_label=False)  # titled within
    c["fail_examples"] = gr.Dataframe(pd.DataFrame(columns=EXAMPLE_COLUMNS), label="Example episodes (choose a row to "
                                      "watch it)", elem_id="dash-fail-examples", max_height=360, interactive=False)
    c["weights"] = gr.Dataframe(pd.DataFrame(), label="Sampling weights: what the server samples with, and planned ones",
                                elem_id="dash-weights", max_height=360, interactive=False)
    return c
