"""Submit always ends the episode with a reward, whatever the agent's files hold.

Python source may contain any character: form feed, vertical tab, ``\\x1c``-``\\x1e``, U+0085,
U+2028/U+2029, a lone ``\\r`` (all of which ``str.splitlines`` breaks lines at, and a unified diff
does not), NUL, and (from a JSON ``"\\ud800"`` escape) lone surrogates. Paths may be anything an
action can carry. Whatever an agent writes through ``edit_file`` or ``apply_patch``, the submit that
follows must return, with ``done`` true and a number for a reward, unless the sandbox itself failed
(then the reward is ``None``, and only then), and the step count never passes the budget.

The attacks run on every face of the environment: in process (:class:`A01Environment`, whose logger
must write the record too), over OpenEnv's ``/ws`` (the server's own JSON), and through the training
rollout function (a model's replies read by the environment). Sandbox faults are injected with a
sandbox whose workers cannot start, and with a verifier that raises.

Hypothesis runs derandomized (the same examples on every run, as CI wants); ``A01_FUZZ_RANDOM=1``
draws fresh ones and ``A01_FUZZ_EXAMPLES=N`` sets how many per face.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envcore.cache import ScenarioCache
from envcore.env.actions import ApplyPatch, EditFile
from envcore.env.environment import A01Environment, Runtime
from envcore.env.episode import Episode
from envcore.env.episode_log import EpisodeLogger, read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.patching import make_diff
from envcore.runner.base import RunnerInfrastructureError

FUZZ = settings(max_examples=int(os.environ.get("A01_FUZZ_EXAMPLES", "10")), deadline=None,
                derandomize=os.environ.get("A01_FUZZ_RANDOM") != "1", database=None,
                suppress_health_check=list(HealthCheck))

# ----- what an agent may write ---------------------------------------------------------------------------
LINE_BREAKERS = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\r\n"]
ODD = [*LINE_BREAKERS, "\n", "\x00", "\t", "\x7f", "\ud800", "\udfff", "\ufeff", "é", "\U0001f600", "\\", "@@",
       "--- a/", "+++ b/", "\\ No newline at end of file"]
texts = st.lists(st.sampled_from(ODD) | st.text(max_size=8), max_size=12).map("".join)
ATTACK_PATHS = ["data/seed.json/x.py", "app/main.py/x.py", "app/routers", "app/" + "n" * 300 + ".py",
                "/".join(["d"] * 20) + ".py", "app/__pycache__/x.py", "../x.py", "/abs.py", "app//x.py",
                "./app/x.py", "", "app\\x.py", "app/\ud800.py", "app/x\x00.py", "app/x\u2028.py", "data/seed.json"]
paths = st.sampled_from(ATTACK_PATHS) | st.text(st.sampled_from("ab/._\\\x00é\u2028\r"), max_size=12)


@st.composite
def patches(draw, files: dict[str, str]) -> dict[str, Any] | Any:
    """One action that changes files (or tries to), drawn against the episode's current ``files``."""
    path = draw(st.sampled_from(sorted(files)) | paths)
    kind = draw(st.sampled_from(["replace", "insert", "append a line", "new file", "delete", "raw diff", "edit",
                                 "edit anywhere"]))
    if kind in ("replace", "insert", "append a line", "new file", "delete"):
        new = dict(files)
        if kind == "delete":
            new.pop(path, None)
        elif kind == "append a line":  # e.g. a page break (a form feed alone on its line) at the end
            new[path] = files.get(path, "") + draw(st.sampled_from(ODD) | texts) + "\n"
        elif kind == "insert" and path in files:
            text = files[path]
            at = draw(st.integers(0, len(text)))
            new[path] = text[:at] + draw(texts) + text[at:]
        else:
            new[path] = draw(texts)
        action = {"tool": "apply_patch", "diff": make_diff(files, new) or "--- a/x\n+++ b/x\n"}
    elif kind == "raw diff":
        action = {"tool": "apply_patch",
                  "diff": f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+{draw(texts)}\n" + draw(texts)}
    else:
        text = files.get(path, "")
        if kind == "edit" and text:
            start = draw(st.integers(0, max(len(text) - 1, 0)))
            search = text[start:start + draw(st.integers(1, 60))]
        else:
            search = draw(texts) or "x"
        action = {"tool": "edit_file", "path": path or "x", "search": search, "replace": draw(texts)}
    how = draw(st.sampled_from(["as is", "as is", "reply", "unvalidated"]))
    if how == "reply":  # a model's reply; json.dumps writes a lone surrogate as a "\ud800" escape
        return {"tool": "reply", "text": "Here is my change:\n" + json.dumps(action)}
    if how == "unvalidated":  # an in-process caller may hand over a tool built without validation
        model = ApplyPatch if action["tool"] == "apply_patch" else EditFile
        return model.model_construct(**{k: v for k, v in action.items() if k != "tool"})
    return action


def wire(action: Any) -> dict[str, Any]:
    """The action as a client sends it (a tool built without validation, as its fields)."""
    return action if isinstance(action, dict) else action.model_dump(mode="python")


# ----- faults ------------------------------------------------------------------------------------------
class FaultySandbox:
    """The real sandbox, whose workers cannot start while ``broken`` is set (an infrastructure fault)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.broken = False

    def spawn(self, *args: Any, **kwargs: Any) -> Any:
        if self.broken:
            raise RunnerInfrastructureError("injected fault: no worker can start")
        return self.real.spawn(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture(scope="module")
def faulty(sandbox) -> FaultySandbox:
    return FaultySandbox(sandbox)


@pytest.fixture(scope="module")
def sampler() -> CurriculumSampler:
    return CurriculumSampler(ScenarioCache.open(None))  # the newest shipped cache


@pytest.fixture(scope="module")
def bundle(sampler):
    return sampler.cache.load(sampler.cache.ids()[0])


def entry_file(bundle) -> str:
    """The file of the module the entrypoint names (``app.main:app`` -> ``app/main.py``)."""
    module = bundle.entrypoint.partition(":")[0].replace(".", "/")
    return f"{module}.py" if f"{module}.py" in bundle.files else f"{module}/__init__.py"


def assert_ended(final: Any, *, broken: bool, budget: int, steps: int) -> None:
    """The last observation of an episode: done, a reward exactly when the sandbox worked, within budget."""
    assert final.done is True
    if broken:
        assert final.reward is None and final.error and "not your fault" in final.error
    else:
        assert isinstance(final.reward, float) and math.isfinite(final.reward) and -1 <= final.reward <= 1, final.text
        assert final.reward_breakdown is not None
    assert steps <= budget


def assert_logged(log, episode_id: str, *, broken: bool) -> None:
    problems: list = []
    records = [r for r in read_episodes(log, problems) if r.episode_id == episode_id]
    assert problems == [] and len(records) == 1
    assert records[0].outcome == ("infrastructure_error" if broken else records[0].outcome)
    assert (records[0].reward is None) == broken


# ----- in process --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def in_process(sampler, faulty, tmp_path_factory):
    log = tmp_path_factory.mktemp("in-process") / "episodes.jsonl"
    logger = EpisodeLogger(log)
    env = A01Environment(Runtime(sampler=sampler, sandbox=faulty, logger=logger))
    yield env, log
    env.close()
    logger.close()


@FUZZ
@given(data=st.data(), broken=st.booleans(), budget=st.integers(2, 6))
def test_any_files_then_submit_end_the_episode_in_process(in_process, faulty, bundle, data, broken, budget):
    env, log = in_process
    faulty.broken = broken
    try:
        env.reset(scenario=bundle.scenario_id, max_steps=budget)
        final = None
        for _ in range(data.draw(st.integers(1, budget - 1))):
            final = env.step(data.draw(patches(env.episode.files)))
            assert final.done is False and env.state.step_count < budget
        final = env.step({"tool": "submit"})
    finally:
        faulty.broken = False
    assert_ended(final, broken=broken, budget=budget, steps=env.state.step_count)
    assert_logged(log, env.state.episode_id, broken=broken)
    json.dumps(final.model_dump(mode="json"), ensure_ascii=False).encode()  # every text is encodable


@FUZZ
@given(data=st.data(), budget=st.integers(1, 3))
def test_running_out_of_steps_on_any_patch_still_ends_with_a_reward(in_process, bundle, data, budget):
    env, log = in_process
    env.reset(scenario=bundle.scenario_id, max_steps=budget)
    for step in range(budget):
        observation = env.step(data.draw(patches(env.episode.files)))
        assert observation.done is (step == budget - 1)
    assert_ended(observation, broken=False, budget=budget, steps=env.state.step_count)
    assert_logged(log, env.state.episode_id, broken=False)


# ----- named attacks (each failed once) -----------------------------------------------------------------
@pytest.fixture
def episode(bundle, sandbox):
    ep = Episode(bundle, sandbox, max_steps=10)
    yield ep
    ep.close_live()


@pytest.mark.parametrize("char", LINE_BREAKERS, ids=[repr(c) for c in LINE_BREAKERS])
def test_form_feed_in_a_patched_file_does_not_break_submit(episode, char):
    # A page break (a line holding only a form feed, as in the standard library) at the end of a module:
    # the diff made at submit was split at the form feed as well as at the newline, and did not parse back.
    main = entry_file(episode.bundle)
    tail = episode.files[main][-40:]
    edited = episode.step({"tool": "edit_file", "path": main, "search": tail, "replace": tail + char + "\n"})
    assert edited.error is None and episode.files[main].endswith("\n" + char + "\n")
    final = episode.step({"tool": "submit"})
    assert_ended(final, broken=False, budget=10, steps=episode.steps)
    assert final.result["outcome"] in ("graded", "load_error")


def test_a_new_file_made_of_line_separators_does_not_break_submit(episode):
    text = "".join(f"x{i} = {i}{char}\n" for i, char in enumerate(LINE_BREAKERS)) + "\u2028\u2029\x85"
    assert episode.step({"tool": "apply_patch", "diff": make_diff({}, {"app/odd.py": text})}).error is None
    assert episode.files["app/odd.py"] == text
    assert_ended(episode.step({"tool": "submit"}), broken=False, budget=10, steps=episode.steps)


def test_a_lone_surrogate_in_a_refused_action_does_not_break_the_log_at_submit(bundle, sampler, sandbox, tmp_path):
    # The refused action is logged as sent; the record held a lone surrogate, which UTF-8 cannot
    # encode, and writing it raised out of the submit step.
    logger = EpisodeLogger(tmp_path / "episodes.jsonl")
    env = A01Environment(Runtime(sampler=sampler, sandbox=sandbox, logger=logger))
    try:
        env.reset(scenario=bundle.scenario_id)
        refused = env.step({"tool": "edit_file", "path": "app/\ud800.py", "search": "\udfff", "replace": "x"})
        assert refused.error
        final = env.step({"tool": "submit"})
    finally:
        env.close()
        logger.close()
    assert_ended(final, broken=False, budget=30, steps=2)
    (record,) = read_episodes(tmp_path / "episodes.jsonl")
    assert record.steps[0].action["path"] == "app/\ufffd.py"


def test_a_lone_surrogate_escape_in_a_reply_is_refused_and_submit_still_ends(episode):
    reply = '{"tool": "edit_file", "path": "app/main.py", "search": "\\"\\"\\"", "replace": "\\ud800"}'
    refused = episode.step({"tool": "reply", "text": reply})
    assert refused.error and episode.files == episode.original
    json.dumps(refused.model_dump(mode="json"), ensure_ascii=False).encode()
    assert_ended(episode.step({"tool": "submit"}), broken=False, budget=10, steps=episode.steps)


def test_a_verifier_that_raises_an_infrastructure_error_ends_the_episode_without_a_reward(bundle, sandbox):
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RunnerInfrastructureError("the grader's sandbox is gone")

    episode = Episode(bundle, sandbox, max_steps=5, verifier=failing)
    tests = episode.step({"tool": "run_tests"})
    assert tests.error and "not your fault" in tests.error and not tests.done
    final = episode.step({"tool": "submit"})
    assert_ended(final, broken=True, budget=5, steps=episode.steps)
    assert episode.outcome == "submitted" and episode.report.outcome == "infrastructure_error"


def test_a_sandbox_whose_workers_cannot_start_ends_the_episode_without_a_reward(bundle, faulty):
    faulty.broken = True
    try:
        episode = Episode(bundle, faulty, max_steps=5)
        final = episode.step({"tool": "submit"})
    finally:
        faulty.broken = False
    assert_ended(final, broken=True, budget=5, steps=1)


# ----- over /ws ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ws_client(sampler, faulty, tmp_path_factory):
    from fastapi.testclient import TestClient

    from envcore.env.server import create_env_app

    log = tmp_path_factory.mktemp("ws") / "episodes.jsonl"
    logger = EpisodeLogger(log)
    client = TestClient(create_env_app(Runtime(sampler=sampler, sandbox=faulty, logger=logger), max_sessions=2))
    with client.websocket_connect("/ws") as ws:
        yield ws, log
    logger.close()


def _ws_call(ws, frame: dict[str, Any]) -> dict[str, Any]:
    ws.send_text(json.dumps(frame))  # ensure_ascii: a lone surrogate travels as a "\ud800" escape
    reply = ws.receive_json()
    assert reply["type"] in ("observation", "state"), reply
    return reply["data"]


@FUZZ
@given(data=st.data(), broken=st.booleans(), budget=st.integers(2, 5))
def test_any_files_then_submit_end_the_episode_over_ws(ws_client, faulty, bundle, data, broken, budget):
    ws, log = ws_client
    faulty.broken = broken
    try:
        first = _ws_call(ws, {"type": "reset", "data": {"scenario": bundle.scenario_id, "max_steps": budget}})
        files = dict(bundle.files)
        for _ in range(data.draw(st.integers(1, budget - 1))):
            frame = _ws_call(ws, {"type": "step", "data": wire(data.draw(patches(files)))})
            assert frame["done"] is False
            state = _ws_call(ws, {"type": "state"})
            assert state["step_count"] < budget
        final = _ws_call(ws, {"type": "step", "data": {"tool": "submit"}})
        state = _ws_call(ws, {"type": "state"})
    finally:
        faulty.broken = False
    observation = SimpleNamespace(**{**final["observation"], "done": final["done"], "reward": final["reward"]})
    assert_ended(observation, broken=broken, budget=budget, steps=state["step_count"])
    assert first["observation"]["scenario_id"] == bundle.scenario_id
    assert_logged(log, state["episode_id"], broken=broken)


# ----- through the training rollout function --------------------------------------------------------------
class ScriptedReplies:
    """A generation backend that writes given replies, one turn after another (the environment, the
    reply parser and the token assembly are real)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.replies: list[str] = []

    def generate(self, prompts: list[list[int]], budgets: list[int]) -> list[Any]:
        from envcore.training.generation import Generated

        text = self.replies.pop(0) if self.replies else '{"tool": "submit"}'
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return [Generated(ids[:budget]) for budget in budgets]


@pytest.fixture(scope="module")
def rollout(tiny_model, sampler, faulty, tmp_path_factory):
    from transformers import AutoTokenizer

    from envcore.agents.rollouts import local_sessions
    from envcore.training.rollout import EpisodeRollout

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    log = tmp_path_factory.mktemp("rollout") / "episodes.jsonl"
    logger = EpisodeLogger(log)
    generation = ScriptedReplies(tokenizer)
    function = EpisodeRollout(session_factory=local_sessions(Runtime(sampler=sampler, sandbox=faulty), logger, "training"),
                              tokenizer=tokenizer, generator=lambda trainer: generation, max_steps=4,
                              max_new_tokens=100_000, completion_budget=1_000_000, agent_id="test", num_generations=1)
    yield function, generation, log
    function.close()
    logger.close()


@pytest.mark.slow  # the same property through a third door; over /ws and in process by default
@FUZZ
@given(data=st.data(), broken=st.booleans())
def test_any_files_then_submit_end_the_episode_through_the_rollout_function(rollout, faulty, bundle, data, broken):
    from envcore.training.episodes import EpisodeKey

    function, generation, log = rollout
    files = dict(bundle.files)
    actions = [wire(data.draw(patches(files))) for _ in range(data.draw(st.integers(1, 4)))]
    # what a model writes: its reply as text (an action of its own, or a reply it wraps once more)
    generation.replies = [a["text"] if a["tool"] == "reply" else json.dumps(a) for a in actions]
    before = len(list(read_episodes(log)))
    trainer = SimpleNamespace(_metrics={"train": defaultdict(list), "eval": defaultdict(list)},
                              model=SimpleNamespace(training=True))
    faulty.broken = broken
    try:
        out = function([EpisodeKey(bundle.scenario_id, 0).prompt()], trainer)
    finally:
        faulty.broken = False
    records = list(read_episodes(log))[before:]
    assert len(records) == 1 and len(records[0].steps) <= 4
    final = SimpleNamespace(**records[0].steps[-1].observation)
    assert_ended(final, broken=broken, budget=4, steps=len(records[0].steps))
    assert len(out["env_reward"]) == 1 and math.isfinite(out["env_reward"][0])
    assert trainer._metrics["train"]["env/infrastructure_errors"] == [float(broken)]
