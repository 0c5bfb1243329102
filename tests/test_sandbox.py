"""The sandbox's machinery: zygote and workers, the wire protocol, live apps, the audit policy, the
seccomp filter, and parity with the in-process runner (the scenario check runs on either)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

import pytest

from envcore.factory.check import check_scenario
from envcore.runner.base import AppSource, Batch, Gate
from envcore.runner.http import HttpRequest
from envcore.sandbox import LiveApp, Sandbox, SandboxLimits, SandboxRunner, supported_platform
from envcore.sandbox import seccomp
from envcore.sandbox.audit import AuditPolicy
from envcore.sandbox.wire import FrameReader, PeerClosed, WireError, WireTimeout, encode, send_frame

pytestmark = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")


def app_source(bundle, files=None):
    return AppSource(files or bundle.files, bundle.entrypoint)


def entry_path(bundle):
    """The file of the app's entry module (where injected routes go)."""
    module = bundle.entrypoint.split(":")[0].replace(".", "/")
    return f"{module}.py" if f"{module}.py" in bundle.files else f"{module}/__init__.py"


def with_entry_code(bundle, code, files=None):
    """The bundle's files (or ``files``) with ``code`` appended to the entry module."""
    files = dict(files or bundle.files)
    files[entry_path(bundle)] += code
    return files


def tokens(bundle):
    return {u.username: u.token for u in bundle.users}


# -- parity with the in-process runner ------------------------------------------------------------

@pytest.mark.slow  # the whole scenario check again, on the sandbox; verdict parity is tested by default below
def test_scenario_check_passes_on_the_sandbox_runner(sandbox, shipped):
    runner = SandboxRunner(sandbox)
    for scenario_id in shipped.ids()[:6]:
        report = check_scenario(shipped.load(scenario_id), runner, fail_fast=False)
        assert report.ok, report.summary()


def test_sandbox_and_inprocess_runners_agree_probe_by_probe(sandbox, shipped, runner):
    box = SandboxRunner(sandbox)
    for scenario_id in shipped.ids()[10:14]:
        bundle = shipped.load(scenario_id)
        a = runner.run(app_source(bundle), bundle.probes, tokens(bundle))
        b = box.run(app_source(bundle), bundle.probes, tokens(bundle))
        assert [(o.probe_id, o.passed) for o in a.outcomes] == [(o.probe_id, o.passed) for o in b.outcomes]
        assert [[s.status for s in o.steps] for o in a.outcomes] == [[s.status for s in o.steps] for o in b.outcomes]


def test_gates_are_applied_in_the_parent(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[0])
    batch = Batch(bundle.probes, Gate(403, None, "deny_all"))
    [report] = SandboxRunner(sandbox).run_batches(app_source(bundle), [batch], tokens(bundle))
    assert all(step.status == 403 for o in report.outcomes for step in o.steps)
    assert report.containment is None  # nothing reached a worker: none was started


def test_stop_on_failure_reports_up_to_the_first_failure(sandbox, shipped, runner):
    bundle = shipped.load(shipped.ids()[0])
    probes = sorted(bundle.probes, key=lambda p: p.kind.value != "security")  # a failing probe first
    a = runner.run(app_source(bundle), probes, tokens(bundle), stop_on_failure=True)
    b = SandboxRunner(sandbox).run(app_source(bundle), probes, tokens(bundle), stop_on_failure=True)
    assert b.stopped_early and [o.probe_id for o in a.outcomes] == [o.probe_id for o in b.outcomes]


# -- zygote and workers ---------------------------------------------------------------------------

def test_workers_report_every_containment_layer(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[0])
    with sandbox.load(app_source(bundle)) as worker:
        layers = worker.containment
    assert layers["rlimits"] and layers["audit_hook"]
    assert layers["seccomp"] is seccomp.supported()
    if os.geteuid() == 0:
        assert layers["capabilities_dropped"]


def test_worker_environment_is_scrubbed(sandbox, shipped, monkeypatch):
    bundle = shipped.load(shipped.ids()[0])
    files = with_entry_code(bundle, "\n\n@app.get('/env')\nasync def _env():\n    import os\n    return sorted(os.environ)\n")
    with sandbox.load(app_source(bundle, files)) as worker:
        response = worker.request(HttpRequest("GET", "/env"), 2.0)
    assert response.status == 200
    assert sorted(eval(response.body)) == ["HOME", "LANG", "PATH", "TMPDIR"]  # noqa: S307 - a JSON list of names


@pytest.mark.slow  # test_sandbox_attacks restarts a killed zygote by default
def test_zygote_is_restarted_after_it_dies(shipped):
    bundle = shipped.load(shipped.ids()[0])
    with Sandbox(warm_up=False, spares=0) as box:
        first = box.zygote_pid
        os.kill(first, signal.SIGKILL)
        time.sleep(0.1)
        with box.load(app_source(bundle)) as worker:
            assert worker.request(HttpRequest("GET", "/"), 2.0).status is not None
        assert box.zygote_pid not in (None, first) and box.zygote_restarts == 1


def test_workers_die_with_their_zygote(shipped):
    bundle = shipped.load(shipped.ids()[0])
    with Sandbox(warm_up=False, spares=0) as box:
        worker = box.load(app_source(bundle))
        os.kill(box.zygote_pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(worker.pid, 0)
            except ProcessLookupError:
                break
            with open(f"/proc/{worker.pid}/stat") as stat:  # a zombie waiting for init counts as dead
                if stat.read().split(") ")[1].startswith("Z"):
                    break
            time.sleep(0.02)
        else:
            pytest.fail("the worker outlived its zygote")
        worker.close(kill=False)


def test_spares_are_prepared_and_used(shipped):
    bundle = shipped.load(shipped.ids()[0])
    with Sandbox(spares=1) as box:
        deadline = time.monotonic() + 10
        while not box._spares and time.monotonic() < deadline:
            time.sleep(0.02)
        with box.load(app_source(bundle)):
            pass
        assert (box.stats["spawns"], box.stats["from_spare"], box.stats["from_template"]) == (1, 1, 0)


def test_concurrent_verifications_share_one_sandbox(sandbox, shipped):
    from envcore.patching import apply_patch
    from envcore.verifier import Resolution, verify

    bundles = [shipped.load(i) for i in shipped.ids()[20:26]]
    results = []

    def work(bundle):
        results.append(verify(bundle, apply_patch(bundle.files, bundle.reference_fix), sandbox=sandbox).resolution)

    threads = [threading.Thread(target=work, args=(b,)) for b in bundles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [Resolution.FULL] * len(bundles)


def test_unsupported_platform_is_refused_with_a_reason(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert "Linux" in supported_platform()
    from envcore.runner.base import RunnerInfrastructureError

    with pytest.raises(RunnerInfrastructureError, match="Linux"):
        Sandbox()


# -- live apps ------------------------------------------------------------------------------------

def test_live_app_serves_the_current_code_and_restarts_after_update(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[0])
    with LiveApp(sandbox, app_source(bundle)) as live:
        assert live.request(HttpRequest("GET", "/version")).status == 404
        first_pid = live.pid
        files = with_entry_code(bundle, "\n\n@app.get('/version')\nasync def _version():\n    return {'v': 2}\n")
        live.update(app_source(bundle, files))
        assert not live.running
        response = live.request(HttpRequest("GET", "/version"))
        assert response.status == 200 and b'"v":2' in response.body
        assert live.pid != first_pid and response.note is None  # new code, not a restart


def test_live_app_recovers_from_a_crash_and_says_state_was_reset(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[0])
    files = with_entry_code(bundle, "\n\n@app.get('/die')\nasync def _die():\n    import os\n    os._exit(3)\n")
    with LiveApp(sandbox, app_source(bundle, files)) as live:
        crashed = live.request(HttpRequest("GET", "/die"))
        assert crashed.status is None and "exited with code 3" in crashed.error
        after = live.request(HttpRequest("GET", "/"))
        assert after.status is not None and "restarted" in after.note and live.restarts == 1


def test_live_app_reports_a_load_error(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[0])
    files = with_entry_code(bundle, "\ndef broken(:\n")
    with LiveApp(sandbox, app_source(bundle, files)) as live:
        response = live.request(HttpRequest("GET", "/"))
    assert response.status is None and "SyntaxError" in response.error and "SyntaxError" in live.load_error


def test_idle_live_workers_are_reaped(shipped):
    bundle = shipped.load(shipped.ids()[0])
    with Sandbox(limits=SandboxLimits(idle_s=0.2), warm_up=False, spares=0) as box:
        live = LiveApp(box, app_source(bundle))
        live.request(HttpRequest("GET", "/"))
        assert live.running
        deadline = time.monotonic() + 5
        while live.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not live.running
        assert live.request(HttpRequest("GET", "/")).note is not None  # reloaded on demand
        live.close()


# -- wire protocol --------------------------------------------------------------------------------

def test_frames_round_trip_with_a_blob():
    a, b = socket.socketpair()
    with a, b:
        send_frame(a, {"type": "x", "n": 1}, b"\x00body")
        assert FrameReader(b).read(time.monotonic() + 1) == ({"type": "x", "n": 1}, b"\x00body")


def test_oversized_frame_is_refused_before_it_is_read():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode({"type": "x"}, b"y" * 10)[:8])  # only the header: 10 blob bytes announced
        with pytest.raises(WireError, match="too large"):
            FrameReader(b).read(time.monotonic() + 1, max_blob=5)


def test_slow_or_missing_frame_times_out_and_closed_peer_is_reported():
    a, b = socket.socketpair()
    with b:
        a.sendall(encode({"type": "x"})[:5])
        reader = FrameReader(b)
        with pytest.raises(WireTimeout):
            reader.read(time.monotonic() + 0.05)
        a.close()
        with pytest.raises(PeerClosed):
            reader.read(time.monotonic() + 1)


def test_malformed_frame_is_a_wire_error():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"\x00\x00\x00\x03\x00\x00\x00\x00{x}")
        with pytest.raises(WireError, match="malformed"):
            FrameReader(b).read(time.monotonic() + 1)


# -- audit policy and seccomp ---------------------------------------------------------------------

@pytest.mark.parametrize(
    "event, args, allowed",
    [
        ("open", ("/ws/data/seed.json", "r", os.O_RDONLY), True),
        ("open", ("/ws/out.txt", "w", os.O_WRONLY | os.O_CREAT), True),
        ("open", ("/py/lib/json/__init__.py", "r", os.O_RDONLY), True),
        ("open", ("/py/lib/evil.py", "w", os.O_WRONLY | os.O_CREAT), False),
        ("open", ("/work/artifacts/scenarios/v1/x.json", "r", os.O_RDONLY), False),
        ("open", ("/ws/../etc/passwd", "r", os.O_RDONLY), False),
        ("open", ("/proc/1/environ", "rb", os.O_RDONLY), False),
        ("open", (3, "r", os.O_RDONLY), True),
        ("os.listdir", ("/ws",), True),
        ("os.listdir", ("/dev/shm",), False),
        ("os.remove", ("/ws/data/seed.json", -1), True),
        ("os.rename", ("/ws/a", "/tmp/a", -1, -1), False),
        ("os.symlink", ("/etc/passwd", "/ws/p", -1), False),
        ("os.system", (b"sh",), False),
        ("subprocess.Popen", ("sh", ["sh"], None, None), False),
        ("os.fork", (), False),
        ("os.kill", (1, 9), False),
        ("socket.__new__", (None, 2, 1, 0), False),
        ("ctypes.dlopen", ("libc.so.6",), False),
        ("import", ("ctypes", None, [], [], []), False),
        ("import", ("json", None, [], [], []), True),
        ("gc.get_objects", (None,), False),
        ("sqlite3.connect", (":memory:",), True),
        ("sqlite3.connect", ("/tmp/x.db",), False),
        ("sqlite3.load_extension", (None, "x"), False),
        ("compile", (b"x", "<string>"), True),
    ],
)
def test_audit_policy_decisions(event, args, allowed):
    policy = AuditPolicy("/ws", ["/py/lib"], max_new_files=8)
    assert (policy.decide(event, args) is None) is allowed


def test_audit_policy_caps_new_files(tmp_path):
    policy = AuditPolicy(str(tmp_path), [], max_new_files=2)
    flags = os.O_WRONLY | os.O_CREAT
    assert policy.decide("open", (str(tmp_path / "a"), "w", flags)) is None
    assert policy.decide("open", (str(tmp_path / "b"), "w", flags)) is None
    assert "at most 2 files" in policy.decide("open", (str(tmp_path / "c"), "w", flags))


def test_seccomp_filter_is_well_formed():
    program = seccomp.build_filter(1234)
    assert len(program) % 8 == 0 and len(program) // 8 < 4096  # the kernel's BPF_MAXINSNS


def test_the_shipped_warmup_samples_are_the_generators_own(tmp_path):
    """The sandbox warms up on samples shipped as data (it never imports the factory); they must be
    what the generator writes now (python -m envcore factory warmup-apps)."""
    from envcore.factory.warmup import write_warmup_apps
    from envcore.sandbox.warmup import SAMPLES, warmup_apps

    count = write_warmup_apps(tmp_path / "samples.json.gz")
    assert (tmp_path / "samples.json.gz").read_bytes() == SAMPLES.read_bytes(), \
        "stale warm-up samples: run python -m envcore factory warmup-apps"
    assert len(warmup_apps()) == count >= 4
