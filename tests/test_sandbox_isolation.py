"""Attacks on grading's isolation: one test per attack class, named after the attack.

Two promises of the grader are attacked here:

* **the same patch always earns the same reward**: every probe runs on the app exactly as loaded, so
  an app cannot count, rank or remember the grader's requests, and neither the order of the probes
  nor the kind of worker (a fresh one, or one forked from a template) can change a result;
* **no rollout can touch another rollout**: a worker changes nothing outside its own throwaway copy
  of the app (no host file, no template file, no file metadata) and leaves nothing a later worker
  can read (extended attributes, System V or POSIX IPC objects, files in shared folders, locks).

Each malicious app is the battery's target scenario with code injected (see ``tests/sandbox_kit``).
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import time

import pytest

from envcore.patching import apply_patch
from envcore.runner.base import AppSource
from envcore.runner.http import HttpRequest
from envcore.sandbox import LiveApp, Sandbox, supported_platform
from envcore.verifier import Resolution, verify
from tests.sandbox_kit import (
    module_fixtures,
    LIMITS, PRELUDE, assert_sandbox_healthy, call_json, denied, source, with_code,
    with_middleware, with_route,
)

pytestmark = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")

target, bundle, fixed, sb = module_fixtures()


@pytest.fixture(scope="module")
def fresh_only():
    """A sandbox without templates: every worker imports the whole app."""
    box = Sandbox(limits=LIMITS, spares=1, templates=0).start()
    yield box
    box.close()


@pytest.fixture(scope="module")
def eager():
    """A sandbox with templates: a run lends one and forks every worker it can from it."""
    box = Sandbox(limits=LIMITS, spares=1, template_spares=2).start()
    yield box
    box.close()


def rewards(bundle, files, sandboxes, rounds: int = 3) -> set:
    """The (resolution, reward, per-probe results) of ``rounds`` gradings in each sandbox."""
    seen = set()
    for box in sandboxes:
        for _ in range(rounds):
            report = verify(bundle, files, sandbox=box)
            assert report.outcome in ("graded", "load_error"), report.summary()
            seen.add((report.resolution, report.reward, tuple(sorted((p.probe_id, p.passed) for p in report.probes))))
    return seen


# == the same patch always earns the same reward ====================================================

COUNT_CALLERS = """
    global _callers
    try:
        _callers
    except NameError:
        _callers = set()
    _callers.add(request.headers.get("authorization", ""))
    if len(_callers) >= 4:
        from starlette.responses import JSONResponse
        return JSONResponse({"detail": "busy"}, status_code=403)
"""
"""Refuses every caller once four distinct callers have been seen: a grader sends many requests from
many users, a person exploring the app sends few."""


def test_an_app_that_refuses_the_nth_distinct_caller_earns_what_it_earns_without_the_trick(sb, eager, fresh_only,
                                                                                          bundle, fixed):
    honest = rewards(bundle, fixed, [sb], rounds=1)
    tricked = rewards(bundle, with_middleware(fixed, COUNT_CALLERS), [sb, eager, fresh_only])
    assert tricked == honest, (tricked, honest)
    (resolution, reward, _), = tricked
    assert resolution is Resolution.FULL and reward == 1.0
    vulnerable = rewards(bundle, bundle.files, [sb], rounds=1)
    assert rewards(bundle, with_middleware(bundle.files, COUNT_CALLERS), [sb, fresh_only]) == vulnerable


FIRST_READER_OWNS = """
    global _first_reader
    try:
        _first_reader
    except NameError:
        _first_reader = {}
    caller = request.headers.get("authorization", "")
    path = request.url.path
    if request.method == "GET" and caller and path.count("/") >= 3:
        owner = _first_reader.setdefault(path, caller)
        if owner != caller:
            from starlette.responses import JSONResponse
            return JSONResponse({"detail": "not found"}, status_code=404)
"""
"""A record belongs to whoever read it first: when the owner's own probe happens to come before the
attacker's, the exploit is refused, so on one shared app the reward would depend on probe order."""


def test_an_app_that_remembers_who_read_a_record_first_cannot_pass_by_probe_order(sb, eager, fresh_only, bundle):
    vulnerable = rewards(bundle, bundle.files, [sb], rounds=1)
    tricked = rewards(bundle, with_middleware(bundle.files, FIRST_READER_OWNS), [sb, eager, fresh_only], rounds=4)
    assert len(tricked) == 1, tricked
    (resolution, reward, _), = tricked
    (_, vulnerable_reward, _), = vulnerable
    assert resolution is Resolution.NO and reward == vulnerable_reward == 0.0


REWRITE_SEED = """
    import json as _json
    _seed = _json.loads(SEED_FILE.read_text())
    _seed["served"] = _seed.get("served", 0) + 1
    try:
        SEED_FILE.write_text(_json.dumps(_seed))
    except OSError:
        pass
    if _json.loads(SEED_FILE.read_text()).get("served", 0) > 3:
        from starlette.responses import JSONResponse
        return JSONResponse({"detail": "busy"}, status_code=403)
"""
"""Counts the requests it has served in ``data/seed.json`` and refuses everyone after the third: no
probe sends more than three requests, so the count only bites if the file carries from probe to probe."""


def test_writes_to_its_data_files_do_not_reach_the_next_probe(sb, eager, fresh_only, bundle, fixed):
    honest = rewards(bundle, fixed, [sb], rounds=1)
    tricked = rewards(bundle, with_middleware(fixed, REWRITE_SEED), [sb, eager, fresh_only])
    assert tricked == honest, (tricked, honest)


def appending_to_seed(files: dict[str, str]) -> dict[str, str]:
    """``files`` whose ``resolve_user`` (run on every signed-in request) first appends to the app's own
    data file, letting any error escape: a worker that could not write its files would answer 500
    where a worker that could answers normally. Only a function body changes, so a template's worker
    can load the patch by swapping that body in."""
    marker = "    scheme, _, token = request.headers.get(\"authorization\", \"\").partition(\" \")\n"
    assert files["app.py"].count(marker) == 1
    write = "    with open(SEED_FILE, \"a\", encoding=\"utf-8\") as log:\n        log.write(\" \")\n"
    return {**files, "app.py": files["app.py"].replace(marker, write + marker)}


def test_a_patch_that_writes_its_files_earns_the_same_from_template_and_fresh_workers(eager, fresh_only, bundle,
                                                                                      fixed):
    honest = rewards(bundle, fixed, [fresh_only], rounds=1)
    patch = appending_to_seed(fixed)
    before = dict(eager.stats)
    assert rewards(bundle, patch, [eager, fresh_only], rounds=2) == honest
    assert eager.stats["swapped"] > before["swapped"], "the template's workers served the patch"


HOLD_THE_SEED_OPEN = """
import os as _os
_held = open(SEED_FILE, "r+", encoding="utf-8")  # left open at import: a template's workers share it
"""


def nosy_about_the_held_file(files: dict[str, str]) -> dict[str, str]:
    """``files`` whose ``resolve_user``, on its first call in a process, checks whether an earlier
    worker moved the offset of, or set ``O_APPEND`` on, the file the import left open (both are
    shared by every fork of the template, not copied), answering 500 if so, and then moves and sets
    them itself. Only a function body changes, so a template's worker swaps it in."""
    marker = "    scheme, _, token = request.headers.get(\"authorization\", \"\").partition(\" \")\n"
    nosy = ("    import fcntl as _fcntl\n"
            "    _fd = _held.fileno()\n"
            "    if not globals().get('_looked'):  # once a process: a probe's later steps see its own moves\n"
            "        globals()['_looked'] = True\n"
            "        if _os.lseek(_fd, 0, 1) != 0 or _fcntl.fcntl(_fd, _fcntl.F_GETFL) & _os.O_APPEND:\n"
            "            raise RuntimeError('an earlier worker moved the shared file')\n"
            "        _os.lseek(_fd, 7, 0)\n"
            "        _fcntl.fcntl(_fd, _fcntl.F_SETFL, _fcntl.fcntl(_fd, _fcntl.F_GETFL) | _os.O_APPEND)\n")
    assert files["app.py"].count(marker) == 1
    return {**files, "app.py": files["app.py"].replace(marker, nosy + marker)}


def test_a_file_the_import_left_open_carries_nothing_from_one_worker_to_the_next(eager, fresh_only, bundle, fixed):
    """An app whose import opens a file of its folder (a SQLite database, say) is served by a
    template (one import for the run); the offset and status flags its workers share are put back
    before each one runs, so a patch cannot see what an earlier probe did to them."""
    holding = bundle.model_copy(update={"files": with_code(bundle.files, HOLD_THE_SEED_OPEN)})
    honest = rewards(holding, with_code(fixed, HOLD_THE_SEED_OPEN), [fresh_only], rounds=1)
    before = dict(eager.stats)
    assert rewards(holding, nosy_about_the_held_file(with_code(fixed, HOLD_THE_SEED_OPEN)), [eager, fresh_only],
                   rounds=2) == honest
    assert eager.stats["swapped"] > before["swapped"], "the template's workers served the patch"


def test_probe_order_cannot_change_the_reward(sb, bundle, fixed, monkeypatch):
    """The grader shuffles probes with its own generator; replaying many orders gives one result."""
    verify_module = sys.modules["envcore.verifier.verify"]

    patch = with_middleware(fixed, COUNT_CALLERS + FIRST_READER_OWNS)
    seen = set()
    for seed in range(6):
        monkeypatch.setattr(verify_module, "_random", random.Random(seed))
        report = verify(bundle, patch, sandbox=sb)
        seen.add((report.resolution, report.reward, tuple(sorted((p.probe_id, p.passed) for p in report.probes))))
    assert len(seen) == 1, seen


def test_the_same_patch_earns_one_reward_from_fresh_and_template_workers(eager, fresh_only, bundle, fixed):
    for files in (bundle.files, fixed, apply_patch(bundle.files, bundle.reference_fix)):
        assert len(rewards(bundle, files, [eager, fresh_only], rounds=2)) == 1


def test_probes_run_two_at_a_time_earn_what_they_earn_one_at_a_time(bundle, fixed):
    """A verification alone on the sandbox runs two probes at once, each in its own worker: an app
    that counts callers or remembers who read first sees no more from two lanes than from one."""
    patch = with_middleware(fixed, COUNT_CALLERS + FIRST_READER_OWNS)
    with Sandbox(limits=LIMITS, spares=1, templates=0, probe_lanes=1) as one, \
            Sandbox(limits=LIMITS, spares=1, templates=0, probe_lanes=2) as two:
        for files in (patch, fixed, bundle.files):
            assert rewards(bundle, files, [one], rounds=1) == rewards(bundle, files, [two], rounds=2)
        assert one.stats["second_lane"] == 0 and two.stats["second_lane"] > 0
        assert_sandbox_healthy(two)


# == no rollout can touch another rollout ===========================================================

METADATA_ATTACKS = """
    import os
    here = os.getcwd()
    targets = {"seed": os.path.join(here, "data", "seed.json"), "folder": here, "python": os.__file__}
    out = {}
    for name, path in targets.items():
        out[name + ":chmod"] = _attempt(lambda: os.chmod(path, 0))
        out[name + ":chown"] = _attempt(lambda: os.chown(path, os.getuid(), os.getgid()))
        out[name + ":utime"] = _attempt(lambda: os.utime(path, (1, 1)))
        out[name + ":setxattr"] = _attempt(lambda: os.setxattr(path, "user.note", b"seen"))
        out[name + ":removexattr"] = _attempt(lambda: os.removexattr(path, "user.note"))
    fd = os.open(targets["seed"], os.O_RDONLY)
    out["fchmod"] = _attempt(lambda: os.fchmod(fd, 0))
    out["fchown"] = _attempt(lambda: os.fchown(fd, os.getuid(), os.getgid()))
    out["futime"] = _attempt(lambda: os.utime(fd, (1, 1)))
    out["fsetxattr"] = _attempt(lambda: os.setxattr(fd, "user.note", b"seen"))
    os.close(fd)
    return out
"""


def _metadata(path: str) -> tuple:
    info = os.stat(path)
    try:
        names = tuple(sorted(os.listxattr(path)))
    except OSError:
        names = ()
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, info.st_mtime_ns, names


@pytest.mark.parametrize("from_template", [False, True], ids=["fresh-worker", "template-worker"])
def test_changing_file_metadata_is_denied(eager, fresh_only, bundle, fixed, from_template):
    box = eager if from_template else fresh_only
    files = AppSource(with_route(fixed, METADATA_ATTACKS), bundle.entrypoint)
    # a template of the same files (trusted here) serves the worker by swapping nothing in
    link = box.templates.acquire(files) if from_template else None
    try:
        with box.load(files, link) as worker:
            assert (worker.template is not None) is from_template
            results = json.loads(worker.request(HttpRequest.build("GET", "/attack"), 2.0).body)
            template_seed = os.path.join(link.workspace, "data", "seed.json") if link else None
            before = _metadata(template_seed) if link else None
    finally:
        if link is not None:
            box.templates.release(link)
    assert all(denied(r) for r in results.values()), {k: r for k, r in results.items() if not denied(r)}
    if from_template:
        assert before is not None and before[0] != 0 and not before[4]
    assert _metadata(os.__file__)[0] != 0 and "user.note" not in _metadata(os.__file__)[4]


NOTE_KEY = 0x5EED0A01


def test_notes_left_in_ipc_objects_do_not_reach_the_next_episode(sb, bundle, fixed):
    writer = with_route(fixed, """
        import os, mmap
        out = {}
        out["shm_open"] = _attempt(lambda: os.open("/dev/shm/a01-note", os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            import _posixshmem
            out["posix_shm"] = _attempt(lambda: _posixshmem.shm_open("/a01-note", os.O_CREAT | os.O_RDWR, 0o600))
        except ImportError:
            out["posix_shm"] = {"ok": False, "permission": True, "error": "ImportError"}
        out["tmp_file"] = _attempt(lambda: open("/tmp/a01-note", "w").write("seen"))
        return out
    """)
    results = call_json(sb, bundle, writer)
    assert all(denied(r) or r.get("error") == "ImportError" for r in results.values()), results
    assert not os.path.exists("/dev/shm/a01-note") and not os.path.exists("/tmp/a01-note")


SYSV = f"""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    shm = libc.syscall(29, {NOTE_KEY}, 4096, 0o1600)     # shmget(key, size, IPC_CREAT | 0600)
    msg = libc.syscall(68, {NOTE_KEY}, 0o1600)           # msgget(key, IPC_CREAT | 0600)
    sem = libc.syscall(64, {NOTE_KEY}, 1, 0o1600)        # semget(key, 1, IPC_CREAT | 0600)
    mq = libc.syscall(240, b"/a01-note", 0o100 | 0o2, 0o600, None)  # mq_open(name, O_CREAT | O_RDWR)
    return {{"shmget": shm, "msgget": msg, "semget": sem, "mq_open": mq, "errno": ctypes.get_errno()}}
"""


def test_notes_left_in_system_v_or_posix_ipc_do_not_reach_the_next_episode(sb, bundle, fixed):
    """The kernel layers hold even with the audit hook (which refuses ctypes) turned off."""
    from tests.sandbox_kit import DISABLE_AUDIT_HOOK

    try:
        results = call_json(sb, bundle, with_route(fixed, SYSV, prelude=DISABLE_AUDIT_HOOK))
        assert all(results[k] == -1 for k in ("shmget", "msgget", "semget", "mq_open")), results
        assert _ipc_keys().isdisjoint({NOTE_KEY}) and not os.path.exists("/dev/mqueue/a01-note")
    finally:  # never leave an object behind on the host, whatever happened
        for flag in ("-M", "-Q", "-S"):
            subprocess.run(["ipcrm", flag, str(NOTE_KEY)], capture_output=True)


def _ipc_keys() -> set[int]:
    keys = set()
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as table:
            for line in list(table)[1:]:
                keys.add(int(line.split()[0]))
    return keys


LOCKS_PRELUDE = """
import os as _os
_SHARED = _os.open(_os.__file__, _os.O_RDONLY)  # a file every worker can read (opened while loading)
"""
LOCKS = """
    import fcntl, os, struct, time
    out = {}
    fd = os.open(os.path.join(os.getcwd(), "data", "seed.json"), os.O_RDONLY) if os.fstat(_SHARED).st_size == 0 else _SHARED
    out["flock"] = _attempt(lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB))
    lock = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 1, 0)
    out["setlk"] = _attempt(lambda: fcntl.fcntl(fd, fcntl.F_SETLK, lock))
    probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 1, 0)
    out["getlk"] = _attempt(lambda: struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, probe))[0])
    return out
"""


def test_file_locks_cannot_pass_notes_between_workers_running_at_once(sb, bundle, fixed):
    """A lock one worker takes on a file is invisible to another worker (the lock calls do nothing in the
    sandbox: every worker has its own copy of the app's files, and a descriptor it opened on a shared
    file while loading points at ``/dev/null`` once the app has loaded)."""
    import fcntl

    files = with_route(fixed, LOCKS, prelude=LOCKS_PRELUDE)
    with LiveApp(sb, source(bundle, files)) as holder:
        first = json.loads(holder.request(HttpRequest.build("GET", "/attack")).body)
        second = call_json(sb, bundle, files)  # another worker, while the first one is alive
    assert first["flock"]["ok"] and second["flock"]["ok"], (first, second)
    assert second["getlk"] == {"ok": True, "value": repr(fcntl.F_UNLCK)}, second


TEMPLATE_WRECK = """
    import os, shutil
    seed = os.path.join(os.getcwd(), "data", "seed.json")
    return {"write": _attempt(lambda: open(seed, "w").write("{}")),
            "truncate": _attempt(lambda: os.truncate(seed, 0)),
            "remove": _attempt(lambda: os.remove(seed)),
            "rename": _attempt(lambda: os.rename(seed, seed + ".gone")),
            "rmtree": _attempt(lambda: shutil.rmtree(os.path.join(os.getcwd(), "data"))),
            "link": _attempt(lambda: os.link(seed, seed + ".2")),
            "symlink": _attempt(lambda: os.symlink("/etc/passwd", seed + ".3")),
            "chmod": _attempt(lambda: os.chmod(seed, 0))}
"""


def test_a_template_worker_cannot_change_what_the_next_worker_of_that_template_reads(eager, bundle, fixed):
    files = AppSource(with_route(fixed, TEMPLATE_WRECK), bundle.entrypoint)
    link = eager.templates.acquire(files)
    try:
        with eager.load(files, link) as worker:
            assert worker.template is link
            results = json.loads(worker.request(HttpRequest.build("GET", "/attack"), 2.0).body)
        # what it may do to its own copy of the files it did; the next worker gets them back
        with eager.load(files, link) as second:
            seen = json.loads(second.request(HttpRequest.build("GET", "/attack"), 2.0).body)
        seed = os.path.join(link.workspace, "data", "seed.json")
        assert json.loads(open(seed).read())["sessions"], "the template's data files are intact"
        assert sorted(os.listdir(os.path.join(link.workspace, "data"))) == ["seed.json"]
    finally:
        eager.templates.release(link)
    for name in ("link", "symlink", "chmod"):
        assert denied(results[name]) and denied(seen[name]), (name, results[name], seen[name])
    assert results["write"]["ok"] and seen["write"]["ok"], (results, seen)  # the folder was back in place


def test_workspaces_are_removed_whatever_the_app_did_to_them(bundle, fixed):
    box = Sandbox(limits=LIMITS, spares=0, templates=0).start()
    try:
        files = with_code(fixed, PRELUDE + """
import os
_here = os.getcwd()
_attempt(lambda: os.chmod(os.path.join(_here, "data"), 0))
_attempt(lambda: os.chmod(_here, 0o500))
_attempt(lambda: os.makedirs(os.path.join(_here, "deep/" * 40)))
""")
        for _ in range(3):
            report = verify(bundle, files, sandbox=box)
            assert report.outcome == "graded"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(n.startswith("w-") for n in os.listdir(box.root)):
            time.sleep(0.05)
        assert [n for n in os.listdir(box.root) if n.startswith("w-")] == []
        root = box.root
    finally:
        box.close()
    assert not os.path.exists(root)


def test_leftover_files_do_not_reach_the_next_episode(sb, bundle, fixed):
    writer = with_code(fixed, """
import os
try:
    with open(os.path.join(os.getcwd(), "data", "seed.json"), "a") as _f:
        _f.write(" ")
except OSError:
    pass
""")
    reader = with_route(fixed, """
        import os
        found = []
        for folder, _dirs, names in os.walk(os.getcwd()):
            found += [os.path.relpath(os.path.join(folder, n), os.getcwd()) for n in names]
        return {"files": sorted(found), "seed_tail": open("data/seed.json").read()[-5:]}
    """)
    verify(bundle, writer, sandbox=sb)
    seen = call_json(sb, bundle, reader)
    assert seen["files"] == sorted(reader), seen  # the app's own files (its code too), nothing left over
    assert not seen["seed_tail"].endswith(" "), seen


def test_grading_leaves_the_sandbox_healthy(sb):
    assert_sandbox_healthy(sb)


TIMES_CHANNEL = '''
import os, json
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "seed.json")
folder = os.path.dirname(path)
seen = {}
for name, target in (("file", path), ("folder", folder)):
    info = os.stat(target)
    seen[name] = [info.st_mtime_ns, info.st_atime_ns, info.st_size, info.st_ino]
if WRITE:
    with open(path, "r+b") as handle:  # the same bytes back: only the times say it was written
        data = handle.read()
        handle.seek(0)
        handle.write(data)
    open(path, "rb").read()
    os.listdir(folder)
return seen
'''


@pytest.mark.parametrize("write", [False, True], ids=["reads-only", "writes-its-data"])
def test_file_times_carry_nothing_from_one_template_worker_to_the_next(eager, bundle, fixed, write):
    """A worker that writes (or only reads) a data file moves its times; the parent put the content back
    but not the times, so the next worker of the template read one bit per file from the last: the
    same patch earned FULL in some gradings and NO in others. Whatever a worker did, the next one sees
    every file and folder with the times the template left them."""
    files = AppSource(with_route(fixed, TIMES_CHANNEL.replace("WRITE", str(write))), bundle.entrypoint)
    link = eager.templates.acquire(files)
    try:
        observed = []
        for _ in range(3):
            with eager.load(files, link) as worker:
                assert worker.template is link
                observed.append(json.loads(worker.request(HttpRequest.build("GET", "/attack"), 2.0).body))
    finally:
        eager.templates.release(link)
    assert observed[0] == observed[1] == observed[2], observed


def test_a_request_cannot_leave_a_trace_in_the_python_installation(sb, bundle, fixed):
    """Reading a file updates its access time, and every worker may read the Python installation: a
    grading's worker read files chosen by the hidden requests it served, and the next episode's app read
    their access times back. Once its app has loaded, a worker can read nothing outside its folder
    (the app's own lazy imports are done before), so what it learns from requests stays in it."""
    attack = """
        import importlib, os
        target = os.path.realpath(os.__file__)
        def lazy():  # a handler's own import, as apps write them: done before the seal
            import fractions
            return fractions.Fraction(1, 3).denominator
        return {"read": _attempt(lambda: open(target, "rb").read(1)),
                "read_opened_while_loading": _attempt(lambda: os.read(_SHARED, 16)),
                "list": _attempt(lambda: os.listdir(os.path.dirname(target))),
                "import": _attempt(lambda: importlib.import_module("xml" + ".dom.pulldom")),
                "lazy_named_import": _attempt(lazy)}
    """
    results = call_json(sb, bundle, with_route(fixed, attack, prelude=LOCKS_PRELUDE))
    assert denied(results["read"]) and denied(results["list"]), results
    assert results["read_opened_while_loading"] == {"ok": True, "value": "b''"}, results  # now /dev/null
    assert not results["import"]["ok"], results["import"]
    assert results["lazy_named_import"] == {"ok": True, "value": "3"}, results["lazy_named_import"]
    report = verify(bundle, fixed, sandbox=sb)
    assert report.containment.get("no_reads_after_load") is True, report.containment


def test_a_librarys_own_lazy_imports_work_after_the_seal(sb, bundle, fixed):
    """The seal must not break the libraries an app may use: python-jose verifies a signature through
    cryptography, which imports its backend on first use, and a codec is imported on its first use.
    After the seal neither could be read, so every signed token was refused and the reference fix of
    an external scenario failed its own legitimate use. The zygote imports such modules beforehand."""
    attack = """
        def sign_and_verify():
            from jose import jwt
            token = jwt.encode({"sub": "someone"}, "a key", algorithm="HS256")
            return jwt.decode(token, "a key", algorithms=["HS256"])["sub"]
        return {"jose": _attempt(sign_and_verify), "codec": _attempt(lambda: b"\\x80".decode("cp1252"))}
    """
    results = call_json(sb, bundle, with_route(fixed, attack, prelude=LOCKS_PRELUDE))
    assert results["jose"] == {"ok": True, "value": "'someone'"}, results["jose"]
    assert results["codec"] == {"ok": True, "value": "'€'"}, results["codec"]
