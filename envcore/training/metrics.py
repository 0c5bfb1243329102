"""Training metrics: how long GRPO steps take, and the Trackio database read back as a DataFrame.

:class:`StepTimer` is a ``TrainerCallback`` that times every optimizer step and takes, from the
rollout function, the time spent waiting for the environment during it, so the training command
can print seconds per GRPO step and the environment's share of it (the environment must never be
the bottleneck).

:func:`read_metrics` loads the metric rows of every run of every project in a Trackio folder (one
SQLite file per project, ``<dir>/<project>.db``) into a long DataFrame: ``project, run, step,
metric, value``. It reads the file directly, read-only (so the Space can show the curves without
importing Trackio or setting ``TRACKIO_DIR``), skips rows with no metrics and non-numeric values,
and drops the ``train/`` prefix the Trainer adds (``train/env/reward`` is ``env/reward``).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

import pandas as pd

CURVES = ("reward", "env/reward", "env/full_fix", "env/partial", "env/format_error_rate", "env/episode_steps")
"""The metrics the dashboard's training panel offers first (every ``env/component/*`` follows)."""


class StepTimer:
    """Times optimizer steps; ``env_seconds`` is read from the rollout function (``EpisodeRollout``)."""

    def __init__(self, rollout: Any) -> None:
        self.rollout = rollout
        self.steps: list[dict[str, float]] = []
        self._started = 0.0
        self._env_at_start = 0.0
        self._gen_at_start = 0.0

    # TrainerCallback protocol (duck-typed: transformers calls the methods it finds)
    def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self._started = time.perf_counter()
        self._env_at_start = self.rollout.env_seconds
        self._gen_at_start = self.rollout.generation_seconds

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.steps.append({
            "step": float(state.global_step),
            "seconds": time.perf_counter() - self._started,
            "env_seconds": self.rollout.env_seconds - self._env_at_start,
            "generation_seconds": self.rollout.generation_seconds - self._gen_at_start,
        })

    def summary(self) -> dict[str, Any]:
        """Seconds per step (median and mean) and the environment's share of step time, overall."""
        if not self.steps:
            return {"steps": 0}
        seconds = [s["seconds"] for s in self.steps]
        total, env, gen = sum(seconds), sum(s["env_seconds"] for s in self.steps), sum(s["generation_seconds"] for s in self.steps)
        return {
            "steps": len(self.steps),
            "seconds_per_step_median": statistics.median(seconds),
            "seconds_per_step_mean": statistics.fmean(seconds),
            "env_seconds_total": env,
            "generation_seconds_total": gen,
            "env_share": env / total if total else 0.0,
            "generation_share": gen / total if total else 0.0,
            "per_step": self.steps,
        }

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):  # every other callback event: nothing to do
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_metrics(root: str | Path) -> pd.DataFrame:
    """Every metric row under ``root`` (a Trackio folder or one ``.db`` file); see the module docstring."""
    root = Path(root)
    files = [root] if root.is_file() else sorted(root.glob("*.db")) if root.is_dir() else []
    rows: list[tuple[str, str, int, str, float]] = []
    for db in files:
        try:
            connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        except sqlite3.Error:
            continue
        try:
            records = connection.execute("SELECT run_name, step, metrics FROM metrics ORDER BY id").fetchall()
        except sqlite3.Error:  # not a Trackio database, or one being created
            records = []
        finally:
            connection.close()
        for run, step, payload in records:
            try:
                values = json.loads(payload)
            except (TypeError, ValueError):
                continue
            for name, value in values.items():
                number = _numeric(value)
                if number is None or name in ("step", "timestamp"):
                    continue
                metric = name[len("train/"):] if name.startswith("train/") else name
                rows.append((db.stem, str(run), int(step), metric, number))
    frame = pd.DataFrame(rows, columns=["project", "run", "step", "metric", "value"])
    return frame.drop_duplicates(["project", "run", "step", "metric"], keep="last").reset_index(drop=True)


def metric_names(frame: pd.DataFrame) -> list[str]:
    """The metrics in ``frame``: :data:`CURVES` first (those present), then the rest sorted."""
    present = set(frame["metric"]) if len(frame) else set()
    first = [m for m in CURVES if m in present]
    components = sorted(m for m in present if m.startswith("env/component/"))
    rest = sorted(present - set(first) - set(components))
    return first + components + rest
