"""Baseline agents: each one's expected outcome on sample scenarios, played in process.

The bounds are the benchmark's validity: the oracle fully fixes, no-op and deny-all earn nothing,
random stays in range and repeats itself for a seed, the heuristic fixes the plain IDORs it was
written for and not what it was not."""

from __future__ import annotations

import textwrap

import pytest

from envcore.agents.base import SUBMIT, ScriptedAgent
from envcore.agents.baselines import BASELINES, HeuristicAgent, RandomAgent, add_ownership_checks
from envcore.agents.play import play_episode
from envcore.env.environment import A01Environment, Runtime
from envcore.env.sampler import CurriculumSampler

# Test-split scenarios the heuristic fixes (plain IDOR write, tiers 1 and 3) and one it cannot (a
# missing admin check), found by playing it over the split.
HEURISTIC_FIXES = ("46faa66fac8f408a", "1a04cca7abb1ca82")


@pytest.fixture(scope="module")
def env(shipped, sandbox):
    environment = A01Environment(Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox))
    yield environment
    environment.close()


def outcome(observation):
    return observation.reward, (observation.reward_breakdown or {}).get("resolution")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_fixes_noop_and_deny_all_earn_nothing(env, seed):
    reward, resolution = outcome(play_episode(env, BASELINES["oracle"](env.runtime.cache), seed=seed, split="test"))
    assert resolution == "full" and reward >= 0.95
    reward, resolution = outcome(play_episode(env, BASELINES["noop"](), seed=seed, split="test"))
    assert resolution == "no" and reward <= 0 and env.episode.steps == 1
    reward, resolution = outcome(play_episode(env, BASELINES["deny_all"](), seed=seed, split="test"))
    assert resolution == "no" and reward <= 0
    assert "_lazy_refuse_everything" in env.episode.diff()  # it did patch: the app refuses everyone


def test_random_stays_in_range_and_repeats_itself_for_a_seed(env):
    first = [play_episode(env, RandomAgent(), seed=s, split="test") for s in range(4)]
    histories = []
    for s in range(4):
        play_episode(env, RandomAgent(), seed=s, split="test")
        histories.append([r.action for r in env.episode.records])
    again = [play_episode(env, RandomAgent(), seed=s, split="test") for s in range(4)]
    assert all(-1 <= o.reward <= 1 for o in first)
    assert [o.reward for o in first] == [o.reward for o in again]
    assert any(len(h) > 1 for h in histories)


@pytest.mark.parametrize("scenario", HEURISTIC_FIXES)
def test_heuristic_fixes_a_plain_idor(env, scenario):
    reward, resolution = outcome(play_episode(env, HeuristicAgent(), seed=0, scenario=scenario))
    assert resolution == "full" and reward > 0.9


def test_heuristic_cannot_fix_a_missing_admin_check(env):
    reward, resolution = outcome(play_episode(env, HeuristicAgent(), seed=0, split="test", bug_class="missing_admin_check"))
    assert resolution != "full" and reward < 0.5


def test_add_ownership_checks_guards_id_routes_only():
    source = textwrap.dedent('''\
        from fastapi import APIRouter, HTTPException, Request

        from ..security import login_required, can_modify

        router = APIRouter()


        @router.get("/{note_id}")
        async def get_note(request: Request, note_id: str):
            user = request.state.user
            record = load_note(note_id)
            if record is None:
                raise HTTPException(status_code=404, detail="note not found")
            return record


        @router.patch("/{note_id}")
        async def update_note(request: Request, note_id: str):
            user = request.state.user
            note = load_note(note_id)
            if note is None:
                raise HTTPException(status_code=404)
            if not can_modify(user, note):
                raise HTTPException(status_code=403)
            return note


        @router.get("/")
        async def list_notes(request: Request):
            user = request.state.user
            return []
        ''')
    patched = add_ownership_checks(source, {"can_read", "can_modify"})
    assert "from ..security import login_required, can_modify, can_read\n" in patched
    assert patched.count("if not can_read(user, record):") == 1
    assert patched.count("can_modify(") == 1  # the handler that already checks is left alone
    compile(patched, "notes.py", "exec")
    assert add_ownership_checks("def broken(:\n", {"can_read"}) == "def broken(:\n"
    assert add_ownership_checks(source, set()) == source


def test_a_scripted_agent_submits_when_its_script_ends():
    class TwoReads(ScriptedAgent):
        def script(self, first):
            seen = yield {"tool": "list_files"}
            assert seen == "after-list"
            yield {"tool": "read_file", "path": "x.py"}

    agent = TwoReads()
    agent.begin(None)
    assert agent.act("first") == {"tool": "list_files"}
    assert agent.act("after-list") == {"tool": "read_file", "path": "x.py"}
    assert agent.act("after-read") == SUBMIT and agent.act("again") == SUBMIT
