"""``python -m envcore train --config configs/<name>.yaml``: SFT and/or GRPO training, then evaluation.

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
    t = groups.add_parser("train", help="train a model against the environment: SFT on demonstrations, then GRPO",
                          description="Train a model on the environment in up to two stages: SFT on verified "
                          "demonstrations (the config's sft section; python -m envcore demos writes them), then "
                          "TRL's GRPO with LoRA on multi-turn episodes (in process or against --config "
                          "environment.urls servers), starting from the SFT weights. Metrics of both stages go to "
                          "Trackio (tracking.dir, local); the adapter is saved in PEFT format and evaluated "
                          "against the base model and the configured baselines, stage by stage when the config "
                          "lists evaluation.stages. Shipped configs: configs/train-tiny-learn.yaml (CPU: a model "
                          "built from nothing, SFT then GRPO), configs/train-tiny.yaml (CPU: GRPO alone, a "
                          "pipeline demonstration), configs/train-tiny-factory.yaml (CPU: the same through TRL's "
                          "environment_factory and native tool calls), configs/train-scratch-gpu.yaml (GPU: a small model from "
                          "nothing), configs/train-qwen-coder-sft.yaml and configs/train-qwen-coder.yaml (GPU: a "
                          "real model, with and without SFT).")
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
    from pathlib import Path

    from envcore.cache import CacheError, ScenarioCache
    from envcore.training.pipeline import curriculum_sampler, draw_episodes

    stages = []
    if config.model.scratch is not None:
        s = config.model.scratch
        stages.append(f"model built from scratch into {config.model.name_or_path} ({s.layers} layers of {s.hidden_size}, "
                      f"a {s.vocab_size}-token tokenizer trained on the demonstrations)")
    demos_ready = True
    if config.sft is not None:
        demos = Path(config.sft.demos) / "demos.jsonl"
        if demos.is_file():
            with demos.open(encoding="utf-8") as handle:
                count = sum(1 for line in handle if line.strip())
            stages.append(f"SFT on {count} demonstrations in {config.sft.demos} -> {config.sft_dir}")
        else:
            demos_ready = False
            stages.append(f"SFT on {config.sft.demos}: not written yet (python -m envcore demos --out {config.sft.demos} ...)")
    try:
        cache = ScenarioCache.open(config.environment.cache)
    except CacheError as exc:
        raise SystemExit(f"invalid config: environment.cache: {exc}") from None
    if config.grpo.max_steps:
        try:
            keys = draw_episodes(config, curriculum_sampler(config, cache)) if demos_ready or config.episodes.scenarios != "demos" else []
        except ValueError as exc:
            raise SystemExit(f"invalid config: {exc}") from None
        tiers = {t: sum(1 for k in keys if k.tier == t) for t in (1, 2, 3)}
        drawn = (f"{len(keys)} episode groups ({', '.join(f'tier {t}: {n}' for t, n in tiers.items() if n)})" if keys
                 else "episode groups drawn once the demonstrations exist")
        stages.append(f"GRPO: {drawn}, {config.grpo.max_steps} steps of {config.grpo.generation_batch} episodes; "
                      f"adapter -> {config.adapter_dir}")
    print(f"{config.name}: config valid")
    for line in stages:
        print(f"  {line}")
    return 0
