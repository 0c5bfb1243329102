"""In-process probe runner: the fast backend for trusted code (the factory's own apps).

Each run writes the app's files into the runner's workspace folder (emptied first), loads the
entrypoint with the loader every runner uses (:mod:`envcore.runner.loader`: the files on disk, the
folder the working directory and first on ``sys.path``, the app's modules found by a private finder),
and sends the probes to the ASGI app directly on one reusable event loop. With ``isolate_probes``
every probe runs on the app exactly as loaded, as in grading (the app imported once and forked once
per probe, its folder put back after each); without it a batch's probes share one copy of the app and
each batch gets a pristine one. The app's modules stay in place while the run serves it, as they do
in a sandboxed worker, so an import inside a handler finds them; when the run is over they are
removed from ``sys.modules`` (and anything they shadowed is put back), so two apps that both call
their package ``app`` never meet.

**One thread, as in a worker.** While it serves an app the runner applies the adaptations every
sandboxed worker runs under (:func:`envcore.sandbox.one_thread.on_one_thread`): the libraries that
would start a thread (aiosqlite's connection thread, asyncio's default executor, limits' timer) and
Starlette's thread pool do their work in place. A fork has none of its parent's threads, so without
them an aiosqlite connection opened by the app's startup waits for ever in every fork; and an app
must not behave differently here and in the sandbox.

**Deadlines.** A forked copy that has not answered within the sandbox's budget for its probes
(``limits.verify_timeout_s`` plus ``limits.probe_allowance_s`` a probe, :class:`SandboxLimits`) is
killed, and every probe it was running fails with ``no response (... did not answer within N s ...)``
(which of them had finished in time depends on their order, as in the sandbox). A fork dies with
the process that made it (``PR_SET_PDEATHSIG``). The load itself, and the one batch run here rather
than in a fork, have no deadline: code this runner loads runs with the caller's rights and can hang it.

**Its folder.** A runner's folder (``a01-inprocess-*``) is removed by :meth:`InProcessRunner.close`,
when the runner is collected, or when the process exits normally; a process killed outright cannot,
so each runner holds a lock on its folder for as long as it lives, and a new runner removes the
folders beside its own whose lock nobody holds.

**Load profiles** (``diagnostics``) measure the app: what the sandbox's zygote imports before any app
(:func:`envcore.sandbox.app_runtime.preload_libraries`: :data:`~envcore.sandbox.app_runtime.APP_LIBRARIES`
and the parts they import lazily) is imported first, once per process, so the first ``from fastapi
import FastAPI`` of the process is not charged to the app's line, nor a library's first import of
one of its parts to the load.

Speed comes from two caches that do not change behaviour: compiled code objects are kept by
(path, source hash), because a scenario check loads five variants of one app that share most files;
and FastAPI's per-endpoint "where is this function defined" lookup, which otherwise re-reads and
tokenizes source on the first request to every endpoint of every app, is answered from what the
finder already knows.

This backend offers **no isolation**: code it loads runs with the caller's rights. It is for
generated, trusted apps and for tests; untrusted (agent-patched) code goes through the sandboxed
backend, which implements the same :class:`~envcore.runner.base.ProbeRunner` interface. Not
thread-safe: use one runner per thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import glob
import linecache
import logging
import os
import pickle
import posixpath
import select
import shutil
import signal
import sys
import tempfile
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Mapping, Sequence

from envcore.runner import request_warmup
from envcore.runner.actors import Actors
from envcore.runner.base import AppSource, Batch, RunnerInfrastructureError, RunReport
from envcore.runner.databases import DatabaseBuildError, build_databases
from envcore.runner.diagnostics import AppError, LoadSampler, app_traceback, worth_showing
from envcore.runner.execute import probe_outcome, run_probes
from envcore.runner.http import HttpRequest, HttpResponse, Lifespan, WouldReachApp, call_asgi, gate_app
from envcore.runner.loader import (
    AppLoadError,
    CodeCache,
    ImportedApp,
    load_app,
    materialize,
    safe_relpath,
    short_traceback,
)
from envcore.runner.snapshot import FolderSnapshot
from envcore.sandbox.app_runtime import preload_libraries
from envcore.sandbox.limits import SandboxLimits
from envcore.sandbox.one_thread import on_one_thread
from envcore.scenario.probes import Probe

SCRATCH_PREFIX = "a01-inprocess-"
OWNER_LOCK = ".owner.lock"
"""The file in a runner's folder it holds a lock on for as long as it lives."""


class _LoadAgain(Exception):
    """App code ran during the warm-up request: the run loads the app again, without it."""


def _remove_scratch(root: Path, owner_pid: int, lock_fd: int | None) -> None:
    """Remove a runner's folder, only in the process that made it: a forked copy of the runner that is
    collected (or exits through ``sys.exit``) must not remove the folder its parent still works in."""
    if os.getpid() == owner_pid:
        shutil.rmtree(root, ignore_errors=True)
        if lock_fd is not None:
            os.close(lock_fd)


def _hold(root: Path) -> int | None:
    """Lock ``root`` as in use for as long as this process (or a fork of it) lives: a lock file is
    made and locked under another name, then renamed, so no other runner ever finds it unlocked."""
    try:
        making = root / (OWNER_LOCK + ".new")
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(making, root / OWNER_LOCK)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_abandoned_folders(parent: str) -> list[str]:
    """Remove the runners' folders in ``parent`` whose runner is gone (its lock held by nobody: the
    process was killed and could not clean up); return them. A folder without a lock file (being
    made, or made by a runner that did not lock) is left alone."""
    removed = []
    for folder in glob.glob(os.path.join(glob.escape(parent), SCRATCH_PREFIX + "*")):
        try:
            fd = os.open(os.path.join(folder, OWNER_LOCK), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its runner is alive
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed


_libraries_preloaded = False


def preload_app_libraries() -> None:
    """Import what the sandbox's zygote imports before it forks any worker, with the zygote's own
    function (:func:`~envcore.sandbox.app_runtime.preload_libraries`: the libraries an app may use,
    :data:`~envcore.sandbox.app_runtime.APP_LIBRARIES`, and the parts they import lazily), once per
    process, so that a load profile measures the app and not the first import of a library in this
    process (a few seconds, once)."""
    global _libraries_preloaded
    if _libraries_preloaded:
        return
    _libraries_preloaded = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of libraries no app of this run may use
        preload_libraries()


def _fork_tie() -> Any:
    """What a fork calls with its parent's pid to be killed when that parent dies (Linux's
    ``PR_SET_PDEATHSIG``; elsewhere nothing). Imported here, in the parent, once."""
    if sys.platform.startswith("linux"):
        from envcore.sandbox.containment import tie_to_parent

        return tie_to_parent
    return lambda parent: None


def _default_signals() -> None:
    """In a fork: the signals that stop a command stop the fork at once (the handlers the parent
    installed, see ``envcore.cli.factory_cmd``, are for the parent)."""
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover - not this process's main thread
            pass


def _stop(pid: int) -> None:
    """Kill the fork ``pid`` (if it is still running) and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def _exit_status(pid: int, deadline: float) -> int | None:
    """The exit status of the fork ``pid`` once it has exited, or ``None`` if it is still running at
    ``deadline`` (``time.monotonic``): it closed its end of the pipe and went on running."""
    try:
        exited = os.pidfd_open(pid)  # readable once the process has exited (Linux 5.3+)
    except (AttributeError, OSError):
        exited = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if exited is not None:
                select.select([exited], [], [], left)
            else:
                time.sleep(min(0.005, left))
    finally:
        if exited is not None:
            os.close(exited)


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything ``fd`` gives until its end, or ``None`` if it has not ended by ``deadline``
    (``time.monotonic``)."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


class InProcessRunner:
    """Runs probes against an app imported into this process (trusted code only)."""

    name = "inprocess"

    def __init__(self, *, isolate_probes: bool = False, scratch_parent: str | None = None,
                 diagnostics: bool = False, limits: SandboxLimits | None = None) -> None:
        self.diagnostics = diagnostics
        """Keep the app's tracebacks behind 5xx answers and profile its load, for the scenario's
        author (:mod:`envcore.runner.diagnostics`)."""
        self.isolate_probes = isolate_probes
        """Every probe on the app exactly as loaded, as grading runs it and as the sandbox runs every
        probe (one fork per probe). Left unset, it follows ``diagnostics``: a runner that serves a
        scenario's author (``factory import``, ``factory check``) judges the scenario as grading
        will, so a rate limit or a counter in the app cannot fail a probe here that the sandbox
        passes. ``False`` lets the probes of a batch share one copy of the app, several times
        cheaper (about 2.6x on the scenario check): the factory's build of its own apps, whose
        probes own their records, so sharing only ever adds rejections there."""
        self.limits = limits or SandboxLimits()
        """The deadlines: a fork gets ``verify_timeout_s`` plus ``probe_allowance_s`` per probe."""
        self._loop = asyncio.new_event_loop()
        parent = scratch_parent or tempfile.gettempdir()
        remove_abandoned_folders(parent)
        self._root = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))
        # Removed by close(), or when the runner is collected or this process exits normally. A
        # process killed by a signal cannot clean up: the next runner made beside it removes its
        # folder (remove_abandoned_folders), and a pool whose workers are ended by a signal gives
        # them a ``scratch_parent`` it removes itself.
        self._remove_root = weakref.finalize(self, _remove_scratch, self._root, os.getpid(), _hold(self._root))
        self._cache = CodeCache()
        # Generated apps log refused accesses; keep them out of the grader's stderr.
        logging.getLogger("app").addHandler(logging.NullHandler())
        logging.getLogger("app").propagate = False

    def close(self) -> None:
        if not self._loop.is_closed():
            self._cancel_leftover_tasks()
            self._loop.close()
        self._remove_root()

    def _cancel_leftover_tasks(self) -> None:
        """Cancel what a run stopped midway left on the loop (the app's lifespan, waiting for a
        shutdown that never came), as ``asyncio.run`` does, so closing the loop does not leave tasks
        that complain when they are collected (waiting a second at most for them to finish)."""
        pending = asyncio.all_tasks(self._loop)
        if not pending:
            return
        for task in pending:
            task.cancel()
        with contextlib.suppress(Exception):  # the app's cancellation failing is no reason not to close
            self._loop.run_until_complete(asyncio.wait(pending, timeout=1.0))

    def __enter__(self) -> "InProcessRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _workspace(self, files: Mapping[str, str]) -> Path:
        """The folder the app runs in, holding exactly the files and folders of ``files``.

        One folder is reused from run to run: files and folders the new app does not have are
        removed (including anything the previous app wrote), every file is written afresh."""
        root = self._root / "app-root"
        wanted = {safe_relpath(rel) for rel in files}
        wanted_dirs = {""}
        for rel in wanted:
            parent = posixpath.dirname(rel)
            while parent not in wanted_dirs:
                wanted_dirs.add(parent)
                parent = posixpath.dirname(parent)
        if root.exists():
            for dirpath, dirnames, filenames in os.walk(root, topdown=True):
                here = os.path.relpath(dirpath, root)
                here = "" if here == "." else here
                for name in filenames:
                    rel = posixpath.join(here, name) if here else name
                    if rel not in wanted:
                        os.unlink(os.path.join(dirpath, name))
                for name in list(dirnames):
                    rel = posixpath.join(here, name) if here else name
                    if rel not in wanted_dirs:
                        shutil.rmtree(os.path.join(dirpath, name))
                        dirnames.remove(name)
        materialize(files, root)
        return root

    def run(
        self,
        source: AppSource,
        probes: Sequence[Probe],
        actors: Actors,
        *,
        stop_on_failure: bool = False,
    ) -> RunReport:
        return self.run_batches(source, [Batch(tuple(probes), None, stop_on_failure)], actors)[0]

    def run_batches(self, source: AppSource, batches: Sequence[Batch], actors: Actors, *,
                    warm: bool = True) -> list[RunReport]:
        """Load once and give every batch (with ``isolate_probes``, every probe) pristine state: each
        runs in a forked child of the loaded app, and the app's folder is put back after it, except
        that one whose every request stops at its batch's gate runs here with the gate closed
        (nothing reaches the app, so nothing changes), and the very last one runs here. Before the
        forks, the loaded app serves the one request only library code answers (``warm``, see
        :mod:`envcore.runner.request_warmup`), so that no fork repeats its first-use work. The app
        is served on one thread, as in a sandboxed worker (see the module docstring)."""
        if self.diagnostics:
            preload_app_libraries()  # before the load is timed
        with on_one_thread():
            return self._run_batches(source, batches, actors, warm=warm)

    def _run_batches(self, source: AppSource, batches: Sequence[Batch], actors: Actors, *,
                     warm: bool) -> list[RunReport]:
        started = time.perf_counter()
        reports: list[RunReport] = []
        root = self._root / "app-root"
        sampler: LoadSampler | None = None
        imported: ImportedApp | None = None
        again = False
        try:
            try:
                root = self._workspace(source.files)
            except OSError as exc:  # workspace trouble is ours, not the app's
                raise RunnerInfrastructureError(f"cannot prepare the app workspace: {exc}") from exc
            sampler = LoadSampler(str(root)).start() if self.diagnostics else None
            try:
                build_databases(root, source.files)
            except DatabaseBuildError as exc:
                raise AppLoadError(str(exc)) from None
            imported = load_app(root, source.files, source.entrypoint, self._cache)  # kept until the run ends
            app = imported.app
            lifespan = Lifespan(app, lambda exc: short_traceback(exc, root))
            failure = self._loop.run_until_complete(lifespan.startup())
            if failure is not None:
                raise AppLoadError(f"startup failed: {failure}")
            profile = worth_showing(sampler.stop(), loaded=True) if sampler is not None else None
            snapshot = FolderSnapshot(str(root))  # as loaded: startup may have written files
            if warm and (len(batches) > 1 or self.isolate_probes or any(b.isolate for b in batches)):
                # the request path's first-use work once, before the forks (nothing of the app's runs)
                try:
                    request_warmup.warm_up(app, lambda into: request_warmup.record_calls_under(str(root), into))
                except request_warmup.WarmUpBroke:
                    # app code ran after all: this copy is no longer the app as loaded; load it again
                    self._loop.run_until_complete(lifespan.shutdown())
                    raise _LoadAgain from None
            for i, batch in enumerate(batches):
                t0 = time.perf_counter()
                outcomes, sent, stopped, errors = [], 0, False, []
                isolate = self.isolate_probes or batch.isolate
                units = [Batch((probe,), batch.gate) for probe in batch.probes] if isolate else [batch]
                for j, unit in enumerate(units):
                    last = i == len(batches) - 1 and j == len(units) - 1
                    result = None
                    if batch.gate is not None and batch.gate.front is None:
                        # With the gate closed nothing reaches the app: no state can change, no fork
                        # is needed. (A lazy-fix batch usually fails on its first probe, at the gate.)
                        try:
                            result = self._loop.run_until_complete(self._session(app, unit, actors, closed_gate=True))
                        except WouldReachApp:
                            result = None
                    if result is None and last:
                        result = self._loop.run_until_complete(self._session(app, unit, actors))
                    elif result is None:
                        result = self._forked(app, unit, actors)
                        snapshot.restore()
                    outcomes += result[0]
                    sent += result[1]
                    stopped = stopped or result[2]
                    errors += result[3]
                    if batch.stop_on_failure and not all(o.passed for o in result[0]):
                        stopped = stopped or j < len(units) - 1
                        break
                reports.append(
                    RunReport(
                        load_error=None,
                        outcomes=tuple(outcomes),
                        elapsed_s=time.perf_counter() - (started if i == 0 else t0),
                        requests=sent,
                        stopped_early=stopped,
                        app_errors=tuple(errors),
                        load_profile=profile,
                    )
                )
            self._loop.run_until_complete(lifespan.shutdown())
        except AppLoadError as exc:
            profile = worth_showing(sampler.stop(), loaded=False) if sampler is not None else None
            failed = RunReport(load_error=str(exc), elapsed_s=time.perf_counter() - started, load_profile=profile)
            return [failed for _ in batches]
        except _LoadAgain:
            again = True
        finally:
            if sampler is not None:
                sampler.stop()  # (a no-op once stopped)
            if imported is not None:
                imported.forget()
            for filename in [f for f in linecache.cache if f.startswith(str(root))]:
                linecache.cache.pop(filename, None)
        if again:
            return self._run_batches(source, batches, actors, warm=False)
        return reports

    def deadline_s(self, batch: Batch) -> float:
        """How long the fork running ``batch`` may take: the sandbox's budget for its probes."""
        return self.limits.verify_timeout_s + self.limits.probe_allowance_s * len(batch.probes)

    def _forked(self, app: Any, batch: Batch, actors: Actors):
        budget = self.deadline_s(batch)
        parent, tie = os.getpid(), _fork_tie()
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: fresh copy of the loaded app; report back and leave without cleanup
            code = 0
            try:
                os.close(read_fd)
                tie(parent)
                _default_signals()
                gc.disable()  # a collection would touch (and so copy) every page shared with the parent
                loop = asyncio.new_event_loop()  # never share the parent's selector
                result = loop.run_until_complete(self._session(app, batch, actors))
                payload = pickle.dumps(result)
                with os.fdopen(write_fd, "wb") as out:
                    out.write(payload)
            except BaseException:  # noqa: BLE001 - anything here is reported as an infrastructure failure
                code = 70
            finally:
                os._exit(code)
        os.close(write_fd)
        payload: bytes | None = None
        status = None
        deadline = time.monotonic() + budget
        try:
            payload = _read_until(read_fd, deadline)
            if payload is not None:
                status = _exit_status(pid, deadline)
                payload = payload if status is not None else None
        finally:
            os.close(read_fd)
            if status is None:  # past its deadline, or this process is being stopped: never left running
                _stop(pid)
        if payload is None:
            return self._unanswered(batch, budget)
        if status != 0 or not payload:
            raise RunnerInfrastructureError(f"probe batch child exited with status {status}")
        return pickle.loads(payload)

    @staticmethod
    def _unanswered(batch: Batch, budget: float):
        """The result of a batch whose fork did not answer in time: every probe fails (the sandbox's
        rule for a run past its budget: which probes finished in time depends on their order)."""
        reason = (f"the app did not answer within {budget:g} s (its forked copy was stopped; an app whose "
                  f"requests wait on a thread or a lock its process no longer has hangs like this)")
        probes = batch.probes[:1] if batch.stop_on_failure else batch.probes
        outcomes = [probe_outcome(p, [HttpResponse(None, error=reason)] * len(p.steps)) for p in probes]
        return outcomes, 0, len(probes) < len(batch.probes), []

    async def _session(self, app: Any, batch: Batch, actors: Actors, *, closed_gate: bool = False):
        target = app
        front = batch.gate.front() if batch.gate is not None and batch.gate.front is not None else None
        if batch.gate is not None and front is None:
            target = gate_app(app, batch.gate.status, batch.gate.path_patterns, closed=closed_gate)

        root = str(self._root / "app-root")
        on_error = (lambda exc: app_traceback(exc, root)) if self.diagnostics else None

        async def send(request: HttpRequest) -> HttpResponse:
            if front is None:
                return await call_asgi(target, request, on_error=on_error)
            answer = front.answer(request)
            if answer is not None:
                return answer
            response = await call_asgi(target, request, on_error=on_error)
            front.observe(request, response)
            return response

        errors: list[AppError] = []
        outcomes, sent, stopped = await run_probes(send, batch.probes, actors, stop_on_failure=batch.stop_on_failure,
                                                   app_root=root, app_errors=errors)
        return outcomes, sent, stopped, errors
