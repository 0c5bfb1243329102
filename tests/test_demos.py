"""Demonstrations for SFT: the expert's edits are the reference fix, every demonstration is replayed
and graded now (a log's claims count for nothing), only full fixes of train scenarios are kept, the
chat is exactly what a language-model agent is shown when it plays, and the SFT labels cover the
agent's turns and nothing else."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from envcore.agents.expert import expert_plan, file_edits, read_windows
from envcore.agents.llm import LLMAgent
from envcore.agents.play import play_episode
from envcore.cache import ScenarioCache
from envcore.env.environment import A01Environment, Runtime
from envcore.env.episode_log import EpisodeLogger, EpisodeRecord, StepEntry
from envcore.env.sampler import CurriculumSampler
from envcore.patching import apply_patch
from envcore.training import demos as D
from envcore.training.sft import IGNORE, encode_chat, sft_rows
from envcore.training.turns import TurnEncoder

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cache():
    return ScenarioCache.open(None)  # the newest shipped cache: compact and realistic apps


@pytest.fixture(scope="module")
def runtime(cache, sandbox):
    return Runtime(sampler=CurriculumSampler(cache), sandbox=sandbox)


def _env_factory(runtime):
    return lambda: A01Environment(runtime)


def _train(cache, n, *, seed=0, style=None):
    ids = sorted(i for i in cache.ids(split="train")
                 if style is None or cache.row(i).get("code_style", "").startswith("routers") == (style == "realistic"))
    return random.Random(seed).sample(ids, n)


# ----- the expert -------------------------------------------------------------------------------------
def test_the_experts_edits_rebuild_the_reference_fix_with_unique_search_texts(cache):
    for sid in _train(cache, 60, seed=3) + _train(cache, 20, seed=4, style="realistic"):
        bundle = cache.load(sid)
        files = dict(bundle.files)
        plan = expert_plan(bundle)
        for action in plan:
            if action["tool"] == "edit_file":
                assert files[action["path"]].count(action["search"]) == 1, (sid, action["search"][:80])
                files[action["path"]] = files[action["path"]].replace(action["search"], action["replace"])
            elif action["tool"] == "apply_patch":
                files = apply_patch(files, action["diff"])
        assert files == apply_patch(bundle.files, bundle.reference_fix), sid
        tools = [a["tool"] for a in plan]
        # a reviewer's order: read, reproduce as the attacker, patch, run the visible tests (submit follows)
        assert tools[0] == "read_file" and "http_request" in tools and tools[-1] == "run_tests"
        assert tools.index("http_request") < min(i for i, t in enumerate(tools) if t in ("edit_file", "apply_patch"))


def test_an_edit_far_from_its_twin_grows_context_until_it_is_unique():
    old = "def a():\n    return x\n\n\ndef b():\n    return x\n"
    new = "def a():\n    return x\n\n\ndef b():\n    return y\n"
    (edit,) = file_edits("m.py", old, new)
    assert old.count(edit.search) == 1 and old.replace(edit.search, edit.replace) == new


def test_a_long_file_is_read_around_its_changes_and_a_short_one_whole():
    long = "".join(f"line {i}\n" for i in range(200))
    changed = long.replace("line 100\n", "line 100 fixed\n")
    assert read_windows(long, changed) == [(89, 113)]
    short = "".join(f"line {i}\n" for i in range(20))
    assert read_windows(short, short.replace("line 3\n", "")) == [(1, 20)]


# ----- collecting -------------------------------------------------------------------------------------
def _record(cache, scenario_id, actions, *, reward=1.0, resolution="full", agent_id="teacher"):
    """A log record as a producer would write it; what it claims about its grade is not trusted."""
    row = cache.row(scenario_id)
    now = time.time()
    return EpisodeRecord(
        episode_id=f"{scenario_id}-{agent_id}", agent_id=agent_id, source="evaluation", scenario_id=scenario_id,
        scenario_hash=row["sha256"], bug_class=row["bug_class"], tier=row["tier"], split=row["split"], seed=0,
        started_at=now, ended_at=now, outcome="submitted", max_steps=12,
        steps=[StepEntry(step=i + 1, action=a, observation={}, elapsed_ms=1.0) for i, a in enumerate(actions)],
        reward=reward, reward_breakdown={"resolution": resolution, "components": []})


@pytest.fixture(scope="module")
def collected(cache, runtime, tmp_path_factory):
    folder = tmp_path_factory.mktemp("demos")
    train = _train(cache, 2, seed=11)
    test = sorted(cache.ids(split="test"))[0]
    oracle_train = cache.load(train[0]).reference_fix
    oracle_test = cache.load(test).reference_fix
    log = folder / "teacher.jsonl"
    logger = EpisodeLogger(log)
    for record in [
        # a teacher that fixed a train scenario in one patch, written as a model's reply
        _record(cache, train[0], [{"tool": "reply", "text": "I patch it.\n" + json.dumps({"tool": "apply_patch", "diff": oracle_train})},
                                  {"tool": "reply", "text": '{"tool": "submit"}'}]),
        # the same fix on a test scenario: never learned from, whatever its grade
        _record(cache, test, [{"tool": "apply_patch", "diff": oracle_test}, {"tool": "submit"}]),
        # a forged log: it claims a full fix and changed nothing
        _record(cache, train[1], [{"tool": "submit"}]),
        # a scenario this cache does not hold
        _record(cache, train[1], [{"tool": "submit"}]).model_copy(update={"scenario_id": "ffffffffffffffff"}),
    ]:
        logger.write(record)
    candidates = D.expert_candidates(cache, [train[0], train[1], train[1]], max_steps=12) + D.log_candidates(log)
    collection = D.collect(cache, candidates, env_factory=_env_factory(runtime), parallel=2)
    manifest = D.write(collection, folder / "out", cache=cache)
    return {"collection": collection, "manifest": manifest, "folder": folder / "out", "train": train, "test": test,
            "log": str(log)}


def test_only_full_fixes_of_train_scenarios_are_kept_and_the_manifest_says_why(collected, cache):
    demos = list(D.read_demos(collected["folder"]))
    assert demos and all(d.resolution == "full" and d.split == "train" for d in demos)
    assert all(cache.split_of(d.scenario_id) == "train" for d in demos)
    assert collected["test"] not in {d.scenario_id for d in demos}
    sources = collected["manifest"]["sources"]
    assert sources["expert"] == {"offered": 3, "kept": 2, "dropped": {"unknown_scenario": 0, "not_train": 0,
                                                                       "not_full": 0, "duplicate": 1}}
    assert sources[collected["log"]] == {"offered": 4, "kept": 1, "dropped": {"unknown_scenario": 1, "not_train": 1,
                                                                               "not_full": 1, "duplicate": 0}}
    manifest = collected["manifest"]
    assert manifest["demonstrations"] == len(demos) == 3 and manifest["splits"] == ["train"]
    import hashlib

    assert manifest["sha256"] == hashlib.sha256((collected["folder"] / "demos.jsonl").read_bytes()).hexdigest()
    teacher = next(d for d in demos if d.source == collected["log"])
    assert teacher.messages[2]["content"].startswith("I patch it.")  # the reply is kept as the model wrote it
    assert len({d.demo_id for d in demos}) == len(demos)


def test_every_demonstration_ends_with_a_submit_and_every_reply_is_an_action(collected):
    from envcore.env.reply import parse_action_text

    for demo in D.read_demos(collected["folder"]):
        replies = D.assistant_turns(demo.messages)
        assert json.loads(replies[-1].split("\n")[-1]) == {"tool": "submit"}
        assert len(replies) == demo.steps and demo.messages[0]["role"] == "system"
        assert all(parse_action_text(r).action is not None for r in replies)


class _Recorder(LLMAgent):
    """A language-model agent that writes given replies and keeps what it was shown each turn."""

    def __init__(self, replies):
        super().__init__()
        self.replies, self.shown = list(replies), []

    def complete(self, messages):
        self.shown.append([dict(m) for m in messages])
        return self.replies.pop(0)


def test_a_demonstration_is_the_chat_an_agent_is_shown_when_it_plays(collected, runtime):
    env = A01Environment(runtime)
    try:
        for demo in D.read_demos(collected["folder"]):
            replies = D.assistant_turns(demo.messages)
            agent = _Recorder(replies)
            final = play_episode(env, agent, seed=demo.seed, scenario=demo.scenario_id, split="any",
                                 max_steps=demo.max_steps)
            assert final.done and final.reward == pytest.approx(demo.reward)
            indices = [i for i, m in enumerate(demo.messages) if m["role"] == "assistant"]
            assert len(agent.shown) == len(indices)
            for shown, index in zip(agent.shown, indices):
                assert shown == demo.messages[:index]  # turn for turn, character for character
    finally:
        env.close()


def test_the_sft_labels_cover_the_agents_turns_and_their_end_only(collected, tiny_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    encoder = TurnEncoder(tokenizer)
    for demo in D.read_demos(collected["folder"]):
        ids, labels = encode_chat(encoder, demo.messages)
        assert len(ids) == len(labels)
        spans, current = [], []
        for token, label in zip(ids, labels):
            if label != IGNORE:
                assert label == token
                current.append(token)
            elif current:
                spans.append(current)
                current = []
        if current:
            spans.append(current)
        replies = D.assistant_turns(demo.messages)
        assert [tokenizer.decode(s) for s in spans] == [r + tokenizer.eos_token for r in replies]
        # the whole sequence is the chat as the template renders it
        assert tokenizer.decode(ids) == encoder.render(demo.messages, generation_prompt=False)
    data = sft_rows(D.read_demos(collected["folder"]), tokenizer, max_length=10**6)
    assert len(data.rows) == 3 and data.too_long == 0 and 0 < data.learned_tokens < data.tokens
    assert sft_rows(D.read_demos(collected["folder"]), tokenizer, max_length=50).too_long == 3


def test_the_demos_command_refuses_what_it_cannot_do(tmp_path, collected):
    from envcore.cli import main

    with pytest.raises(SystemExit, match="nothing to offer"):
        main(["demos", "--out", str(tmp_path / "d")])
    with pytest.raises(SystemExit, match="already holds"):
        main(["demos", "--out", str(collected["folder"]), "--expert", "1"])
    with pytest.raises(SystemExit, match="no such file"):
        main(["demos", "--out", str(tmp_path / "d"), "--from-log", str(tmp_path / "missing.jsonl")])
    with pytest.raises(SystemExit, match="a number or 'all'"):
        main(["demos", "--out", str(tmp_path / "d"), "--expert", "many"])
