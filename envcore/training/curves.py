"""Does GRPO raise the reward? Learning curves over several seeds, against a control that never updates.

One GRPO run's reward over steps is noise plus drift: the scenarios drawn change from step to step,
and so does the luck of sampling. So the question is asked of several runs: the same model trained
with several GRPO seeds (``python -m envcore job run --preset cpu-learn --grpo-seed N``), and the
same rounds played with a learning rate of 0 (``--control``), whose curve is what no learning looks
like under the same noise.

:func:`learning_curves` reads each run's ``metrics.jsonl`` (the job's own log, one row per GRPO step)
and gives, per step and per group (treated, control), the mean over seeds with a 95% interval
(Student's t over the seeds); and per run the **rise**: the mean of the last third of its steps
minus the mean of its first third. The verdict compares the treated runs' rises with the controls':
GRPO raised the reward only if the treated runs rose and their rise's interval lies above the
control's mean rise; with one treated run there is no interval and so no verdict. Beside it, step by
step, the treated mean against the control's (how many steps below and above it, and the mean
difference after the first step, which both arms share). :func:`render_curves` says it in Markdown.

**A band from each step's own episodes.** A step's mean is itself a sample: its episodes (the job's
``scenarios_per_step`` x ``group_size``, 32 in ``cpu-learn``) vary, and the row keeps their spread
(``reward_std``; a full-fix share's spread follows from the share). So even one run per arm has a band:
per step, each arm's mean with a 95% interval over its episodes, and the treated-minus-control
difference with the interval of the two together; the steps where that interval lies wholly below (or
above) zero are counted. Episodes of one scenario are alike, so this band is narrower than the spread
between whole runs would be: a step outside it is a difference the step's own sampling cannot explain,
not yet one that other seeds would repeat.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from envcore.numbers import signed

METRICS = ("env/reward", "env/full_fix")
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def _metrics_text(folder: Path) -> str:
    """``metrics.jsonl`` of a run folder, of a job's ``--out`` folder (inside its ``results.tar.gz``), or
    of a job's working folder."""
    import io
    import tarfile

    plain = [folder / "metrics.jsonl", *sorted(folder.glob("training/*/metrics.jsonl"))]
    found = next((p for p in plain if p.is_file()), None)
    if found is not None:
        return found.read_text()
    parts = sorted(folder.glob("results.tar.gz.[0-9][0-9]")) or [folder / "results.tar.gz"]
    if parts[0].is_file():
        with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:gz") as tar:
            for member in tar.getmembers():
                if member.name.startswith("training/") and member.name.endswith("/metrics.jsonl"):
                    return tar.extractfile(member).read().decode()
    raise FileNotFoundError(f"no metrics.jsonl in {folder} (nor in a results.tar.gz there)")


def episodes_per_step(folder: str | Path) -> int | None:
    """How many episodes one GRPO step of the job in ``folder`` played (its ``training.json``:
    ``scenarios_per_step`` x ``group_size``), ``None`` if it does not say."""
    import io
    import tarfile

    folder = Path(folder)
    plain = [folder / "training.json", *sorted(folder.glob("training/*/training.json"))]
    found = next((p for p in plain if p.is_file()), None)
    text = found.read_text() if found is not None else None
    if text is None:
        parts = sorted(folder.glob("results.tar.gz.[0-9][0-9]")) or [folder / "results.tar.gz"]
        if not parts[0].is_file():
            return None
        with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:gz") as tar:
            member = next((m for m in tar.getmembers() if m.name.endswith("/training.json")), None)
            if member is None:
                return None
            text = tar.extractfile(member).read().decode()
    grpo = json.loads(text).get("config", {}).get("spec", {}).get("grpo", {})
    if not grpo.get("scenarios_per_step") or not grpo.get("group_size"):
        return None
    return int(grpo["scenarios_per_step"]) * int(grpo["group_size"])


def _spread(metric: str, row: dict[str, Any]) -> float | None:
    """The standard deviation of ``metric`` over one step's episodes."""
    metrics = row["metrics"]
    if metric == "env/reward" and "reward_std" in metrics:
        return float(metrics["reward_std"])
    if metric == "env/full_fix" and metric in metrics:
        share = float(metrics[metric])
        return math.sqrt(max(share * (1 - share), 0.0))
    return None


def grpo_rows(folder: str | Path) -> list[dict[str, Any]]:
    """The GRPO rows of one job's metrics (:func:`_metrics_text`), in step order."""
    text = _metrics_text(Path(folder))
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    grpo = [r for r in rows if not r["run"].endswith("-sft") and "env/reward" in r["metrics"]]
    return sorted(grpo, key=lambda r: r["step"])


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% Student's t interval over ``values`` (a single value: no width)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def rise(values: list[float]) -> float:
    """Mean of the last third minus mean of the first third (at least one step each)."""
    third = max(1, len(values) // 3)
    return statistics.fmean(values[-third:]) - statistics.fmean(values[:third])


def learning_curves(treated: list[str | Path], control: list[str | Path], *, metrics: tuple[str, ...] = METRICS) -> dict[str, Any]:
    """Per step and per run group, the mean over seeds with its interval; per run, its rise; and the verdict."""
    groups = {"treated": [grpo_rows(f) for f in treated], "control": [grpo_rows(f) for f in control]}
    for name, folders in (("treated", treated), ("control", control)):
        for folder, rows in zip(folders, groups[name]):
            if not rows:
                raise ValueError(f"{folder}: no GRPO step in its metrics (the job stopped before GRPO?)")
    sizes = {"treated": [episodes_per_step(f) for f in treated], "control": [episodes_per_step(f) for f in control]}
    out: dict[str, Any] = {"runs": {"treated": [str(f) for f in treated], "control": [str(f) for f in control]},
                           "metrics": {}}
    for metric in metrics:
        block: dict[str, Any] = {}
        for name, runs in groups.items():
            if not runs:
                continue
            steps = min(len(r) for r in runs)
            series = [[float(row["metrics"][metric]) for row in run[:steps]] for run in runs]
            block[name] = {
                "steps": steps,
                "per_step": [dict(zip(("mean", "low", "high"), interval([s[i] for s in series]))) for i in range(steps)],
                "rises": [rise(s) for s in series],
                "rise": dict(zip(("mean", "low", "high"), interval([rise(s) for s in series]))),
            }
        if "treated" in block and len(groups["treated"]) < 2:
            block["verdict"] = "one treated run: no interval, no verdict"
        elif "treated" in block:
            treated_rise = block["treated"]["rise"]
            control_mean = block["control"]["rise"]["mean"] if "control" in block else 0.0
            block["verdict"] = ("rose" if treated_rise["low"] > max(0.0, control_mean) else
                                "fell" if treated_rise["high"] < min(0.0, control_mean) else "no clear change")
        if "treated" in block and "control" in block:
            # step by step, treated against control: the arms share their first step (the same model and
            # seed), so from the second on each difference is what the updates changed, plus sampling noise
            t = [r["mean"] for r in block["treated"]["per_step"]]
            c = [r["mean"] for r in block["control"]["per_step"]]
            later = list(zip(t, c))[1:]
            block["steps_below_control"] = sum(a < b for a, b in later)
            block["steps_above_control"] = sum(a > b for a, b in later)
            block["mean_difference_after_first"] = statistics.fmean(a - b for a, b in later) if later else 0.0
            band = _episode_band(metric, groups, sizes)
            if band is not None:
                block["episode_band"] = band
        out["metrics"][metric] = block
    return out


def _episode_band(metric: str, groups: dict[str, list[list[dict[str, Any]]]],
                  sizes: dict[str, list[int | None]]) -> dict[str, Any] | None:
    """With one run per arm: per step, the treated-minus-control difference and its 95% interval over
    the two steps' episodes, and how many steps after the first lie wholly below or above zero (see
    the module docstring). ``None`` when a run does not say how many episodes a step played."""
    if len(groups["treated"]) != 1 or len(groups["control"]) != 1:
        return None
    n_t, n_c = sizes["treated"][0], sizes["control"][0]
    if not n_t or not n_c:
        return None
    treated, control = groups["treated"][0], groups["control"][0]
    steps = []
    for t_row, c_row in zip(treated, control):
        s_t, s_c = _spread(metric, t_row), _spread(metric, c_row)
        if s_t is None or s_c is None:
            return None
        difference = float(t_row["metrics"][metric]) - float(c_row["metrics"][metric])
        half = 1.96 * math.sqrt(s_t ** 2 / n_t + s_c ** 2 / n_c)
        steps.append({"difference": difference, "low": difference - half, "high": difference + half})
    later = steps[1:]
    return {"episodes_per_step": [n_t, n_c], "per_step": steps,
            "steps_wholly_below": sum(s["high"] < 0 for s in later), "steps_wholly_above": sum(s["low"] > 0 for s in later)}


def render_curves(result: dict[str, Any], *, title: str = "Does GRPO raise the reward?") -> str:
    lines = [f"# {title}", "",
             f"{len(result['runs']['treated'])} GRPO run(s) against {len(result['runs']['control'])} control run(s) "
             "(the same rounds with a learning rate of 0). Each cell: mean over the runs [95% t interval].", ""]
    for metric, block in result["metrics"].items():
        lines += [f"## {metric}", ""]
        names = [n for n in ("treated", "control") if n in block]
        lines += ["| step | " + " | ".join(names) + " |", "| ---: |" + " ---: |" * len(names)]
        steps = max(block[n]["steps"] for n in names)
        for i in range(steps):
            cells = []
            for n in names:
                rows = block[n]["per_step"]
                cells.append(f"{signed(rows[i]['mean'])} [{signed(rows[i]['low'])}, {signed(rows[i]['high'])}]" if i < len(rows) else "")
            lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
        lines.append("")
        for n in names:
            r = block[n]["rise"]
            each = ", ".join(f"{signed(x)}" for x in block[n]["rises"])
            lines.append(f"- rise (last third minus first third), {n}: {signed(r['mean'])} [{signed(r['low'])}, {signed(r['high'])}] "
                         f"(each run: {each})")
        if "steps_below_control" in block:
            lines.append(f"- after the first step, treated minus control: {signed(block['mean_difference_after_first'])} on "
                         f"average; below the control in {block['steps_below_control']} steps, above in "
                         f"{block['steps_above_control']}")
        if "episode_band" in block:
            band = block["episode_band"]
            lines.append(f"- with each step's own episodes ({band['episodes_per_step'][0]} a step): the difference's 95% "
                         f"interval lies wholly below zero in {band['steps_wholly_below']} steps after the first, wholly "
                         f"above in {band['steps_wholly_above']}")
        if "verdict" in block:
            lines.append(f"- verdict: **{block['verdict']}**")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
