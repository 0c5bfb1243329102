"""Loading an app from its files: the one loader every runner uses.

An app runs as ``uvicorn main:app`` started from its folder would run it: every file of the app,
``.py`` files included, is on disk in the folder (:func:`materialize`), the working directory is
that folder and the folder is first on ``sys.path`` (:func:`load_app`). So an app that finds its
parts on disk works as it does anywhere: ``os.path.exists(__file__)`` is true and the file reads
back the module's source; ``pkgutil.iter_modules``/``walk_packages`` over a package's ``__path__``
discover its routers; ``importlib.resources.files(package)`` and ``pkgutil.get_data`` read package
data; ``Path(__file__).parent / "templates"`` is there; python-dotenv's ``load_dotenv()``, which
looks for ``.env`` from the folder of the first calling frame whose file exists, finds it.

The app's own modules are found and compiled by a private finder (:class:`AppFinder`) from the
files as given, not read back from disk: compiled code is cached by (path, source hash), which a
scenario check (five variants of one app) and the sandbox (code compiled once by the grader for
byte-identical trusted files) both rely on, and an app that rewrites its own files while it serves
cannot change what a later import inside a handler runs. The text on disk is the same text. Which
top-level names the app's files own is decided once for every runner
(:func:`envcore.sandbox.app_runtime.app_module_names`): its modules and stand-ins for libraries that
are not provided, never a standard-library module or a provided library, whose file in the app's
folder is never what an import loads (the folder being first on the path notwithstanding).

Every runner keeps what the import added (the finder, the app's modules, the folder on
``sys.path``) for as long as it serves the app, so an import inside a handler
(``def handler(): from app import helpers``) finds the app's own module wherever it runs. A sandboxed
worker serves one app and never forgets it; the in-process runner, which loads app after app into
one process, calls :meth:`ImportedApp.forget` once the run is over, which takes the app's modules
out again and puts back any module of the same name they shadowed (the project's own ``app.py``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.resources.abc
import importlib.util
import os
import posixpath
import sys
import traceback
from collections import OrderedDict
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any, Mapping

from envcore.sandbox.app_runtime import app_module_names, top_level_names

CODE_CACHE_SIZE = 1024


class AppLoadError(Exception):
    """The app could not be imported or started; the message is shown to whoever wrote it."""


def safe_relpath(rel: str) -> str:
    """``rel`` normalised, or :class:`AppLoadError` if it is absolute or climbs out of the app folder."""
    norm = posixpath.normpath(rel)
    if rel.startswith(("/", "\\")) or norm == "." or norm == ".." or norm.startswith("../") or "\x00" in rel:
        raise AppLoadError(f"file path escapes the app folder: {rel!r}")
    return norm


def materialize(files: Mapping[str, str], root: Path) -> None:
    """Write ``files`` (every one, ``.py`` files included) under ``root``, refusing paths that would
    escape it. Paths are checked lexically; ``root`` itself holds no symbolic links (the runner
    creates every folder in it)."""
    made: set[str] = set()
    for rel, text in files.items():
        norm = safe_relpath(rel)
        parent = posixpath.dirname(norm)
        if parent not in made:
            os.makedirs(os.path.join(root, parent), exist_ok=True)
            made.add(parent)
        with open(os.path.join(root, norm), "w", encoding="utf-8") as handle:
            handle.write(text)


class CodeCache:
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


class _FolderResources(importlib.resources.abc.TraversableResources):
    """``importlib.resources`` for one of the app's packages: its folder on disk."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def files(self) -> Path:
        return Path(self.folder)


class AppFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the app's own modules among its files (by dotted name) and loads cached code.

    It owns every top-level name the app's ``.py`` files define, as running the app from its own
    folder would (``python main.py`` or ``uvicorn main:app`` put that folder first on the path): a
    ``main.py`` beside an ``api/`` package, flat ``import models`` imports, and folders without an
    ``__init__.py`` (namespace packages) all import. A name the process has imported already (the
    standard library, FastAPI) stays the installed module, as it would in a real process.

    Each module's ``__file__`` is its file on disk, and the loader answers what a file loader would
    (``get_filename``, ``get_data``, resources), so code that finds its parts on disk works."""

    def __init__(self, root: Path, files: Mapping[str, str], tops: frozenset[str], cache: CodeCache,
                 reserved: frozenset[str] = frozenset()) -> None:
        self.root, self.files, self.tops, self.cache = root, files, tops, cache
        self.reserved = reserved
        """Top-level names the app's files define but may not own (``json.py``, a ``yaml/`` folder):
        they resolve to the installation, never to the file on disk, though the folder is on the path."""

    def _locate(self, fullname: str) -> tuple[str | None, bool] | None:
        """(the module's file relative to the app, whether it is a package), or ``None``."""
        base = fullname.replace(".", "/")
        if f"{base}/__init__.py" in self.files:
            return f"{base}/__init__.py", True
        if f"{base}.py" in self.files:
            return f"{base}.py", False
        if any(p.startswith(base + "/") and p.endswith(".py") for p in self.files):
            return None, True  # a folder of modules without __init__.py: a namespace package
        return None

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.reserved:
            return self._installed_spec(fullname, target)
        if fullname.partition(".")[0] not in self.tops:
            return None
        found = self._locate(fullname)
        if found is None:
            return None
        rel, package = found
        origin = str(self.root / rel) if rel else None
        spec = importlib.util.spec_from_loader(fullname, self, origin=origin, is_package=package)
        spec.has_location = rel is not None
        if package:
            spec.submodule_search_locations = [str(self.root / fullname.replace(".", "/"))]
        spec.loader_state = rel
        return spec

    def _installed_spec(self, fullname: str, target=None):
        """The spec of top-level module ``fullname`` as the installation has it, looked up past the
        app's folder; :class:`ModuleNotFoundError` where the installation has none (the app's file of
        that name is never what the import loads)."""
        here = os.path.realpath(self.root)
        entries = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != here]
        for finder in sys.meta_path:
            if finder is self:
                continue
            if finder is importlib.machinery.PathFinder:
                spec = finder.find_spec(fullname, entries, target)
            else:
                find = getattr(finder, "find_spec", None)
                spec = find(fullname, None, target) if find is not None else None
            if spec is not None:
                return spec
        raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)

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

    def get_filename(self, fullname: str) -> str:
        found = self._locate(fullname)
        if found is None or found[0] is None:
            raise ImportError(f"no file for {fullname}", name=fullname)
        return str(self.root / found[0])

    def is_package(self, fullname: str) -> bool:
        found = self._locate(fullname)
        return bool(found and found[1])

    def get_data(self, path: str) -> bytes:
        """A file's bytes, as a file loader reads them (``pkgutil.get_data``)."""
        with open(path, "rb") as handle:
            return handle.read()

    def get_resource_reader(self, fullname: str) -> _FolderResources | None:
        found = self._locate(fullname)
        if found is None:
            return None
        rel, package = found
        folder = fullname.replace(".", "/") if package else posixpath.dirname(rel or "")
        return _FolderResources(str(self.root / folder))


def short_traceback(exc: BaseException, root: Path) -> str:
    """``Type at file:line: message``, the line being the last one of the app's own files."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(root) in (f.filename or "")]
    where = ""
    if frames:
        last = frames[-1]
        where = f" at {os.path.relpath(last.filename, root)}:{last.lineno}"
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" at {os.path.relpath(exc.filename, root)}:{exc.lineno}"
    return f"{type(exc).__name__}{where}: {exc}"


class _LibraryState:
    """Process-wide registries of libraries apps use, which an app's import adds to and forgetting
    its modules does not empty: SQLModel keeps every table class of every app in one
    ``SQLModel.metadata``, so importing a second version of an app in the same process would fail
    ("Table 'note' is already defined"). A worker imports one app in a fresh process and never
    needs this; importing apps one after another in one process (the in-process runner) does."""

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


def endpoint_context_cache() -> dict | None:
    """FastAPI's private per-endpoint source-location cache, if this FastAPI has one."""
    try:
        import fastapi.routing as routing
    except ImportError:  # pragma: no cover - FastAPI is a dependency
        return None
    cache = getattr(routing, "_endpoint_context_cache", None)
    return cache if isinstance(cache, dict) else None


def endpoints(app: Any) -> list[Any]:
    """Every endpoint function of ``app``'s routes, included routers' too."""
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


def seed_endpoint_context(context: dict | None, functions: list[Any]) -> None:
    """Tell FastAPI where each endpoint is defined, so it does not re-read and tokenize source on
    the first request to every endpoint of every app."""
    if context is None:
        return
    for fn in functions:
        code = getattr(fn, "__code__", None)
        where = {"file": code.co_filename, "line": code.co_firstlineno} if code else {}
        context[id(fn)] = {"function": getattr(fn, "__name__", "?"), **where}


class ImportedApp:
    """An app imported by :func:`load_app`, and what its import added to this process."""

    def __init__(self, app: Any, finder: AppFinder, root: Path, *, cwd: str, before: set[str],
                 shadowed: dict[str, ModuleType], libraries: _LibraryState) -> None:
        self.app, self.finder, self.root = app, finder, root
        self._cwd, self._before, self._shadowed, self._libraries = cwd, before, shadowed, libraries
        self._endpoints: list[Any] = []
        self.forgotten = False

    def seed_endpoints(self) -> None:
        self._endpoints = endpoints(self.app)
        seed_endpoint_context(endpoint_context_cache(), self._endpoints)

    def forget(self) -> None:
        """Undo what the import did to this process: the finder, the folder on ``sys.path``, the app's
        modules (those it imported later too), the endpoints FastAPI was told about, the libraries'
        registries; put back the modules it shadowed and the working directory. Idempotent."""
        if self.forgotten:
            return
        self.forgotten = True
        root_str = str(self.root)
        inside = root_str.rstrip(os.sep) + os.sep
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        if root_str in sys.path:
            sys.path.remove(root_str)
        for key in [k for k in sys.path_importer_cache if k == root_str or k.startswith(inside)]:
            del sys.path_importer_cache[key]
        for name in set(sys.modules) - self._before:
            module = sys.modules[name]
            if name.partition(".")[0] in self.finder.tops or str(getattr(module, "__file__", "") or "").startswith(inside):
                del sys.modules[name]
        sys.modules.update(self._shadowed)
        self._libraries.restore()
        context = endpoint_context_cache()
        if context is not None:
            for fn in self._endpoints:
                context.pop(id(fn), None)
        self._endpoints = []
        try:
            os.chdir(self._cwd)
        except OSError:  # the folder the caller worked in is gone: stay where we are
            pass


def load_app(root: Path, files: Mapping[str, str], entrypoint: str, cache: CodeCache | None = None) -> ImportedApp:
    """Import ``module:attr`` of ``files`` (already written under ``root`` by :func:`materialize`)
    as ``uvicorn module:attr`` run from ``root`` would: ``root`` the working directory and first on
    ``sys.path``, the app's modules found by an :class:`AppFinder` placed first on ``sys.meta_path``.

    Everything stays in place until :meth:`ImportedApp.forget`, so imports the app makes later,
    inside a handler, find its own modules. :class:`AppLoadError` (with everything undone) if the
    import fails or the module has no such attribute."""
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise AppLoadError(f"entrypoint must look like 'module:attribute', got {entrypoint!r}")
    # The names the app's files own (its modules, stand-ins for libraries that are not provided) step
    # aside from whatever this process imported under them (this project's own app.py, a library the
    # process happened to import) while the app is loaded, as in a fresh process, and come back when
    # it is forgotten; a name the app may not own (the standard library's, a provided library's) is
    # always the installation's, whatever the app's files say (envcore.sandbox.app_runtime).
    owned = app_module_names(files)
    shadowed = {name: mod for name, mod in sys.modules.items() if name.partition(".")[0] in owned}
    for name in shadowed:
        del sys.modules[name]
    cwd = os.getcwd()
    os.chdir(root)
    finder = AppFinder(root, files, owned, cache or CodeCache(size=64), reserved=top_level_names(files) - owned)
    imported = ImportedApp(None, finder, root, cwd=cwd,
                           before=set(sys.modules), shadowed=shadowed, libraries=_LibraryState.save())
    sys.meta_path.insert(0, imported.finder)
    sys.path.insert(0, str(root))  # for anything the app imports that the finder does not own
    try:
        module = importlib.import_module(module_name)
        try:
            imported.app = getattr(module, attr)
        except AttributeError:
            raise AppLoadError(f"{module_name} has no attribute {attr!r}") from None
    except AppLoadError:
        imported.forget()
        raise
    except (Exception, SystemExit) as exc:
        message = short_traceback(exc, root)
        imported.forget()
        raise AppLoadError(message) from None
    imported.seed_endpoints()
    return imported
