"""What training did, in the Space's words: the three-stage tables of the shipped training runs.

A run with an SFT stage writes ``artifacts/training/<run>/stages.json``
(:mod:`envcore.training.stages`): the base model, after SFT and after SFT+GRPO, each evaluated on the
same scenarios of every slice (the scenarios it learned, the test split, the held-out styles). This
module reads those files, read-only and without the training stack, and says it two ways:

* :func:`learning_line`: one row for the dashboard's headline card: the run whose stages gained most
  on apps it never saw, or, where none gained there, on the scenarios it learned, with every slice's
  result beside it, as it is;
* :func:`stages_markdown`: every run's whole table for the training panel.

Everything read from a file is escaped (:mod:`ui.safe`); a file that is not a stage table is skipped.
Rewards and differences are written by :func:`envcore.numbers.signed` (never ``-0.000``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envcore.numbers import signed
from ui import safe

TITLES = {"base": "base", "sft": "SFT", "sft+grpo": "SFT+GRPO"}
LEARNED = "trained"
SMALL_MODEL = 50_000_000
"""Below this many parameters a model is said to be small (not expected to fix unseen apps)."""


def files_version(artifacts: Path) -> tuple[tuple[str, int], ...]:
    """(path, mtime) of every stage table: what a cache of anything drawn from them is keyed by."""
    out = []
    for path in sorted((Path(artifacts) / "training").glob("*/stages.json")):
        try:
            out.append((str(path), path.stat().st_mtime_ns))
        except OSError:
            continue
    return tuple(out)


def _valid(table: Any) -> bool:
    if not isinstance(table, dict) or not isinstance(table.get("slices"), dict) or not isinstance(table.get("run"), str):
        return False
    for block in table["slices"].values():
        stages = block.get("stages") if isinstance(block, dict) else None
        if not isinstance(stages, dict) or not stages:
            return False
        for stage, values in stages.items():
            try:
                float(values["overall"]["full_fix"]["mean"])
                float(values["format_error_rate"])
                int(values["episodes"])
            except (KeyError, TypeError, ValueError):
                return False
    return True


def read_stage_tables(artifacts: Path) -> list[dict[str, Any]]:
    """Every run's stage table (with ``parameters`` and ``description`` from its ``training.json``
    and the model's ``config.json`` when they can be read), by run name."""
    from ui.artifact_sets import _model_folder, model_parameters

    tables = []
    for path, _ in files_version(artifacts):
        folder = Path(path).parent
        try:
            table = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        if not _valid(table):
            continue
        try:
            training = json.loads((folder / "training.json").read_text())
        except (OSError, ValueError):
            training = {}
        table["description"] = str((training.get("config") or {}).get("description") or "").strip()
        # the count the run measured on its own model, else one worked out from the model's config
        counted = training.get("parameters")
        table["parameters"] = counted if isinstance(counted, int) and not isinstance(counted, bool) and counted > 0 else None
        model = training.get("model")
        found = _model_folder(Path(artifacts), str(model)) if isinstance(model, str) else None
        if found is not None and table["parameters"] is None:
            try:
                table["parameters"] = model_parameters(json.loads((found / "config.json").read_text()))
            except (OSError, ValueError):
                pass
        tables.append(table)
    return sorted(tables, key=lambda t: t["run"])


def _rate(block: dict[str, Any], stage: str, key: str = "full_fix") -> float | None:
    values = block["stages"].get(stage)
    if values is None:
        return None
    return float(values["format_error_rate"]) if key == "format" else float(values["overall"][key]["mean"])


def _arrow(block: dict[str, Any], key: str = "full_fix") -> str:
    shown = [(TITLES.get(stage, stage), _rate(block, stage, key)) for stage in block["stages"]]
    return " → ".join(f"{title} {value:.0%}" for title, value in shown if value is not None)


def _block_gain(block: dict[str, Any]) -> float:
    stages = list(block["stages"])
    return (_rate(block, stages[-1]) or 0.0) - (_rate(block, stages[0]) or 0.0)


def _gain(table: dict[str, Any]) -> float:
    block = table["slices"].get(LEARNED) or next(iter(table["slices"].values()))
    return _block_gain(block)


def _held_out_gain(table: dict[str, Any]) -> float:
    """The largest full-fix gain, first stage to last, on a slice of apps the run never learned."""
    return max((_block_gain(b) for name, b in table["slices"].items() if name != LEARNED), default=0.0)


def _size(table: dict[str, Any]) -> str:
    parameters = table.get("parameters")
    if not parameters:
        return ""
    if parameters < 1e5:  # a toy model (a smoke run's) would read as "0.0M"
        return f"{'an' if str(parameters).startswith(('8', '11', '18')) else 'a'} {parameters:,}-parameter model"
    return f"a {parameters / 1e6:.1f}M-parameter model" if parameters < 1e9 else f"a {parameters / 1e9:.1f}B-parameter model"


def learning_line(tables: list[dict[str, Any]]) -> str:
    """The headline row (see the module docstring); ``""`` when no run has a stage table."""
    if not tables:
        return ""
    # a gain on apps the model never saw says more than one on the apps it was taught
    table = max(tables, key=lambda t: (_held_out_gain(t) > 0, _held_out_gain(t), _gain(t), t["run"]))
    size = _size(table)
    head = f"**What training did** ({safe.markdown(table['run'])}{', ' + size if size else ''}): "
    parts = []
    for name, block in table["slices"].items():
        episodes = max(int(s["episodes"]) for s in block["stages"].values())
        where = (f"the {episodes} scenarios it learned" if name == LEARNED
                 else f"{episodes} unseen scenarios of {safe.markdown(name)}")
        text = f"full fixes on {where}: {_arrow(block)}"
        if name == LEARNED:
            text += f" (format errors {_arrow(block, 'format')})"
        parts.append(text)
    line = head + "; ".join(parts) + "."
    small = table.get("parameters") is not None and table["parameters"] < SMALL_MODEL
    if small and any(name != LEARNED for name in table["slices"]) and _held_out_gain(table) <= 0:
        line += " A model this small learns the apps it was shown; it is not expected to fix apps it has not seen."
    return line


def _stages_title(table: dict[str, Any]) -> str:
    """The stages a run reached, in order (a job cut off before GRPO says base → SFT, not more)."""
    seen: list[str] = []
    for block in table["slices"].values():
        seen += [stage for stage in block["stages"] if stage not in seen]
    return " → ".join(TITLES.get(stage, safe.markdown(stage)) for stage in seen)


def stages_markdown(tables: list[dict[str, Any]]) -> str:
    """Every run's table (stages by slice, then the paired comparisons), for the training panel."""
    if not tables:
        return ("No run with an SFT stage yet: `python -m envcore train --config configs/train-tiny-learn.yaml` "
                "writes the base → SFT → SFT+GRPO table here.")
    out = []
    for table in tables:
        size = _size(table)
        out += [f"#### {safe.markdown(table['run'])}: {_stages_title(table)}" + (f" ({size})" if size else ""), ""]
        if table["description"]:
            out += [safe.markdown(table["description"]), ""]
        out += ["| slice | stage | scenarios | full fix | security | regression | mean reward | format errors |",
                "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, block in table["slices"].items():
            for stage, s in block["stages"].items():
                o = s["overall"]

                def cell(key: str) -> str:
                    low, high = o[key]["ci95"]
                    return f"{o[key]['mean']:.0%} [{low:.0%}, {high:.0%}]"

                out.append(f"| {safe.markdown(name)} | {TITLES.get(stage, safe.markdown(stage))} | {int(s['episodes'])} | "
                           f"{cell('full_fix')} | {cell('security_pass')} | {cell('regression_pass')} | "
                           f"{signed(float(o['reward']['mean']))} | {float(s['format_error_rate']):.0%} |")
        rows = []
        for name, block in table["slices"].items():
            for label, c in (block.get("comparisons") or {}).items():
                try:
                    later, earlier = label.split(" vs ")
                    d = c["reward_difference"]
                    rows.append(f"| {safe.markdown(name)} | {TITLES.get(later, later)} vs {TITLES.get(earlier, earlier)} | "
                                f"{int(c['scenarios'])} | {signed(d['mean'])} [{signed(d['ci95'][0])}, {signed(d['ci95'][1])}] | "
                                f"{int(c['full_fix']['only_other'])} / {int(c['full_fix']['only_base'])} |")
                except (KeyError, TypeError, ValueError):
                    continue
        if rows:
            out += ["", "| slice | comparison | scenarios | reward difference (95% CI) | fixed only by the later / the earlier |",
                    "| --- | --- | ---: | ---: | ---: |", *rows]
        out.append("")
    return "\n".join(out).rstrip() + "\n"
