"""In-process probe runner: the fast backend for trusted code (the factory's own apps).

Each run writes the app's files into the runner's workspace folder (emptied first), loads the
entrypoint with the loader every runner uses (:mod:`envcore.runner.loader`: the files on disk, the
folder the working directory and first on ``sys.path``, the app's modules found by a private finder),
and sends the probes to the ASGI app directly on one reusable event loop. A batch's probes share one
copy of the app, each batch gets a pristine one; with ``isolate_probes`` every probe does, as in
grading (the app imported once and forked once per probe, its folder put back after each). The
app's modules stay in place while the run serves it, as they do in a sandboxed worker, so an import
inside a handler finds them; when the run is over they are removed from ``sys.modules`` (and
anything they shadowed is put back), so two apps that both call their package ``app`` never meet.

Speed comes from two caches that do not change behaviour: compiled code objects are kept by
(path, source hash), because a scenario check loads five variants of one app that share most files;
and FastAPI's per-endpoint "where is this function defined" lookup, which otherwise re-reads and
tokenizes source on the first request to every endpoint of every app, is answered from what the
finder already knows.

This backend offers **no isolation**: code it loads runs with the caller's rights and can hang it.
It is for generated, trusted apps and for tests; untrusted (agent-patched) code goes through the
sandboxed backend, which implements the same :class:`~envcore.runner.base.ProbeRunner` interface.
Not thread-safe: use one runner per thread.
"""

from __future__ import annotations

import asyncio
import gc
import linecache
import logging
import os
import pickle
import posixpath
import shutil
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Mapping, Sequence

from envcore.runner import request_warmup
from envcore.runner.actors import Actors
from envcore.runner.base import AppSource, Batch, RunnerInfrastructureError, RunReport
from envcore.runner.databases import DatabaseBuildError, build_databases
from envcore.runner.diagnostics import AppError, LoadSampler, app_traceback, worth_showing
from envcore.runner.execute import run_probes
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
from envcore.scenario.probes import Probe


class _LoadAgain(Exception):
    """App code ran during the warm-up request: the run loads the app again, without it."""


def _remove_scratch(root: Path, owner_pid: int) -> None:
    """Remove a runner's folder, only in the process that made it: a forked copy of the runner that is
    collected (or exits through ``sys.exit``) must not remove the folder its parent still works in."""
    if os.getpid() == owner_pid:
        shutil.rmtree(root, ignore_errors=True)


class InProcessRunner:
    """Runs probes against an app imported into this process (trusted code only)."""

    name = "inprocess"

    def __init__(self, *, isolate_probes: bool = False, scratch_parent: str | None = None,
                 diagnostics: bool = False) -> None:
        self.diagnostics = diagnostics
        """Keep the app's tracebacks behind 5xx answers and profile its load, for the scenario's
        author (:mod:`envcore.runner.diagnostics`)."""
        self.isolate_probes = isolate_probes
        """Every probe on the app exactly as loaded, as grading runs it (one fork per probe); by
        default the probes of a batch share one copy of the app, which is several times cheaper
        and what the factory's check uses: its probes own their records, so sharing only ever adds
        failures (a scenario whose probes disturb each other fails its pass-to-pass check)."""
        self._loop = asyncio.new_event_loop()
        self._root = Path(tempfile.mkdtemp(prefix="a01-inprocess-", dir=scratch_parent))
        # Removed by close(), or when the runner is collected or this process exits normally. A
        # process killed by a signal (a pool worker at the pool's end) cannot clean up: give such
        # processes a ``scratch_parent`` their parent removes.
        self._remove_root = weakref.finalize(self, _remove_scratch, self._root, os.getpid())
        self._cache = CodeCache()
        # Generated apps log refused accesses; keep them out of the grader's stderr.
        logging.getLogger("app").addHandler(logging.NullHandler())
        logging.getLogger("app").propagate = False

    def close(self) -> None:
        self._loop.close()
        self._remove_root()

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
        :mod:`envcore.runner.request_warmup`), so that no fork repeats its first-use work."""
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
            return self.run_batches(source, batches, actors, warm=False)
        return reports

    def _forked(self, app: Any, batch: Batch, actors: Actors):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: fresh copy of the loaded app; report back and leave without cleanup
            code = 0
            try:
                os.close(read_fd)
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
        with os.fdopen(read_fd, "rb") as inp:
            payload = inp.read()
        _, status = os.waitpid(pid, 0)
        if status != 0 or not payload:
            raise RunnerInfrastructureError(f"probe batch child exited with status {status}")
        return pickle.loads(payload)

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
