"""A template runs its app's startup once for all its workers, and only when no worker could tell.

Every probe must see the app exactly as a worker that imported *and started* it would: the startup's
effects exactly once, none of another probe's. Startup code the patch changes, and startups that
leave something a fork cannot carry on (a thread, a task, a timer, an asyncio object bound to the
startup's loop), are left to each worker. Attacks are named ``test_attack_*``."""

from __future__ import annotations

import json

import pytest

from envcore.runner.base import AppSource
from envcore.runner.http import HttpRequest
from envcore.sandbox import AppLoadFailure, Sandbox, SandboxLimits

ENTRY = "sapp:app"

APP = '''import asyncio
import sqlite3
from pathlib import Path

from fastapi import FastAPI

app = FastAPI()
STATE = {"started": 0, "seeded": []}
DB = Path(__file__).resolve().parent / "app.db"
CONN = None


def seed():
    STATE["seeded"].append("admin")


@app.on_event("startup")
async def on_start():
    global CONN
    STATE["started"] += 1
    seed()
    CONN = sqlite3.connect(DB)
    CONN.execute("CREATE TABLE IF NOT EXISTS notes (body TEXT)")
    CONN.execute("INSERT INTO notes VALUES ('from startup')")
    CONN.commit()
    # EXTRA


@app.get("/state")
def state():
    STATE["started"] += 100  # this probe's own change
    return STATE


@app.post("/note")
def note():
    CONN.execute("INSERT INTO notes VALUES ('from a probe')")
    CONN.commit()
    return {"notes": [row[0] for row in CONN.execute("SELECT body FROM notes")]}
'''


def app_files(extra: str = "", *, seed_body: str | None = None) -> dict[str, str]:
    text = APP.replace("    # EXTRA", extra)
    if seed_body is not None:
        text = text.replace('    STATE["seeded"].append("admin")', seed_body)
    return {"sapp.py": text}


def reply(worker, method: str, path: str) -> dict:
    response = worker.request(HttpRequest(method, path), 2.0)
    assert response.status == 200, (response.status, response.error, response.body[:300])
    return json.loads(response.body)


@pytest.fixture()
def box():
    limits = SandboxLimits(request_timeout_s=2.0, load_timeout_s=5.0, cpu_s=5, memory_mb=192)
    sandbox = Sandbox(limits=limits, spares=0, templates=2, template_spares=0).start()
    yield sandbox
    sandbox.close()


def serve_twice(sandbox: Sandbox, base: AppSource, source: AppSource | None = None):
    """Two workers of one template of ``base`` loading ``source`` (default: the base), one after
    the other as a run has them; each worker's answers."""
    link = sandbox.templates.acquire(base)
    assert link is not None
    answers = []
    try:
        for _ in range(2):
            with sandbox.spawn(source or base, link) as worker:
                worker.wait_ready(5.0)
                answers.append((worker, reply(worker, "GET", "/state"), reply(worker, "POST", "/note")))
    finally:
        sandbox.templates.release(link)
    return link, answers


def fresh_answers(sandbox: Sandbox, source: AppSource):
    with sandbox.spawn(source) as worker:
        worker.wait_ready(5.0)
        return reply(worker, "GET", "/state"), reply(worker, "POST", "/note")


def test_the_startup_runs_once_in_the_template_and_every_worker_sees_it_exactly_once(box):
    base = AppSource(app_files(), ENTRY)
    link, answers = serve_twice(box, base)
    assert link.info.get("started") is True and box.templates.stats["started"] == 1
    expected = fresh_answers(box, base)
    assert expected == ({"started": 101, "seeded": ["admin"]}, {"notes": ["from startup", "from a probe"]})
    for worker, state, notes in answers:
        assert worker.swapped is True
        assert (state, notes) == expected  # not 201, not a second probe's note: each worker is pristine


def test_attack_a_patch_of_a_function_the_startup_ran_loads_afresh_and_runs_the_patched_startup(box):
    base = AppSource(app_files(), ENTRY)
    patched = AppSource(app_files(seed_body='    STATE["seeded"].append("patched")'), ENTRY)
    _, answers = serve_twice(box, base, patched)
    expected = fresh_answers(box, patched)
    assert expected[0]["seeded"] == ["patched"]
    for worker, state, notes in answers:
        assert worker.swapped is False and "started" in (worker.unswappable_reason or "")
        assert (state, notes) == expected


@pytest.mark.parametrize("extra, why", [  # a task by default; a timer and an Event (a sandbox each) slow
    ("    asyncio.get_running_loop().create_task(asyncio.sleep(3600))", "task"),
    pytest.param("    asyncio.get_running_loop().call_later(3600, print)", "timer", marks=pytest.mark.slow),
    pytest.param("    global EVENT\n    EVENT = asyncio.Event()\n    try:\n"
                 "        await asyncio.wait_for(EVENT.wait(), 0.001)\n"
                 "    except asyncio.TimeoutError:\n        pass", "Event", marks=pytest.mark.slow),
])
def test_a_startup_that_leaves_work_on_its_loop_is_left_to_each_worker(box, extra, why):
    """A worker serves its requests on the loop its startup ran on; a fork of the template would
    serve them on a new one, without the task, the timer or the loop an object is bound to."""
    base = AppSource(app_files(extra), ENTRY)
    link, answers = serve_twice(box, base)
    assert link.info.get("started") is False and box.templates.stats["started"] == 0
    assert [why in reason for reason in box.templates._start_refused.values()] == [True]  # remembered for the next build
    expected = fresh_answers(box, base)
    for _worker, state, notes in answers:
        assert (state, notes) == expected


@pytest.mark.slow  # a sandbox of its own; a task left on the loop and a failing startup run by default
def test_a_startup_that_starts_a_thread_fails_in_every_worker_as_it_would_in_a_fresh_one(box):
    base = AppSource(app_files("    import threading, time\n    threading.Thread(target=time.sleep, args=(60,), "
                               "daemon=True).start()"), ENTRY)
    with pytest.raises(AppLoadFailure) as fresh:
        box.load(base)
    link = box.templates.acquire(base)
    assert link is not None and link.info.get("started") is False  # the template's startup was refused
    try:
        with pytest.raises(AppLoadFailure) as templated:
            box.load(base, link)
    finally:
        box.templates.release(link)
    assert "startup" in str(fresh.value) and "startup" in str(templated.value)


def test_a_startup_that_fails_is_no_template_and_each_worker_reports_the_failure(box):
    base = AppSource(app_files("    raise RuntimeError('no database')"), ENTRY)
    assert box.templates.acquire(base) is None
    with pytest.raises(AppLoadFailure, match="no database"):
        box.load(base)


@pytest.mark.slow  # a sandbox of its own, for an operator's switch; started templates are tested by default
def test_starting_apps_in_templates_can_be_turned_off_and_then_every_worker_starts_its_own(box):
    box.templates.start_apps = False
    base = AppSource(app_files(), ENTRY)
    link, answers = serve_twice(box, base)
    assert link.info.get("started") is False
    assert [(state, notes) for _, state, notes in answers] == [fresh_answers(box, base)] * 2


def test_attack_a_file_the_startup_left_open_carries_nothing_from_one_worker_to_the_next(box):
    """The startup opens a log of its own folder and keeps it open: every worker shares that open file
    (a fork shares it, offset and all). Each probe appends to it and reads it back: whatever an earlier
    worker wrote, moved or truncated, the next one sees the log exactly as the startup left it."""
    extra = ('    global LOG\n    LOG = open(Path(__file__).resolve().parent / "notes.log", "a+")\n'
             '    LOG.write("started\\n")\n    LOG.flush()')
    files = app_files(extra)
    files["sapp.py"] += '''

@app.get("/log")
def log():
    LOG.write("a probe was here\\n")
    LOG.flush()
    LOG.seek(0)
    return {"log": LOG.read(), "at": LOG.tell()}
'''
    base = AppSource(files, ENTRY)
    link = box.templates.acquire(base)
    assert link is not None and link.info.get("started") is True
    seen = []
    try:
        for _ in range(3):
            with box.spawn(base, link) as worker:
                worker.wait_ready(5.0)
                seen.append(reply(worker, "GET", "/log"))
    finally:
        box.templates.release(link)
    with box.spawn(base) as fresh:
        fresh.wait_ready(5.0)
        expected = reply(fresh, "GET", "/log")
    assert expected["log"] == "started\na probe was here\n"
    assert seen == [expected] * 3
