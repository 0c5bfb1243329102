"""``python -m envcore train --config configs/<name>.yaml``: GRPO + LoRA training, then evaluation.

The config file describes the whole run (:mod:`envcore.training.config`); ``--set key=value``
overrides one field for this run (``--set grpo.max_steps=2``, values read as YAML). ``--check``
validates the config and draws the curriculum's episodes without loading a model. At the end the
command prints seconds per GRPO step and the environment's share of step time, and (unless the
config turns it off) evaluates the adapter and writes the comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def register(groups: argparse._SubParsersAction) -> None:
    t = groups.add_parser("train", help="train a LoRA adapter with GRPO against the environment",
                          description="Train a LoRA adapter with TRL's GRPO on multi-turn episodes of the environment "
                          "(in process or against --config environment.urls servers), log metrics to Trackio "
                          "(tracking.dir, local), save the adapter in PEFT format and evaluate it on held-out "
                          "scenarios against the base model and the configured baselines. Shipped configs: "
                          "configs/train-tiny.yaml (CPU, a tiny local model: a pipeline demonstration) and "
                          "configs/train-qwen-coder.yaml (a GPU run).")
    t.add_argument("--config", required=True, help="a training config (YAML)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. grpo.max_steps=2 (repeatable; values are YAML)")
    t.add_argument("--check", action="store_true",
                   help="validate the config and draw the episodes, then stop (no model is loaded)")
    t.set_defaults(func=cmd_train)


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set takes KEY=VALUE, not {pair!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise SystemExit(f"--set {pair}: the value is not YAML: {exc}") from None
    return out


def cmd_train(args: argparse.Namespace) -> int:
    from envcore.training.config import ConfigError, load_config

    try:
        config = load_config(args.config, parse_overrides(args.set))
    except ConfigError as exc:
        raise SystemExit(f"invalid config: {exc}") from None
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    if args.check:
        return _check(config)
    from envcore.training.pipeline import TrainingError, train
    from envcore.training.rollout import CapacityError
    from envcore.training.turns import TemplateError

    try:
        train(config)
    except (TrainingError, CapacityError, TemplateError, ValueError, OSError) as exc:
        print(f"training stopped: {exc}", file=sys.stderr)
        return 1
    return 0


def _check(config: Any) -> int:
    from envcore.cache import ScenarioCache
    from envcore.training.pipeline import curriculum_sampler, draw_episodes

    cache = ScenarioCache.open(config.environment.cache)
    try:
        keys = draw_episodes(config, curriculum_sampler(config, cache))
    except ValueError as exc:
        raise SystemExit(f"invalid config: {exc}") from None
    tiers = {t: sum(1 for k in keys if k.tier == t) for t in (1, 2, 3)}
    print(f"{config.name}: config valid; {len(keys)} episode groups ({', '.join(f'tier {t}: {n}' for t, n in tiers.items() if n)}), "
          f"{config.grpo.max_steps} steps of {config.grpo.generation_batch} episodes; adapter -> {config.adapter_dir}")
    return 0
