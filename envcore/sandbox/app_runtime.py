"""What the sandbox gives an app besides its own files: the libraries it may import, and SQLite
that works in a folder where no file may be created once the app has loaded.

**Libraries.** An app may import the standard library (minus what only an escape would use, see
:mod:`envcore.sandbox.audit`), FastAPI with Starlette and Pydantic, and the libraries real FastAPI
apps are written with, listed in :data:`APP_LIBRARIES` (and in ``docs/bundle-format.md``). The zygote
imports them all before it forks anything, so an app's ``import sqlalchemy`` costs a dictionary
lookup instead of 150 ms in every worker, and modules a library pulls in at import (``uvicorn``
imports ``multiprocessing``) are loaded by trusted code rather than refused as the app's own import.
Using them is still bound by every layer: ``uvicorn.run`` cannot open a socket, a process pool
cannot fork.

**SQLite files.** A worker may create files while the app loads (its import and start-up create a
database file, as most real apps do) and none afterwards (see :mod:`envcore.sandbox.worker`). SQLite
creates a rollback journal beside the database for every write transaction, and temporary files for
large sorts; :func:`keep_sqlite_journals_in_memory` makes every connection keep both in memory (the
journal is only there to survive a crash, which a worker never needs to), so writes keep working
after the folder is frozen. An app that switches to WAL itself needs ``-wal`` and ``-shm`` files and
must create them while it loads.

**The app's own module names.** An app's files are importable by their names, as when it is run from
its own folder (``main.py`` is ``main``, ``api/`` is ``api``), and a scenario brings a library that is
not provided the same way: a stand-in ``app/stripe.py`` is what ``import stripe`` loads.
:func:`app_module_names` decides which top-level names the app's files may own, the same in every
runner and whatever the process imported before: never a standard-library module, a library an app
may import (or one it needs), the runtime's own package or a module the interpreter imports by itself
(``sitecustomize``). A file with such a name is not what its import loads: ``app/json.py`` leaves
``import json`` the standard library's, so no patch can put its own code under a name that library
code (or a later import in the same process) trusts to be the installed one.

**TLS trust store.** HTTP clients build an SSL context when a client is made (httpx does, for plain
``http://`` too), reading certifi's CA bundle from the installation, which a worker may no longer
read once its app has loaded; :func:`keep_ca_bundle_in_memory` serves that one file from memory, so
making a client works and the request itself fails where every network call does.

**Name lookups.** dnspython's default resolver (email-validator's deliverability check uses it)
reads the host's ``/etc/resolv.conf`` when first used, which a worker may not read (nor should it learn
the host's name servers); :func:`resolve_without_name_servers` gives it none, so a lookup fails at
once as on a machine without a network (email-validator then reports deliverability as unknown).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import sqlite3
import sqlite3.dbapi2
import ssl
import sys
from collections.abc import Callable, Iterable
from typing import Any

from envcore.sandbox.audit import DENIED_MODULES

APP_LIBRARIES = (
    "uvicorn",
    "sqlalchemy", "sqlalchemy.orm", "sqlalchemy.ext.asyncio", "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.sqlite.aiosqlite", "greenlet", "aiosqlite",
    "sqlmodel",
    "jwt",
    "jose", "jose.jwt",
    "passlib", "passlib.context", "passlib.hash", "passlib.handlers.bcrypt",
    "bcrypt",
    "pwdlib", "pwdlib.hashers.argon2", "pwdlib.hashers.bcrypt",
    "argon2",
    "pydantic_settings", "dotenv",
    "multipart", "python_multipart",
    "email_validator",
    "itsdangerous", "starlette.middleware.sessions",
    "jinja2", "fastapi.templating",
    "yaml",
    "requests", "httpx",
    "slowapi", "limits", "limits.storage", "limits.aio.storage",
    "faker",
)
"""Modules the zygote imports for every app (the libraries' public entry points); their submodules
load on demand from the Python installation, which a worker may read."""


APP_DISTRIBUTIONS = (
    "fastapi", "starlette", "pydantic", "anyio", "uvicorn",
    "SQLAlchemy", "sqlmodel", "aiosqlite", "greenlet",  # greenlet: SQLAlchemy's asyncio extension runs on it
    "PyJWT", "python-jose", "cryptography",  # python-jose[cryptography], as FastAPI's own tutorial installs it
    "passlib", "bcrypt", "pwdlib", "argon2-cffi",
    "pydantic-settings", "python-dotenv", "python-multipart", "email-validator",
    "itsdangerous", "Jinja2", "PyYAML",
    "requests", "httpx",
    "slowapi", "limits",
    "Faker",
)
"""The distributions an app may import (docs/bundle-format.md), with everything they require."""

_IMPORTABLE: frozenset[str] | None = None


def distribution_name(name: str) -> str:
    """A distribution's name as packaging normalises it (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(names: Iterable[str]) -> set[str]:
    """The installed distributions ``names`` and everything they require (extras aside), normalised
    names; a name not installed here is left out."""
    wanted: set[str] = set()
    stack = [distribution_name(name) for name in names]
    while stack:
        name = stack.pop()
        if name in wanted:
            continue
        try:
            requires = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue
        wanted.add(name)
        stack += [distribution_name(re.match(r"[A-Za-z0-9_.\-]+", req).group(0)) for req in requires if "extra ==" not in req]
    return wanted


def importable_modules() -> frozenset[str]:
    """Top-level module names an app may import besides its own: the standard library and the
    modules of :data:`APP_DISTRIBUTIONS` and of every distribution they require (extras aside).
    Worked out once a process (the zygote does it before forking anything)."""
    global _IMPORTABLE
    if _IMPORTABLE is None:
        wanted = requirement_closure(APP_DISTRIBUTIONS)
        modules = {top for top, dists in importlib.metadata.packages_distributions().items()
                   if any(distribution_name(d) in wanted for d in dists)}
        _IMPORTABLE = frozenset(modules | set(sys.stdlib_module_names) | set(sys.builtin_module_names))
    return _IMPORTABLE


INTERPRETER_MODULES = ("sitecustomize", "usercustomize", "__main__")
"""Modules the interpreter imports by itself (at start-up, or as the script it runs): no app's."""

RUNTIME_PACKAGE = __name__.partition(".")[0]
"""The package of the runtime that loads apps (``envcore``): in memory in every worker."""


def top_level_names(files: Iterable[str]) -> frozenset[str]:
    """The top-level module and package names the ``.py`` paths among ``files`` define (``main.py`` ->
    ``main``, ``api/notes.py`` -> ``api``); a name that is not an identifier cannot be imported."""
    names = set()
    for path in files:
        if path.endswith(".py"):
            first = path.split("/", 1)[0].removesuffix(".py")
            if first.isidentifier():
                names.add(first)
    return frozenset(names)


def reserved_module_reason(name: str) -> str | None:
    """Why an app's file may not own the top-level module ``name`` (``None``: it may)."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "a standard-library module"
    if name in INTERPRETER_MODULES:
        return "a module the interpreter imports by itself"
    if name == RUNTIME_PACKAGE:
        return "the package of the runtime that loads apps"
    if name in importable_modules():
        return "a library apps may import (or one such a library needs)"
    return None


def app_module_names(files: Iterable[str]) -> frozenset[str]:
    """The top-level module names an app whose file paths are ``files`` owns: every name its ``.py``
    files define (``main.py``, ``api/``, a stand-in ``stripe.py``) but those
    :func:`reserved_module_reason` keeps for the installation. The loader serves these names, and only
    these, from the app's files; the rest resolve to the installation as in any process."""
    return frozenset(name for name in top_level_names(files) if reserved_module_reason(name) is None)


def reserved_app_modules(files: Iterable[str]) -> dict[str, str]:
    """The top-level names the app's ``.py`` files define that it may not own, each with why (for a
    porter: such a file is never what its import loads, so it must be renamed)."""
    return {name: reason for name in sorted(top_level_names(files))
            if (reason := reserved_module_reason(name)) is not None}


def import_named_modules(files: dict[str, str], importable: frozenset[str]) -> int:
    """Import every module the app's Python files name in an ``import`` statement anywhere (inside a
    function too), of those it may import and not yet imported; return how many were imported.

    A worker does this once the app has loaded, just before its folder is sealed: after the seal nothing
    outside the folder can be read (so a request cannot leave a trace in the Python installation's
    access times), and a module imported lazily by a handler must already be in memory. Only library and
    standard-library modules are imported here, never the app's own (they loaded with it); an import
    that fails is left for the app's handler to meet, as it would anywhere."""
    names: set[str] = set()
    for path, text in files.items():
        if path.endswith(".py"):
            names.update(_imported_names(text))
    imported = 0
    for name in sorted(names):
        top = name.split(".", 1)[0]
        if name in sys.modules or top not in importable or top in DENIED_MODULES or name in DENIED_MODULES:
            continue
        try:
            importlib.import_module(name)
            imported += 1
        except BaseException:  # noqa: BLE001 - a name that is not a module (an attribute) or fails to import
            continue
    return imported


_IMPORT_LINE = re.compile(
    r"^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import[ \t]+\(?([\w., \t]+)|import[ \t]+([\w., \t]+))", re.MULTILINE)


def _imported_names(text: str) -> set[str]:
    """Absolute module names on the ``import`` lines of ``text`` (``import a.b``, ``from a import b``
    gives ``a`` and ``a.b``). Read line by line, not parsed (a worker's stack is no place for
    ``ast.parse``, which fails on deep ones): a line inside a string counts too, which costs at most an
    import that was not needed."""
    names: set[str] = set()
    for match in _IMPORT_LINE.finditer(text):
        module, members, plain = match.groups()
        if module:
            names.add(module)
            names.update(f"{module}.{m.split()[0]}" for m in members.split(",") if m.split())
        else:
            names.update(m.split()[0] for m in plain.split(",") if m.split())
    return names


def preload_libraries() -> list[str]:
    """Import :data:`APP_LIBRARIES` (trusted, before the first fork), then everything a library may
    import lazily (:func:`preload_lazy_imports`); return the names that are missing from this
    installation (an app importing one gets an ``ImportError``, as it would anywhere)."""
    missing = []
    for name in APP_LIBRARIES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a library that fails to import is simply not offered
            missing.append(name)
    preload_lazy_imports()
    return missing


_NOT_PRELOADED = ("test", "tests", "testing", "conftest", "__main__")
"""Submodules left out of :func:`preload_lazy_imports`: a library's own tests and entry points."""

_LOCALE = re.compile(r"[a-z]{2,3}(?:_[A-Za-z]{2,4})*")
_PRELOADED_PARTS: dict[str, Callable[[list[str]], bool]] = {
    # Faker ships some 700 modules of locale data. ``Faker()`` loads the default locale's (en_US,
    # built on en) and an app that asks for another locale does so at load time, when the worker may
    # still read the installation; its documentation tools and pytest plugin are no app's business.
    "faker": lambda parts: not (
        (len(parts) > 1 and parts[1] in ("sphinx", "contrib", "cli", "documentor"))
        or (len(parts) > 3 and parts[1] == "providers" and _LOCALE.fullmatch(parts[3]) is not None
            and parts[3] not in ("en", "en_US"))),
}
"""Libraries whose submodules :func:`preload_lazy_imports` imports only in part, by top-level name:
a rule given the dotted name's parts says whether a submodule (and, for a package, what is under it)
is imported."""


def _preloaded(name: str) -> bool:
    parts = name.split(".")
    if any(part in _NOT_PRELOADED or part.startswith("test_") for part in parts):
        return False
    rule = _PRELOADED_PARTS.get(parts[0])
    return rule is None or rule(parts)


def _submodules(name: str, pkgutil: Any, load: Callable[[str], None]) -> None:
    """``load`` every submodule of the imported package ``name`` that :func:`_preloaded` keeps, depth
    first; a package left out is not imported, nor anything under it (``pkgutil.walk_packages``
    imports every package it finds, to look inside)."""
    package = sys.modules.get(name)
    for info in pkgutil.iter_modules(getattr(package, "__path__", None) or [], f"{name}."):
        if _preloaded(info.name):
            load(info.name)
            if info.ispkg:
                _submodules(info.name, pkgutil, load)


def preload_lazy_imports() -> int:
    """Import what the libraries an app may use import only when a feature is first used: every
    submodule of their packages, every module their source names on an ``import`` line (inside a
    function too: ``default_backend()`` imports ``cryptography.hazmat.backends.openssl`` on its first
    call), and every codec of ``encodings`` (loaded on a codec's first use). Return how many modules
    were imported.

    Once its app has loaded, a worker can read nothing outside its folder (the seal, see
    :mod:`envcore.sandbox.containment`), so a library module that was not imported by then cannot be:
    python-jose verifying a signature failed with ``No module named
    'cryptography.hazmat.backends.openssl'`` and every signed token was refused. Imported here, once,
    by trusted code before the first fork, such a module is a dictionary lookup in every worker."""
    import pkgutil
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of parts no app asked for
        return _preload_lazy_imports(pkgutil)


def _preload_lazy_imports(pkgutil: Any) -> int:
    before = len(sys.modules)
    importable = importable_modules()
    stdlib = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    libraries = sorted(importable - stdlib)

    def quietly(name: str) -> None:
        top = name.split(".", 1)[0]
        if name in sys.modules or top not in importable or top in DENIED_MODULES or name in DENIED_MODULES:
            return
        loaded = set(sys.modules)
        try:
            importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - an optional part whose own dependency is absent, as anywhere
            pass
        # a part that pulls in a module an app may not import (ctypes, subprocess...) is left unloaded:
        # in memory, that module would be the app's for the asking, past the import refusal
        new = set(sys.modules) - loaded
        if any(m in DENIED_MODULES or m.split(".", 1)[0] in DENIED_MODULES for m in new):
            for module in new:
                sys.modules.pop(module, None)

    for top in libraries:
        quietly(top)
        _submodules(top, pkgutil, quietly)
    named: set[str] = set()
    for module in list(sys.modules.values()):
        origin = getattr(module, "__file__", None) or ""
        if origin.endswith(".py") and (getattr(module, "__name__", "") or "").split(".", 1)[0] in libraries:
            try:
                with open(origin, encoding="utf-8", errors="replace") as source:
                    named.update(_imported_names(source.read()))
            except OSError:
                continue
    for name in sorted(named):
        quietly(name)
    import encodings

    for info in pkgutil.iter_modules(encodings.__path__, "encodings."):
        quietly(info.name)
    return len(sys.modules) - before


_PRAGMAS = ("PRAGMA journal_mode=MEMORY", "PRAGMA temp_store=MEMORY")


def keep_sqlite_journals_in_memory() -> None:
    """Make ``sqlite3.connect`` (and ``sqlite3.dbapi2.connect``, which SQLAlchemy calls) return
    connections whose rollback journal and temporary tables live in memory. Idempotent."""
    original = getattr(sqlite3.connect, "__wrapped__", sqlite3.connect)

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = original(*args, **kwargs)
        for pragma in _PRAGMAS:
            try:
                connection.execute(pragma)
            except sqlite3.Error:  # a read-only or busy database keeps its defaults
                pass
        return connection

    connect.__wrapped__ = original  # type: ignore[attr-defined]
    connect.__doc__ = original.__doc__
    sqlite3.connect = sqlite3.dbapi2.connect = connect


def keep_ca_bundle_in_memory() -> None:
    """Make ``SSLContext.load_verify_locations(cafile=<certifi's bundle>)`` load it from memory (read
    here, once, by trusted code). Every other file, folder or ``cadata`` is loaded as asked. Idempotent;
    nothing happens without certifi."""
    try:
        import certifi

        path = certifi.where()
        with open(path, encoding="ascii") as bundle:
            text = bundle.read()
    except (ImportError, OSError, ValueError):
        return
    names = {path, os.path.realpath(path)}
    context = ssl.SSLContext
    original = getattr(context.load_verify_locations, "__wrapped__", context.load_verify_locations)

    def load_verify_locations(self: ssl.SSLContext, cafile: Any = None, capath: Any = None, cadata: Any = None) -> None:
        if cafile is not None and capath is None and cadata is None and isinstance(cafile, (str, os.PathLike)) \
                and os.fspath(cafile) in names:
            return original(self, cadata=text)
        return original(self, cafile, capath, cadata)

    load_verify_locations.__wrapped__ = original  # type: ignore[attr-defined]
    context.load_verify_locations = load_verify_locations  # type: ignore[method-assign]


def resolve_without_name_servers() -> None:
    """Make dnspython's default resolver one with no name servers (nothing read from the host). Every
    lookup through it fails at once with ``NoNameservers``. Nothing happens without dnspython."""
    try:
        import dns.resolver
    except ImportError:
        return
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = []
    dns.resolver.default_resolver = resolver
