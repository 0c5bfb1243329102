"""The Play tab's teaching: the checklist ticked from the player's own steps, hints that cost reward
and are logged, and the debrief after submit (envcore/env/coach.py, envcore/env/hints.py, the
session facade and ui/teaching_view.py)."""

from __future__ import annotations

import json

import pytest

from envcore.env.environment import Runtime
from envcore.env.episode_log import EpisodeLogger, read_episodes
from envcore.env.hints import HINTS, hint_text
from envcore.env.sampler import CurriculumSampler
from envcore.scenario.probes import ProbeKind
from envcore.server.sessions import SessionError, SessionHub
from ui import teaching_view

IDOR_READ = "ab8f867487219d4e"
"""A training scenario: zoe.lindqvist70 owns note 32963; rosa.berg48 reads it (the hidden exploit)."""
OWNER, PROBE_ATTACKER, OTHER_USER, ADMIN = "zoe.lindqvist70", "rosa.berg48", "viktor.kim89", "hana.moreau66"
NOTE = "/api/notes/32963"
DENY_ALL = """--- a/app.py
+++ b/app.py
@@ -219,7 +219,7 @@
     if record is None:
         raise HTTPException(status_code=404, detail="note not found")
     if not can_read(user, record):
-        logger.warning("user %s opened note %s they do not own", user["id"], note_id)
+        raise HTTPException(status_code=403, detail="not allowed to view this note")
     return present(user, record)
 
 
"""


@pytest.fixture(scope="module")
def hub(shipped, sandbox, tmp_path_factory):
    server = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    log = tmp_path_factory.mktemp("coach") / "human.jsonl"
    human = Runtime(sampler=server.sampler, source="human", max_steps=40, parent=server, logger=EpisodeLogger(log))
    hub = SessionHub(human, ttl_s=600, max_sessions=8, sweep_every_s=0)
    hub.log_path = log
    yield hub
    hub.shutdown()


@pytest.fixture
def play(hub):
    sid = hub.open()
    hub.reset(sid, scenario=IDOR_READ, agent_id="human:tester")
    yield sid
    hub.close(sid)


def ask(hub, sid, path, user=None, method="GET", body=None):
    action = {"tool": "http_request", "method": method, "path": path}
    if user:
        action["as_user"] = user
    if body is not None:
        action["json_body"] = body
    observation = hub.step(sid, action)
    assert observation.error is None, observation.error
    return observation.result


def ticked(hub, sid) -> dict[str, bool]:
    return {item["key"]: item["done"] for item in hub.checklist(sid, wait_s=None)}


def test_the_checklist_ticks_the_exploit_from_any_user_the_fixed_app_refuses(hub, play):
    assert ask(hub, play, NOTE, OWNER)["status"] == 200
    assert not ticked(hub, play)["exploit_reproduced"]  # the owner reading their own note is legitimate use
    assert ask(hub, play, NOTE, OTHER_USER)["status"] == 200  # not the hidden probe's user: still the exploit
    items = hub.checklist(play, wait_s=None)
    assert items[0]["done"] and OTHER_USER in items[0]["note"] and "403" in items[0]["note"]
    assert [i["done"] for i in items[1:]] == [False, False, False]


def test_what_the_player_created_does_not_make_a_request_look_like_the_exploit(hub, play):
    created = ask(hub, play, "/api/notes", PROBE_ATTACKER, "POST", {"title": "mine"})
    assert created["status"] in (200, 201)
    note_id = json.loads(created["body"])["id"]
    assert ask(hub, play, f"/api/notes/{note_id}", PROBE_ATTACKER)["status"] == 200  # their own new note
    assert not ticked(hub, play)["exploit_reproduced"]


def test_the_fix_ticks_refused_and_kept_and_a_new_patch_unticks_them(hub, play, shipped):
    fix = shipped.load(IDOR_READ).reference_fix
    ask(hub, play, NOTE, PROBE_ATTACKER)
    assert hub.step(play, {"tool": "apply_patch", "diff": fix}).error is None
    assert ticked(hub, play) == {"exploit_reproduced": True, "patched": True, "exploit_refused": False,
                                 "legit_kept": False}  # patched, not yet checked
    assert ask(hub, play, NOTE, PROBE_ATTACKER)["status"] == 403
    assert ask(hub, play, NOTE, OWNER)["status"] == 200
    assert ticked(hub, play) == dict.fromkeys(["exploit_reproduced", "patched", "exploit_refused", "legit_kept"], True)
    # another patch: what was seen on the code before it is no longer evidence
    edit = {"tool": "edit_file", "path": "app.py", "search": '"""Personal notes API: a small FastAPI service."""',
            "replace": '"""Personal notes API: a small FastAPI service (reviewed)."""'}
    assert hub.step(play, edit).error is None
    items = {i["key"]: i for i in hub.checklist(play, wait_s=None)}
    assert not items["exploit_refused"]["done"] and "check again" in items["exploit_refused"]["note"]
    assert not items["legit_kept"]["done"]


def test_a_lazy_fix_is_refused_credit_for_legitimate_use(hub, play):
    lock_out = {"tool": "edit_file", "path": "app.py", "search": "    if not can_read(user, record):\n"
                "        logger.warning",
                "replace": "    raise HTTPException(status_code=403, detail=\"no\")\n    if not can_read(user, record):\n"
                           "        logger.warning"}
    assert hub.step(play, lock_out).error is None
    assert ask(hub, play, NOTE, PROBE_ATTACKER)["status"] == 403
    assert ask(hub, play, NOTE, OWNER)["status"] == 403  # the owner is locked out too
    assert ask(hub, play, NOTE, ADMIN)["status"] == 403
    done = ticked(hub, play)
    assert done["exploit_refused"] and not done["legit_kept"]


def test_visible_tests_passing_after_a_patch_tick_legitimate_use(hub, play, shipped):
    assert hub.step(play, {"tool": "apply_patch", "diff": shipped.load(IDOR_READ).reference_fix}).error is None
    assert hub.step(play, {"tool": "run_tests"}).error is None
    assert ticked(hub, play)["legit_kept"]


def test_hints_come_in_order_cost_reward_and_are_logged(hub, shipped):
    fix = shipped.load(IDOR_READ).reference_fix
    rewards = {}
    for taken in (0, 2):
        sid = hub.open()
        hub.reset(sid, scenario=IDOR_READ, agent_id=f"human:hints{taken}")
        for level in range(taken):
            hint = hub.take_hint(sid)
            assert (hint["level"], hint["key"]) == (level + 1, HINTS[level].key) and hint["text"]
        hub.step(sid, {"tool": "apply_patch", "diff": fix})
        observation = hub.step(sid, {"tool": "submit"})
        rewards[taken] = observation.reward
        components = {c["name"]: c for c in observation.reward_breakdown["components"]}
        if taken:
            assert components["hints"]["value"] == pytest.approx(-(HINTS[0].cost + HINTS[1].cost))
            assert components["hints"]["measured"] == 2
        else:
            assert "hints" not in components  # an episode without hints (every agent's) has no such term
        with pytest.raises(SessionError, match="over"):
            hub.take_hint(sid)
        hub.close(sid)
    assert rewards[0] - rewards[2] == pytest.approx(HINTS[0].cost + HINTS[1].cost)
    logged = {r.agent_id: r for r in read_episodes(hub.log_path)}
    assert [h["key"] for h in logged["human:hints2"].hints] == ["where", "lines"]
    assert logged["human:hints2"].hints[0]["cost"] == HINTS[0].cost and logged["human:hints0"].hints == []


def test_a_fourth_hint_is_refused(hub, play):
    for _ in HINTS:
        hub.take_hint(play)
    with pytest.raises(SessionError, match=f"all {len(HINTS)} hints"):
        hub.take_hint(play)


def _hidden_request_parts(bundle) -> set[str]:
    """The concrete parts of a hidden exploit that a test-split scenario must never show."""
    parts = set()
    for probe in bundle.probes:
        if probe.kind == ProbeKind.SECURITY and not probe.visible:
            for step in probe.steps:
                if any(ch.isdigit() for ch in step.path.rsplit("/", 1)[-1]):
                    parts.add(step.path)
                parts.update(v for v in step.query.values() if len(v) > 3)
                parts.update(f"{k}: {v}" for k, v in step.headers.items())
                if step.json_body is not None:
                    parts.add(json.dumps(step.json_body))
    return parts


def test_a_test_split_scenario_tells_its_exploit_in_words_only(shipped):
    bundles = [shipped.load(i) for i in shipped.ids(split="test")[:60]]
    checked = 0
    for bundle in bundles:
        hidden = _hidden_request_parts(bundle)
        if not hidden:
            continue
        checked += 1
        text = hint_text(bundle, "exploit", "words")
        assert not any(part in text for part in hidden), (bundle.scenario_id, text)
        full = hint_text(bundle, "exploit", "full")
        first = next(p for p in bundle.probes if p.kind == ProbeKind.SECURITY)
        assert f"`{first.steps[0].request_line}`" in full  # the full hint names the request itself
    assert checked >= 20


def test_the_debrief_replays_the_exploit_before_and_after_and_names_the_bug(hub, play, shipped):
    bundle = shipped.load(IDOR_READ)
    hub.step(play, {"tool": "apply_patch", "diff": bundle.reference_fix})
    assert hub.debrief(play) is None  # nothing is told before the episode ends
    hub.step(play, {"tool": "submit"})
    debrief = hub.debrief(play)
    assert debrief["category"]["name"] == "solved" and debrief["cwe"] == ["CWE-639"]
    # every exploit: the attacker's, the same tried by a second user, and the other way round
    assert len(debrief["replays"]) == sum(p.kind == "security" for p in bundle.probes) == 3
    replay = debrief["replays"][0]
    assert not replay["before"].passed and replay["before"].steps[0].status == 200
    assert replay["after"].passed and replay["after"].steps[0].status == 403
    card = teaching_view.debrief_markdown(debrief).replace("\\", "")  # as it reads, Markdown escapes aside
    assert "Insecure direct object reference (read)" in card and "CWE-639 Authorization Bypass" in card
    first = next(p for p in bundle.probes if p.kind == "security").steps[0]
    record_id = first.path.rsplit("/", 1)[-1]
    assert record_id in card and first.actor in card  # a training scenario shows the request itself
    assert "raise HTTPException" in teaching_view.reference_fix_html(debrief)


def test_a_failed_episode_is_explained_in_the_failure_analysis_words(hub, play):
    lock_out = {"tool": "edit_file", "path": "app.py", "search": "    if not can_read(user, record):\n"
                "        logger.warning",
                "replace": "    raise HTTPException(status_code=403, detail=\"no\")\n    if not can_read(user, record):\n"
                           "        logger.warning"}
    hub.step(play, lock_out)
    hub.step(play, {"tool": "submit"})
    debrief = hub.debrief(play)
    assert debrief["category"]["name"] == "over_restriction"
    card = teaching_view.debrief_markdown(debrief).replace("\\", "")
    assert "over-restriction" in card and "legitimate use broken" in card.lower()


def test_a_test_split_debrief_names_users_the_player_knows_never_the_hidden_requests(hub, shipped):
    scenario = next(i for i in shipped.ids(split="test") if _hidden_request_parts(shipped.load(i)))
    bundle = shipped.load(scenario)
    sid = hub.open()
    try:
        hub.reset(sid, scenario=scenario, agent_id="human:tester")
        hub.step(sid, {"tool": "apply_patch", "diff": bundle.reference_fix})
        hub.step(sid, {"tool": "submit"})
        card = teaching_view.debrief_markdown(hub.debrief(sid))
    finally:
        hub.close(sid)
    assert not any(part in card for part in _hidden_request_parts(bundle)), card
    known = {u.username for u in bundle.users}
    assert any(name in card for name in known)


def test_a_flood_of_requests_queues_no_more_than_the_cap_of_replays(hub, play, monkeypatch):
    """A page firing requests faster than they are judged cannot queue sandbox work in front of
    everyone else's: past MAX_PENDING the coach skips them (the requests themselves are served)."""
    import threading

    from envcore.env import coach as coach_module

    coach = hub._get(play).coach
    gate, replays = threading.Event(), []
    real = coach_module.Coach._replay

    def slow(self, source, step):
        replays.append(step)
        gate.wait(10)
        return real(self, source, step)

    monkeypatch.setattr(coach_module.Coach, "_replay", slow)
    for number in range(10):
        assert ask(hub, play, f"/api/notes/{number}", PROBE_ATTACKER)["status"] is not None
    assert coach.skipped == 10 - coach_module.MAX_PENDING
    gate.set()
    assert coach.settle(10)
    assert len(replays) <= 2 * coach_module.MAX_PENDING


def test_a_closed_session_replays_nothing_more(hub, monkeypatch):
    from envcore.env import coach as coach_module

    sid = hub.open()
    hub.reset(sid, scenario=IDOR_READ, agent_id="human:tester")
    coach = hub._get(sid).coach
    hub.close(sid)
    replayed = []
    monkeypatch.setattr(coach_module.Coach, "_replay", lambda self, source, step: replayed.append(step))
    assert coach.judge({"method": "GET", "path": NOTE, "as_user": OTHER_USER}) is None and replayed == []


# ----- a hint always tells more than the task ----------------------------------------------------------
def _every_hint_tells_something(bundles, split_of) -> None:
    from envcore.env.hints import news
    from envcore.scenario.splits import disclosure_for

    told_nothing = []
    for bundle in bundles:
        disclosure = disclosure_for(split_of(bundle.scenario_id))
        for hint in HINTS:
            if not news(bundle, hint_text(bundle, hint.key, disclosure)):
                told_nothing.append((bundle.scenario_id, hint.key))
    assert told_nothing == []


def test_the_first_hint_repeating_the_task_costs_nothing_because_it_never_does(shipped):
    """The task names the route and a one-file app's file is in the file list: a 'where' hint of the
    fix's file and the route alone repeated the task and cost 0.10. It names the route's handler (its
    function, file and line) as well, which no task says."""
    from envcore.env.hints import news

    bundle = shipped.load("e8ea09a30453a31c")  # one file; the task names GET /api/shared/{code}
    assert "`GET /api/shared/{code}`" in bundle.task
    where = hint_text(bundle, "where", "words")
    assert "`read_shared_review()` in `app.py` (line " in where
    assert set(news(bundle, where)) == {"read_shared_review()", f"line {where.split('(line ')[1].split(')')[0]}"}
    line = int(where.split("(line ")[1].split(")")[0])
    assert bundle.files["app.py"].splitlines()[line - 1].lstrip().startswith(("def read_shared_review(",
                                                                               "async def read_shared_review("))
    lines = hint_text(bundle, "lines", "words")  # a held-out scenario's: where to read, no line of the fix
    assert "`read_shared_review()`" in lines and "names no lines of the fix" in lines


def test_every_hint_tells_more_than_the_task_on_a_large_sample_of_the_shipped_cache(shipped):
    ids = sorted(shipped.ids())[::6]  # one in six (235 of 1,410), every split and code style among them
    splits = {shipped.split_of(i) for i in ids}
    assert splits == set(shipped.splits())  # every split (train, val, test, test_styles, external)
    _every_hint_tells_something([shipped.load(i) for i in ids], shipped.split_of)


@pytest.mark.slow
def test_every_hint_of_every_shipped_scenario_tells_more_than_the_task(shipped):
    _every_hint_tells_something(list(shipped), shipped.split_of)
