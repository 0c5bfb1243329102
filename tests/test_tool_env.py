"""TRL's environment_factory door (envcore/training/tool_env.py): the class's tools are the registry's,
grading never serializes across a generation batch, an episode cannot end more cheaply by stopping
early or by breaking its grading, and a tiny GRPO run goes through TRL's own tool loop on CPU (slow)."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

from envcore.env.actions import A01Observation
from envcore.env.tools import TOOLS
from envcore.training.episodes import EpisodeKey
from envcore.training.tool_env import ENDED, A01ToolEnv, ToolEnvironments, check_tool_template, tool_dataset

GRADING_S = 0.4


class FakeSession:
    """A session whose ending steps (submit, out_of_budget) take GRADING_S, like a real grading."""

    def __init__(self, rewards: dict[str, float | None] | None = None) -> None:
        self.actions: list[dict] = []
        self.rewards = rewards or {}
        self.max_steps = 0
        self.steps = 0
        self.scenario = ""
        self.active = 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def reset(self, *, seed: int, agent_id: str, max_steps: int, scenario: str = "s0", **_: object) -> A01Observation:
        self.max_steps, self.steps, self.scenario = max_steps, 0, scenario
        return A01Observation(text="task", steps_left=max_steps, scenario_id=scenario)

    def step(self, action: dict) -> A01Observation:
        self.actions.append(action)
        self.steps += 1
        left = self.max_steps - self.steps
        if action["tool"] in ("submit", "out_of_budget") or left <= 0:
            time.sleep(GRADING_S)
            reward = self.rewards.get(self.scenario, -0.01 if action["tool"] == "submit" else -0.12)
            return A01Observation(text="graded", done=True, reward=reward, steps_left=0, scenario_id=self.scenario,
                                  reward_breakdown={"resolution": "no", "components": []})
        return A01Observation(text=f"{action['tool']} ok", steps_left=left, scenario_id=self.scenario)

    def close(self) -> None:
        pass


def fake_group(count: int, *, max_steps: int = 6, rewards: dict | None = None) -> tuple[ToolEnvironments, list]:
    sessions = [FakeSession(rewards) for _ in range(count)]
    group = ToolEnvironments(lambda index: sessions[index], max_steps=max_steps)
    return group, sessions


def key(scenario: str, seed: int = 1) -> str:
    return EpisodeKey(scenario, seed).prompt()


def test_the_classs_tools_are_exactly_the_registrys_and_trl_can_read_their_schemas() -> None:
    from transformers.utils import get_json_schema

    public = {name for name, _ in inspect.getmembers(A01ToolEnv, predicate=inspect.isfunction)
              if not name.startswith("_")}
    assert public - {"reset", "get_reward"} == set(TOOLS)
    env = A01ToolEnv(fake_group(1)[0])
    for name in TOOLS:
        schema = get_json_schema(getattr(env, name))["function"]
        assert schema["name"] == name and schema["description"]
        assert all(p.get("description") for p in schema["parameters"]["properties"].values())


def test_grading_of_a_batch_runs_side_by_side_not_one_rollout_after_another() -> None:
    group, sessions = fake_group(8)
    envs = [group() for _ in range(8)]
    for index, env in enumerate(envs):
        env.reset(episode=key("0" * 15 + str(index)))
    started = time.perf_counter()
    for env in envs[:5]:  # five submit; three stop calling tools
        assert "Submitted" in env.submit()
    assert time.perf_counter() - started < GRADING_S  # submit answers at once
    started = time.perf_counter()
    rewards = [env.get_reward() for env in envs]
    elapsed = time.perf_counter() - started
    assert elapsed < 2 * GRADING_S, f"8 gradings took {elapsed:.2f} s: they ran one after another"
    assert rewards[:5] == [-0.01] * 5 and rewards[5:] == [-0.12] * 3
    assert [s.actions[-1]["tool"] for s in sessions] == ["submit"] * 5 + ["out_of_budget"] * 3
    group.close()


def test_the_budgets_last_step_is_graded_in_the_pool_and_later_calls_do_nothing() -> None:
    group, sessions = fake_group(1, max_steps=2)
    env = group()
    env.reset(episode=key("a" * 16))
    assert "list_files ok" in env.list_files()
    started = time.perf_counter()
    assert "last step" in env.read_file(path="app/main.py")
    assert time.perf_counter() - started < GRADING_S
    assert env.submit() == ENDED and env.list_files() == ENDED
    assert env.get_reward() == -0.12
    assert [a["tool"] for a in sessions[0].actions] == ["list_files", "read_file"]
    group.close()


def test_a_broken_grading_earns_its_groups_mean_never_a_fixed_value() -> None:
    """The attack: make the grading fail (reward None) hoping for a free 0 instead of a failing
    patch's negative reward. The episode gets what its group's other rollouts earned."""
    group, sessions = fake_group(4, rewards={"b" * 16: None})
    envs = [group() for _ in range(4)]
    sessions[1].rewards = {"c" * 16: -0.5}  # the failed rollout's partner, same key
    for env, scenario in zip(envs, ["c" * 16, "c" * 16, "b" * 16, "b" * 16]):
        env.reset(episode=key(scenario))
    sessions[0].rewards = {"c" * 16: None}
    for env in envs:
        env.submit()
    rewards = [env.get_reward() for env in envs]
    assert rewards[0] == rewards[1] == -0.5  # the broken one took its group's mean
    assert rewards[2] == rewards[3] == -0.5  # a whole group broken: the round's mean, still not 0
    assert group.last_metrics["env/infrastructure_errors"] == 3.0
    group.close()


def test_arguments_a_tool_does_not_take_are_an_invalid_step_of_the_real_environment(train_key: str) -> None:
    group = ToolEnvironments(max_steps=5)
    env = group()
    first = env.reset(episode=train_key)
    assert "Security report" in first and "[5 steps left]" in first
    answer = env.http_request(path="/", bogus=1)
    assert "invalid action" in answer and "bogus" in answer and "[4 steps left]" in answer
    assert env._session.env.state.invalid_actions == 1
    group.close()


def test_stopping_early_never_pays_better_than_running_out_of_steps(train_key: str) -> None:
    group = ToolEnvironments(max_steps=3)
    stopped, exhausted, submitted = group(), group(), group()
    for env in (stopped, exhausted, submitted):
        env.reset(episode=train_key)
    for _ in range(3):
        exhausted.list_files()
    submitted.submit()
    rewards = {name: env.get_reward() for name, env in
               (("stopped", stopped), ("exhausted", exhausted), ("submitted", submitted))}
    assert rewards["stopped"] <= rewards["exhausted"] < rewards["submitted"], rewards
    group.close()


def test_a_template_without_tools_is_refused_with_what_to_do(tiny_model) -> None:
    from transformers import AutoTokenizer

    problem = check_tool_template(AutoTokenizer.from_pretrained(tiny_model))
    assert problem and "rollout_func" in problem and "tiny-tool-llm" in problem
    assert check_tool_template(AutoTokenizer.from_pretrained("artifacts/models/tiny-tool-llm")) is None


def test_the_dataset_hides_the_key_from_the_model() -> None:
    rows = tool_dataset([EpisodeKey("d" * 16, 3, 1)])
    assert rows[0]["episode"] == key("d" * 16, 3) + " tier=1"
    assert all("a01-episode" not in m["content"] for m in rows[0]["prompt"])


@pytest.fixture
def train_key() -> str:
    from envcore.cache import ScenarioCache

    cache = ScenarioCache.open()
    return key(next(s for s in cache.ids() if cache.split_of(s) == "train"))


@pytest.mark.slow  # a training run; the class's tools and gradings are tested by default
def test_tiny_grpo_through_trls_own_tool_loop(tmp_path, train_key: str) -> None:
    """GRPOTrainer(environment_factory=...) on CPU: TRL renders the tools into the prompt, runs the
    model's native calls against the environment and takes the reward from get_reward."""
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model_dir = "artifacts/models/tiny-tool-llm"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    group = ToolEnvironments(max_steps=4)
    calls: list[str] = []
    original = A01ToolEnv._tool

    def spy(self: A01ToolEnv, name: str, arguments: dict) -> str:
        calls.append(name)
        return original(self, name, arguments)

    A01ToolEnv._tool = spy  # type: ignore[method-assign]
    try:
        args = GRPOConfig(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=4, max_steps=2,
                          max_completion_length=256, max_tool_calling_iterations=3, report_to="none", use_cpu=True,
                          logging_steps=1, learning_rate=1e-4, beta=0.0, save_strategy="no", seed=0,
                          shuffle_dataset=False, disable_tqdm=True)
        keys = [EpisodeKey.parse(train_key)] * 4
        trainer = GRPOTrainer(model=model, args=args, train_dataset=tool_dataset(keys), processing_class=tokenizer,
                              environment_factory=group)
        group.attach(trainer)
        trainer.train()
    finally:
        A01ToolEnv._tool = original  # type: ignore[method-assign]
        group.close()
    logged = [row for row in trainer.state.log_history if "env/reward" in row]
    assert len(logged) == 2 and group.rounds == 2
    assert all("rewards/A01ToolEnv/mean" in row for row in logged)
    assert calls, "the taught model made no tool call that TRL could parse"
    assert set(calls) <= set(TOOLS)
