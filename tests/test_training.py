"""The training pipeline end to end: a tiny model trained with GRPO + LoRA through the real
environment by ``python -m envcore train``, then its adapter, metrics, episode log and evaluation.

Slow, the whole module: a training run in a process of its own. The default run's training smoke is
the from-scratch job's (SFT then GRPO, tests/test_scratch_job.py) and the parts of this pipeline
(tests/test_training_parts.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envcore.env.episode_log import read_episodes
from envcore.env.reward import COMPONENTS
from envcore.training.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_the_adapter_is_saved_in_peft_format_with_its_config_and_loads(training_run, tiny_model):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from envcore.agents.llm import TransformersAgent

    adapter = training_run["adapter"]
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4
    assert config["base_model_name_or_path"] == str(tiny_model)
    assert (adapter / "adapter_model.safetensors").stat().st_size > 0
    assert "name: test-grpo" in (adapter / "train_config.yaml").read_text()
    assert "GRPO" in (adapter / "README.md").read_text()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), adapter)
    assert any("lora_A" in name for name, _ in model.named_parameters())
    agent = TransformersAgent(adapter=str(adapter), max_new_tokens=8)  # the base model comes from the adapter
    assert agent.name == f"llm:{tiny_model.name}+test-grpo"


def test_trackio_holds_a_row_per_step_with_every_environment_metric(training_run):
    frame = read_metrics(training_run["root"] / "trackio")
    assert set(frame["project"]) == {"a01-test"} and set(frame["run"]) == {"test-grpo"}
    names = set(frame["metric"])
    expected = {"reward", "env/reward", "env/full_fix", "env/partial", "env/format_error_rate", "env/episode_steps",
                "env/truncated", "env/infrastructure_errors", "time/env_s", "time/generation_s"}
    assert expected <= names, expected - names
    assert {f"env/component/{name}" for name in COMPONENTS} <= names  # the breakdown's own names
    rewards = frame[frame["metric"] == "env/reward"]
    assert sorted(rewards["step"]) == [1, 2]
    assert rewards["value"].between(-1, 1).all()
    share = frame[frame["metric"] == "env/format_error_rate"]["value"]
    assert share.between(0, 1).all()


def test_the_reader_agrees_with_trackios_own_api(training_run):
    """The dashboard reads the SQLite file directly; Trackio's API must see the same values."""
    code = ("import json; from trackio.sqlite_storage import SQLiteStorage as S; "
            "print(json.dumps(S.get_logs('a01-test', 'test-grpo')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"TRACKIO_DIR": str(training_run["root"] / "trackio"), "PATH": "/usr/bin:/bin",
                               "GRADIO_ANALYTICS_ENABLED": "False"})
    assert done.returncode == 0, done.stderr[-2000:]
    logs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = read_metrics(training_run["root"] / "trackio")
    for entry in logs:
        for key, value in entry.items():
            if key.startswith("train/env/"):
                row = ours[(ours["step"] == entry["step"]) & (ours["metric"] == key[len("train/"):])]
                assert row["value"].iloc[-1] == pytest.approx(value)


def test_the_command_prints_seconds_per_step_and_the_environment_share(training_run):
    out = training_run["stdout"]
    assert "seconds per GRPO step:" in out and "environment time:" in out
    summary = json.loads((training_run["run_dir"] / "training.json").read_text())
    timing = summary["timing"]
    assert timing["steps"] == 2 and timing["seconds_per_step_median"] > 0
    assert 0 < timing["env_share"] < 1 and 0 < timing["generation_share"] < 1
    assert summary["trackio"]["project"] == "a01-test"


def test_training_episodes_are_logged_in_the_one_format_in_groups(training_run):
    records = list(read_episodes(training_run["run_dir"] / "episodes.jsonl"))
    assert len(records) == 2 * 4  # two steps of a generation batch of four
    assert {r.source for r in records} == {"training"}
    assert all(r.split == "train" and r.reward is not None for r in records)
    assert all(r.outcome in ("submitted", "budget_exhausted") for r in records)
    by_scenario: dict[str, int] = {}
    for record in records:
        by_scenario[record.scenario_id] = by_scenario.get(record.scenario_id, 0) + 1
    assert sorted(by_scenario.values()) == [2, 2, 2, 2]  # each scenario played num_generations times
    tiers = [r.tier for r in sorted(records, key=lambda r: r.started_at)]
    assert tiers[:4] == [1] * 4 and tiers[4:] == [2] * 4  # curriculum order: tier 1, then tier 2


def test_the_adapter_is_evaluated_against_the_base_model_and_the_baselines(training_run):
    run_dir = training_run["run_dir"]
    trained = json.loads((run_dir / "eval" / "trained" / "summary.json").read_text())
    base = json.loads((run_dir / "eval" / "base" / "summary.json").read_text())
    assert trained["run"]["adapter"] == str(training_run["adapter"]) and trained["episodes"] == 2
    assert base["run"]["adapter"] is None and base["episodes"] == 2
    report = (run_dir / "comparison.md").read_text()
    assert "against base model" in report and "against heuristic" in report
    comparisons = json.loads((run_dir / "comparison.json").read_text())
    assert comparisons["base model"]["scenarios"] == 2 and comparisons["heuristic"]["scenarios"] == 2


def test_the_space_sees_the_adapter_evaluation_as_trained_and_the_base_model_as_a_baseline(training_run):
    from ui.artifact_sets import discover
    from ui.dashboard_tab import default_pair

    sets = {s.name: s for s in discover(training_run["root"])}
    assert sets["training/test-grpo/eval/trained"].kind == "trained"
    assert sets["training/test-grpo/eval/base"].kind == "baseline"
    assert sets["training/test-grpo"].kind == "trained"  # the training rollouts
    base, other = default_pair(list(sets.values()))
    assert other == "training/test-grpo/eval/trained"  # the evaluation, not the training rollouts


def _remote_config(tmp_path, tiny_model, url, batch):
    import yaml

    config = {
        "name": "remote-grpo", "model": {"name_or_path": str(tiny_model), "dtype": "float32"},
        "lora": {"r": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj"]},
        "episodes": {"max_steps": 2, "max_new_tokens": 8, "completion_budget": 64,
                     "curriculum": [{"tiers": [1], "groups": 2}]},
        "environment": {"urls": [url]},
        "grpo": {"num_generations": 2, "per_device_train_batch_size": batch, "max_steps": 1, "logging_steps": 1},
        "tracking": {"project": "a01-remote", "dir": str(tmp_path / "trackio")},
        "output": {"adapter_dir": str(tmp_path / "adapters/{name}"), "run_dir": str(tmp_path / "training/{name}")},
        "evaluation": {"enabled": False},
    }
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_training_against_a_server_checks_its_capacity_first_then_trains_through_it(tmp_path, tiny_model):
    from envcore.env.bench import free_port, start_server, stop_server

    port = free_port()
    server = start_server(None, port, sessions=2)
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "envcore", "train", "--config"]
    try:
        too_big = subprocess.run([*command, str(_remote_config(tmp_path, tiny_model, url, 4))], capture_output=True,
                                 text=True, timeout=300, env={**__import__("os").environ, "GRADIO_ANALYTICS_ENABLED": "False"})
        assert too_big.returncode == 1
        assert "needs 4 there" in too_big.stderr and "A01_MAX_SESSIONS=4" in too_big.stderr
        assert not (tmp_path / "adapters" / "remote-grpo").exists()  # stopped before any training
        fits = subprocess.run([*command, str(_remote_config(tmp_path, tiny_model, url, 2))], capture_output=True,
                              text=True, timeout=300, env={**__import__("os").environ, "GRADIO_ANALYTICS_ENABLED": "False"})
        assert fits.returncode == 0, fits.stdout[-2000:] + fits.stderr[-2000:]
    finally:
        stop_server(server, timeout_s=20)
    assert "environment: 1 server(s), 2 sessions" in fits.stdout
    assert (tmp_path / "adapters" / "remote-grpo" / "adapter_config.json").is_file()
    records = list(read_episodes(tmp_path / "training" / "remote-grpo" / "episodes.jsonl"))
    assert len(records) == 2 and {r.source for r in records} == {"training"}
    assert records[0].verification is None  # written by the client: the hidden report stays on the server
