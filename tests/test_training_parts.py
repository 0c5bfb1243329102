"""The training pipeline's parts: config, episode keys, token assembly, the rollout function against
the real environment (in process and over a server), capacity checks and generation backends."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from envcore.agents.prompts import system_prompt
from envcore.agents.rollouts import local_sessions, remote_sessions
from envcore.cache import ScenarioCache
from envcore.env.environment import Runtime
from envcore.env.episode_log import EpisodeLogger, read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.training.config import ConfigError, CurriculumStage, load_config
from envcore.training.episodes import EpisodeKey, episode_dataset, episode_keys
from envcore.training.generation import Generated, VLLMServerGeneration
from envcore.training.rollout import CapacityError, EpisodeRollout, check_capacity, environment_reward
from envcore.training.turns import TemplateError, TurnEncoder

REPO = Path(__file__).resolve().parents[1]


# ----- config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["train-tiny.yaml", "train-qwen-coder.yaml"])
def test_shipped_configs_are_valid(name):
    config = load_config(REPO / "configs" / name)
    assert config.grpo.generation_batch % config.grpo.num_generations == 0
    assert config.episodes.curriculum


def test_a_misspelt_key_is_an_error_naming_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text((REPO / "configs/train-tiny.yaml").read_text().replace("max_new_tokens: 32", "max_new_token: 32", 1))
    with pytest.raises(ConfigError, match="max_new_token"):
        load_config(path)


def test_a_batch_that_does_not_hold_whole_groups_is_refused():
    with pytest.raises(ConfigError, match="multiple of num_generations"):
        load_config(REPO / "configs/train-tiny.yaml", {"grpo.per_device_train_batch_size": 3})


def test_overrides_set_nested_fields_and_are_validated():
    config = load_config(REPO / "configs/train-tiny.yaml", {"grpo.max_steps": 7, "name": "other"})
    assert config.grpo.max_steps == 7 and config.adapter_dir == Path("artifacts/adapters/other")
    with pytest.raises(ConfigError, match="name"):
        load_config(REPO / "configs/train-tiny.yaml", {"name": "../escape"})


def test_train_check_validates_and_draws_without_a_model(capsys):
    from envcore.cli import main

    assert main(["train", "--config", str(REPO / "configs/train-tiny.yaml"), "--check"]) == 0
    assert "config valid" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        main(["train", "--config", str(REPO / "configs/train-tiny.yaml"), "--set", "nonsense"])


# ----- episode keys -----------------------------------------------------------------------------------
def test_episode_keys_follow_the_curriculum_and_are_reproducible():
    sampler = CurriculumSampler(ScenarioCache.open(None))
    stages = [CurriculumStage(tiers=[1], groups=3), CurriculumStage(tiers=[3], groups=2)]
    keys = episode_keys(sampler, stages, split="train", seed=4)
    assert [k.tier for k in keys] == [1, 1, 1, 3, 3]
    assert keys == episode_keys(sampler, stages, split="train", seed=4)
    train = set(sampler.cache.ids(split="train"))
    assert all(k.scenario in train for k in keys)
    assert EpisodeKey.parse(keys[0].prompt()) == keys[0]
    assert EpisodeKey.parse([{"role": "user", "content": keys[1].prompt()}]) == keys[1]
    assert episode_dataset(keys)["prompt"][0] == keys[0].prompt()
    with pytest.raises(ValueError, match="not an episode key"):
        EpisodeKey.parse("please fix the app")


# ----- token assembly ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_an_episode_is_one_sequence_equal_to_the_rendered_chat(tokenizer):
    encoder = TurnEncoder(tokenizer)
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "the task"}]
    prompt = encoder.prompt_ids(messages)
    reply = '{"tool": "list_files"}'
    generated = encoder.encode(reply) + [tokenizer.eos_token_id]  # the model wrote its end of turn
    following = encoder.observation_ids(messages, reply, generated, "files: app.py [3 steps left]")
    whole = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": "files: app.py [3 steps left]"}]
    assert tokenizer.decode(prompt + generated + following) == encoder.render(whole, generation_prompt=True)
    truncated = encoder.encode(reply)  # cut by the token budget: the end of turn is the template's
    following = encoder.observation_ids(messages, reply, truncated, "x")
    assert tokenizer.decode(following).startswith(tokenizer.eos_token)


def test_a_template_that_rewrites_history_is_refused(tokenizer):
    rewriting = ("{% for m in messages %}{% if loop.last or m['role'] != 'assistant' %}<|im_start|>{{ m['role'] }}\n"
                 "{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    encoder = TurnEncoder(tokenizer, chat_template=rewriting)
    with pytest.raises(TemplateError):
        encoder.observation_ids([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                 {"role": "user", "content": "c"}], "d", [5], "e")


# ----- the rollout function against the real environment ------------------------------------------------
class ScriptedGeneration:
    """A generation backend that writes given replies (the environment and the token assembly are real)."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.calls = tokenizer, list(replies), []

    def generate(self, prompts, budgets):
        self.calls.append(len(prompts))
        text = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return [Generated(ids[:budget]) for budget in budgets]


def _trainer():
    return SimpleNamespace(_metrics={"train": defaultdict(list), "eval": defaultdict(list)},
                           model=SimpleNamespace(training=True))


def _rollout(tokenizer, factory, replies, **options):
    settings = {"max_steps": 4, "max_new_tokens": 64, "completion_budget": 4000, "agent_id": "llm:test@train",
                "num_generations": 2} | options
    generation = ScriptedGeneration(tokenizer, replies)
    return EpisodeRollout(session_factory=factory, tokenizer=tokenizer, generator=lambda trainer: generation,
                          **settings), generation


@pytest.fixture(scope="module")
def keys():
    sampler = CurriculumSampler(ScenarioCache.open(None))
    return episode_keys(sampler, [CurriculumStage(tiers=[1], groups=2)], split="train", seed=0)


def test_rollouts_play_whole_episodes_in_lockstep_through_the_environment(tokenizer, keys, tmp_path):
    logger = EpisodeLogger(tmp_path / "episodes.jsonl")
    factory = local_sessions(Runtime.from_environ(sessions=4), logger, "training")
    rollout, generation = _rollout(tokenizer, factory, ['{"tool": "list_files"}', 'I think {"tool": "submit"}'])
    prompts = [k.prompt() for k in keys for _ in range(2)]
    trainer = _trainer()
    out = rollout(prompts, trainer)
    rollout.close()
    assert generation.calls == [4, 4]  # one batched generation per turn for every live episode
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["env_mask"]) == 4
    for completion, mask in zip(out["completion_ids"], out["env_mask"]):
        assert len(completion) == len(mask) and mask[0] == 1 and 0 in mask and mask[-1] == 1
    assert out["logprobs"] is None  # generate() gives none; TRL computes them
    records = list(read_episodes(tmp_path / "episodes.jsonl"))
    assert len(records) == 4 and {r.outcome for r in records} == {"submitted"}
    assert all(r.reward is not None for r in records)  # all scored
    # the reward TRL gets is the environment's own, episode by episode
    assert sorted(environment_reward(None, out["env_reward"])) == pytest.approx(sorted(r.reward for r in records))
    assert {r.source for r in records} == {"training"} and {len(r.steps) for r in records} == {2}
    metrics = trainer._metrics["train"]
    assert metrics["env/episode_steps"] == [2.0] and metrics["env/format_error_rate"] == [0.0]
    assert metrics["env/truncated"] == [0.0] and "env/component/security_blocked" in metrics
    assert rollout.env_seconds > 0 and rollout.rounds == 1


def test_a_completion_budget_that_runs_out_costs_what_running_out_of_steps_costs(tokenizer, keys, tmp_path):
    logger = EpisodeLogger(tmp_path / "episodes.jsonl")
    factory = local_sessions(Runtime.from_environ(sessions=2), logger, "training")
    rollout, _ = _rollout(tokenizer, factory, ["no action here, just words " * 4], max_new_tokens=40,
                          completion_budget=120, max_steps=10)
    trainer = _trainer()
    out = rollout([keys[0].prompt()] * 2, trainer)
    rollout.close()
    assert all(len(c) <= 120 for c in out["completion_ids"])
    records = list(read_episodes(tmp_path / "episodes.jsonl"))
    assert {r.outcome for r in records} == {"budget_exhausted"}
    for record in records:
        components = {c["name"]: c for c in record.reward_breakdown["components"]}
        assert components["budget_exhausted"]["value"] == pytest.approx(-0.1)
        assert components["steps_used"]["value"] == pytest.approx(-0.02)  # the whole step budget is charged
        assert record.steps[-1].action == {"tool": "out_of_budget", "budget": "completion tokens"}
    assert trainer._metrics["train"]["env/truncated"] == [1.0]
    assert trainer._metrics["train"]["env/format_error_rate"][0] > 0


@pytest.mark.parametrize("learn_after", [True, False])
def test_replies_after_the_first_format_error_are_left_out_of_the_loss_when_asked(tokenizer, keys, tmp_path,
                                                                                  learn_after):
    factory = local_sessions(Runtime.from_environ(sessions=2), EpisodeLogger(tmp_path / "episodes.jsonl"), "training")
    replies = ['{"tool": "list_files"}', "not an action", "still not one", '{"tool": "submit"}']
    rollout, _ = _rollout(tokenizer, factory, replies, max_steps=6, learn_after_format_error=learn_after)
    out = rollout([keys[0].prompt()] * 2, _trainer())
    rollout.close()
    for completion, mask in zip(out["completion_ids"], out["env_mask"]):
        runs, start = [], 0  # (mask, text) of each run of equal mask values
        for flag, run in itertools.groupby(mask):
            end = start + len(list(run))
            runs.append((flag, tokenizer.decode(completion[start:end], skip_special_tokens=True)))
            start = end
        learned = " | ".join(text for m, text in runs if m)
        assert "list_files" in learned and "not an action" in learned  # the reply that broke the format is learned
        assert ("still not one" in learned) == learn_after and ('"submit"' in learned) == learn_after
        assert "still not one" in " ".join(text for _, text in runs)  # left in the episode either way


def test_rollouts_run_against_a_server_too(tokenizer, keys, tmp_path):
    from envcore.env.bench import free_port, start_server, stop_server

    port = free_port()
    server = start_server(None, port, sessions=2)
    try:
        url = f"http://127.0.0.1:{port}"
        assert check_capacity([url], 2) == {url: 2}
        with pytest.raises(CapacityError, match="A01_MAX_SESSIONS=3"):
            check_capacity([url], 3)
        logger = EpisodeLogger(tmp_path / "episodes.jsonl")
        rollout, _ = _rollout(tokenizer, remote_sessions([url], logger, "training"), ['{"tool": "submit"}'])
        out = rollout([keys[1].prompt()] * 2, _trainer())
        rollout.close()
    finally:
        stop_server(server, timeout_s=20)
    assert len(out["env_reward"]) == 2 and all(-1 <= r <= 1 for r in out["env_reward"])
    records = list(read_episodes(tmp_path / "episodes.jsonl"))
    assert len(records) == 2 and {r.scenario_id for r in records} == {keys[1].scenario}


def test_an_infrastructure_failure_is_not_learned_from(tokenizer):
    rollout, _ = _rollout(tokenizer, lambda index: None, ["x"])
    episodes = [SimpleNamespace(final=SimpleNamespace(reward=r)) for r in (0.5, None, -0.2, 0.4, None, None)]
    # groups of two: a failed rollout gets its group's mean (advantage zero); a group with no reward, 0
    assert rollout._rewards(episodes) == [0.5, 0.5, -0.2, 0.4, 0.0, 0.0]


def test_capacity_reports_open_sessions(tmp_path):
    from fastapi.testclient import TestClient

    from envcore.env.server import create_env_app

    client = TestClient(create_env_app(Runtime.from_environ(), max_sessions=3))
    assert client.get("/capacity").json() == {"max_sessions": 3, "active_sessions": 0, "available": 3}
    with client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "reset", "data": {"seed": 1}})
        ws.receive_json()
        assert client.get("/capacity").json()["active_sessions"] == 1
    with pytest.raises(CapacityError, match="needs 4"):
        check_capacity(["http://testserver"], 4, client=client)


def test_vllm_server_generation_cuts_at_the_end_of_turn_and_keeps_logprobs(tokenizer):
    eos = tokenizer.eos_token_id

    class Client:
        def generate(self, **kwargs):
            self.kwargs = kwargs
            return {"prompt_ids": kwargs["prompts"], "completion_ids": [[5, 6, eos, 7], [8, 9, 10, 11]],
                    "logprobs": [[[-0.1], [-0.2], [-0.3], [-0.4]], [[-1.0], [-1.1], [-1.2], [-1.3]]]}

    args = SimpleNamespace(repetition_penalty=1.0, temperature=0.9, top_p=1.0, top_k=0, min_p=None)
    client = Client()
    backend = VLLMServerGeneration(SimpleNamespace(args=args), tokenizer, client=client)
    out = backend.generate([[1, 2], [3]], [8, 3])
    assert out[0].ids == [5, 6, eos] and out[0].logprobs == [-0.1, -0.2, -0.3]
    assert out[1].ids == [8, 9, 10] and out[1].logprobs == [-1.0, -1.1, -1.2]
    assert client.kwargs["n"] == 1 and client.kwargs["max_tokens"] == 8 and client.kwargs["logprobs"] == 0


# ----- the harness's own budget, in the environment ----------------------------------------------------
def test_out_of_budget_is_on_the_wire_but_not_a_tool_and_a_reply_cannot_carry_it():
    from envcore.env.actions import TOOL_NAMES, A01Action
    from envcore.env.environment import A01Environment
    from envcore.env.tools import TOOLS

    assert "out_of_budget" not in TOOL_NAMES and "out_of_budget" not in TOOLS
    assert A01Action.model_validate({"tool": "out_of_budget"}).root.budget == "tokens"
    env = A01Environment(Runtime.from_environ())
    env.reset(seed=3)
    observation = env.step({"tool": "reply", "text": '{"tool": "out_of_budget"}'})
    assert observation.error and "not 'out_of_budget'" in observation.error and not observation.done
    observation = env.step({"tool": "out_of_budget", "budget": "tokens"})
    assert observation.done and observation.reward is not None
    assert env.episode.outcome == "budget_exhausted"
    env.close()


class AlternatingGeneration:
    """At each turn, every other live episode submits and the rest write noise (rows are the episodes
    still live), so the two rollouts of a group end differently."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompts, budgets):
        out = []
        for row, budget in enumerate(budgets):
            text = '{"tool": "submit"}' if row % 2 == 0 else "no action here"
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
            out.append(Generated(ids[:budget]))
        return out


@pytest.mark.parametrize("checkpointing", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["plain", "gradient-checkpointing"])
def test_reward_differences_within_a_group_reach_the_lora_weights(tiny_model, tokenizer, keys, tmp_path, checkpointing):
    """GRPO through the real environment: when the rollouts of a group earn different rewards, the
    loss has a gradient and the adapter moves (what the random model alone cannot show: its
    rollouts all tie), and it moves the right way: the reply that earned more (submitting, against
    noise that runs out of steps) becomes likelier relative to the one that earned less. With
    gradient checkpointing too, as the real config runs."""
    import os

    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from envcore.training.episodes import episode_dataset

    factory = local_sessions(Runtime.from_environ(sessions=4), EpisodeLogger(tmp_path / "episodes.jsonl"), "training")
    rollout = EpisodeRollout(session_factory=factory, tokenizer=tokenizer, max_steps=2, max_new_tokens=16,
                             completion_budget=400, agent_id="llm:test@train", num_generations=2,
                             generator=lambda trainer: AlternatingGeneration(tokenizer))
    tokenizer.padding_side = "left"
    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=2,
                      learning_rate=5e-2, beta=0.0, logging_steps=1, report_to="none", use_cpu=True,
                      shuffle_dataset=False, save_strategy="no", max_completion_length=400, disable_tqdm=True,
                      gradient_checkpointing=checkpointing)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    prompt = TurnEncoder(tokenizer).prompt_ids([{"role": "system", "content": system_prompt()},
                                                 {"role": "user", "content": "the task"}])

    def margin(policy) -> float:
        """log p(submit) - log p(noise) after ``prompt``: how much likelier the better reply is."""
        totals = []
        for text in ('{"tool": "submit"}', "no action here"):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            with torch.no_grad():
                logits = policy(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1].float()
            totals.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None]).sum().item())
        return totals[0] - totals[1]

    before = margin(model)
    trainer = GRPOTrainer(model=model, reward_funcs=[environment_reward], args=args, processing_class=tokenizer,
                          train_dataset=episode_dataset(keys), rollout_func=rollout,
                          peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
    trainer.train()
    rollout.close()
    logged = [e for e in trainer.state.log_history if "reward_std" in e]
    assert logged and all(e["reward_std"] > 0 for e in logged)
    assert any(e["grad_norm"] > 0 for e in logged)
    moved = [p for name, p in trainer.model.named_parameters() if "lora_B" in name]
    assert moved and any(torch.count_nonzero(p) > 0 for p in moved)  # LoRA's B starts at zero
    records = list(read_episodes(tmp_path / "episodes.jsonl"))
    submits = [r.reward for r in records if r.outcome == "submitted"]
    noise = [r.reward for r in records if r.outcome != "submitted"]
    assert submits and noise and min(submits) > max(noise)  # the premise: submitting earned more
    assert margin(trainer.model) > before + 0.1


def test_the_generation_batch_follows_trls_own_settings():
    """Sessions are opened (and servers checked) for what TRL hands the rollout function per round."""
    from trl import GRPOConfig

    for extra in ({}, {"steps_per_generation": 4}, {"generation_batch_size": 8}):
        config = load_config(REPO / "configs/train-tiny.yaml", {"grpo.extra": extra, "grpo.gradient_accumulation_steps": 2})
        args = GRPOConfig(output_dir="/tmp/unused", per_device_train_batch_size=config.grpo.per_device_train_batch_size,
                          gradient_accumulation_steps=2, num_generations=2, use_cpu=True, report_to="none", **extra)
        assert config.grpo.generation_batch == args.generation_batch_size


def test_transformers_generation_samples_from_the_distribution_the_loss_scores(tokenizer, monkeypatch):
    """GRPO scores the sampled tokens under the full softmax (temperature only). Left unset, top_k
    would fall back to generate()'s default of 50 and the rollouts would come from another policy."""
    import contextlib

    import torch
    import trl.models

    from envcore.training.generation import TransformersGeneration

    seen = {}

    class Model:
        def generate(self, *, input_ids, attention_mask, generation_config):
            seen["config"] = generation_config
            return torch.cat([input_ids, torch.full((input_ids.shape[0], 2), tokenizer.eos_token_id)], dim=1)

    monkeypatch.setattr(trl.models, "unwrap_model_for_generation", lambda *a, **k: contextlib.nullcontext(Model()))
    args = SimpleNamespace(temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
                           ds3_gather_for_generation=False, gradient_checkpointing_kwargs=None)
    trainer = SimpleNamespace(args=args, model_wrapped=None, accelerator=SimpleNamespace(device="cpu"))
    out = TransformersGeneration(trainer, tokenizer).generate([[1, 2, 3], [4]], [4, 4])
    assert [o.ids for o in out] == [[tokenizer.eos_token_id]] * 2
    assert seen["config"].top_k == 0 and seen["config"].do_sample and seen["config"].temperature == 1.0
