"""Attacks on fault attribution: one test per attack class, named after the attack.

Reward ``None`` ("infrastructure error": nobody's fault, dropped from training) is only for a failure
of the sandbox itself. Anything the agent's files cause is the patch's fault and costs what a broken
app costs: a path that collides with a data file or folder, names the filesystem refuses, a tree
that cannot be written, a workspace too large to send to a worker, an app that kills its own worker
while loading. And no spawn or retry loop of the sandbox runs unbounded.
"""

from __future__ import annotations

import signal

import pytest

from envcore.patching import apply_patch
from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.sandbox import Sandbox, SandboxLimits, supported_platform
from envcore.sandbox.pool import SPAWN_ATTEMPTS, AppLoadFailure
from envcore.verifier import verify
from tests.sandbox_kit import sandbox_fixture

pytestmark = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")

LIMITS = SandboxLimits(request_timeout_s=2, load_timeout_s=4, verify_timeout_s=20, cpu_s=3, memory_mb=160)

sb = sandbox_fixture(LIMITS)


@pytest.fixture(scope="module")
def target(bundle_for):
    return bundle_for(5)


def assert_patch_fault(report):
    """Graded as the app's failure to load: a number, never the 'no reward' of an infrastructure error."""
    assert report.outcome == "load_error", report.summary()
    assert report.reward == 0.0 and report.infrastructure_error is None
    return report


@pytest.mark.parametrize("path, why", [
    ("data/seed.json/evil.py", "is a file"),
    ("instance/secrets.txt/x.py", "is a file"),
    ("a" * 300 + ".py", "bytes"),
    ("/".join(["d"] * 40) + "/deep.py", "deep"),
    ("bad\ud800name.py", "Unicode"),
    ("nul\x00name.py", "control"),
    ("line\u2028break.py", "control"),
    ("__pycache__/x.py", "reserved"),
    ("a//b.py", "empty name"),
    ("../escape.py", "escapes"),
    ("/etc/evil.py", "absolute"),
], ids=["under-a-data-file", "under-a-secrets-file", "name-too-long", "too-deep", "lone-surrogate", "nul",
        "line-separator", "pycache", "empty-name", "climbs-out", "absolute"])
def test_a_file_the_filesystem_cannot_hold_is_the_patchs_fault(sb, target, path, why):
    files = {**target.files, path: "X = 1\n"}
    report = assert_patch_fault(verify(target, files, sandbox=sb))
    assert why in report.load_error, report.load_error


def test_a_workspace_too_large_to_send_to_a_worker_is_the_patchs_fault(sb, target):
    files = {**target.files, "app/huge.py": "# " + "x" * (9 << 20) + "\n"}
    report = assert_patch_fault(verify(target, files, sandbox=sb))
    assert "bytes" in report.load_error


def test_source_that_is_not_unicode_is_the_patchs_fault(sb, target):
    path = next(p for p in target.files if p.endswith(".py"))
    files = {**target.files, path: target.files[path] + "\nNAME = '\ud800'\n"}
    assert_patch_fault(verify(target, files, sandbox=sb))


@pytest.mark.parametrize("how", [
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
    "import os\nos._exit(3)",
    "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
    "import time\nwhile True:\n    pass",  # CPU limit or load timeout
], ids=["sigkill", "exit", "segv", "spin"])
def test_an_app_that_kills_its_worker_while_loading_is_the_patchs_fault(sb, target, how):
    entry = target.entrypoint.partition(":")[0].replace(".", "/") + ".py"
    path = entry if entry in target.files else entry.replace(".py", "/__init__.py")
    files = {**target.files, path: target.files[path] + "\n" + how + "\n"}
    assert_patch_fault(verify(target, files, sandbox=sb))
    assert verify(target, apply_patch(target.files, target.reference_fix), sandbox=sb).reward == 1.0


def test_spawning_gives_up_after_a_bounded_number_of_attempts(target, monkeypatch):
    """A sandbox whose workers keep dying before they get the app fails as the sandbox, and soon."""
    box = Sandbox(limits=LIMITS, spares=0, templates=0).start()
    try:
        attempts = []

        def dies(source, diagnose=False):
            attempts.append(source)
            return None

        monkeypatch.setattr(box, "_spawn_fresh", dies)
        with pytest.raises(RunnerInfrastructureError, match="attempts"):
            box.spawn(AppSource(target.files, target.entrypoint))
        assert len(attempts) == SPAWN_ATTEMPTS
        report = verify(target, target.files, sandbox=box)
        assert report.outcome == "infrastructure_error" and report.reward is None
    finally:
        box.close()


def test_a_worker_the_sandbox_could_not_write_files_for_is_an_infrastructure_error(target, monkeypatch):
    """The one kind of write failure that is ours: the disk under the sandbox is full."""
    import errno

    import envcore.sandbox.pool as pool

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    box = Sandbox(limits=LIMITS, spares=0, templates=0).start()
    try:
        monkeypatch.setattr(pool, "materialize", full)
        report = verify(target, target.files, sandbox=box)
        assert report.outcome == "infrastructure_error" and "space" in report.infrastructure_error
        monkeypatch.setattr(pool, "materialize", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENAMETOOLONG, "x")))
        assert verify(target, target.files, sandbox=box).outcome == "load_error"
    finally:
        box.close()


def test_loading_a_tree_with_a_problem_raises_the_apps_load_failure(sb, target):
    with pytest.raises(AppLoadFailure, match="is a file"):
        sb.spawn(AppSource({**target.files, "data/seed.json/x.py": ""}, target.entrypoint))
    assert signal.SIGKILL  # the sandbox is untouched: the next app loads
    with sb.load(AppSource(target.files, target.entrypoint)) as worker:
        assert worker.containment
