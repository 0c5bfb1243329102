"""The session facade the Space plays through: separate episodes per visitor, a TTL that frees the
sandbox of visitors who left, a bounded number of sessions, hidden probes only after submit, human
episodes in the shared log format, and agents run live one step at a time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envcore.env.environment import ResetError, Runtime
from envcore.env.episode_log import EpisodeLogger, read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.server.sessions import SessionError, SessionHub, SessionLimit, UnknownSession, human_agent_id

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def hub(shipped, sandbox, tmp_path):
    server = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    human = Runtime(sampler=server.sampler, logger=EpisodeLogger(tmp_path / "human.jsonl"), source="human",
                    max_steps=40, parent=server)
    clock = Clock()
    hub = SessionHub(human, ttl_s=60, max_sessions=3, clock=clock, sweep_every_s=0)
    hub.clock = clock  # type: ignore[attr-defined]
    hub.log_path = tmp_path / "human.jsonl"  # type: ignore[attr-defined]
    yield hub
    hub.shutdown()


def test_two_visitors_play_separate_episodes(hub):
    a, b = hub.open(), hub.open()
    first_a = hub.reset(a, seed=1, split="test")
    first_b = hub.reset(b, seed=2, split="test")
    assert a != b and first_a.scenario_id != first_b.scenario_id
    path = first_a.files[0]
    hub.step(a, {"tool": "read_file", "path": path})
    hub.step(a, {"tool": "view_diff"})
    assert hub.state(a).step_count == 2 and hub.state(b).step_count == 0
    assert hub.state(b).scenario_id == first_b.scenario_id


def test_the_play_runtime_shares_the_server_sandbox(hub, sandbox):
    assert hub.runtime.get_sandbox() is sandbox
    assert hub.live_runtime.get_sandbox() is sandbox


def test_idle_sessions_are_closed_after_the_ttl_and_logged_as_abandoned(hub):
    idle, active = hub.open(), hub.open()
    hub.reset(idle, seed=3, split="test")
    hub.reset(active, seed=4, split="test")
    hub.clock.now += 45
    hub.step(active, {"tool": "list_files"})
    hub.clock.now += 30  # idle: 75 s > 60 s; active: 30 s
    assert hub.sweep() == 1
    assert not hub.is_open(idle) and hub.is_open(active)
    with pytest.raises(UnknownSession):
        hub.step(idle, {"tool": "list_files"})
    records = list(read_episodes(hub.log_path))
    assert [r.outcome for r in records] == ["abandoned"] and records[0].source == "human"


def test_sessions_are_bounded_and_a_closed_one_frees_its_slot(hub):
    ids = [hub.open() for _ in range(3)]
    with pytest.raises(SessionLimit, match="all 3 play sessions are in use"):
        hub.open()
    assert hub.close(ids[0]) and not hub.close(ids[0])
    assert hub.open()


def test_expired_sessions_make_room_for_new_visitors(hub):
    for _ in range(3):
        hub.open()
    hub.clock.now += 61
    assert hub.open() and len(hub) == 1


def test_hidden_probes_are_revealed_only_after_submit(hub, shipped):
    sid = hub.open()
    first = hub.reset(sid, seed=5, split="test")
    assert hub.verdict(sid) is None
    tests = hub.step(sid, {"tool": "run_tests"})
    assert all(p["visible"] for p in tests.result["probes"])
    assert hub.verdict(sid) is None
    final = hub.step(sid, {"tool": "submit"})
    verdict = hub.verdict(sid)
    assert final.done and verdict is not None
    probes = verdict["verification"]["probes"]
    bundle = shipped.load(first.scenario_id)
    assert {p["probe_id"] for p in probes} == {p.id for p in bundle.probes}
    assert any(not p["visible"] for p in probes)
    assert verdict["reward_breakdown"]["reward"] == final.reward
    # a test-split scenario: the hidden suite is shown in words only (its title and why it failed)
    titles = {p.id: p.title for p in bundle.probes}
    for probe in (p for p in probes if not p["visible"]):
        assert probe["expected"] == [titles[probe["probe_id"]]] and probe["got"] == []
    hidden_paths = {s.path for p in bundle.probes if not p.visible for s in p.steps} - \
        {s.path for p in bundle.visible_probes for s in p.steps}
    shown = str(verdict)
    assert not any(path in shown for path in hidden_paths) and not any(u.token in shown for u in bundle.users)


def test_a_training_scenarios_hidden_suite_is_revealed_after_submit(hub, shipped):
    sid = hub.open()
    first = hub.reset(sid, seed=5, split="train")
    hub.step(sid, {"tool": "submit"})
    probes = hub.verdict(sid)["verification"]["probes"]
    hidden = {p.id: p for p in shipped.load(first.scenario_id).probes if not p.visible}
    for probe in (p for p in probes if not p["visible"]):
        steps = hidden[probe["probe_id"]].steps
        assert len(probe["expected"]) == len(steps) and probe["expected"][0].startswith(f"{steps[0].method} ")


def test_a_human_episode_is_logged_in_the_shared_format(hub):
    sid = hub.open()
    hub.reset(sid, seed=6, split="test", agent_id=human_agent_id("Ada", sid))
    hub.step(sid, {"tool": "list_files"})
    hub.step(sid, {"tool": "submit"})
    record = hub.record(sid)
    [logged] = list(read_episodes(hub.log_path))
    assert logged.agent_id == "human:Ada" and logged.source == "human" and logged.outcome == "submitted"
    assert logged.reward == record.reward and [s.action["tool"] for s in logged.steps] == ["list_files", "submit"]


@pytest.mark.parametrize("nickname, expected", [
    ("Ada", "human:Ada"),
    ("  ", "human:anon-abcdefgh"),
    (None, "human:anon-abcdefgh"),
    ("ada\n| forged | row |", "human:ada-forged-row"),
    ("<script>alert(1)</script>", "human:script-alert-1-script"),
    ("x" * 100, "human:" + "x" * 32),
])
def test_nicknames_cannot_inject_into_agent_ids(nickname, expected):
    assert human_agent_id(nickname, "abcdefghijkl") == expected


def test_scenarios_are_chosen_by_hash_prefix_full_hash_and_domain(hub, shipped):
    sid = hub.open()
    row = shipped.rows[0]
    assert hub.reset(sid, scenario=row["scenario_id"][:8]).scenario_id == row["scenario_id"]
    assert hub.reset(sid, scenario=row["sha256"].upper()).scenario_id == row["scenario_id"]
    with pytest.raises(ResetError, match="content hash"):
        hub.reset(sid, scenario=row["scenario_id"] + "0" * 48)
    with pytest.raises(ResetError, match="hexadecimal"):
        hub.reset(sid, scenario="../../etc/passwd")
    tested = next(r for r in shipped.rows if r["split"] == "test")  # a combination the cache holds
    domain, tier = tested["domain"], int(tested["tier"])
    for seed in range(3):
        chosen = hub.reset(sid, seed=seed, domain=domain, tier=tier, split="test").scenario_id
        chosen_row = shipped.row(chosen)
        assert (chosen_row["domain"], chosen_row["tier"], chosen_row["split"]) == (domain, tier, "test")
    with pytest.raises(ResetError, match="no validated scenario matches .*'domain': 'no-such-domain'"):
        hub.reset(sid, domain="no-such-domain")


def test_unknown_and_forged_session_ids_are_refused(hub):
    for forged in (None, "", "not-a-session", "../x"):
        with pytest.raises(UnknownSession):
            hub.step(forged, {"tool": "list_files"})


def test_an_agent_plays_live_one_step_at_a_time(hub, shipped):
    sid = hub.open(kind="live")
    scenario = shipped.ids(split="test")[0]
    hub.start_agent(sid, "heuristic", scenario=scenario)
    action, observation = hub.agent_step(sid)
    assert action["tool"] and hub.state(sid).step_count == 1
    while not observation.done:
        _, observation = hub.agent_step(sid)
    record = hub.record(sid)
    assert record.agent_id == "heuristic" and record.source == "live" and record.reward is not None
    assert not list(read_episodes(hub.log_path))  # live demonstrations are not human-eval results


def test_live_agents_always_include_the_scripted_baselines(hub):
    agents = hub.live_agents()
    assert {"heuristic", "random", "noop", "deny_all", "oracle"} <= set(agents)
    assert "validation" in agents["oracle"].label
    assert "model:tiny-random-llm" in agents  # the shipped tiny model
    assert "adapter:tiny-grpo" in agents  # the shipped adapter of the tiny training run


def test_a_server_without_torch_lists_local_models_with_what_they_need_and_refuses_them_in_words(hub, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    agents = hub.live_agents()
    local = [a for a in agents.values() if a.name.startswith(("model:", "adapter:"))]
    assert local and all("needs torch" in a.label and "WITH_LOCAL_MODELS=1" in a.label for a in local)
    session_id = hub.open("live")
    with pytest.raises(SessionError, match="this server lacks torch"):
        hub.start_agent(session_id, local[0].name, seed=1)
    assert all(not agents[name].missing for name in ("heuristic", "noop", "oracle"))


def test_the_shipped_adapter_plays_live(hub):
    sid = hub.open("live")
    hub.start_agent(sid, "adapter:tiny-grpo", seed=2, max_steps=2)
    action, observation = hub.agent_step(sid)
    assert action["tool"] == "reply" and observation.steps_left == 1
    hub.close(sid)


def test_an_adapter_finds_its_base_model_from_any_working_directory(monkeypatch, tmp_path):
    """The shipped adapter names its base model by the folder training used, relative to the project."""
    from envcore.agents.llm import _base_of

    adapter = ROOT / "artifacts" / "adapters" / "tiny-grpo"
    monkeypatch.chdir(tmp_path)
    assert Path(_base_of(str(adapter))) == ROOT / "artifacts" / "models" / "tiny-random-llm"


def test_the_ui_never_imports_the_sandbox():
    forbidden = ("envcore.sandbox", "envcore.runner", "envcore.verifier")
    for path in sorted((ROOT / "ui").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"
