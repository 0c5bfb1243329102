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
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

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
        out["metrics"][metric] = block
    return out


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
                cells.append(f"{rows[i]['mean']:+.3f} [{rows[i]['low']:+.3f}, {rows[i]['high']:+.3f}]" if i < len(rows) else "")
            lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
        lines.append("")
        for n in names:
            r = block[n]["rise"]
            each = ", ".join(f"{x:+.3f}" for x in block[n]["rises"])
            lines.append(f"- rise (last third minus first third), {n}: {r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] "
                         f"(each run: {each})")
        if "steps_below_control" in block:
            lines.append(f"- after the first step, treated minus control: {block['mean_difference_after_first']:+.3f} on "
                         f"average; below the control in {block['steps_below_control']} steps, above in "
                         f"{block['steps_above_control']}")
        if "verdict" in block:
            lines.append(f"- verdict: **{block['verdict']}**")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
