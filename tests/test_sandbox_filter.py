"""The seccomp filter is an allowlist: attacks through the system calls a denylist forgot.

Each attack first switches the audit hook off (``DISABLE_AUDIT_HOOK``, a known limit of audit hooks)
and then makes the raw system call through ``ctypes``, so what refuses it is the kernel: the seccomp
filter, installed last, after every other layer. ``-1, 1`` is the call's result and ``errno`` EPERM.
"""

from __future__ import annotations

import pytest

from envcore.sandbox import supported_platform
from envcore.verifier import Resolution, verify
from tests.sandbox_kit import (
    DISABLE_AUDIT_HOOK,
    GRADER_PID,
    assert_sandbox_healthy,
    call_json,
    module_fixtures,
    with_code,
    with_route,
)

pytestmark = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")

target, bundle, fixed, sb = module_fixtures()

EPERM = "(-1, 1)"

RAW = DISABLE_AUDIT_HOOK + '''
import ctypes as _ctypes
_libc = _ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = _ctypes.c_long


def _raw(number, *args):
    """A system call straight through libc: (result, errno)."""
    _ctypes.set_errno(0)
    result = _libc.syscall(_ctypes.c_long(number), *[_ctypes.c_long(a) for a in args])
    return result, _ctypes.get_errno()
'''


def raw_results(sb, bundle, files, calls: dict[str, str]) -> dict[str, str]:
    body = "return {" + ", ".join(f"{name!r}: repr(_raw({call}))" for name, call in calls.items()) + "}"
    return call_json(sb, bundle, with_route(files, body, prelude=RAW))


def test_signal_ownership_through_fcntl_and_ioctl_is_refused(sb, bundle, fixed):
    """F_SETOWN / F_SETSIG / F_SETOWN_EX and FIOSETOWN / SIOCSPGRP make the kernel signal a process of
    the app's choosing (the grader, the zygote) when the descriptor is ready."""
    calls = {
        "F_SETOWN": f"72, 0, 8, {GRADER_PID}",
        "F_SETSIG": "72, 0, 10, 9",
        "F_SETOWN_EX": "72, 0, 15, 0",
        "F_SETLEASE": "72, 0, 1024, 1",
        "F_NOTIFY": "72, 0, 1026, 1",
        "FIOSETOWN": f"16, 0, 0x8901, {GRADER_PID}",
        "SIOCSPGRP": f"16, 0, 0x8902, {GRADER_PID}",
        "FS_IOC_SETFLAGS": "16, 0, 0x40086602, 0",
    }
    results = raw_results(sb, bundle, fixed, calls)
    assert results == {name: EPERM for name in calls}, results
    assert_sandbox_healthy(sb)


def test_the_descriptor_commands_an_app_needs_still_work(sb, bundle, fixed):
    body = """
        import fcntl, os
        fd = os.open(__file__ if False else "data/seed.json", os.O_RDONLY)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a lock: succeeds, does nothing
        os.close(copy)
        os.close(fd)
        return {"flags": flags >= 0, "isatty": os.isatty(0), "pid": os.getpid() > 0}
    """
    results = call_json(sb, bundle, with_route(fixed, body))
    assert results == {"flags": True, "isatty": False, "pid": True}


def test_landlock_calls_are_refused_once_the_filter_is_on(sb, bundle, fixed):
    """No ruleset of the app's own (so none to put in place of the worker's freeze), no rule added."""
    calls = {
        "create_ruleset_version": "444, 0, 0, 1",
        "create_ruleset": "444, 0, 8, 0",
        "add_rule": "445, 3, 1, 0, 0",
        "restrict_self_other_fd": "446, 0, 0",
    }
    results = raw_results(sb, bundle, fixed, calls)
    assert results == {name: EPERM for name in calls}, results
    assert_sandbox_healthy(sb)


def test_replacing_the_freeze_ruleset_descriptor_is_a_load_error(sb, bundle, fixed):
    """The worker applies its freeze by descriptor number once the app has loaded: an app that puts
    another file in place of every descriptor it did not open itself leaves the freeze nothing to
    apply, and the worker reports a load error instead of serving an app that may still create files."""
    attack = """
        import os as _os, stat as _stat
        _null = _os.open("/dev/null", _os.O_RDONLY)
        for _fd in range(3, 256):
            if _fd == _null:
                continue
            try:
                _mode = _os.fstat(_fd).st_mode
            except OSError:
                continue
            if not _stat.S_ISSOCK(_mode):  # the socket to the parent stays
                _os.dup2(_null, _fd)
    """
    report = verify(bundle, with_code(fixed, attack), sandbox=sb)
    assert report.outcome == "load_error" and report.resolution is Resolution.NO, report.summary()
    assert report.reward == 0.0
    assert_sandbox_healthy(sb)


def test_the_worker_checks_its_own_freeze(sb, bundle, fixed):
    """Creating a file after load fails, whatever Python-level patching the app left behind."""
    body = """
        import os
        return {"create": _attempt(lambda: os.open("after-load.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL)),
                "mkdir": _attempt(lambda: os.mkdir("after-load"))}
    """
    results = call_json(sb, bundle, with_route(fixed, body, prelude=DISABLE_AUDIT_HOOK))
    assert results["create"]["permission"] and results["mkdir"]["permission"], results


def test_path_only_descriptors_that_would_stat_host_files_are_refused(sb, bundle, fixed):
    """``O_PATH`` opens are not checked by Landlock; with one, ``fstat`` would read any file's
    metadata."""
    body = """
        import os
        def path_fd(path):
            fd = os.open(path, os.O_PATH)
            return os.fstat(fd).st_mode
        return {"shadow": _attempt(lambda: path_fd("/etc/shadow")), "root": _attempt(lambda: path_fd("/"))}
    """
    results = call_json(sb, bundle, with_route(fixed, body, prelude=DISABLE_AUDIT_HOOK))
    assert all(r["permission"] for r in results.values()), results


def test_shared_counters_of_free_memory_and_disk_are_unreadable(sb, bundle, fixed):
    """Free memory and free disk space are counters one worker can move (allocate, write) and another
    read: a channel between rollouts."""
    calls = {"sysinfo": "99, 0", "statfs": "137, 0, 0", "fstatfs": "138, 0, 0", "mincore": "27, 0, 0, 0"}
    results = raw_results(sb, bundle, fixed, calls)
    assert results == {name: EPERM for name in calls}, results
    body = "import os\nreturn {'statvfs': _attempt(lambda: os.statvfs('.'))}"
    results = call_json(sb, bundle, with_route(fixed, body, prelude=DISABLE_AUDIT_HOOK))
    assert results["statvfs"]["permission"], results


def test_an_app_cannot_add_a_filter_of_its_own(sb, bundle, fixed):
    """A filter of the app's own could fake the result of the worker's later calls (its freeze)."""
    calls = {"prctl_seccomp": "157, 22, 2, 0", "seccomp": "317, 1, 0, 0", "prctl_name": "157, 15, 0"}
    results = raw_results(sb, bundle, fixed, calls)
    assert results == {name: EPERM for name in calls}, results


def test_system_calls_outside_the_allowlist_are_refused(sb, bundle, fixed):
    calls = {"personality": "135, 0xffffffff", "getcpu": "309, 0, 0, 0", "memfd_create": "319, 0, 0",
             "timerfd_create": "283, 1, 0", "eventfd2": "290, 0, 0", "setrlimit": "160, 7, 0",
             "prlimit64_set": "302, 0, 7, 1, 0", "sched_setaffinity": "203, 0, 0, 0", "wait4": "61, -1, 0, 0, 0",
             "mlock": "149, 0, 4096", "unshare": "272, 0", "syslog": "103, 3, 0, 0"}
    results = raw_results(sb, bundle, fixed, calls)
    assert results == {name: EPERM for name in calls}, results
    assert_sandbox_healthy(sb)


@pytest.mark.slow  # a few minutes under strace
def test_workers_on_every_shipped_cache_call_nothing_outside_the_allowlist(tmp_path):
    """The allowlist's evidence, run again: every system call contained workers make while grading and
    serving a sample of every shipped cache is on the list (and none was refused)."""
    import json
    import shutil
    import subprocess
    import sys

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    out = tmp_path / "survey.json"
    done = subprocess.run([sys.executable, "-m", "envcore.sandbox.survey", "--per-cache", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=1800)
    survey = json.loads(out.read_text())
    assert done.returncode == 0 and survey["outside_allowlist"] == [], done.stdout[-3000:]
    assert survey["processes"] > 10 and not survey["refused"], survey["refused"]
