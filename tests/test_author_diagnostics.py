"""Diagnostics for a scenario's author, and the wall that keeps them from an agent.

``factory import`` and ``factory check`` say *where* an app went wrong: the app's traceback behind a
5xx answer that made a check fail (its frames, file:line and source line, and the exception, next to
the request), in both runners; and where the time went of a load that failed, overran its deadline
or was slow. Grading never collects either: a patch that makes every hidden probe raise learns
nothing from the submit, and a worker that sends a traceback or a load profile it was not asked for
is not believed.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import envcore.sandbox.default as default_sandbox_module
from envcore.cli import main
from envcore.runner.base import AppSource
from envcore.runner.inprocess import InProcessRunner
from envcore.sandbox import supported_platform
from envcore.sandbox.pool import AppLoadFailure
from envcore.sandbox.runner import run_sandboxed
from envcore.scenario.probes import Probe

linux_only = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")

NOTES_APP = '''\
"""A notes API whose note pages fail: the renderer reads a field the notes do not have."""

from fastapi import FastAPI, Header, HTTPException

app = FastAPI()
TOKENS = {"tok_alice_4242": "alice", "tok_bob_7373": "bob"}
NOTES = {"n1": {"id": "n1", "owner": "alice", "text": "alice's note"},
         "n2": {"id": "n2", "owner": "bob", "text": "bob's note"}}


def caller(authorization):
    user = TOKENS.get((authorization or "").removeprefix("Bearer "))
    if user is None:
        raise HTTPException(status_code=401, detail="sign in")
    return user


def count_words(note):
    return len(note["body"].split())


def render(note):
    return {"id": note["id"], "text": note["text"], "words": count_words(note)}


@app.get("/api/health")
def health():
    return {"status": "ok"}


@app.get("/api/notes/{note_id}")
def read_note(note_id: str, authorization: str | None = Header(default=None)):
    caller(authorization)
    note = NOTES.get(note_id)
    if note is None:
        raise HTTPException(status_code=404, detail="no such note")
    return render(note)
'''

SLOW_APP = '''\
"""An API that seeds its accounts slowly at import (as a password hash at a high cost would)."""

import time

from fastapi import FastAPI

app = FastAPI()
ACCOUNTS = {}


def hash_password(password):
    time.sleep(0.25)
    return password[::-1]


def seed_accounts():
    for number in range(100):
        ACCOUNTS[f"user{number}"] = hash_password(f"pw{number}")


seed_accounts()


@app.get("/api/health")
def health():
    return {"status": "ok"}
'''

SCENARIO = {
    "title": "Notes API", "domain": "notes", "bug_class": "idor", "cwe": ["CWE-639"], "entrypoint": "main:app",
    "task": "Fix the access control of the notes API.", "policy": "A note may be read only by its owner.",
    "users": [{"username": "alice", "role": "user", "user_id": "1", "token": "tok_alice_4242"},
              {"username": "bob", "role": "user", "user_id": "2", "token": "tok_bob_7373"}],
    "sites": [{"site": "notes.read", "method": "GET", "path": "/api/notes/{note_id}"}],
}
PROBES = [
    {"id": "reg-health", "kind": "regression", "visible": True, "title": "the health endpoint answers",
     "steps": [{"method": "GET", "path": "/api/health", "expect": [{"kind": "status_in", "codes": [200]}]}]},
    {"id": "reg-own-note", "kind": "regression", "visible": True, "title": "alice reads her note",
     "steps": [{"actor": "alice", "method": "GET", "path": "/api/notes/n1",
                "expect": [{"kind": "status_in", "codes": [200]}]}]},
    {"id": "sec-other-note", "kind": "security", "title": "bob cannot read alice's note",
     "steps": [{"actor": "bob", "method": "GET", "path": "/api/notes/n1",
                "expect": [{"kind": "status_in", "codes": [403, 404]}]}]},
]


def scenario_folder(root: Path, app: str) -> Path:
    """A scenario folder (no fix.diff: imported with ``--allow-no-fix``) holding ``app`` as app/main.py."""
    (root / "app").mkdir(parents=True)
    (root / "app" / "main.py").write_text(app, encoding="utf-8")
    (root / "scenario.yaml").write_text(json.dumps(SCENARIO), encoding="utf-8")  # JSON is YAML
    (root / "probes.yaml").write_text(json.dumps(PROBES), encoding="utf-8")
    return root


def line_of(source: str, text: str) -> int:
    return next(number for number, line in enumerate(source.splitlines(), 1) if text in line)


def imported(folder: Path, cache: Path, capsys, *extra: str) -> str:
    assert main(["factory", "import", str(folder), "--out", str(cache), "--allow-no-fix", *extra]) == 1
    return capsys.readouterr().out


@pytest.fixture
def shared_default_sandbox(sandbox, monkeypatch):
    """``factory import`` in the sandbox runs on the test session's sandbox (no zygote of its own)."""
    monkeypatch.setattr(default_sandbox_module, "_default", sandbox)
    return sandbox


RAISING_LINE = line_of(NOTES_APP, 'note["body"]')
CALLING_LINE = line_of(NOTES_APP, "return render(note)")


def assert_names_the_raise(out: str) -> None:
    assert "[vulnerable] visible probe reg-own-note fails on the vulnerable app: ['status 500 not in [200]']" in out
    assert "the app raised on GET /api/notes/n1 as alice (probe reg-own-note, status 500)" in out
    assert f"app/main.py:{RAISING_LINE} in count_words" in out
    assert 'return len(note["body"].split())' in out
    assert f"app/main.py:{CALLING_LINE} in read_note" in out
    assert "KeyError: 'body'" in out
    assert out.count("KeyError: 'body'") == 1, out  # once per distinct traceback, however many requests raised it


# -- the app's traceback -------------------------------------------------------------------------


def test_factory_import_in_process_prints_the_apps_traceback(tmp_path, capsys):
    out = imported(scenario_folder(tmp_path / "notes", NOTES_APP), tmp_path / "cache", capsys, "--runner", "inprocess")
    assert_names_the_raise(out)


@linux_only
def test_factory_import_in_the_sandbox_prints_the_apps_traceback(tmp_path, capsys, shared_default_sandbox):
    out = imported(scenario_folder(tmp_path / "notes", NOTES_APP), tmp_path / "cache", capsys)
    assert_names_the_raise(out)


def test_factory_check_of_a_cache_prints_the_apps_traceback(tmp_path, capsys):
    from envcore.cache import add_to_cache
    from envcore.factory.byo import load_bundle_dir

    bundle = load_bundle_dir(scenario_folder(tmp_path / "notes", NOTES_APP), require_fix=False)
    add_to_cache(tmp_path / "cache", [(bundle, "test")], generator="import")
    assert main(["factory", "check", str(tmp_path / "cache"), "--workers", "1", "--runner", "inprocess"]) == 1
    out = capsys.readouterr().out
    assert f"{bundle.scenario_id}: what the app did (for the scenario's author):" in out
    assert f"app/main.py:{RAISING_LINE} in count_words" in out and "KeyError: 'body'" in out


# -- where a load's time went ---------------------------------------------------------------------


@linux_only
def test_a_load_past_its_deadline_is_profiled_down_to_the_function_that_sleeps(tmp_path, capsys,
                                                                              shared_default_sandbox):
    out = imported(scenario_folder(tmp_path / "slow", SLOW_APP), tmp_path / "cache", capsys)
    limit = shared_default_sandbox.limits.load_timeout_s
    assert f"the vulnerable app does not load: the app did not finish loading within {limit:g} s" in out
    assert "the vulnerable app was still loading after" in out
    sleeping = f"app/main.py:{line_of(SLOW_APP, 'time.sleep(0.25)')} in hash_password"
    assert sleeping in out and "time.sleep(0.25)" in out
    assert f"app/main.py:{line_of(SLOW_APP, 'ACCOUNTS[')} in seed_accounts" in out
    profile = out[out.index("where the time went"):]
    assert float(profile.split(sleeping)[0].split()[-2]) > limit / 2  # most of the load, charged to the sleep


def test_a_slow_load_that_succeeds_says_how_long_and_where():
    from envcore.runner.diagnostics import render_load_profile

    app = SLOW_APP.replace("range(100)", "range(5)")  # 1.25 s: slow, and within any deadline
    probe = Probe.model_validate(PROBES[0])
    with InProcessRunner(diagnostics=True) as runner:
        report = runner.run(AppSource({"main.py": app}, "main:app"), [probe], {})
    assert report.loaded and report.outcomes[0].passed
    text = render_load_profile(report.load_profile)
    assert text.startswith("the app took 1.") and "s to load" in text
    assert f"app/main.py:{line_of(app, 'time.sleep(0.25)')} in hash_password" in text
    with InProcessRunner() as runner:  # without diagnostics: nothing sampled, nothing kept
        quiet = runner.run(AppSource({"main.py": app.replace("range(5)", "range(1)")}, "main:app"), [probe], {})
    assert quiet.load_profile is None and quiet.app_errors == ()


# -- never for an agent ---------------------------------------------------------------------------


@linux_only
def test_grading_runs_collect_no_traceback_and_no_profile(sandbox):
    """What grading uses (``run_sandboxed`` without ``diagnose``) carries neither, whatever the app does."""
    probes = [Probe.model_validate(p) for p in PROBES]
    actors = {u["username"]: u["token"] for u in SCENARIO["users"]}
    source = AppSource({"main.py": NOTES_APP}, "main:app")
    graded = run_sandboxed(sandbox, source, probes, actors)
    assert graded.loaded and graded.app_errors == () and graded.load_profile is None
    asked = run_sandboxed(sandbox, source, probes, actors, diagnose=True)
    assert {e.probe_id for e in asked.app_errors} == {"reg-own-note", "sec-other-note"}


FORGE = '''
import json as _json, os as _os, stat as _stat, struct as _struct

def _forge(message):
    """Write a frame of the worker's protocol onto its socket, as if the worker had sent it."""
    data = _json.dumps(message).encode()
    for fd in range(3, 64):
        try:
            if _stat.S_ISSOCK(_os.fstat(fd).st_mode):
                _os.write(fd, _struct.pack("!II", len(data), 0) + data)
                return
        except OSError:
            pass
'''


@linux_only
def test_a_worker_that_sends_a_traceback_it_was_not_asked_for_is_not_believed(sandbox):
    """A patch cannot turn diagnostics on: the traceback a worker claims unasked is dropped."""
    app = NOTES_APP + FORGE + textwrap.dedent('''
        @app.middleware("http")
        async def _claim(request, call_next):
            _forge({"type": "response", "status": 500, "headers": [], "error": None, "truncated": False,
                    "traceback": "LEAKED " + request.url.path})
            return await call_next(request)
    ''')
    from envcore.runner.http import HttpRequest

    worker = sandbox.spawn(AppSource({"main.py": app}, "main:app"))
    with worker:
        worker.wait_ready(sandbox.limits.load_timeout_s)
        response = worker.request(HttpRequest("GET", "/api/hidden-probe-path"), sandbox.limits.request_timeout_s)
    assert response.status == 500  # the forged frame, read as the answer...
    assert response.traceback is None  # ...without the traceback it claims


@linux_only
def test_a_worker_that_sends_a_load_profile_it_was_not_asked_for_fails_its_own_load(sandbox):
    app = FORGE + textwrap.dedent('''
        _forge({"type": "profile", "profile": {"seconds": 1.0, "finished": False, "outside_s": 0.0,
                                                "entries": [[1.0, "app/x.py", 1, "f", "LEAKED"]]}})
        from fastapi import FastAPI
        app = FastAPI()
    ''')
    worker = sandbox.spawn(AppSource({"main.py": app}, "main:app"))
    with worker, pytest.raises(AppLoadFailure, match="broke the protocol") as failure:
        worker.wait_ready(sandbox.limits.load_timeout_s)
    assert failure.value.profile is None and worker.load_profile is None


RAISE_EVERYWHERE = '''

app.debug = True  # Starlette's debug page: the traceback, with the message below, as the body


@app.middleware("http")
async def _raise_on_every_request(request, call_next):
    raise RuntimeError("hidden probe path: " + request.method + " " + request.url.path)
'''


@linux_only
def test_a_patch_that_makes_every_hidden_probe_raise_learns_nothing_from_the_submit(sandbox):
    """Through the environment, as an agent plays: the app raises on every request with the request's
    path in its message (and serves the traceback as its body); after submit, the observation holds
    no traceback, none of the app's words and no path of a hidden probe."""
    from envcore.cache import ScenarioCache
    from envcore.env.environment import A01Environment, Runtime
    from envcore.env.sampler import CurriculumSampler

    cache = ScenarioCache.open(None)
    env = A01Environment(Runtime(sampler=CurriculumSampler(cache), sandbox=sandbox))
    try:
        scenario = next(s for s in cache.ids(split="train") if cache.load(s).entrypoint == "app:app")
        env.reset(scenario=scenario)
        bundle = env.episode.bundle
        env.step({"tool": "edit_file", "path": "app.py", "search": bundle.files["app.py"],
                  "replace": bundle.files["app.py"] + RAISE_EVERYWHERE})
        own = env.step({"tool": "http_request", "path": "/api/whatever-i-send"})
        final = env.step({"tool": "submit"})
    finally:
        env.close()
    # the agent's own request: what its app answered, and the exception in one line, never frames
    assert own.result["status"] == 500 and own.result["error"].startswith("RuntimeError: hidden probe path:")
    assert final.done and final.reward is not None and final.result["outcome"] == "graded"
    visible_paths = {step.path for probe in bundle.probes if probe.visible for step in probe.steps}
    hidden_paths = {step.path for probe in bundle.probes if not probe.visible for step in probe.steps} - visible_paths
    assert hidden_paths
    text = final.model_dump_json()
    assert not [p for p in hidden_paths if p in text]
    for words in ("Traceback", "hidden probe path", "RuntimeError", 'File "', "app.py:", " in _raise_on_every_request"):
        assert words not in text


# -- an exception after the answer ----------------------------------------------------------------

AUDITED_APP = NOTES_APP.replace("from fastapi import FastAPI, Header, HTTPException",
                                "from fastapi import BackgroundTasks, FastAPI, Header, HTTPException").replace(
    '''def read_note(note_id: str, authorization: str | None = Header(default=None)):
    caller(authorization)''', '''def read_note(note_id: str, tasks: BackgroundTasks, authorization: str | None = Header(default=None)):
    tasks.add_task(write_audit_line, caller(authorization), note_id)''').replace(
    "def render(note):\n    return {\"id\": note[\"id\"], \"text\": note[\"text\"], \"words\": count_words(note)}",
    "def render(note):\n    return {\"id\": note[\"id\"], \"text\": note[\"text\"]}\n\n\n"
    "def write_audit_line(user, note_id):\n    with open(\"audit.log\", \"a\") as log:  # a new file, once loaded\n"
    "        log.write(f\"{user} read {note_id}\\n\")")


@linux_only
def test_a_background_task_that_fails_after_the_answer_is_shown_to_the_author(tmp_path, capsys, shared_default_sandbox):
    """The app answered 200, then its audit task raised (it creates a file once loaded, which the
    sandbox refuses): no probe fails, and before, nothing said so anywhere."""
    out = imported(scenario_folder(tmp_path / "notes", AUDITED_APP), tmp_path / "cache", capsys)  # (its canaries fail)
    assert "reg-own-note fails" not in out  # the probe passes: the answer was good
    assert "the app raised on GET /api/notes/n1 as alice (probe reg-own-note, after answering 200" in out, out
    assert "in write_audit_line" in out and "PermissionError" in out
