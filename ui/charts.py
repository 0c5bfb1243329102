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
* Sets are keyed by their name everywhere (colours, tables) but shown by ``names`` (their words:
  ``Heuristic baseline (scripted)``), when the caller passes them.
* Bars run horizontally, one row per set or player, with the labels on the left: a phone's
  390 pixels then hold the same chart as a desktop, only taller, and long names are read level
  rather than tilted. A chart is as tall as its rows need: each row gets :data:`LINE_HEIGHT` pixels
  per line of its wrapped label (:func:`rows_height`), so labels of several lines never overlap
  their neighbours' (they did, four lines in rows 46 pixels apart).
* Where every set is measured on every slice (:func:`rate_chart`), the chart is a heatmap: one row
  per slice, one column per set under a short name, the value written in its cell and the interval
  and n on hover. Grouped bars drew fifteen sets as fifteen hairlines per slice under a fifteen-entry
  legend of near-identical colours; a cell per (slice, set) reads at a glance at any number of sets.
  Column labels are one line each, level where they fit and upright only where they would overlap
  (a phone; Plotly's ``autotickangles``): two-line labels stood upright are wider than a phone's
  columns.
* Rate metrics (:data:`ui.data.RATE_METRICS`) get a fixed 0-100% axis so charts compare at a glance;
  reward and steps get an axis fitted to the data.
* Stacked bars (:func:`outcome_chart`, :func:`failure_chart`) are drawn from tables with a value for
  every (row, category), zeros included, sent as plain lists: Plotly sends a NumPy array as a typed
  array, where a missing value is a NaN that poisons the running sum of the stack and cuts every
  later segment of that bar short (the failure bar of ``random`` used to stop at about 85%).
* No data is never drawn as an empty axis that looks like zeros: every chart returns
  :func:`empty_figure` with a message saying what is missing.
* Plotly renders a subset of HTML (links included) in every label, so every text that comes from the
  data (set, run, agent, slice, component and category names) goes through :func:`ui.safe.plot`;
  hover templates read such text from the trace (``%{fullData.name}``, ``%{x}``, ``%{meta[0]}``) and
  never embed it, so a ``%{...}`` in a name is not a placeholder.
* Signed numbers a reader sees (cell texts, hovers) are written here by
  :func:`envcore.numbers.signed` and sent as text: Plotly's own ``+.3f`` writes a value that rounds
  to zero from below as ``-0.000``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd
import plotly.graph_objects as go

from envcore.numbers import signed, signed_percent
from ui import safe
from ui.data import GROUP_LABELS, METRIC_LABELS, OUTCOMES, RATE_METRICS

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


def _shown(name: str, names: Mapping[str, str] | None) -> str:
    """The set ``name`` as shown (its words from ``names``, else its name), escaped for Plotly."""
    return safe.plot((names or {}).get(name, name))


def _wrapped(text: str, width: int = 26) -> str:
    """``text`` escaped for Plotly and broken into lines of about ``width`` characters (an axis label
    that stays narrow on a phone)."""
    lines: list[str] = []
    for word in str(text).split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(safe.plot(line) for line in lines) or safe.plot(text)


LINE_HEIGHT = 16
"""Pixels per line of a wrapped row label (12-pixel text, Plotly's 1.3 line spacing, and a little air)."""
ROW_GAP = 10
"""Pixels between two rows' labels, so that a bar keeps some air above and below."""
FIXED_HEIGHT = 180
"""Pixels of a horizontal chart that are not rows: its title (or the margin where it would be), a
legend wrapped to several lines on a phone, the value axis and its title."""

TITLE_HEIGHT = 40
"""Pixels a chart's title takes (a chart the page names over it has none)."""


def _lines(label: str) -> int:
    return label.count("<br>") + 1


def rows_height(labels: Iterable[str], *, fixed: int = FIXED_HEIGHT) -> int:
    """A chart's height with one row per label: :data:`FIXED_HEIGHT` plus, per row, as many lines as
    the longest label has (a category axis spaces its rows evenly), and :data:`ROW_GAP`."""
    labels = list(labels)
    lines = max((_lines(label) for label in labels), default=1)
    return fixed + len(labels) * (lines * LINE_HEIGHT + ROW_GAP)


LEGEND = {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "xanchor": "left", "title": {"text": ""},
          "traceorder": "normal"}
"""A horizontal legend above the plot: it wraps to the width of a phone instead of taking half of it."""
MARGIN = {"l": 10, "r": 16, "t": 40, "b": 50}
"""Narrow side margins (the axes' labels push them as far as they need): a phone's width is for the bars."""


def _title(text: str) -> dict:
    """A title at the top left of the figure that makes room for itself, so a legend above the plot
    (which makes room for itself too) never covers it: the padding under it is what keeps a legend of
    one row off it. One line: Plotly places a title of several lines anchored at the top partly
    outside the figure."""
    return {"text": text, "x": 0, "xref": "container", "xanchor": "left", "y": 1, "yref": "container",
            "yanchor": "top", "pad": {"t": 10, "b": 24, "l": 10}, "automargin": True}


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


RATE_SCALE = [[0.0, "#F3F5F7"], [1.0, "#00805C"]]
"""A share: pale grey at 0% to a deep Okabe-Ito green at 100% (white text reads on it)."""
REWARD_SCALE = [[0.0, "#D55E00"], [0.5, "#F7F7F7"], [1.0, "#0072B2"]]
"""A reward: vermilion below zero, blue above, white at zero (Okabe-Ito's ends, told apart by all)."""
COLUMN_CHARACTERS = 30
"""The longest column label of a heatmap, in characters: a longer name is cut, with an ellipsis,
unless two names would then read alike (the hover says each whole). Labels are one line: level
where they fit (a desktop), upright where they do not (a phone), and an upright line is one line
of text wide, narrower than any column."""
HEATMAP_ROW = 22
"""Pixels per heatmap row: one line of 11-pixel text in a cell, with a gap."""
UPRIGHT_ROOM = 30
"""Pixels of a heatmap kept for column labels stood upright (a phone), which push the rows down: on a
desktop, where they lie level, the rows are that much taller instead."""
LEVEL_COLUMNS = 8
"""Up to this many columns lie level on a desktop. More (every run shown) stand upright everywhere,
and the heatmap is made taller by their length (:data:`UPRIGHT_CHARACTER` per character) so that
its rows keep their height."""
UPRIGHT_CHARACTER = 6.2
"""Pixels per character of a 10-pixel column label stood upright."""
HEATMAP_MARGIN = {"l": 10, "r": 4, "t": 40, "b": 10}
"""A heatmap's margins: no axis at the bottom, and a phone's width is for the columns."""


def _one_line(texts: list[str], width: int = COLUMN_CHARACTERS) -> list[str]:
    """``texts`` escaped for Plotly, each on one line of at most ``width`` characters, unless cutting
    them would make two alike: then whole."""
    whole = [" ".join(str(text).split()) for text in texts]
    cut = [text if len(text) <= width else text[: width - 1].rstrip() + "…" for text in whole]
    return [safe.plot(text) for text in (cut if len(set(cut)) == len(set(whole)) else whole)]


def _cell(value: float, metric: str) -> str:
    """How a cell's value is written: a share as ``24%``, a reward signed (``+0.19``), else one decimal."""
    if value != value:  # NaN
        return ""
    if metric in RATE_METRICS:
        return f"{value:.0%}"
    return signed(value, 2) if metric == "reward" else f"{value:.1f}"


def rate_chart(table: pd.DataFrame, *, by: str, metric: str, colors: Mapping[str, str] | None = None,
               names: Mapping[str, str] | None = None) -> go.Figure:
    """A heatmap from :func:`ui.data.rate_table`: one row per group (sorted), one column per set (in the
    order the sets first appear in ``table``, under ``names``), each cell the mean written in it, its
    95% bootstrap interval and n on hover; a (group, set) with no graded episode is left blank.
    ``colors`` is accepted for the callers that pass every chart the same arguments: cells are
    coloured by their value, not by their set."""
    del colors  # a cell's colour is its value
    if table.empty:
        return empty_figure(f"No graded episodes: no {_metric_label(metric).lower()} to show.")
    groups = sorted(set(table["group"]))  # rate_table's order, whatever order the rows come in
    sets = list(dict.fromkeys(table["set"]))
    cells = {(row.group, row.set): row for row in table.itertuples()}
    shown = {s: _shown(s, names) for s in sets}

    def cell(group: str, set_name: str) -> tuple[float | None, str, list]:
        """(value, its text, [low, high, n, set]) of one cell; blank where the set has no episode there."""
        row = cells.get((group, set_name))
        if row is None:
            return None, "", ["", "", 0, shown[set_name]]
        return (float(row.mean), _cell(row.mean, metric),
                [_cell(row.low, metric), _cell(row.high, metric), int(row.n), shown[set_name]])

    grid = [[cell(group, set_name) for set_name in sets] for group in groups]
    z, text, custom = ([[c[i] for c in line] for line in grid] for i in range(3))
    rate = metric in RATE_METRICS
    scale = ({"colorscale": RATE_SCALE, "zmin": 0, "zmax": 1} if rate else
             {"colorscale": REWARD_SCALE, "zmin": -1, "zmax": 1, "zmid": 0} if metric == "reward" else
             {"colorscale": RATE_SCALE})
    crowded = len(sets) > LEVEL_COLUMNS  # every run shown: smaller text keeps a cell's value inside it
    columns = _one_line([(names or {}).get(s, s) for s in sets])
    figure = go.Figure(go.Heatmap(
        z=z, x=columns, y=[_group_label(g, by) for g in groups], text=text, texttemplate="%{text}",
        textfont={"size": 10 if crowded else 11}, customdata=custom, showscale=False, xgap=2, ygap=2,
        hoverongaps=False, **scale,
        hovertemplate=("<b>%{customdata[3]}</b><br>%{y}: %{text}<br>95% CI [%{customdata[0]}, %{customdata[1]}]"
                       "<br>n = %{customdata[2]}<extra></extra>"),
    ))
    grouping = GROUP_LABELS.get(by, by.replace("_", " "))
    title = _metric_label(metric) if by == "overall" else f"{_metric_label(metric)} by {grouping.lower()}"
    figure.update_layout(
        template=TEMPLATE, margin=HEATMAP_MARGIN, title=_title(f"{title} <sup>(hover a cell: 95% CI, n)</sup>"),
        # Set names head the columns, as in a table; upright only where level ones would overlap.
        xaxis={"side": "top", "type": "category", "autotickangles": [0, 90], "showgrid": False,
               "tickfont": {"size": 10 if crowded else 12}},
        yaxis={"title": {"text": ""}, "type": "category", "autorange": "reversed", "showgrid": False,
               "tickfont": {"size": 11}},
        # The rows (a line of text each), and room over them for the title and the column labels:
        # level ones take a line, upright ones (a phone) push the rows down into UPRIGHT_ROOM.
        height=100 + len(groups) * HEATMAP_ROW + (UPRIGHT_ROOM if len(sets) <= LEVEL_COLUMNS else
                                                   round(UPRIGHT_CHARACTER * max(map(len, columns)))),
    )
    return figure


def _group_label(group: str, by: str) -> str:
    return f"tier {safe.plot(group)}" if by == "tier" else safe.plot(group)


NEGLIGIBLE = 0.0005
"""A mean contribution smaller than this reads as zero at three decimals: a component with no larger
one in any set drawn is left out of :func:`component_chart`."""
REWARD_COMPONENT_COLORS = {
    "security_blocked": "#009E73", "legit_use_broken": "#D55E00", "app_loads": "#000000", "steps_used": "#BBBBBB",
    "invalid_actions": "#CC79A7", "diff_size": "#56B4E9", "budget_exhausted": "#E69F00",
}
"""One colour per reward component (what pays green, what breaks the app dark), the same everywhere."""


def component_chart(means: pd.DataFrame, *, rewards: pd.DataFrame | None = None,
                    names: Mapping[str, str] | None = None) -> go.Figure:
    """Where each set's reward comes from: from :func:`ui.data.component_means`, one row per set
    (table order, top to bottom) and one segment per reward component, stacked from zero (what adds
    to the reward to the right, what takes from it to the left), so a row's segments sum to the mean
    reward; with ``rewards`` (:func:`ui.data.rate_table` of ``reward`` over ``overall``), a diamond
    marks each set's mean reward with its 95% interval. A component below :data:`NEGLIGIBLE` in every
    set is left out (its bars would be invisible, its legend entry a line of nothing)."""
    if means.empty:
        return empty_figure("No graded episodes: no reward components to show.")
    sets = list(dict.fromkeys(means["set"]))
    labels = [_wrapped((names or {}).get(s, s)) for s in sets]
    # A component that adds nothing to any set drawn is an invisible bar and a line of legend: left out.
    weighty = means.groupby("component", sort=False)["mean"].apply(lambda m: bool((m.abs() >= NEGLIGIBLE).any()))
    means = means[means["component"].map(weighty)]
    extra = iter(distinct_colors(len(PALETTE) + len(set(means["component"])))[len(PALETTE):])
    figure = go.Figure()
    for component, rows in means.groupby("component", sort=False):
        rows = rows.set_index("set").reindex(sets)
        color = REWARD_COMPONENT_COLORS.get(component) or next(extra)
        values = rows["mean"].fillna(0.0).tolist()
        figure.add_trace(go.Bar(
            name=safe.plot(component), y=labels, x=values, orientation="h", marker_color=color,
            customdata=[[signed(v), int(n)] for v, n in zip(values, rows["n"].fillna(0))],
            hovertemplate="%{fullData.name}<br>%{y}: %{customdata[0]} on average<br>n = %{customdata[1]}<extra></extra>",
        ))
    if rewards is not None and not rewards.empty:
        shown = rewards.set_index("set").reindex(sets).dropna(subset=["mean"])
        figure.add_trace(go.Scatter(
            name="mean reward (95% CI)", y=[labels[sets.index(s)] for s in shown.index], x=shown["mean"].tolist(),
            mode="markers", marker={"symbol": "diamond", "size": 10, "color": "#222222", "line": {"color": "white", "width": 1}},
            error_x={"type": "data", "symmetric": False, "array": (shown["high"] - shown["mean"]).tolist(),
                     "arrayminus": (shown["mean"] - shown["low"]).tolist(), "color": "#222222", "thickness": 1.5,
                     "width": 4},
            customdata=[[signed(m), signed(lo), signed(hi), int(n)]
                        for m, lo, hi, n in zip(shown["mean"], shown["low"], shown["high"], shown["n"])],
            hovertemplate=("%{y}<br>mean reward %{customdata[0]}<br>95% CI [%{customdata[1]}, %{customdata[2]}]"
                           "<br>n = %{customdata[3]}<extra></extra>"),
        ))
    figure.add_vline(x=0, line={"color": ZERO_LINE, "width": 1})
    figure.update_layout(
        template=TEMPLATE, barmode="relative", margin=MARGIN,
        # Untitled: the dashboard's caption over it names it (a title would repeat it, 45 pixels higher).
        xaxis={"title": {"text": "Contribution to reward"}, "zeroline": False},  # fits under a phone's plot
        yaxis={"title": {"text": ""}, "type": "category", "autorange": "reversed"},
        # No title (the page names it); a legend of up to eight entries, a line or two more than the outcomes'.
        legend=LEGEND, height=rows_height(labels, fixed=FIXED_HEIGHT - TITLE_HEIGHT + 20),
    )
    return figure


def delta_chart(table: pd.DataFrame, *, base: str, other: str, metric: str,
                colors: Mapping[str, str] | None = None, names: Mapping[str, str] | None = None) -> go.Figure:
    """A forest plot from :func:`ui.data.paired_delta_table`: per slice, the mean paired difference
    (other - base) with its 95% bootstrap interval, and a line at zero (no difference)."""
    if table.empty:
        return empty_figure(f"No scenario has a graded episode in both {(names or {}).get(base, base)} and "
                            f"{(names or {}).get(other, other)}.")
    color = _colors([other], colors)[other]
    rate = metric in RATE_METRICS

    def show(value: float) -> str:
        return signed_percent(value, 1) if rate else signed(value)

    def level(value: float) -> str:
        return f"{value:.1%}" if rate else signed(value)

    labels = [f"{safe.plot(s)} (n={n})" for s, n in zip(table["slice"], table["n"])]
    shown_base, shown_other = _shown(base, names), _shown(other, names)
    figure = go.Figure(go.Scatter(
        name=f"{shown_other} − {shown_base}", x=table["delta"], y=labels, mode="markers", meta=[shown_base, shown_other],
        marker={"color": color, "size": 9, "symbol": "diamond"},
        error_x={"type": "data", "symmetric": False, "array": (table["high"] - table["delta"]).tolist(),
                 "arrayminus": (table["delta"] - table["low"]).tolist(), "thickness": 1.5, "width": 4,
                 "color": color},
        customdata=[[show(d), show(lo), show(hi), level(b), level(o)] for d, lo, hi, b, o in
                    zip(table["delta"], table["low"], table["high"], table["base"], table["other"])],
        hovertemplate=("%{y}<br>difference %{customdata[0]}<br>95% CI [%{customdata[1]}, %{customdata[2]}]"
                       "<br>%{meta[0]}: %{customdata[3]}, %{meta[1]}: %{customdata[4]}<extra></extra>"),
    ))
    figure.add_vline(x=0, line={"color": ZERO_LINE, "dash": "dash", "width": 1})
    figure.update_layout(
        template=TEMPLATE, showlegend=False, margin=MARGIN,
        # The two sets are named beside the chart (the dropdowns and the sentence over it): a title
        # naming them would not fit a phone's width.
        title=_title(f"Paired difference in {_metric_label(metric).lower()} <sup>(95% bootstrap CI)</sup>"),
        xaxis={"title": {"text": f"Difference in {_metric_label(metric).lower()} (compared − baseline)"},
               **({"tickformat": "+.0%"} if rate else {})},
        # Slices top to bottom in table order: overall first, as a forest plot reads.
        yaxis={"title": {"text": ""}, "autorange": "reversed", "type": "category"},
        height=max(340, 130 + 28 * len(table)),
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
    figure.update_xaxes(title_text="step (of each run: SFT or GRPO)", row=len(metrics), col=1)
    figure.update_layout(template=TEMPLATE, height=90 + 190 * len(metrics), margin={"t": 40, "b": 40},
                         legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0})
    return figure


def _stacked_shares(table: pd.DataFrame, *, row: str, labels: Mapping[str, str], titles: Mapping[str, str],
                    colors: Mapping[str, str], denominator: str, title: str, axis_title: str) -> go.Figure:
    """Stacked horizontal bars of shares: one bar per distinct ``row`` value (table order, top to
    bottom, shown as ``labels``), one segment per ``category`` (table order), from a table with a
    ``share``, a ``count`` and ``denominator`` for every (row, category). Missing cells are drawn as
    zeros (see the module docstring), so a complete table's bars end at exactly 100%. An empty
    ``title`` or ``axis_title`` leaves it out (the page names the chart over it)."""
    rows = list(dict.fromkeys(table[row]))
    shown_rows = [labels.get(r, safe.plot(r)) for r in rows]
    figure = go.Figure()
    for category in dict.fromkeys(table["category"]):
        part = table[table["category"] == category].set_index(row).reindex(rows)
        figure.add_trace(go.Bar(
            y=shown_rows, x=part["share"].fillna(0.0).tolist(), orientation="h",
            name=safe.plot(titles.get(category, category)),
            marker={"color": colors.get(category, "#999999")},
            customdata=[[int(c), int(t)] for c, t in zip(part["count"].fillna(0), part[denominator].fillna(0))],
            texttemplate="%{x:.0%}", textposition="inside", insidetextanchor="middle", textangle=0,
            hovertemplate="%{fullData.name}<br>%{y}: %{x:.1%} (%{customdata[0]} of %{customdata[1]})<extra></extra>",
        ))
    fixed = FIXED_HEIGHT if title else FIXED_HEIGHT - TITLE_HEIGHT
    figure.update_layout(template=TEMPLATE, barmode="stack", height=rows_height(shown_rows, fixed=fixed), margin=MARGIN,
                         uniformtext={"minsize": 10, "mode": "hide"},
                         xaxis={"range": [0, 1], "tickformat": ".0%", "title": {"text": axis_title}},
                         yaxis={"autorange": "reversed", "type": "category", "title": {"text": ""}},
                         legend=LEGEND, **({"title": _title(title)} if title else {}))
    return figure


OUTCOME_COLORS = {"full_fix": "#009E73", "partial": "#56B4E9", "not_fixed": "#BBBBBB", "budget": "#E69F00",
                  "not_graded": "#555555"}
"""Outcome colours: a fix green, a partial fix light blue, no fix grey, a budget run out orange."""


def outcome_chart(table: pd.DataFrame, *, names: Mapping[str, str] | None = None) -> go.Figure:
    """How each entrant's episodes ended, from :func:`ui.data.outcome_table`: one stacked bar per
    entrant (leaderboard order), its segments the shares of :data:`ui.data.OUTCOMES`, summing to 100%
    of its episodes."""
    if table.empty:
        return empty_figure("No episodes in the chosen sets.")
    labels = {e: _wrapped((names or {}).get(e, e)) for e in dict.fromkeys(table["entrant"])}
    return _stacked_shares(table.rename(columns={"outcome": "category"}), row="entrant", labels=labels,
                           titles=OUTCOMES, colors=OUTCOME_COLORS, denominator="episodes",
                           title="", axis_title="")  # named by the caption over it; its ticks say 0% to 100%


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
    dimension = safe.plot(by.replace("_", " "))
    return _stacked_shares(table, row="slice", labels={}, titles=titles, colors=CATEGORY_COLORS, denominator="graded",
                           title=f"Solved, or why not, by {dimension}",
                           axis_title="share of graded episodes")
