"""The load profile a scenario's author is shown, and the warning for a load near its deadline.

``factory import`` and ``factory check`` show where a load's time went when it failed, overran its
deadline or was slow (:mod:`envcore.runner.diagnostics`). Three things hold here:

* a load that finished is described by the profile its own ``ready`` report carries, or by none:
  never by the profile the worker streamed while it was still loading (a fast load has no profile);
* a load that fails after another load of the same app succeeded is shown with *its own* profile,
  next to the probe it failed, not with the profile of the load that succeeded;
* a load that succeeds but takes more than half of the load deadline is warned about, with the time,
  the deadline and where the time went: on a busy machine such an app passes or fails by chance.

The slow loads are made deterministic: the apps sleep a known time while they load, and a load that
must fail is given a deadline shorter than that sleep.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import envcore.factory.check as check_module
import envcore.sandbox.default as default_sandbox_module
from envcore.cli import main
from envcore.factory.check import Diagnostics
from envcore.runner.base import AppSource
from envcore.runner.diagnostics import REPORT_EVERY_S, SLOW_LOAD_S, LoadProfile
from envcore.sandbox import supported_platform
from envcore.sandbox.limits import SandboxLimits
from envcore.sandbox.wire import send_frame
from envcore.scenario.probes import Probe

linux_only = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")

SLEEPY_APP = '''\
"""A notes API that warms a cache while it loads (as hashing its users' passwords at cost 12 would)."""

import time

from fastapi import FastAPI, Header, HTTPException

app = FastAPI()
TOKENS = {"tok_alice_4242": "alice", "tok_bob_7373": "bob"}
NOTES = {"n1": {"id": "n1", "owner": "alice", "text": "alice's note"},
         "n2": {"id": "n2", "owner": "bob", "text": "bob's note"}}


def warm_cache():
    time.sleep(LOAD_SECONDS)


warm_cache()


@app.get("/api/notes/{note_id}")
def read_note(note_id: str, authorization: str | None = Header(default=None)):
    if TOKENS.get((authorization or "").removeprefix("Bearer ")) is None:
        raise HTTPException(status_code=401, detail="sign in")
    note = NOTES.get(note_id)
    if note is None:
        raise HTTPException(status_code=404, detail="no such note")
    return note
'''

SCENARIO = {
    "title": "Notes API", "domain": "notes", "bug_class": "idor", "cwe": ["CWE-639"], "entrypoint": "main:app",
    "task": "Fix the access control of the notes API.", "policy": "A note may be read only by its owner.",
    "users": [{"username": "alice", "role": "user", "user_id": "1", "token": "tok_alice_4242"},
              {"username": "bob", "role": "user", "user_id": "2", "token": "tok_bob_7373"}],
    "sites": [{"site": "notes.read", "method": "GET", "path": "/api/notes/{note_id}"}],
}
PROBES = [
    {"id": "reg-own-notes", "kind": "regression", "visible": True, "title": "each user reads their own note",
     "steps": [{"actor": "alice", "method": "GET", "path": "/api/notes/n1",
                "expect": [{"kind": "status_in", "codes": [200]}]},
               {"actor": "bob", "method": "GET", "path": "/api/notes/n2",
                "expect": [{"kind": "status_in", "codes": [200]}]}]},
    {"id": "sec-other-note", "kind": "security", "title": "bob cannot read alice's note",
     "steps": [{"actor": "bob", "method": "GET", "path": "/api/notes/n1",
                "expect": [{"kind": "status_in", "codes": [403, 404]}]}]},
]
"""A valid scenario (the app is vulnerable, every canary breaks the visible use), whatever the app's
load time."""


def sleepy_app(seconds: float) -> str:
    return SLEEPY_APP.replace("LOAD_SECONDS", repr(seconds))


SLEEP_LINE = f"app/main.py:{next(n for n, line in enumerate(SLEEPY_APP.splitlines(), 1) if 'time.sleep' in line)}" \
             " in warm_cache"


def scenario_folder(root: Path, seconds: float) -> Path:
    """A scenario folder (no fix.diff: imported with ``--allow-no-fix``) whose app sleeps ``seconds`` as it loads."""
    (root / "app").mkdir(parents=True)
    (root / "app" / "main.py").write_text(sleepy_app(seconds), encoding="utf-8")
    (root / "scenario.yaml").write_text(json.dumps(SCENARIO), encoding="utf-8")  # JSON is YAML
    (root / "probes.yaml").write_text(json.dumps(PROBES), encoding="utf-8")
    return root


def profile_json(seconds: float, finished: bool) -> dict:
    return LoadProfile(seconds, finished, (), 0.0).to_json() | {
        "entries": [[seconds, "app/main.py", 14, "warm_cache", "time.sleep(9)"]]}


# -- the parent's reading of a load (a scripted worker on a socket pair) ----------------------------


class FakeSandbox:
    """What a :class:`~envcore.sandbox.pool.Worker` asks of its sandbox, with nothing behind it."""

    def __init__(self, load_timeout_s: float = 5.0) -> None:
        self.limits = SandboxLimits(load_timeout_s=load_timeout_s)
        self.zygote_restarts = 0
        self.stats: dict[str, int] = {}

    def kill_worker(self, pid: int) -> None:
        pass

    def release_slot(self, *, busy: bool = False) -> None:
        pass

    def discard_workspace(self, path: str) -> None:
        pass


@pytest.fixture
def scripted_worker():
    """A parent's :class:`Worker` asked for diagnostics, and a function that sends it frames as its
    worker process would."""
    from envcore.sandbox.pool import Worker

    made: list[tuple[Worker, socket.socket]] = []

    def make(*frames: dict, load_timeout_s: float = 5.0) -> Worker:
        parent, child = socket.socketpair()
        worker = Worker(FakeSandbox(load_timeout_s), 0, parent, "/nonexistent")
        worker.diagnose = True
        for frame in frames:
            send_frame(child, frame)
        made.append((worker, child))
        return worker

    yield make
    for worker, child in made:
        worker.close()
        child.close()


def test_a_fast_load_keeps_none_of_the_profile_it_streamed_while_loading(scripted_worker):
    """The bogus "the app was still loading after 0.25 s" after every fast load: the profile streamed
    while loading is replaced by the ready report's, which a fast load's lacks."""
    worker = scripted_worker({"type": "profile", "profile": profile_json(REPORT_EVERY_S, False)},
                             {"type": "ready", "containment": {}, "timings_ms": {}})
    worker.wait_ready(5.0)
    assert worker.load_profile is None


def test_a_slow_load_keeps_the_profile_its_ready_report_carries(scripted_worker):
    worker = scripted_worker({"type": "profile", "profile": profile_json(REPORT_EVERY_S, False)},
                             {"type": "ready", "containment": {}, "profile": profile_json(1.6, True)})
    worker.wait_ready(5.0)
    assert worker.load_profile is not None
    assert worker.load_profile.finished and worker.load_profile.seconds == 1.6
    assert worker.load_profile.deadline_s == 5.0  # the sandbox's load deadline, which the warning names


def test_a_finished_load_is_slow_past_a_second_or_past_half_its_deadline(scripted_worker):
    quick = scripted_worker({"type": "ready", "containment": {}, "profile": profile_json(0.6, True)})
    quick.wait_ready(5.0)
    assert quick.load_profile is None  # well within a second and a 5 s deadline: nothing to say
    near = scripted_worker({"type": "ready", "containment": {}, "profile": profile_json(0.6, True)},
                           load_timeout_s=1.0)
    near.wait_ready(1.0)
    assert near.load_profile is not None and near.load_profile.seconds == 0.6  # over half of a 1 s deadline


def test_a_load_stopped_at_its_deadline_keeps_the_last_profile_it_streamed(scripted_worker):
    from envcore.sandbox.pool import AppLoadFailure

    worker = scripted_worker({"type": "profile", "profile": profile_json(0.25, False)},
                             {"type": "profile", "profile": profile_json(0.5, False)})
    with pytest.raises(AppLoadFailure, match="did not finish loading") as failure:
        worker.wait_ready(0.3)
    assert failure.value.profile is not None
    assert not failure.value.profile.finished and failure.value.profile.seconds == 0.5


def test_a_failed_load_keeps_the_profile_its_error_report_carries(scripted_worker):
    from envcore.sandbox.pool import AppLoadFailure

    worker = scripted_worker({"type": "profile", "profile": profile_json(0.25, False)},
                             {"type": "load_error", "error": "startup failed: boom", "containment": {},
                              "profile": profile_json(0.4, True)})
    with pytest.raises(AppLoadFailure, match="boom") as failure:
        worker.wait_ready(5.0)
    assert failure.value.profile is not None and failure.value.profile.finished
    assert failure.value.profile.seconds == 0.4


# -- in the sandbox ------------------------------------------------------------------------------


@pytest.fixture
def shared_default_sandbox(sandbox, monkeypatch):
    """``factory import`` in the sandbox runs on the test session's sandbox (no zygote of its own)."""
    monkeypatch.setattr(default_sandbox_module, "_default", sandbox)
    return sandbox


def with_load_deadline(sandbox, monkeypatch, load_timeout_s: float) -> None:
    """The session's sandbox, with another load deadline (and room for the loads in the run's budget)."""
    monkeypatch.setattr(sandbox, "limits", replace(sandbox.limits, load_timeout_s=load_timeout_s,
                                                   verify_timeout_s=max(sandbox.limits.verify_timeout_s,
                                                                        8 * load_timeout_s)))


def loads_reported(out: str) -> list[float]:
    return [float(x) for x in re.findall(r"took (\d+\.\d+) s to load", out)]


@linux_only
def test_a_worker_that_loads_fast_reports_no_profile(sandbox):
    """The app sleeps past the first streamed profile (0.25 s) and finishes well before a second."""
    worker = sandbox.spawn(AppSource({"main.py": sleepy_app(0.4)}, "main:app"), diagnose=True)
    with worker:
        worker.wait_ready(sandbox.limits.load_timeout_s)
    profile = worker.load_profile
    assert profile is None or (profile.finished and profile.seconds > SLOW_LOAD_S), profile  # (a very busy machine)


@linux_only
def test_factory_import_of_an_app_that_loads_fast_prints_no_load_profile(tmp_path, capsys, shared_default_sandbox):
    folder = scenario_folder(tmp_path / "fast", 0.4)
    assert main(["factory", "import", str(folder), "--out", str(tmp_path / "cache"), "--allow-no-fix"]) == 0
    out = capsys.readouterr().out
    assert "still loading" not in out, out
    assert all(seconds > SLOW_LOAD_S for seconds in loads_reported(out)), out  # only a load a busy machine slowed
    assert "load deadline" not in out, out


@linux_only
def test_a_load_that_fails_after_another_succeeded_is_shown_with_its_own_profile(sandbox, monkeypatch):
    """The first load of the run gets the whole deadline and succeeds (slowly); every later load is
    given one second, as a busy machine would leave it, and is stopped while its app still sleeps.
    Each probe that lost its load is shown with the profile of *that* load, not the one that worked."""
    from envcore.sandbox import pool
    from envcore.sandbox.runner import run_sandboxed

    with_load_deadline(sandbox, monkeypatch, 10.0)
    original = pool.Worker.wait_ready
    loads: list[float] = []
    lock = threading.Lock()

    def wait_ready(self, timeout_s):
        with lock:
            loads.append(timeout_s)
            first = len(loads) == 1
        return original(self, timeout_s if first else min(timeout_s, 1.0))

    monkeypatch.setattr(pool.Worker, "wait_ready", wait_ready)
    probes = [Probe.model_validate(PROBES[0]),
              *(Probe.model_validate({**PROBES[1], "id": f"sec-other-note-{n}"}) for n in range(2))]
    actors = {u["username"]: u["token"] for u in SCENARIO["users"]}
    report = run_sandboxed(sandbox, AppSource({"main.py": sleepy_app(2.0)}, "main:app"), probes, actors,
                           diagnose=True)
    assert report.loaded and len(loads) == 3
    assert report.outcomes[0].passed
    failed = [o for o in report.outcomes if not o.passed]
    assert [o.probe_id for o in failed] == ["sec-other-note-0", "sec-other-note-1"]
    assert all("the app did not load for this check: the app did not finish loading within 1 s" in o.failures[0]
               for o in failed)
    # the load that succeeded: finished, two seconds or more
    assert report.load_profile is not None and report.load_profile.finished
    assert report.load_profile.seconds >= 2.0
    # each load that failed: its own profile, unfinished, next to its probe
    lost = {e.probe_id: e for e in report.app_errors if e.load_failed}
    assert set(lost) == {"sec-other-note-0", "sec-other-note-1"}
    for error in lost.values():
        assert error.profile is not None and not error.profile.finished and error.profile.seconds < 2.0
        assert error.profile.entries and error.profile.entries[0].source == "time.sleep(2.0)"
    # as the author reads it
    diagnostics = Diagnostics()
    diagnostics.load(report, "the vulnerable app")
    for outcome in failed:
        diagnostics.failed(report, outcome)
    text = "\n".join(diagnostics.render())
    assert "the app did not load for probe sec-other-note-0 (GET /api/notes/n1 as bob)" in text, text
    assert "the app did not finish loading within 1 s" in text
    assert "the app was still loading after" in text and SLEEP_LINE in text and "time.sleep(2.0)" in text
    assert "to load;" not in text, text  # the load that succeeded explains nothing here
    assert text.count("still loading after") == 1, text  # the same place the time went: said once


@linux_only
def test_factory_import_warns_of_a_load_that_takes_more_than_half_its_deadline(tmp_path, capsys,
                                                                               shared_default_sandbox, monkeypatch):
    """With a 4 s deadline, an app that sleeps 2.2 s as it loads passes, and is warned about: its
    load time, the deadline and where the time went."""
    with_load_deadline(shared_default_sandbox, monkeypatch, 4.0)
    # the checks that load the vulnerable app (each of its loads takes the sleep's time)
    monkeypatch.setattr(check_module, "CHECKS", tuple(c for c in check_module.CHECKS
                                                      if c[0] in ("actors", "structure", "vulnerable")))
    folder = scenario_folder(tmp_path / "near", 2.2)
    assert main(["factory", "import", str(folder), "--out", str(tmp_path / "cache"), "--allow-no-fix"]) == 0
    out = capsys.readouterr().out
    warning = next((line for line in out.splitlines() if line.startswith(f"warning: {folder}: the app took")), None)
    assert warning is not None, out
    seconds = float(re.search(r"the app took (\d+\.\d+) s to load", warning).group(1))
    assert 2.2 <= seconds < 4.0
    assert "more than half of its 4 s load deadline" in warning
    assert SLEEP_LINE in warning and "time.sleep(2.2)" in warning
