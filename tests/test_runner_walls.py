"""Walls two testers hit bringing their own apps to the factory's commands and the in-process runner.

* ``factory check`` and ``factory canaries`` ran a cache's apps (code from anywhere) unsandboxed by
  default, and ``canaries`` could not be told otherwise;
* an app on SQLAlchemy's async engine over aiosqlite hung the in-process import for ever: the runner
  forked while aiosqlite's connection thread was alive, the fork's queries went to a thread it does
  not have, and the parent waited on the fork's pipe with no deadline (a run killed meanwhile also
  left its ``a01-inprocess-*`` folder behind);
* the in-process check shared one copy of the app between probes where the sandbox gives each probe
  a fresh one, so a login rate limit failed the in-process import (``status 429``) of an app the
  sandbox imports;
* ``factory show`` printed a probe's step as ``METHOD path``, so an exploit's query, body and headers
  were invisible;
* in-process load profiles charged the first import of a library (FastAPI) to the app's line.

Each test here failed before the fix it names.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

import envcore.sandbox
from envcore.cache import add_to_cache
from envcore.cli import main
from envcore.factory.byo import load_bundle_dir
from envcore.runner.base import AppSource, Batch
from envcore.runner.inprocess import InProcessRunner
from envcore.sandbox.limits import SandboxLimits
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep
from tests.scenario_kit import (
    DECLARED,
    LOGIN_ROUTE,
    POLICY_CHECK,
    POLICY_IMPORTS,
    USERS,
    _step,
    app_files,
    main_py,
    metadata,
    policy_fix,
    probes,
    status,
    users_json,
    write_scenario,
)

REPO = Path(__file__).resolve().parents[1]


def _cache_of_the_notes_app(tmp_path: Path) -> Path:
    files = app_files()
    bundle = load_bundle_dir(write_scenario(tmp_path / "notes", files, policy_fix(files)))
    add_to_cache(tmp_path / "cache", [(bundle, "test")], generator="import")
    return tmp_path / "cache"


def _probe(probe_id: str, *steps: ProbeStep) -> Probe:
    return Probe(id=probe_id, kind=ProbeKind.REGRESSION, title=probe_id, steps=steps)


def _get(path: str, *facts: dict) -> ProbeStep:
    return ProbeStep(method="GET", path=path, expect=facts)


def _children() -> set[int]:
    """This process's child processes (Linux)."""
    found: set[int] = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children", encoding="ascii") as handle:
                found.update(int(pid) for pid in handle.read().split())
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- 1. a cache's apps run in the sandbox unless the command is told otherwise -----------------------------


def test_factory_check_runs_a_caches_untrusted_apps_in_the_sandbox_by_default(tmp_path, monkeypatch):
    from envcore.cli import factory_cmd

    cache = _cache_of_the_notes_app(tmp_path)
    seen = []
    monkeypatch.setattr(factory_cmd, "verify_cache", lambda root, ids, **kw: seen.append(kw["sandboxed"]) or {})
    assert main(["factory", "check", str(cache)]) == 0
    assert main(["factory", "check", str(cache), "--runner", "inprocess"]) == 0
    assert seen == [True, False]


class _StubSandboxRunner:
    name = "sandbox"

    def __init__(self, *args, **kwargs) -> None:
        pass


def test_factory_canaries_runs_a_caches_untrusted_apps_in_the_sandbox_by_default(tmp_path, monkeypatch):
    from envcore.factory import canaries

    cache = _cache_of_the_notes_app(tmp_path)
    monkeypatch.setattr(envcore.sandbox, "SandboxRunner", _StubSandboxRunner)  # no sandbox started for this
    used = []

    def panel_rewards(bundle, runner):
        used.append(runner.name)
        return {"untouched": 0.0, "reference fix": 1.0}

    monkeypatch.setattr(canaries, "panel_rewards", panel_rewards)
    assert main(["factory", "canaries", str(cache), "--per-class", "0"]) == 0
    assert main(["factory", "canaries", str(cache), "--per-class", "0", "--runner", "inprocess"]) == 0
    assert used == ["sandbox", "inprocess"]


@pytest.mark.parametrize("command", ["check", "canaries", "import"])
def test_every_factory_command_that_runs_apps_says_where_they_run_by_default(command, capsys):
    with pytest.raises(SystemExit) as done:
        main(["factory", command, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--runner {sandbox,inprocess}" in text
    assert "sandbox (the default" in text and "inprocess (" in text


# -- 2. libraries that keep a thread, and children that never answer ---------------------------------------

AIOSQLITE_APP = '''\
from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import String, select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

engine = create_async_engine("sqlite+aiosqlite:///./items.db")
Session = async_sessionmaker(engine, expire_on_commit=False)


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(50))


@asynccontextmanager
async def lifespan(app):
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    async with Session() as session:
        if (await session.scalars(select(Item))).first() is None:
            session.add(Item(name="seed-item"))
            await session.commit()
    yield
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


class ItemIn(BaseModel):
    name: str


@app.get("/items")
async def items():
    async with Session() as session:
        return [item.name for item in await session.scalars(select(Item))]


@app.post("/items", status_code=201)
async def add(body: ItemIn):
    async with Session() as session:
        session.add(Item(name=body.name))
        await session.commit()
    return {"name": body.name}
'''

AIOSQLITE_RUN = '''\
import json
import sys

from envcore.runner.base import AppSource
from envcore.runner.inprocess import InProcessRunner
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep

def probe(probe_id, *steps):
    return Probe(id=probe_id, kind=ProbeKind.REGRESSION, title=probe_id, steps=steps)

seeded = {"kind": "body_includes", "texts": ["seed-item"]}
probes = [
    probe("reads", ProbeStep(method="GET", path="/items", expect=({"kind": "status_in", "codes": [200]}, seeded))),
    probe("writes", ProbeStep(method="POST", path="/items", json_body={"name": "new-item"},
                              expect=({"kind": "status_in", "codes": [201]},)),
          ProbeStep(method="GET", path="/items", expect=({"kind": "body_includes", "texts": ["new-item"]},))),
    probe("fresh", ProbeStep(method="GET", path="/items",
                             expect=(seeded, {"kind": "body_excludes", "texts": ["new-item"]}))),
]
with InProcessRunner(isolate_probes=True) as runner:
    report = runner.run(AppSource({"main.py": sys.argv[1]}, "main:app"), probes, {})
print(json.dumps({"load_error": report.load_error,
                  "outcomes": {o.probe_id: [o.passed, o.failures] for o in report.outcomes}}))
'''


def test_an_aiosqlite_app_is_served_in_process_without_hanging(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(AIOSQLITE_RUN)
    proc = subprocess.Popen([sys.executable, str(script), AIOSQLITE_APP], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the runner and the fork it waits on
        proc.communicate()
        pytest.fail("the in-process runner hung on an aiosqlite app")
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["load_error"] is None
    assert result["outcomes"] == {"reads": [True, []], "writes": [True, []], "fresh": [True, []]}


SQLITE_AT_IMPORT_APP = '''\
import sqlite3

from fastapi import FastAPI

db = sqlite3.connect("notes.db")
db.execute("CREATE TABLE IF NOT EXISTS notes (text TEXT)")
db.execute("INSERT INTO notes VALUES ('seed-note-5521')")
db.commit()
app = FastAPI()


@app.get("/notes")
def notes():
    return [row[0] for row in db.execute("SELECT text FROM notes")]
'''


def test_a_sqlite_connection_made_at_import_serves_sync_routes_in_process_as_in_the_sandbox():
    """A worker serves a sync route on its one thread, so a connection the import made works there;
    in process the route ran in a thread pool, and SQLite refused a connection from another thread."""
    seen = _probe("notes", _get("/notes", {"kind": "status_in", "codes": [200]},
                                {"kind": "body_includes", "texts": ["seed-note-5521"]}))
    with InProcessRunner(isolate_probes=True) as runner:
        report = runner.run(AppSource({"main.py": SQLITE_AT_IMPORT_APP}, "main:app"), [seen, seen], {})
    assert report.loaded, report.load_error
    assert [o.passed for o in report.outcomes] == [True, True], [o.failures for o in report.outcomes]


HANGING_APP = '''\
import time

from fastapi import FastAPI

app = FastAPI()


@app.get("/hang")
def hang():
    time.sleep(600)


@app.get("/ok")
def ok():
    return {"ok": True}
'''


def test_a_forked_copy_that_never_answers_is_stopped_at_the_deadline_and_its_probe_fails():
    hang = _probe("hang", _get("/hang", {"kind": "status_in", "codes": [200]}))
    ok = _probe("ok", _get("/ok", {"kind": "status_in", "codes": [200]}))
    before = _children()
    limits = SandboxLimits(verify_timeout_s=1.0, probe_allowance_s=0.5)
    started = time.monotonic()
    with InProcessRunner(isolate_probes=True, limits=limits) as runner:
        report = runner.run(AppSource({"main.py": HANGING_APP}, "main:app"), [hang, ok, hang, ok], {})
    assert time.monotonic() - started < 30
    outcomes = {o.probe_id: o for o in report.outcomes}
    assert [o.passed for o in report.outcomes] == [False, True, False, True]
    assert "did not answer within 1.5 s" in " ".join(outcomes["hang"].failures), outcomes["hang"].failures
    assert _children() <= before  # stopped and reaped


def test_a_forked_copy_that_never_answers_fails_every_probe_of_its_batch_and_the_run_goes_on():
    hang = _probe("hang", _get("/hang", {"kind": "status_in", "codes": [200]}))
    ok = _probe("ok", _get("/ok", {"kind": "status_in", "codes": [200]}))
    limits = SandboxLimits(verify_timeout_s=1.0, probe_allowance_s=0.5)
    with InProcessRunner(isolate_probes=False, limits=limits) as runner:
        first, second = runner.run_batches(AppSource({"main.py": HANGING_APP}, "main:app"),
                                           [Batch((ok, hang)), Batch((ok,))], {})
    assert [o.passed for o in first.outcomes] == [False, False]  # which finished in time is order's luck
    assert "did not answer within 2 s" in " ".join(first.outcomes[0].failures)
    assert [o.passed for o in second.outcomes] == [True]


SLEEPY_HEALTH = main_py().replace('def health():\n    return {"ok": True}',
                                  'def health():\n    import time\n\n    time.sleep(120)\n    return {"ok": True}')


def _forks_of(pid: int) -> set[int]:
    """Children of ``pid`` that are forks of it (the same command line)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        children = {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()
    forks = set()
    for child in children:
        try:
            if Path(f"/proc/{child}/cmdline").read_bytes() == cmdline:
                forks.add(child)
        except OSError:
            continue
    return forks


def test_a_run_ended_by_sigterm_stops_its_fork_and_leaves_no_scratch_folder(tmp_path):
    assert "time.sleep(120)" in SLEEPY_HEALTH
    files = {**app_files(), "main.py": SLEEPY_HEALTH}
    folder = write_scenario(tmp_path / "sleepy", files, policy_fix(files))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "envcore", "factory", "import", str(folder), "--out",
                             str(tmp_path / "cache"), "--runner", "inprocess"], cwd=REPO,
                            env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # running the check: its folder made, a probe asleep in the health check (in a fork, or here)
        deadline, calm = time.monotonic() + 90, None
        forks: set[int] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            forks |= _forks_of(proc.pid)
            if list(scratch.glob("a01-inprocess-*")):
                calm = calm or time.monotonic()
                if time.monotonic() - calm > 4:
                    break
        assert proc.poll() is None, proc.communicate()
        assert list(scratch.glob("a01-inprocess-*"))
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode != 0
        assert not list(scratch.glob("a01-inprocess-*"))
        time.sleep(0.5)
        assert not [pid for pid in forks if _alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind
        except ProcessLookupError:
            pass


def test_a_scratch_folder_left_by_a_killed_run_is_removed_by_the_next_runner(tmp_path):
    code = ("import os, signal\nfrom envcore.runner.inprocess import InProcessRunner\n"
            f"runner = InProcessRunner(scratch_parent={str(tmp_path)!r})\n"
            "print(runner._root, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == -signal.SIGKILL
    abandoned = Path(proc.stdout.strip())
    assert abandoned.is_dir()
    with InProcessRunner(scratch_parent=str(tmp_path)) as alive:
        assert not abandoned.exists()
        with InProcessRunner(scratch_parent=str(tmp_path)) as another:
            assert alive._root.is_dir() and another._root.is_dir()  # a live runner's folder is never taken
    assert not list(tmp_path.glob("a01-inprocess-*"))


def test_a_runner_failure_during_an_import_is_said_in_one_line_not_a_traceback(tmp_path, capsys, monkeypatch):
    from envcore.cli import factory_cmd
    from envcore.runner.base import RunnerInfrastructureError

    def check_scenario(bundle, runner, **kw):
        raise RunnerInfrastructureError("probe batch child exited with status 17664")

    monkeypatch.setattr(factory_cmd, "check_scenario", check_scenario)
    files = app_files()
    folder = write_scenario(tmp_path / "notes", files, policy_fix(files))
    assert main(["factory", "import", str(folder), "--out", str(tmp_path / "cache"), "--runner", "inprocess"]) == 1
    out = capsys.readouterr().out
    assert f"cannot check {folder}: the inprocess runner failed: probe batch child exited with status 17664" in out


# -- 3. every probe on a freshly loaded app, in process too ----------------------------------------------

LOGINS = {u["username"]: {"email": f"{u['username']}@notes.test", "password": f"pw!{u['username'].split('.')[0]}-7731"}
          for u in USERS}
RATE_LIMITED_LOGIN = LOGIN_ROUTE.replace(
    "def login(email: str, password: str = \"\", password_b64: str = \"\"):\n",
    "def login(email: str, password: str = \"\", password_b64: str = \"\"):\n"
    "    SIGN_INS.append(email)\n"
    "    if len(SIGN_INS) > 3:  # a rate limit: 3 sign-ins per minute, kept in memory\n"
    "        raise HTTPException(status_code=429, detail=\"too many sign-ins\")\n",
).replace("\n@app.post", "\nSIGN_INS = []\n\n\n@app.post", 1)


def _rate_limited_login_scenario(folder: Path) -> Path:
    assert "len(SIGN_INS) > 3" in RATE_LIMITED_LOGIN and "SIGN_INS = []" in RATE_LIMITED_LOGIN
    files = app_files()
    files["main.py"] = main_py(routes=RATE_LIMITED_LOGIN)
    files["data/users.json"] = users_json(USERS, **LOGINS)
    fixed = {**policy_fix(files), "main.py": main_py(POLICY_IMPORTS, POLICY_CHECK, routes=RATE_LIMITED_LOGIN)}

    def login_path(login: dict) -> str:
        return f"/auth/login?email={quote(login['email'], safe='')}&password={quote(login['password'], safe='')}"

    users = []
    for user in USERS:
        login = LOGINS[user["username"]]
        users.append({**user, "credentials": {"kind": "login", "login_name": login["email"], "secret": login["password"],
                                              "login": {"path": login_path(login), "token_json": "access_token"}}})
    return write_scenario(folder, files, fixed, meta=metadata(users, shadow=DECLARED))


def test_a_login_rate_limit_does_not_fail_the_in_process_import_or_check(tmp_path, capsys):
    folder = _rate_limited_login_scenario(tmp_path / "limited")
    code = main(["factory", "import", str(folder), "--out", str(tmp_path / "cache"), "--runner", "inprocess"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "429" not in out
    code = main(["factory", "check", str(tmp_path / "cache"), "--runner", "inprocess", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 of 1 scenarios valid" in out


# -- 4. factory show says what each step sends ----------------------------------------------------------


def test_factory_show_prints_what_an_exploit_sends(tmp_path, capsys):
    files = app_files()
    listed = probes()
    listed.append({"id": "sec-bob-climbs", "kind": "security", "title": "bob cannot list alice's notes by path",
                   "sites": ["admin.notes"], "repeats": "sec-bob-lists",
                   "steps": [_step("bob.marsh", "GET", "/api/admin/notes", [status(401, 403, 404)],
                                   query={"owner": "../alice.wong"}, headers={"X-Forwarded-User": "alice.wong"})]})
    listed.append({"id": "reg-carol-form", "kind": "regression", "title": "carol posts a note as a form",
                   "steps": [_step("carol.diaz", "POST", "/api/notes", [status(200, 201, 422)],
                                   form={"text": "carol-form-" + "x" * 80})]})
    folder = write_scenario(tmp_path / "notes", files, policy_fix(files), probe_list=listed)
    bundle = load_bundle_dir(folder)
    add_to_cache(tmp_path / "cache", [(bundle, "test")], generator="import")
    assert main(["factory", "show", bundle.scenario_id[:8], "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "bob.marsh: GET /api/admin/notes?owner=../alice.wong [headers: X-Forwarded-User] -> " in out
    assert 'carol.diaz: POST /api/notes {"text": "carol-new-4410"} -> ' in out
    assert f'carol.diaz: POST /api/notes form {{"text": "carol-form-{"x" * 49}..."}} -> ' in out
    assert "anonymous: GET /api/health -> " in out
    users = out[out.index("\nUsers"):out.index("\nShadow")]
    assert "alice.wong" in users and "bearer" in users
    shadow = out[out.index("\nShadow"):]
    assert "alice-plan-7731" in shadow and "bob.marsh" in shadow


def test_factory_show_names_each_users_credentials_and_a_missing_shadow(tmp_path, capsys):
    meta = metadata([{**u, "credentials": {"kind": "header", "name": "X-API-Key"}} for u in USERS], shadow=None)
    folder = write_scenario(tmp_path / "keys", app_files(), None, meta=meta)
    bundle = load_bundle_dir(folder, require_fix=False)
    add_to_cache(tmp_path / "cache", [(bundle, "test")], generator="import")
    assert main(["factory", "show", bundle.scenario_id[:8], "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    users = out[out.index("\nUsers"):out.index("\nShadow")]
    assert users.count("header X-API-Key") == 3
    assert "none declared" in out[out.index("\nShadow"):]

    login = load_bundle_dir(_rate_limited_login_scenario(tmp_path / "login"))
    add_to_cache(tmp_path / "cache2", [(login, "test")], generator="import")
    assert main(["factory", "show", login.scenario_id[:8], "--cache", str(tmp_path / "cache2")]) == 0
    out = capsys.readouterr().out
    users = out[out.index("\nUsers"):out.index("\nShadow")]
    assert users.count("login POST /auth/login") == 3 and "pw!" not in users  # the password stays out


# -- 5. a load profile measures the app, not the first import of a library ------------------------------

LIBRARY_HEAVY_APP = '''\
import time

import faker
from slowapi import Limiter
from sqlalchemy.ext.asyncio import create_async_engine
from fastapi import FastAPI

time.sleep(1.5)  # the app's own slow start
app = FastAPI()
'''

PROFILE_RUN = '''\
import json
import sys

from envcore.runner.inprocess import InProcessRunner
from envcore.runner.base import AppSource
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep

probe = Probe(id="p", kind=ProbeKind.REGRESSION, title="p", steps=(ProbeStep(method="GET", path="/docs"),))
with InProcessRunner(diagnostics=True) as runner:
    report = runner.run(AppSource({"main.py": sys.argv[1]}, "main:app"), [probe], {})
profile = report.load_profile
print(json.dumps([[e.seconds, e.line, e.source] for e in profile.entries] if profile else None))
'''


def test_an_in_process_load_profile_does_not_charge_a_librarys_first_import_to_the_app(tmp_path):
    script = tmp_path / "profile.py"
    script.write_text(PROFILE_RUN)
    proc = subprocess.run([sys.executable, str(script), LIBRARY_HEAVY_APP], cwd=REPO, capture_output=True,
                          text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    entries = json.loads(proc.stdout.strip().splitlines()[-1])
    assert entries, "a load of more than a second is profiled"
    sleep_line = 1 + LIBRARY_HEAVY_APP.splitlines().index("time.sleep(1.5)  # the app's own slow start")
    assert entries[0][1] == sleep_line, entries
    imports = sum(seconds for seconds, _, source in entries if source.startswith(("import ", "from ")))
    assert imports < 0.15, entries
