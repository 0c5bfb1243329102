"""``python -m envcore bench grpo-paths``: a GRPO step through TRL's ``environment_factory`` against
the same step through the project's ``rollout_func``, on the tiny CPU configs, in one run.

Both runs draw the same episodes (``configs/train-tiny.yaml`` and ``configs/train-tiny-factory.yaml``
share their curriculum, seed, budgets and batch), play them in process against the same cache, and
stop after the same number of GRPO steps; tracking is off and nothing is written outside a temporary
folder. What differs is the path and therefore the model: the ``rollout_func`` run uses the plain
ChatML tiny model (JSON actions in the reply), the ``environment_factory`` run the tool-calling one
(native calls). Both are random-weight models of the same size class, so the figures compare the
paths' costs (generation, the environment's share, the update), not what the models learn.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

PATHS = {"rollout_func": "configs/train-tiny.yaml", "environment_factory": "configs/train-tiny-factory.yaml"}


def run(steps: int = 4, say: Any = print) -> dict[str, dict[str, Any]]:
    """Train both paths for ``steps`` GRPO steps; return each one's timing figures."""
    from envcore.training.config import load_config
    from envcore.training.pipeline import train, use_tracking_dir

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="a01-grpo-paths-") as folder:
        root = Path(folder)
        use_tracking_dir(root / "trackio")
        for path, config_file in PATHS.items():
            config = load_config(config_file, {
                "name": f"bench-{path.replace('_', '-')}", "grpo.max_steps": steps, "grpo.extra": {"report_to": "none"},
                "evaluation.enabled": False, "tracking.dir": str(root / "trackio"),
                "output.adapter_dir": str(root / path / "adapter"), "output.run_dir": str(root / path / "run")})
            say(f"--- {path}: {config.model.name_or_path}, {steps} steps of {config.grpo.generation_batch} episodes")
            result = train(config, say=lambda line: None)
            timing = result.timing
            results[path] = {
                "model": config.model.name_or_path, "steps": timing.get("steps", 0),
                "seconds_per_step_median": timing.get("seconds_per_step_median"),
                "seconds_per_step_mean": timing.get("seconds_per_step_mean"),
                "env_share": timing.get("env_share"),
                "reward_last": result.last_metrics.get("env/reward", result.last_metrics.get("reward")),
            }
    return results


def render(results: dict[str, dict[str, Any]]) -> str:
    base = results["rollout_func"]["seconds_per_step_median"] or float("nan")
    lines = [f"{'path':<22}{'model':<34}{'s/step (median)':>17}{'env share':>11}{'vs rollout_func':>17}"]
    for path, row in results.items():
        median = row["seconds_per_step_median"] or float("nan")
        lines.append(f"{path:<22}{row['model']:<34}{median:>17.2f}{row['env_share'] or 0:>11.1%}{median / base:>16.2f}x")
    return "\n".join(lines)
