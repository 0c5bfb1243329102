"""Libraries that want a second thread, run in a worker that has only one.

A worker cannot start a thread (the seccomp filter refuses ``clone``, ``RLIMIT_NPROC`` is 0): one
thread keeps a probe's requests strictly in order and leaves nothing running between them. A few of
the libraries an app may use (:data:`envcore.sandbox.app_runtime.APP_LIBRARIES`) start one for work
that needs none in a process serving one request at a time, and would fail where an app calls them
(``RuntimeError: can't start new thread``). Each gets the same work done in place:

* asyncio's default executor (``loop.run_in_executor(None, ...)``, ``asyncio.to_thread``, and
  ``loop.getaddrinfo``, which httpx's ``AsyncClient`` and anyio resolve host names with) calls the
  function at once and hands back a settled future, as :func:`~envcore.sandbox.containment.run_sync_inline`
  does for anyio's (Starlette's) thread pool. So an outgoing request from an async handler fails
  at the name lookup with the sandbox's ``PermissionError`` (an ``OSError``), which the client turns
  into its own connection error, instead of a ``RuntimeError`` no app expects;
* aiosqlite (``create_async_engine("sqlite+aiosqlite:///...")``) runs each SQLite call as it is
  queued instead of on its connection thread;
* limits' in-memory storage (slowapi's default) never starts its clean-up timer: the timer only
  drops expired counters from memory, and every read already treats an expired counter as gone.

:func:`run_on_one_thread` applies them all in the zygote, before the first fork, so every template and
worker inherits them. Idempotent; a library that is not installed is skipped. Threads the app starts
itself still fail as before.

The in-process runner (:mod:`envcore.runner.inprocess`) serves an app on one thread the same way, for
as long as it serves it (:func:`on_one_thread`, which also runs Starlette's thread pool in place, as
every worker does: :func:`~envcore.sandbox.containment.run_sync_inline`), and for the same reasons:
its probes run in forks of the loaded app, and a fork has none of its parent's threads (an aiosqlite
connection the app's startup opened would wait for ever on its connection thread in every fork), and
an app must not pass there and fail here, or the other way round (a SQLite connection made at import
serves sync routes in a worker, where they run on the thread that made it).
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Undo = Callable[[], None]
"""Puts back what an adaptation replaced."""


def inline_default_executor() -> Undo:
    """Make ``loop.run_in_executor(None, fn, *args)`` call ``fn(*args)`` in place and return a future
    already holding its result or exception (an explicit executor is used as given)."""
    loop_class = asyncio.base_events.BaseEventLoop
    previous = loop_class.run_in_executor
    original = getattr(previous, "__wrapped__", previous)

    def run_in_executor(self: Any, executor: Any, func: Callable[..., Any], *args: Any) -> asyncio.Future:
        if executor is not None:
            return original(self, executor, func, *args)
        self._check_closed()
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - delivered to whoever awaits, as a thread would
            future.set_exception(exc)
        return future

    run_in_executor.__wrapped__ = original  # type: ignore[attr-defined]
    loop_class.run_in_executor = run_in_executor  # type: ignore[method-assign]

    def undo() -> None:
        loop_class.run_in_executor = previous  # type: ignore[method-assign]

    return undo


class _InlineThread:
    """Stands for aiosqlite's connection thread: there is nothing to run, calls run as queued."""

    daemon = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start(self) -> None:
        pass

    def is_alive(self) -> bool:
        return False

    def join(self, timeout: float | None = None) -> None:
        pass


class _InlineQueue:
    """Stands for aiosqlite's call queue: each ``(future, call)`` put on it runs at once and settles
    its future, as the connection thread would have."""

    def __class_getitem__(cls, item: Any) -> Any:  # aiosqlite annotates ``SimpleQueue[...]``
        return cls

    def put_nowait(self, item: tuple[asyncio.Future | None, Callable[[], Any]]) -> None:
        future, call = item
        try:
            result = call()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - delivered to whoever awaits, as the thread would
            if future is not None and not future.done():
                future.set_exception(exc)
            return
        if future is not None and not future.done():
            future.set_result(result)

    put = put_nowait


def inline_aiosqlite() -> Undo:
    """aiosqlite's connections run their SQLite calls in place (see :class:`_InlineQueue`)."""
    core = _loaded("aiosqlite.core")
    if core is None:
        return _nothing
    previous = core.Thread, core.SimpleQueue
    core.Thread = _InlineThread
    core.SimpleQueue = _InlineQueue

    def undo() -> None:
        core.Thread, core.SimpleQueue = previous

    return undo


class _IdleTimer:
    """A ``threading.Timer`` that never runs: limits' storage starts one to tidy memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def is_alive(self) -> bool:
        return False


def limits_without_timer() -> Undo:
    """limits' in-memory storage keeps expired counters until they are next read (when it drops them
    anyway) instead of tidying them on a timer thread."""
    memory = _loaded("limits.storage.memory")
    if memory is None or not isinstance(memory.threading, types.ModuleType):
        return _nothing
    module = memory.threading
    memory.threading = types.SimpleNamespace(RLock=module.RLock, Lock=module.Lock, Timer=_IdleTimer)

    def undo() -> None:
        memory.threading = module

    return undo


def inline_thread_pool() -> Undo:
    """Starlette's thread pool (``anyio.to_thread.run_sync``: sync routes and dependencies) calls the
    function in place, as every worker's does (:func:`~envcore.sandbox.containment.run_sync_inline`,
    which a worker applies itself; here for :func:`on_one_thread`)."""
    import anyio.to_thread

    from envcore.sandbox.containment import run_sync_inline

    previous = anyio.to_thread.run_sync
    run_sync_inline()

    def undo() -> None:
        anyio.to_thread.run_sync = previous

    return undo


def _nothing() -> None:
    """The undo of an adaptation that found nothing to adapt."""


ADAPTATIONS: tuple[tuple[str, Callable[[], Undo]], ...] = (
    ("asyncio default executor", inline_default_executor),
    ("aiosqlite", inline_aiosqlite),
    ("limits in-memory storage", limits_without_timer),
)
"""Every adaptation the zygote applies, by what it adapts (each returns its undo)."""

IN_PROCESS: tuple[tuple[str, Callable[[], Undo]], ...] = (
    *ADAPTATIONS,
    ("Starlette's thread pool", inline_thread_pool),
)
"""What :func:`on_one_thread` applies: every adaptation, and the thread pool a worker runs in place."""


def run_on_one_thread() -> list[str]:
    """Apply every adaptation (in the zygote, before the first fork); return what was adapted."""
    done = []
    for name, adapt in ADAPTATIONS:
        adapt()
        done.append(name)
    return done


_scope_lock = threading.Lock()
_scope_depth = 0
_scope_undo: list[Undo] = []


@contextmanager
def on_one_thread() -> Iterator[None]:
    """Every adaptation of :data:`IN_PROCESS` in force while the block runs, undone when the last
    block still running ends (blocks nest, and may run in several threads at once: one runner per
    thread). For the in-process runner, which serves apps one at a time in a process that does
    other work too; a fork made inside the block keeps the adaptations for its life.

    The adaptations are process-wide while in force: code of this process running meanwhile on
    another thread's event loop gets the same in-place calls."""
    global _scope_depth
    with _scope_lock:
        if _scope_depth == 0:
            for _, adapt in IN_PROCESS:
                _scope_undo.append(adapt())
        _scope_depth += 1
    try:
        yield
    finally:
        with _scope_lock:
            _scope_depth -= 1
            if _scope_depth == 0:
                while _scope_undo:
                    _scope_undo.pop()()


def _loaded(name: str) -> types.ModuleType | None:
    """``name`` if it is installed (imported here if need be: this runs in trusted code), else ``None``."""
    if name not in sys.modules:
        try:
            __import__(name)
        except ImportError:
            return None
    return sys.modules.get(name)
