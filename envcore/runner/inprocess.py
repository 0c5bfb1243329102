"""In-process probe runner: the fast backend for trusted code (the factory's own apps).

Each run writes the app's files into the runner's workspace folder (emptied first), imports the
entrypoint through a private module finder, and sends the probes to the ASGI app directly on one
reusable event loop. A batch's probes share one copy of the app, each batch gets a pristine one; with
``isolate_probes`` every probe does, as in grading (the app imported once and forked once per probe,
its folder put back after each). Modules the import creates are removed from ``sys.modules`` afterwards (and
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
import hashlib
import importlib.abc
import importlib.util
import linecache
import logging
import os
import pickle
import posixpath
import shutil
import sys
import tempfile
import time
import traceback
import weakref
from collections import OrderedDict
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Mapping, Sequence

from envcore.runner import request_warmup
from envcore.runner.actors import Actors
from envcore.runner.base import AppSource, Batch, RunnerInfrastructureError, RunReport
from envcore.runner.databases import DatabaseBuildError, build_databases
from envcore.runner.diagnostics import AppError, LoadSampler, app_traceback, worth_showing
from envcore.runner.execute import run_probes
from envcore.runner.http import HttpRequest, HttpResponse, Lifespan, WouldReachApp, call_asgi, gate_app
from envcore.runner.snapshot import FolderSnapshot
from envcore.scenario.probes import Probe

CODE_CACHE_SIZE = 1024


class AppLoadError(Exception):
    """The app could not be imported or started; the message is shown to whoever wrote it."""


def safe_relpath(rel: str) -> str:
    """``rel`` normalised, or :class:`AppLoadError` if it is absolute or climbs out of the app folder."""
    norm = posixpath.normpath(rel)
    if rel.startswith(("/", "\\")) or norm == "." or norm == ".." or norm.startswith("../") or "\x00" in rel:
        raise AppLoadError(f"file path escapes the app folder: {rel!r}")
    return norm


def materialize(files: Mapping[str, str], root: Path, *, skip_python: bool = False) -> None:
    """Write ``files`` under ``root``, refusing paths that would escape it.

    With ``skip_python`` the ``.py`` files are left out (the module finder serves them from memory),
    but their folders are still created so ``Path(__file__).parent`` exists. Paths are checked
    lexically; ``root`` itself holds no symbolic links (the runner creates every folder in it).
    """
    made: set[str] = set()
    for rel, text in files.items():
        norm = safe_relpath(rel)
        parent = posixpath.dirname(norm)
        if parent not in made:
            os.makedirs(os.path.join(root, parent), exist_ok=True)
            made.add(parent)
        if not (skip_python and norm.endswith(".py")):
            with open(os.path.join(root, norm), "w", encoding="utf-8") as handle:
                handle.write(text)


class _CodeCache:
    """Compiled module code by (absolute path, source hash); bounded LRU."""

    def __init__(self, size: int = CODE_CACHE_SIZE) -> None:
        self.size = size
        self.entries: OrderedDict[tuple[str, str], CodeType] = OrderedDict()

    @staticmethod
    def key(filename: str, source: str) -> tuple[str, str]:
        return filename, hashlib.sha1(source.encode("utf-8")).hexdigest()

    def put(self, filename: str, source: str, code: CodeType) -> None:
        """Store code compiled elsewhere for ``source`` (the sandbox ships trusted modules this way)."""
        self.entries[self.key(filename, source)] = code

    def compile(self, source: str, filename: str) -> CodeType:
        key = self.key(filename, source)
        code = self.entries.get(key)
        if code is None:
            code = compile(source, filename, "exec", dont_inherit=True)
            self.entries[key] = code
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)
        else:
            self.entries.move_to_end(key)
        return code


class _AppFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the app's own modules among its files (by dotted name) and loads cached code.

    It owns every top-level name the app's ``.py`` files define, as running the app from its own
    folder would (``python main.py`` or ``uvicorn main:app`` put that folder first on the path): a
    ``main.py`` beside an ``api/`` package, flat ``import models`` imports, and folders without an
    ``__init__.py`` (namespace packages) all import. A name the process has imported already (the
    standard library, FastAPI) stays the installed module, as it would in a real process."""

    def __init__(self, root: Path, files: Mapping[str, str], tops: frozenset[str], cache: _CodeCache) -> None:
        self.root, self.files, self.tops, self.cache = root, files, tops, cache

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.tops:
            return None
        base = fullname.replace(".", "/")
        if f"{base}/__init__.py" in self.files:
            rel, package = f"{base}/__init__.py", True
        elif f"{base}.py" in self.files:
            rel, package = f"{base}.py", False
        elif any(p.startswith(base + "/") and p.endswith(".py") for p in self.files):
            rel, package = None, True  # a folder of modules without __init__.py: a namespace package
        else:
            return None
        origin = str(self.root / rel) if rel else None
        spec = importlib.util.spec_from_loader(fullname, self, origin=origin, is_package=package)
        spec.has_location = rel is not None
        if package:
            spec.submodule_search_locations = [str(self.root / base)]
        spec.loader_state = rel
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module: ModuleType) -> None:
        rel = module.__spec__.loader_state
        if rel is None:  # a namespace package: nothing to run
            return
        filename = str(self.root / rel)
        module.__file__ = filename
        code = self.cache.compile(self.files[rel], filename)
        exec(code, module.__dict__)

    def get_source(self, fullname: str) -> str | None:  # used by linecache for tracebacks
        base = fullname.replace(".", "/")
        return self.files.get(f"{base}/__init__.py", self.files.get(f"{base}.py"))


def top_level_names(files: Mapping[str, str]) -> frozenset[str]:
    """The top-level module and package names the app's ``.py`` files define (``main.py`` ->
    ``main``, ``api/notes.py`` -> ``api``); names that are not identifiers cannot be imported."""
    names = set()
    for path in files:
        if path.endswith(".py"):
            first = path.split("/", 1)[0].removesuffix(".py")
            if first.isidentifier():
                names.add(first)
    return frozenset(names)


def _short_traceback(exc: BaseException, root: Path) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(root) in (f.filename or "")]
    where = ""
    if frames:
        last = frames[-1]
        where = f" at {os.path.relpath(last.filename, root)}:{last.lineno}"
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" at {os.path.relpath(exc.filename, root)}:{exc.lineno}"
    return f"{type(exc).__name__}{where}: {exc}"


def import_app(
    root: Path,
    files: Mapping[str, str],
    entrypoint: str,
    cache: _CodeCache | None = None,
    *,
    keep_modules: bool = False,
) -> Any:
    """Import ``module:attr`` of ``files`` (already written under ``root``) without leaving modules behind.

    With ``keep_modules`` (a process that serves only this app) the app's modules and its finder
    stay installed, so that imports the app makes later, inside a handler, still work."""
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise AppLoadError(f"entrypoint must look like 'module:attribute', got {entrypoint!r}")
    top = module_name.split(".")[0]
    shadowed = {}
    if top in sys.modules:  # a submodule is only ever present with its top-level package
        shadowed = {name: mod for name, mod in sys.modules.items() if name == top or name.startswith(top + ".")}
    for name in shadowed:
        del sys.modules[name]
    before = set(sys.modules)
    libraries = _LibraryState.save()
    tops = top_level_names(files) | {top}
    finder = _AppFinder(root, files, tops, cache or _CodeCache(size=64))
    sys.meta_path.insert(0, finder)
    root_str = str(root)
    sys.path.insert(0, root_str)  # for anything the app imports that the finder does not own
    try:
        module = importlib.import_module(module_name)
        try:
            return getattr(module, attr)
        except AttributeError:
            raise AppLoadError(f"{module_name} has no attribute {attr!r}") from None
    except AppLoadError:
        raise
    except (Exception, SystemExit) as exc:
        raise AppLoadError(_short_traceback(exc, root)) from None
    finally:
        if not keep_modules:
            _forget_app(finder, root_str, before, tops, shadowed)
            libraries.restore()


class _LibraryState:
    """Process-wide registries of libraries apps use, which an app's import adds to and forgetting
    its modules does not empty: SQLModel keeps every table class of every app in one
    ``SQLModel.metadata``, so importing a second version of an app in the same process would fail
    ("Table 'note' is already defined"). A worker imports one app in a fresh process and never
    needs this; importing apps one after another in one process (:class:`InProcessRunner`) does."""

    def __init__(self, tables: set[str] | None, classes: set[str] | None) -> None:
        self.tables, self.classes = tables, classes

    @classmethod
    def save(cls) -> "_LibraryState":
        registry = getattr(sys.modules.get("sqlmodel.main"), "default_registry", None)
        if registry is None:
            return cls(None, None)
        return cls(set(registry.metadata.tables), set(registry._class_registry.keys()))

    def restore(self) -> None:
        registry = getattr(sys.modules.get("sqlmodel.main"), "default_registry", None)
        if registry is None:
            return
        for name in set(registry.metadata.tables) - (self.tables or set()):
            registry.metadata.remove(registry.metadata.tables[name])
        for name in set(registry._class_registry.keys()) - (self.classes or set()):
            registry._class_registry.pop(name, None)


def _forget_app(finder: "_AppFinder", root_str: str, before: set[str], tops: frozenset[str], shadowed: dict) -> None:
    """Undo what importing an app did to the import system."""
    sys.meta_path.remove(finder)
    sys.path.remove(root_str)
    for key in [k for k in sys.path_importer_cache if k.startswith(root_str)]:
        del sys.path_importer_cache[key]
    for name in set(sys.modules) - before:
        module = sys.modules[name]
        if name.partition(".")[0] in tops or str(getattr(module, "__file__", "") or "").startswith(root_str):
            del sys.modules[name]
    sys.modules.update(shadowed)


def _endpoint_context_cache() -> dict | None:
    """FastAPI's private per-endpoint source-location cache, if this FastAPI has one."""
    try:
        import fastapi.routing as routing
    except ImportError:  # pragma: no cover - FastAPI is a dependency
        return None
    cache = getattr(routing, "_endpoint_context_cache", None)
    return cache if isinstance(cache, dict) else None


def _endpoints(app: Any) -> list[Any]:
    found, stack = [], [getattr(app, "router", None)]
    while stack:
        router = stack.pop()
        for route in getattr(router, "routes", None) or []:
            if callable(getattr(route, "endpoint", None)):
                found.append(route.endpoint)
            inner = getattr(route, "original_router", None) or getattr(route, "app", None)
            if inner is not None and hasattr(inner, "routes"):
                stack.append(inner)
    return found


def _seed_endpoint_context(context: dict | None, endpoints: list[Any]) -> None:
    """Tell FastAPI where each endpoint is defined, so it does not re-read source on first request."""
    if context is None:
        return
    for fn in endpoints:
        code = getattr(fn, "__code__", None)
        where = {"file": code.co_filename, "line": code.co_firstlineno} if code else {}
        context[id(fn)] = {"function": getattr(fn, "__name__", "?"), **where}


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
        self._cache = _CodeCache()
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
        """The folder the app runs in, holding exactly the folders and data files of ``files``.

        One folder is reused from run to run: files and folders the new app does not have are
        removed (including anything the previous app wrote), the data files are written afresh."""
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
                    if rel not in wanted or rel.endswith(".py"):
                        os.unlink(os.path.join(dirpath, name))
                for name in list(dirnames):
                    rel = posixpath.join(here, name) if here else name
                    if rel not in wanted_dirs:
                        shutil.rmtree(os.path.join(dirpath, name))
                        dirnames.remove(name)
        materialize(files, root, skip_python=True)
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
        cwd = os.getcwd()
        endpoints: list[Any] = []
        context = _endpoint_context_cache()
        reports: list[RunReport] = []
        root = self._root / "app-root"
        sampler: LoadSampler | None = None
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
            os.chdir(root)
            app = import_app(root, source.files, source.entrypoint, self._cache)
            endpoints = _endpoints(app)
            _seed_endpoint_context(context, endpoints)
            lifespan = Lifespan(app)
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
                    return self.run_batches(source, batches, actors, warm=False)
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
        finally:
            if sampler is not None:
                sampler.stop()  # (a no-op once stopped)
            os.chdir(cwd)
            if context is not None:
                for fn in endpoints:
                    context.pop(id(fn), None)
            for filename in [f for f in linecache.cache if f.startswith(str(root))]:
                linecache.cache.pop(filename, None)
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
