"""Baseline agents: each one's expected outcome on sample scenarios, played in process.

The bounds are the benchmark's validity: the oracle fully fixes, no-op and deny-all earn nothing,
random stays in range and repeats itself for a seed, the heuristic fixes what its checklist covers
and not what it does not. Each heuristic rule also has a unit test on source it must patch, and on
source it must leave alone."""

from __future__ import annotations

import textwrap

import pytest

from envcore.agents.base import SUBMIT, ScriptedAgent
from envcore.agents.baselines import BASELINES, RandomAgent
from envcore.agents.heuristic import (HeuristicAgent, add_ownership_checks, keep_redirects_local, require_admin_areas,
                                      scope_listings)
from envcore.agents.play import play_episode
from envcore.env.environment import A01Environment, Runtime
from envcore.env.sampler import CurriculumSampler

# Test-split scenarios the heuristic fixes, one per rule and auth style (found by playing it over the
# split), and ones it cannot: a tenant leak, a mass assignment, and a missing admin check in an app
# with a colleague directory its blanket ownership checks break.
HEURISTIC_FIXES = {
    "f7b3b2e281889b1c": "idor_write, tier 1", "ba035023b6de6bc0": "idor_write, tier 3",
    "297a7bc03303f964": "missing admin check, @admin_required", "0174ea811eca941e": "forced browsing, Depends(require_admin)",
    "0ab94b196a5d912c": "missing admin check, ensure_admin, tier 3", "e63df45a7400452b": "list leak",
    "78e953aed41d3465": "open redirect",
}
HEURISTIC_MISSES = {"5951e20c262e6f65": "tenant_leak", "1e33350b9c775db7": "mass_assignment",
                    "b2f51963424b1350": "missing_admin_check with a directory decoy"}

@pytest.fixture(scope="module")
def env(shipped, sandbox):
    environment = A01Environment(Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox))
    yield environment
    environment.close()


def outcome(observation):
    return observation.reward, (observation.reward_breakdown or {}).get("resolution")


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
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


@pytest.mark.parametrize("scenario", sorted(HEURISTIC_FIXES))
def test_heuristic_fixes_what_its_checklist_covers(env, scenario):
    reward, resolution = outcome(play_episode(env, HeuristicAgent(), seed=0, scenario=scenario))
    assert resolution == "full" and reward > 0.9, HEURISTIC_FIXES[scenario]


@pytest.mark.parametrize("scenario", sorted(HEURISTIC_MISSES))
def test_heuristic_misses_what_its_checklist_does_not_cover(env, scenario):
    reward, resolution = outcome(play_episode(env, HeuristicAgent(), seed=0, scenario=scenario))
    assert resolution != "full" and reward < 0.5, HEURISTIC_MISSES[scenario]


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


ADMIN_ROUTER = textwrap.dedent('''\
    from fastapi import APIRouter, Request

    from ..security import {imports}

    router = APIRouter(prefix="/api/admin")


    @router.get("/users")
    {decorator}async def list_users({params}):
        """Everyone."""
        {first}return []


    @router.get("/report")
    {decorator}async def report({params}):
        {first}if request.method == "GET" and user["role"] != "admin":
            raise PermissionError
        return []
    ''')


@pytest.mark.parametrize("style, fields, expect", [
    ("inline", dict(imports="authenticate", decorator="", params="request: Request", first="user = authenticate(request)\n    "),
     ["from ..security import authenticate, ensure_admin\n", "user = authenticate(request)\n    ensure_admin(user)\n"]),
    ("inline, no login", dict(imports="authenticate", decorator="", params="request: Request", first=""),
     ["user = authenticate(request)\n    ensure_admin(user)\n    return []"]),
    ("depends", dict(imports="current_user", decorator="", params="user: dict = Depends(current_user)", first=""),
     ["from fastapi import APIRouter, Request, Depends\n", "from ..security import current_user, require_admin\n",
      "async def list_users(user: dict = Depends(require_admin)):"]),
    ("depends, no user", dict(imports="current_user", decorator="", params="", first=""),
     ["async def list_users(user: dict = Depends(require_admin)):"]),
    ("decorator", dict(imports="login_required", decorator="@login_required\n", params="request: Request", first=""),
     ["from ..security import login_required, admin_required\n", "@admin_required\nasync def list_users("]),
])
def test_require_admin_areas_uses_the_apps_own_style(style, fields, expect):
    helpers = {"inline": {"authenticate", "ensure_admin"}, "depends": {"current_user", "require_admin"},
               "decorator": {"login_required", "admin_required"}}[style.split(",")[0]]
    source = ADMIN_ROUTER.format(**fields)
    patched = require_admin_areas(source, helpers)
    for snippet in expect:
        assert snippet in patched, (style, patched)
    compile(patched, "admin.py", "exec")
    # the handler that already says "admin" (on one method only: a trap) is left as it was
    report = source[source.index("async def report"):]
    assert report in patched
    assert require_admin_areas(patched, helpers) == patched  # idempotent


def test_require_admin_areas_leaves_other_paths_alone():
    source = ADMIN_ROUTER.format(imports="authenticate", decorator="", params="request: Request",
                                 first="user = authenticate(request)\n    ").replace("/api/admin", "/api/reports")
    assert require_admin_areas(source, {"authenticate", "ensure_admin"}) == source
    assert require_admin_areas(source.replace("/api/reports", "/api/admin"), {"can_read"}) == source.replace("/api/reports", "/api/admin")


def test_scope_listings_scopes_unscoped_store_queries_of_list_routes():
    source = textwrap.dedent('''\
        from ..security import current_user, visible_scope

        @router.get("/api/tickets")
        async def list_tickets(user: dict = Depends(current_user)):
            return [r for r in query_tickets()]

        @router.get("/api/tickets/search")
        async def search(q: str, user: dict = Depends(current_user)):
            return find_tickets(q, limit=5)

        @router.get("/api/tickets/mine")
        async def mine(user: dict = Depends(current_user)):
            return query_tickets(**visible_scope(user))

        @router.get("/api/tickets/{ticket_id}")
        async def one(ticket_id: str, user: dict = Depends(current_user)):
            return query_tickets(id=ticket_id)

        @router.get("/api/admin/tickets")
        async def everything(user: dict = Depends(current_user)):
            return query_tickets()
        ''')
    patched = scope_listings(source, {"visible_scope"})
    assert "for r in query_tickets(**visible_scope(user))]" in patched
    assert "find_tickets(q, limit=5, **visible_scope(user))" in patched
    assert patched.count("visible_scope(user)") == 3  # mine was scoped already; id and admin routes untouched
    compile(patched, "tickets.py", "exec")
    assert scope_listings(source, {"can_read"}) == source  # the app has no scope helper to call


def test_keep_redirects_local_guards_redirects_to_parameters_once():
    source = textwrap.dedent('''\
        @router.get("/auth/logout")
        async def logout(next: str = "/"):
            return RedirectResponse(url=next, status_code=303)

        @router.get("/home")
        async def home():
            return RedirectResponse("/dashboard")
        ''')
    patched = keep_redirects_local(source, set())
    assert patched.count('if not next.startswith("/") or next.startswith("//") or "\\\\" in next:') == 1
    assert keep_redirects_local(patched, set()) == patched
    compile(patched, "account.py", "exec")


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
