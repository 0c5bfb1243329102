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
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import sys
import types
from collections.abc import Callable
from typing import Any


def inline_default_executor() -> None:
    """Make ``loop.run_in_executor(None, fn, *args)`` call ``fn(*args)`` in place and return a future
    already holding its result or exception (an explicit executor is used as given)."""
    loop_class = asyncio.base_events.BaseEventLoop
    original = getattr(loop_class.run_in_executor, "__wrapped__", loop_class.run_in_executor)

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


def inline_aiosqlite() -> None:
    """aiosqlite's connections run their SQLite calls in place (see :class:`_InlineQueue`)."""
    core = _loaded("aiosqlite.core")
    if core is not None:
        core.Thread = _InlineThread
        core.SimpleQueue = _InlineQueue


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


def limits_without_timer() -> None:
    """limits' in-memory storage keeps expired counters until they are next read (when it drops them
    anyway) instead of tidying them on a timer thread."""
    memory = _loaded("limits.storage.memory")
    if memory is not None and isinstance(memory.threading, types.ModuleType):
        threading = memory.threading
        memory.threading = types.SimpleNamespace(RLock=threading.RLock, Lock=threading.Lock, Timer=_IdleTimer)


ADAPTATIONS: tuple[tuple[str, Callable[[], None]], ...] = (
    ("asyncio default executor", inline_default_executor),
    ("aiosqlite", inline_aiosqlite),
    ("limits in-memory storage", limits_without_timer),
)
"""Every adaptation, by what it adapts."""


def run_on_one_thread() -> list[str]:
    """Apply every adaptation (in the zygote, before the first fork); return what was adapted."""
    done = []
    for name, adapt in ADAPTATIONS:
        adapt()
        done.append(name)
    return done


def _loaded(name: str) -> types.ModuleType | None:
    """``name`` if it is installed (imported here if need be: this runs in trusted code), else ``None``."""
    if name not in sys.modules:
        try:
            __import__(name)
        except ImportError:
            return None
    return sys.modules.get(name)
