"""Plotly figures drawn from the tables of :mod:`ui.data`: DataFrame in, figure out, nothing else.

Choices:

* Every interval drawn is the 95% bootstrap interval computed in :mod:`ui.data`, as asymmetric error
  bars: a rate near 0 or 1 has a lopsided interval and is drawn as such.
* Colours: the Okabe-Ito palette (distinguishable with the common colour-vision deficiencies), keyed
  by set name. :func:`set_colors` assigns it to a list of names in their sorted order; pass the same
  mapping (built once from every set the page can show) as ``colors`` to every chart and a set keeps
  its colour across charts and selections. Past eight sets, :func:`distinct_colors` adds colours at
  least a set CIELAB distance from every other, so no two sets ever share one. Without ``colors`` a
  chart assigns colours to the sets it draws, consistent only within that chart.
* Rate metrics (:data:`ui.data.RATE_METRICS`) get a fixed 0-100% axis so charts compare at a glance;
  reward and steps get an axis fitted to the data.
* No data is never drawn as an empty axis that looks like zeros: every chart returns
  :func:`empty_figure` with a message saying what is missing.
* Plotly renders a subset of HTML (links included) in every label, so every text that comes from the
  data (set, run, agent, slice, component and category names) goes through :func:`ui.safe.plot`;
  hover templates read such text from the trace (``%{fullData.name}``, ``%{x}``, ``%{meta[0]}``) and
  never embed it, so a ``%{...}`` in a name is not a placeholder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd
import plotly.graph_objects as go

from ui import safe
from ui.data import GROUP_LABELS, METRIC_LABELS, RATE_METRICS

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
"""Okabe & Ito (2008), blue first; yellow and black last (yellow is faint on white, black reads as text)."""
_AXIS = {"gridcolor": "#EBF0F8", "linecolor": "#EBF0F8", "zerolinecolor": "#EBF0F8", "automargin": True,
         "ticks": ""}
TEMPLATE = go.layout.Template(layout={
    "paper_bgcolor": "white", "plot_bgcolor": "white", "font": {"color": "#2a3f5f"}, "hoverlabel": {"align": "left"},
    "xaxis": _AXIS, "yaxis": _AXIS, "title": {"x": 0.05},
})
"""plotly_white's look, spelled out: the named template is deep-copied on every figure (~15 ms each),
which alone would cost the dashboard a tenth of its time budget per click."""
ZERO_LINE = "#555555"


MIN_COLOR_DISTANCE = 18.0
"""The least CIELAB distance (ΔE*76) between any two sets' colours: about what a reader tells apart at a
glance in a legend (2.3 is the barely noticeable difference)."""


def _lab(color: str) -> tuple[float, float, float]:
    """CIELAB (D65) of a ``#rrggbb`` colour."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(color[i:i + 2], 16) / 255) for i in (1, 3, 5))
    xyz = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, \
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def color_distance(a: str, b: str) -> float:
    """ΔE*76 between two ``#rrggbb`` colours."""
    return sum((x - y) ** 2 for x, y in zip(_lab(a), _lab(b))) ** 0.5


def _hsl(hue: float, saturation: float, lightness: float) -> str:
    import colorsys

    r, g, b = colorsys.hls_to_rgb(hue, lightness, saturation)
    return "#" + "".join(f"{round(v * 255):02x}" for v in (r, g, b))


def distinct_colors(n: int) -> list[str]:
    """``n`` colours, the Okabe-Ito :data:`PALETTE` first, then hues a golden angle apart at three
    lightnesses, each kept only if it is at least :data:`MIN_COLOR_DISTANCE` from every colour kept;
    if the plane fills up the distance asked for shrinks, so any ``n`` gets colours as far apart as
    this search finds."""
    chosen = list(PALETTE[:n])
    floor = MIN_COLOR_DISTANCE
    step = 0
    while len(chosen) < n:
        for _ in range(720):
            step += 1
            hue = (step * 0.618033988749895) % 1.0
            lightness = (0.35, 0.55, 0.72)[step % 3]
            candidate = _hsl(hue, 0.75, lightness)
            if all(color_distance(candidate, c) >= floor for c in chosen):
                chosen.append(candidate)
                break
        else:
            floor *= 0.8
    return chosen


def set_colors(names: Iterable[str]) -> dict[str, str]:
    """A distinct colour per distinct name (:func:`distinct_colors`), in sorted-name order."""
    ordered = sorted(set(names))
    return dict(zip(ordered, distinct_colors(len(ordered))))


def _colors(names: Iterable[str], colors: Mapping[str, str] | None) -> dict[str, str]:
    names = list(dict.fromkeys(names))
    own = set_colors(names)
    return {name: (colors or {}).get(name, own[name]) for name in names}


def _metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric.replace("_", " "))


def empty_figure(message: str) -> go.Figure:
    """A figure with no data traces: only ``message``, centred, and no axes that could read as zeros."""
    figure = go.Figure()
    figure.update_layout(
        template=TEMPLATE,
        xaxis={"visible": False}, yaxis={"visible": False},
        annotations=[{"text": safe.plot(message), "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                      "showarrow": False, "font": {"size": 15}}],
        height=320,
    )
    return figure


def _value_axis(metric: str) -> dict:
    if metric in RATE_METRICS:
        return {"title": {"text": _metric_label(metric)}, "range": [0, 1.02], "tickformat": ".0%"}
    return {"title": {"text": _metric_label(metric)}, "zeroline": True, "zerolinecolor": ZERO_LINE}


def rate_chart(table: pd.DataFrame, *, by: str, metric: str, colors: Mapping[str, str] | None = None) -> go.Figure:
    """Grouped bars from :func:`ui.data.rate_table`: one trace per set (named after it), one bar per
    group, with the 95% bootstrap interval as asymmetric error bars."""
    if table.empty:
        return empty_figure(f"No graded episodes: no {_metric_label(metric).lower()} to show.")
    palette = _colors(table["set"], colors)
    value_format = ".1%" if metric in RATE_METRICS else "+.3f" if metric == "reward" else ".1f"
    figure = go.Figure()
    for set_name, rows in table.groupby("set", sort=False):
        figure.add_trace(go.Bar(
            name=safe.plot(set_name), x=[safe.plot(g) for g in rows["group"]], y=rows["mean"],
            marker_color=palette[set_name],
            error_y={"type": "data", "symmetric": False, "array": (rows["high"] - rows["mean"]).tolist(),
                     "arrayminus": (rows["mean"] - rows["low"]).tolist(), "thickness": 1.5, "width": 4},
            customdata=rows[["low", "high", "n"]].to_numpy(),
            hovertemplate=(f"<b>%{{fullData.name}}</b><br>%{{x}}: %{{y:{value_format}}}"
                           f"<br>95% CI [%{{customdata[0]:{value_format}}}, %{{customdata[1]:{value_format}}}]"
                           "<br>n = %{customdata[2]}<extra></extra>"),
        ))
    grouping = GROUP_LABELS.get(by, by.replace("_", " "))
    title = _metric_label(metric) if by == "overall" else f"{_metric_label(metric)} by {grouping.lower()}"
    figure.update_layout(
        template=TEMPLATE, barmode="group",
        title={"text": f"{title} <sup>(95% bootstrap CI)</sup>"},
        xaxis={"title": {"text": "" if by == "overall" else grouping}, "type": "category"},
        yaxis=_value_axis(metric), legend={"title": {"text": "Rollout set"}},
    )
    return figure


def component_chart(long: pd.DataFrame, *, colors: Mapping[str, str] | None = None) -> go.Figure:
    """Box plots from :func:`ui.data.component_frame`: per reward component, one box per set, showing
    how much each component added to or took from the reward across episodes."""
    if long.empty:
        return empty_figure("No graded episodes: no reward components to show.")
    palette = _colors(long["set"], colors)
    figure = go.Figure()
    for set_name, rows in long.groupby("set", sort=False):
        figure.add_trace(go.Box(name=safe.plot(set_name), x=[safe.plot(c) for c in rows["component"]], y=rows["value"],
                                marker_color=palette[set_name], boxmean=True))
    figure.update_layout(
        template=TEMPLATE, boxmode="group",
        title={"text": "Reward components <sup>(contribution to the reward, per episode)</sup>"},
        xaxis={"title": {"text": "Component"}, "type": "category"},
        yaxis={"title": {"text": "Contribution"}, "zeroline": True, "zerolinecolor": ZERO_LINE},
        legend={"title": {"text": "Rollout set"}},
    )
    return figure


def delta_chart(table: pd.DataFrame, *, base: str, other: str, metric: str,
                colors: Mapping[str, str] | None = None) -> go.Figure:
    """A forest plot from :func:`ui.data.paired_delta_table`: per slice, the mean paired difference
    (other - base) with its 95% bootstrap interval, and a line at zero (no difference)."""
    if table.empty:
        return empty_figure(f"No scenario has a graded episode in both {base} and {other}.")
    color = _colors([other], colors)[other]
    rate = metric in RATE_METRICS
    value_format = "+.1%" if rate else "+.3f"
    labels = [f"{safe.plot(s)} (n={n})" for s, n in zip(table["slice"], table["n"])]
    shown_base, shown_other = safe.plot(base), safe.plot(other)
    figure = go.Figure(go.Scatter(
        name=f"{shown_other} − {shown_base}", x=table["delta"], y=labels, mode="markers", meta=[shown_base, shown_other],
        marker={"color": color, "size": 9, "symbol": "diamond"},
        error_x={"type": "data", "symmetric": False, "array": (table["high"] - table["delta"]).tolist(),
                 "arrayminus": (table["delta"] - table["low"]).tolist(), "thickness": 1.5, "width": 4,
                 "color": color},
        customdata=table[["low", "high", "base", "other"]].to_numpy(),
        hovertemplate=(f"%{{y}}<br>difference %{{x:{value_format}}}"
                       f"<br>95% CI [%{{customdata[0]:{value_format}}}, %{{customdata[1]:{value_format}}}]"
                       "<br>%{meta[0]}: %{customdata[2]:.3f}, %{meta[1]}: %{customdata[3]:.3f}<extra></extra>"),
    ))
    figure.add_vline(x=0, line={"color": ZERO_LINE, "dash": "dash", "width": 1})
    figure.update_layout(
        template=TEMPLATE, showlegend=False,
        title={"text": f"{shown_other} − {shown_base}: {_metric_label(metric).lower()} "
                       "<sup>(paired on common scenarios, 95% bootstrap CI)</sup>"},
        xaxis={"title": {"text": f"Difference in {_metric_label(metric).lower()} ({shown_other} − {shown_base})"},
               **({"tickformat": "+.0%"} if rate else {})},
        # Slices top to bottom in table order: overall first, as a forest plot reads.
        yaxis={"title": {"text": ""}, "autorange": "reversed", "type": "category"},
        height=max(320, 80 + 28 * len(table)),
    )
    return figure


TRAINING_RATES = frozenset({"env/full_fix", "env/partial", "env/format_error_rate", "env/truncated"})
"""Training metrics that are shares, drawn on a fixed 0-100% axis."""


def training_chart(frame: pd.DataFrame, metrics: list[str], *, colors: Mapping[str, str] | None = None) -> go.Figure:
    """Training curves: one panel per metric (stacked, sharing the step axis), one line per run.
    ``frame`` is :func:`envcore.training.metrics.read_metrics`'s long table with a ``label`` column
    naming each run."""
    from plotly.subplots import make_subplots

    shown = frame[frame["metric"].isin(metrics)] if len(frame) else frame
    metrics = [m for m in metrics if m in set(shown["metric"])] if len(shown) else []
    if not metrics:
        return empty_figure("No metric rows for the chosen runs and metrics.")
    runs = list(dict.fromkeys(shown.sort_values("label")["label"]))
    palette = _colors(runs, colors)
    figure = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.08 / max(len(metrics) - 1, 1),
                           subplot_titles=[safe.plot(m) for m in metrics])
    for row, metric in enumerate(metrics, 1):
        for run in runs:
            points = shown[(shown["metric"] == metric) & (shown["label"] == run)].sort_values("step")
            if points.empty:
                continue
            figure.add_trace(go.Scatter(
                x=points["step"], y=points["value"], mode="lines+markers", name=safe.plot(run), legendgroup=run,
                showlegend=row == 1, line={"color": palette[run], "width": 2}, marker={"size": 5},
                meta=[safe.plot(metric)],
                hovertemplate="%{fullData.name}<br>step %{x}<br>%{meta[0]} %{y:.4g}<extra></extra>",
            ), row=row, col=1)
        if metric in TRAINING_RATES:
            figure.update_yaxes(range=[0, 1.02], tickformat=".0%", row=row, col=1)
    figure.update_xaxes(title_text="GRPO step", row=len(metrics), col=1)
    figure.update_layout(template=TEMPLATE, height=90 + 190 * len(metrics), margin={"t": 40, "b": 40},
                         legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0})
    return figure


CATEGORY_COLORS = {
    "solved": "#009E73", "partial_fix": "#56B4E9", "over_restriction": "#D55E00", "app_broken": "#000000",
    "wrong_site": "#E69F00", "no_patch": "#BBBBBB", "format_errors": "#CC79A7", "budget_exhausted": "#0072B2",
    "other": "#F0E442",
}
"""One colour per failure category (Okabe-Ito, plus grey for doing nothing), the same in every chart."""


def failure_chart(table: pd.DataFrame, *, by: str, titles: Mapping[str, str]) -> go.Figure:
    """Stacked horizontal bars: for each slice (rows of ``table``: ``slice``, ``category``, ``share``,
    ``count``, ``graded``), the share of graded episodes in each category."""
    if table.empty:
        return empty_figure("No graded episode in this analysis.")
    slices = list(dict.fromkeys(table["slice"]))
    figure = go.Figure()
    for category in dict.fromkeys(table["category"]):
        rows = table[table["category"] == category].set_index("slice").reindex(slices)
        figure.add_trace(go.Bar(
            y=[safe.plot(s) for s in slices], x=rows["share"], orientation="h",
            name=safe.plot(titles.get(category, category)),
            marker={"color": CATEGORY_COLORS.get(category, "#999999")}, customdata=rows[["count", "graded"]].values,
            hovertemplate="%{fullData.name}<br>%{y}: %{x:.0%} (%{customdata[0]} of %{customdata[1]})<extra></extra>",
        ))
    figure.update_layout(template=TEMPLATE, barmode="stack", height=120 + 28 * len(slices),
                         xaxis={"range": [0, 1], "tickformat": ".0%", "title": {"text": "share of graded episodes"}},
                         yaxis={"autorange": "reversed", "title": {"text": safe.plot(by.replace("_", " "))}},
                         legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
                         title={"text": f"Why episodes failed, by {safe.plot(by.replace('_', ' '))}"}, margin={"t": 90})
    return figure
