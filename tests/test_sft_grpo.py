"""The learning recipe at small scale, through the command a user types: a model built from nothing,
SFT on verified demonstrations, then GRPO on the same scenarios through the real environment, then the
three-stage table. Format errors must fall after SFT and GRPO's groups must differ in reward (the
signal a random model alone never gives)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envcore.training.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = ["71fb26094b3459de", "4212d59cb1c5f644"]  # open_redirect and missing_admin_check, tier 1, train


def _run(args: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-m", "envcore", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe")
    _run(["demos", "--out", str(root / "demos"), "--scenarios", ",".join(SCENARIOS), "--max-steps", "6",
          "--parallel", "1"])
    config = {
        "name": "test-recipe",
        "model": {"name_or_path": str(root / "base"), "dtype": "float32",
                  "scratch": {"vocab_size": 2048, "hidden_size": 128, "layers": 2, "heads": 4, "kv_heads": 2,
                              "context_tokens": 4096}},
        "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"},
        "sft": {"demos": str(root / "demos"), "lora": False, "max_steps": 80, "per_device_train_batch_size": 2,
                "learning_rate": 5e-3, "warmup_steps": 5, "max_length": 4096},
        "episodes": {"split": "train", "scenarios": "demos", "max_steps": 6, "max_new_tokens": 200,
                     "completion_budget": 2048, "curriculum": [{"tiers": [1], "groups": 2}]},
        # two groups of eight rollouts, sampled at 0.8: this model then fixes about half of its episodes,
        # so a group whose rollouts all tie is rare whatever the CPU's arithmetic made of the SFT weights
        # (at temperature 1 it fixes one in ten or none, and two groups of four tied on another CPU)
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 8, "max_steps": 2, "learning_rate": 1e-4,
                 "temperature": 0.8},
        "tracking": {"project": "a01-test-recipe", "dir": str(root / "trackio")},
        "output": {"adapter_dir": str(root / "adapter"), "sft_dir": str(root / "sft"), "run_dir": str(root / "run")},
        "evaluation": {"max_steps": 6, "max_new_tokens": 200, "parallel": 2, "stages": [{"split": "trained"}]},
    }
    path = root / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    done = _run(["train", "--config", str(path)])
    return {"root": root, "stdout": done.stdout, "training": json.loads((root / "run" / "training.json").read_text()),
            "stages": json.loads((root / "run" / "stages.json").read_text())}


@pytest.mark.slow  # the whole recipe (over a minute); SFT and GRPO are smoked by default in test_scratch_job
def test_sft_makes_format_errors_fall(recipe):
    stages = recipe["stages"]["slices"]["trained"]["stages"]
    # a random model writes almost no readable action (its tokenizer, trained on the demonstrations,
    # merges whole JSON keys, so now and then one parses by chance)
    assert stages["base"]["format_error_rate"] >= 0.6, stages["base"]
    assert stages["sft"]["format_error_rate"] <= 0.2, stages["sft"]
    assert stages["sft"]["overall"]["full_fix"]["mean"] > stages["base"]["overall"]["full_fix"]["mean"] == 0.0
    sft = recipe["training"]["stages"]["sft"]
    assert sft["loss_last"] < sft["loss_first"] and sft["demonstrations"] == 2


@pytest.mark.slow  # the same recipe run
def test_grpo_groups_after_sft_differ_in_reward(recipe):
    grpo = recipe["training"]["stages"]["grpo"]
    assert grpo["zero_spread_share"]["mean"] < 1.0, grpo  # some group's rollouts earned different rewards
    assert grpo["steps_logged"] == 2


@pytest.mark.slow  # the same recipe run
def test_the_run_records_its_reward_configuration_and_both_stages(recipe):
    from envcore.env.reward import reward_configuration_hash

    training = recipe["training"]
    assert training["reward_configuration_hash"] == reward_configuration_hash(training["reward_configuration"])
    assert training["reward_configuration_hash"] == reward_configuration_hash()
    assert training["trackio"]["runs"] == ["test-recipe-sft", "test-recipe"]
    from envcore.training.metrics import read_metrics

    frame = read_metrics(recipe["root"] / "trackio")
    assert {"test-recipe-sft", "test-recipe"} <= set(frame["run"])
    table = (recipe["root"] / "run" / "stages.md").read_text()
    assert all(f"| trained | {stage} |" in table for stage in ("base", "SFT", "SFT+GRPO"))
    assert all(f"| trained | {pair} |" in table for pair in ("SFT vs base", "SFT+GRPO vs SFT", "SFT+GRPO vs base"))


def test_a_config_that_cannot_run_is_refused_before_anything_loads(tmp_path):
    base = {"name": "x", "model": {"name_or_path": "m"}, "episodes": {"curriculum": [{"tiers": [1], "groups": 1}]}}
    for change, fragment in [
        ({"model": {"name_or_path": "m", "scratch": {}}}, "needs an sft section"),
        ({"grpo": {"max_steps": 0}}, "nothing to train"),
        ({"model": {"name_or_path": "m", "scratch": {"hidden_size": 100, "heads": 3}}, "sft": {"demos": "d"}},
         "multiple of heads"),
    ]:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(base | change))
        with pytest.raises(ConfigError, match=fragment):
            load_config(path)


def test_grpo_episodes_never_draw_a_scenario_outside_the_split(tmp_path, shipped):
    from envcore.env.sampler import CurriculumSampler
    from envcore.training.config import CurriculumStage
    from envcore.training.episodes import episode_keys

    sampler = CurriculumSampler(shipped)
    test_id = sorted(shipped.ids(split="test"))[0]
    with pytest.raises(ValueError, match="not train"):
        episode_keys(sampler, [CurriculumStage(tiers=[1, 2, 3], groups=2)], split="train", scenarios=[test_id])
    train = sorted(i for i in shipped.ids(split="train") if shipped.row(i)["tier"] == 1)[:2]
    keys = episode_keys(sampler, [CurriculumStage(tiers=[1], groups=6)], split="train", scenarios=train)
    assert len(keys) == 6
    for start in range(0, 6, 2):  # every round of two groups plays both scenarios once
        assert sorted(k.scenario for k in keys[start:start + 2]) == sorted(train)


@pytest.mark.parametrize("name", ["train-tiny-learn.yaml", "train-qwen-coder-sft.yaml", "train-qwen-coder.yaml",
                                  "train-tiny.yaml"])
def test_every_shipped_config_passes_the_check(name, capsys):
    from envcore.cli import main

    assert main(["train", "--config", str(REPO / "configs" / name), "--check"]) == 0
    out = capsys.readouterr().out
    assert "config valid" in out
    config = load_config(REPO / "configs" / name)
    if config.sft is not None:
        assert "SFT on" in out


def test_the_from_scratch_gpu_config_is_valid_and_names_a_model_of_tens_of_millions(tmp_path):
    from transformers import LlamaConfig

    config = load_config(REPO / "configs" / "train-scratch-gpu.yaml")
    s = config.model.scratch
    model = LlamaConfig(vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                        num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
                        tie_word_embeddings=True)
    from envcore.training.pipeline import _parameters

    parameters = _parameters(model)
    assert 10e6 <= parameters <= 40e6  # tens of millions; ~60 MB in 16-bit floats
    assert config.sft is not None and config.sft.lora is False
