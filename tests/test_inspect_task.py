"""The Inspect AI tasks (a01_repair_gym): Inspect's own CLI finds them through the installed entry point,
their scores are the environment's rewards, every tool call is one environment step, an infrastructure
failure is unscored rather than a 0, and the private split shows neither scenario ids nor its secret.

The models are Inspect's ``mockllm``: its default, which never calls a tool, and scripted ones that call
the environment's tools. mockllm estimates tokens with tiktoken's ``o200k_base``, which tiktoken
downloads on first use; these tests run offline, where the package falls back to an estimate from
characters (:mod:`a01_repair_gym._offline`), so the plain ``inspect`` command works as a user runs it.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml
from inspect_ai import eval as inspect_eval
from inspect_ai.log import read_eval_log
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.model._providers.mockllm import MockLLM

import a01_repair_gym
from a01_repair_gym import _task as tasks
from a01_repair_gym._dataset import cache_samples
from a01_repair_gym._session import Planned
from a01_repair_gym._tools import action_for, tool_parameters
from envcore.agents.private_eval import set_digest
from envcore.cache import ScenarioCache
from envcore.env.actions import A01Observation
from envcore.env.environment import A01Environment, Runtime
from envcore.env.sampler import CurriculumSampler
from envcore.env.tools import TOOLS, arguments
from tests.test_env_server import serve_in_thread

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "a01_repair_gym"

def inspect_cli() -> list[str]:
    """Inspect's own command, as the install put it beside this Python."""
    script = Path(sys.executable).with_name("inspect")
    return [str(script)] if script.exists() else [sys.executable, "-m", "inspect_ai"]


@pytest.fixture(scope="module")
def shipped_cache():
    return ScenarioCache.open(None)


@pytest.fixture(scope="module")
def scenario_of(shipped_cache):
    """The test-split scenario a conversation plays, found from its first user message (the reset text)."""
    by_text = {s.input: str(s.id) for s, _ in cache_samples(shipped_cache, "test", n=None, max_steps=30, seed=0)}

    def find(messages) -> str:
        return by_text[next(m.text for m in messages if m.role == "user")]

    return find


def _usage(output: ModelOutput) -> ModelOutput:
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


def scripted(turns):
    """A mockllm model whose turn ``i`` (counted from the assistant messages so far) is ``turns[i](messages)``:
    a (tool name, arguments) pair, or text. Samples run concurrently: the turn is read from each sample's
    own conversation, never from shared state."""

    def reply(messages, tools, tool_choice, config):
        turn = turns[min(sum(m.role == "assistant" for m in messages), len(turns) - 1)](messages)
        if isinstance(turn, str):
            return _usage(ModelOutput.from_content("mockllm/model", turn))
        name, args = turn
        return _usage(ModelOutput.for_tool_call("mockllm/model", name, args))

    return get_model("mockllm/model", custom_outputs=reply)


def play_directly(cache, sandbox, scenario: str, actions, *, seed: int = 0, max_steps: int = 30) -> A01Observation:
    """The environment's own answer to the same actions: an in-process episode, no Inspect."""
    env = A01Environment(Runtime(sampler=CurriculumSampler(cache), sandbox=sandbox))
    try:
        observation = env.reset(scenario=scenario, seed=seed, max_steps=max_steps)
        for action in actions:
            if observation.done:
                break
            observation = env.step(action)
        return observation
    finally:
        env.close()


def only_log(log_dir: Path):
    logs = sorted(Path(log_dir).glob("*.eval"))
    assert len(logs) == 1, logs
    return read_eval_log(str(logs[0]))


def the_score(sample):
    assert len(sample.scores) == 1
    return next(iter(sample.scores.values()))


# ----- the registry, the tools, the listing ---------------------------------------------------------


@pytest.mark.parametrize("name", list(TOOLS))
def test_each_inspect_tool_has_the_registry_tools_arguments(name):
    params = tool_parameters(name)
    registry = arguments(name)
    assert list(params.properties) == [p.name for p in registry]
    assert params.required == [p.name for p in registry if p.default is p.empty]


@pytest.mark.parametrize("function, args, parse_error, expected, description", [
    ("read_file", {"path": "app/main.py"}, None, {"tool": "read_file", "path": "app/main.py"},
     "a tool goes as written"),
    ("read_file", {}, None, {"tool": "read_file"}, "bad arguments go too: the environment refuses them"),
    ("list_files", {"tool": "submit"}, None, {"tool": "list_files"}, "an argument cannot rename the tool"),
    ("reset", {}, None, "reply", "a name outside the registry is read as a reply (and refused)"),
    ("out_of_budget", {}, None, "reply", "the harness's own action is no tool of the agent's"),
    ("reply", {"text": '{"tool": "submit"}'}, None, "reply", "nor is the reply wrapper"),
    ("submit", {}, "Invalid JSON", "reply", "unreadable arguments are an unreadable reply"),
])
def test_each_call_becomes_one_wire_action(function, args, parse_error, expected, description):
    action = action_for(function, args, parse_error)
    if expected == "reply":
        assert action["tool"] == "reply" and set(action) == {"tool", "text"}, description
        if parse_error:
            assert "{" not in action["text"], "an unreadable call must not carry a readable action"
    else:
        assert action == expected, description


def test_the_listing_names_every_registered_task_with_its_size(shipped_cache):
    listing = yaml.safe_load((PACKAGE / "eval.yaml").read_text())
    registered = {"test", "test_styles", "external", "private"}
    assert {t["name"] for t in listing["tasks"]} == registered
    for entry in listing["tasks"]:
        assert (ROOT / entry["task_path"]).is_file()
        assert hasattr(tasks, entry["name"])
        expected = 100 if entry["name"] == "private" else len(shipped_cache.ids(split=entry["name"]))
        assert entry["dataset_samples"] == expected, f"{entry['name']}: the shipped cache changed; update eval.yaml"
    assert {"security", "code-repair", "access-control", "owasp-a01"} <= set(listing["tags"])
    assert listing["title"] and listing["description"]


def test_samples_carry_no_answer_key(shipped_cache):
    (sample, plan), = cache_samples(shipped_cache, "test", n=1, max_steps=30, seed=7)
    bundle = shipped_cache.load(plan.scenario)
    assert set(sample.metadata) == {"scenario_id", "scenario_hash", "bug_class", "tier", "domain", "split"}
    shown = json.dumps(sample.model_dump(mode="json"))
    assert bundle.reference_fix.strip()[:200] not in shown
    for probe in bundle.probes:
        if not probe.visible:
            assert probe.title not in shown
    assert plan == Planned(scenario=bundle.scenario_id, seed=7)


# ----- Inspect's CLI, through the installed entry point --------------------------------------------


@pytest.mark.slow  # Inspect's CLI in a process of its own; the tasks run in process by default below
def test_inspect_cli_runs_the_test_split_and_scores_the_untouched_app_as_the_environment_does(
        tmp_path, shipped_cache, sandbox):
    if not any(ep.name == "a01_repair_gym" for ep in entry_points(group="inspect_ai")):
        pytest.skip("the a01_repair_gym entry point is not installed: pip install -r requirements.txt (it installs "
                    "this checkout with `-e .`)")
    run = subprocess.run([*inspect_cli(), "eval", "a01_repair_gym/test", "--model", "mockllm/model",
                          "--limit", "2", "--log-dir", str(tmp_path), "--display", "none"],
                         check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    log = only_log(tmp_path)
    assert log.status == "success" and log.eval.task == "a01_repair_gym/test"
    assert log.eval.metadata["cache_version"] == shipped_cache.root.name
    assert len(log.samples) == 2
    for index, sample in enumerate(log.samples):
        assert sample.messages[1].text == sample.input, "the conversation starts with the reset text: the input"
        # mockllm never calls a tool: every turn is a reply with no action, refused, until the budget runs out
        replies = [{"tool": "reply", "text": MockLLM.default_output}] * 30
        expected = play_directly(shipped_cache, sandbox, str(sample.id), replies, seed=index)
        score = the_score(sample)
        assert expected.done and score.value == expected.reward
        assert score.metadata["resolution"] == "no" and score.metadata["outcome"] == "budget_exhausted"
        assert score.metadata["invalid_actions"] == 30
        assert score.metadata["reward_breakdown"] == expected.reward_breakdown
    metrics = log.results.scores[0].metrics
    assert metrics["mean"].value == pytest.approx(sum(the_score(s).value for s in log.samples) / 2)
    assert metrics["full_fix_rate"].value == 0.0 and "stderr" in metrics


# ----- scripted models, in process ------------------------------------------------------------------


def test_a_model_that_applies_the_reference_fix_earns_the_full_fix_reward(tmp_path, shipped_cache, scenario_of,
                                                                          sandbox):
    # the reference fix is the answer key no solver sees; the test reads it from the cache to script the model
    model = scripted([lambda m: ("apply_patch", {"diff": shipped_cache.load(scenario_of(m)).reference_fix}),
                      lambda m: ("submit", {})])
    log, = inspect_eval(tasks.test(n=1), model=model, log_dir=str(tmp_path), display="none")
    assert log.status == "success"
    sample, = log.samples
    bundle = shipped_cache.load(str(sample.id))
    expected = play_directly(shipped_cache, sandbox, bundle.scenario_id,
                             [{"tool": "apply_patch", "diff": bundle.reference_fix}, {"tool": "submit"}])
    score = the_score(sample)
    assert score.value == expected.reward >= 0.95
    assert score.metadata["resolution"] == "full" and score.metadata["full_fix"] == 1.0
    assert score.metadata["outcome"] == "submitted" and score.metadata["steps"] == 2
    assert score.answer.startswith("diff --git")
    assert log.results.scores[0].metrics["full_fix_rate"].value == 1.0


def test_every_call_is_a_step_even_one_inspect_would_refuse(tmp_path, shipped_cache, sandbox):
    # a call missing a required argument, a tool that does not exist, the harness's own action, then submit
    model = scripted([lambda m: ("read_file", {}), lambda m: ("reset", {}), lambda m: ("out_of_budget", {}),
                      lambda m: ("submit", {})])
    log, = inspect_eval(tasks.test(n=1, max_steps=10), model=model, log_dir=str(tmp_path), display="none")
    sample, = log.samples
    score = the_score(sample)
    assert score.metadata["steps"] == 4 and score.metadata["invalid_actions"] == 3
    assert score.metadata["outcome"] == "submitted", "out_of_budget is no tool of the agent's: refused, not obeyed"
    refusals = [m.text for m in sample.messages if m.role == "tool"][:3]
    assert all(text.startswith("Error:") for text in refusals), refusals


def test_an_inspect_limit_ends_the_episode_as_a_harness_budget_does(tmp_path, shipped_cache):
    model = scripted([lambda m: ("list_files", {})])
    log, = inspect_eval(tasks.test(n=1), model=model, log_dir=str(tmp_path), display="none", message_limit=6)
    sample, = log.samples
    score = the_score(sample)
    assert sample.limit is not None and sample.limit.type == "message"
    assert score.metadata["outcome"] == "budget_exhausted"
    assert "messages budget ran out" in score.explanation
    charged = {c["name"]: c for c in score.metadata["reward_breakdown"]["components"]}
    assert charged["budget_exhausted"]["measured"] == 1.0 and score.value < 0


class BrokenVerifier:
    """A session whose episode ends in an infrastructure error at submit (the sandbox failed)."""

    async def reset(self, **options):
        return A01Observation(text="Fix the app.", steps_left=3)

    async def step(self, action):
        return A01Observation(text="Error: the verifier could not run", done=True, reward=None, tool="submit",
                              error="the verifier could not run (not your fault; this episode has no reward): boom",
                              reward_breakdown={"reward": None, "components": [], "resolution": None, "gates": {}})

    async def diff(self):
        return ""

    async def close(self):
        pass


def test_an_infrastructure_error_is_unscored_never_a_zero(tmp_path):
    from inspect_ai.dataset import Sample

    planned = [(Sample(id="s1", input="Fix the app."), Planned(scenario="s1", seed=0))]
    task = tasks._task("test", planned, BrokenVerifier, max_steps=3, parallel=1, facts={})
    log, = inspect_eval(task, model=scripted([lambda m: ("submit", {})]), log_dir=str(tmp_path), display="none")
    assert log.status == "success"
    score = the_score(log.samples[0])
    assert math.isnan(score.value) and score.reason == "scoring_failed"
    assert "infrastructure" in score.explanation and score.metadata["outcome"] == "infrastructure_error"
    assert log.results.scores[0].unscored_samples == 1 and log.results.scores[0].scored_samples == 0


# ----- against a running server ---------------------------------------------------------------------


def test_the_task_plays_a_running_server_over_its_websocket(tmp_path, shipped_cache, scenario_of, sandbox):
    from envcore.env.episode_log import EpisodeLogger, read_episodes
    from envcore.env.server import create_env_app

    server_log = tmp_path / "server.jsonl"
    runtime = Runtime(sampler=CurriculumSampler(shipped_cache), sandbox=sandbox, logger=EpisodeLogger(server_log))

    def patch(messages):  # the server's scenario, looked up by the first user message (the server's reset text)
        return ("apply_patch", {"diff": shipped_cache.load(scenario_of(messages)).reference_fix})

    with serve_in_thread(create_env_app(runtime, max_sessions=4)) as url:
        log, = inspect_eval(tasks.test(server=url, n=1), model=scripted([patch, lambda m: ("submit", {})]),
                            log_dir=str(tmp_path / "logs"), display="none")
    runtime.logger.close()
    assert log.status == "success" and log.eval.metadata["server"] == url
    sample, = log.samples
    score = the_score(sample)
    assert score.metadata["resolution"] == "full" and score.value >= 0.95
    assert score.answer.startswith("diff --git")
    record, = [r for r in read_episodes(server_log) if r.scenario_id == sample.id]
    assert record.reward == score.value and record.agent_id == "mockllm/model", "the server graded it and logged it"


# ----- the private split ----------------------------------------------------------------------------


def test_the_private_split_shows_no_ids_and_never_its_secret(tmp_path, monkeypatch):
    secret = "inspect-private-split-test-" + "9f3c" * 4
    monkeypatch.setenv("A01_PRIVATE_SEED", secret)
    episodes = tmp_path / "episodes.jsonl"
    log, = inspect_eval(tasks.private(count=2, max_steps=2, episode_log=str(episodes)), model="mockllm/model",
                        log_dir=str(tmp_path), display="none")
    assert log.status == "success" and len(log.samples) == 2
    hashes = log.eval.metadata["scenario_hashes"]
    assert log.eval.metadata["scenario_hashes_sha256"] == set_digest(hashes)
    assert len(hashes) == 2 and "scenario_id" not in json.dumps(log.eval.metadata)
    for sample in log.samples:
        assert str(sample.id).startswith("private-") and "scenario_id" not in sample.metadata
        assert sample.metadata["scenario_hash"] in hashes and sample.metadata["split"] == "private"
        assert the_score(sample).metadata["outcome"] == "budget_exhausted"
    # a scenario id is its hash's first 16 digits: one standing alone would be an id, not a hash
    bare_ids = re.compile("|".join(f"{h[:16]}(?![0-9a-f])" for h in hashes))
    with zipfile.ZipFile(next(tmp_path.glob("*.eval"))) as archive:
        for name in archive.namelist():
            text = archive.read(name).decode("utf-8", "replace")
            assert secret not in text, f"the secret is in the log ({name})"
            assert not bare_ids.search(text), f"a scenario id is in the log ({name})"
    written = episodes.read_text()  # the episode log is scrubbed as eval --split private scrubs its own
    assert written.count("\n") == 2 and secret not in written and not bare_ids.search(written)
    assert all(json.loads(line)["diff"] in ("", None) for line in written.splitlines())


def test_the_package_exports_what_its_docstring_names():
    for name in a01_repair_gym.__all__:
        assert getattr(a01_repair_gym, name) is not None
