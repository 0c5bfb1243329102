"""The zygote: a warm process that forks one worker per app version.

Started by :class:`~envcore.sandbox.pool.Sandbox` as ``python -m envcore.sandbox.zygote FD PARENT``
with a scrubbed environment. It imports FastAPI, Starlette, Pydantic, the libraries apps may use
(:mod:`envcore.sandbox.app_runtime`) and the worker code once, then
*warms up*: it loads the sample apps the parent sends and serves them a few requests, so that the
first-use work every app needs (building validators, analysing dependencies, compiling route
patterns) is done here once and inherited by every fork instead of being repeated in each. Then it
freezes the heap (``gc.freeze``) so collections in workers do not copy the shared pages.

Commands arrive as frames on the socket to the parent:

* ``spawn`` (with the worker's socket end passed as SCM_RIGHTS): fork a worker, reply with its pid;
* ``template`` (likewise with a socket): fork a template holding a scenario's original app, which
  then serves this same protocol for the workers it forks (see :mod:`envcore.sandbox.preload`);
* ``kill``: SIGKILL a worker that has not been reaped yet (the zygote reaps, so a pid is never
  reused under the parent's feet); no reply;
* ``status``: wait briefly for a worker to end (killing it if it does not) and reply how it ended;
* ``ping``: reply ``pong`` with the number of live workers.

It never receives probes, reference fixes or anything else secret: only app files and requests to
warm up with. When the parent goes away the zygote exits (``PR_SET_PDEATHSIG`` and end of input),
and its workers follow it the same way.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import time
from collections import OrderedDict
from typing import Any, Callable

# Everything a worker needs is imported here, before the first fork.
import anyio.to_thread  # noqa: F401
import fastapi  # noqa: F401
import fastapi.testclient  # noqa: F401  (pulls in the rest of Starlette's optional modules)
import pydantic  # noqa: F401
import sqlite3  # noqa: F401

from envcore.sandbox import containment
from envcore.sandbox.app_runtime import importable_modules, keep_sqlite_journals_in_memory, preload_libraries
from envcore.sandbox.wire import FrameReader, PeerClosed, WireTimeout, send_frame
from envcore.sandbox.worker import rehearse_all, worker_main

ChildMain = Callable[[int, int, dict, bytes], None]

REAP_INTERVAL_S = 0.25
MAX_TEMPLATE_BLOB = 64 << 20
KEEP_STATUSES = 512


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by {name}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def _zygote_worker(fd: int, me: int, message: dict[str, Any], blob: bytes) -> None:
    worker_main(fd, me, message)


class Zygote:
    """Forks children on command and reaps them. A template process (:mod:`envcore.sandbox.preload`)
    runs one too, with its own ``child_main``."""

    def __init__(self, sock: socket.socket, child_main: ChildMain = _zygote_worker) -> None:
        self.sock = sock
        self.child_main = child_main
        self.reader = FrameReader(sock, collect_fds=True)
        self.live: set[int] = set()
        self.ended: OrderedDict[int, str] = OrderedDict()
        self.read_roots = containment.python_read_roots()
        self.rehearsal: dict[str, Any] | None = None

    def reap(self) -> None:
        while self.live:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.live.clear()
                return
            if pid == 0:
                return
            self.live.discard(pid)
            self.ended[pid] = describe_status(status)
            while len(self.ended) > KEEP_STATUSES:
                self.ended.popitem(last=False)

    def warm_up(self, apps: list[dict[str, Any]]) -> None:
        rehearse_all(apps)  # the same load-and-serve a spare rehearses, here once for every fork
        self.rehearsal = apps[0] if apps else None
        gc.collect()
        gc.freeze()

    def spawn(self, message: dict[str, Any], blob: bytes = b"", child_main: ChildMain | None = None) -> None:
        if not self.reader.fds:
            send_frame(self.sock, {"type": "error", "id": message.get("id"), "error": "spawn without a socket"})
            return
        fd = self.reader.fds.pop(0)
        message["read_roots"] = self.read_roots
        message["rehearsal"] = self.rehearsal
        me = os.getpid()
        pid = os.fork()
        if pid == 0:
            (child_main or self.child_main)(fd, me, message, blob)  # never returns
        os.close(fd)
        self.live.add(pid)
        send_frame(self.sock, {"type": "spawned", "id": message.get("id"), "pid": pid})

    def status(self, message: dict[str, Any]) -> None:
        pid = int(message["pid"])
        deadline = time.monotonic() + float(message.get("grace_s", 0.2))
        while pid in self.live and time.monotonic() < deadline:
            self.reap()
            if pid in self.live:
                time.sleep(0.002)
        if pid in self.live:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            self.live.discard(pid)
            self.ended[pid] = describe_status(status) + " (stopped by the sandbox)"
        send_frame(self.sock, {"type": "status", "id": message.get("id"), "pid": pid,
                               "ended": self.ended.get(pid, "unknown")})

    def serve(self) -> None:
        while True:
            try:
                message, blob = self.reader.read(time.monotonic() + REAP_INTERVAL_S, max_blob=MAX_TEMPLATE_BLOB)
            except WireTimeout:
                self.reap()
                continue
            kind = message.get("type")
            if kind == "spawn":
                self.spawn(message)
            elif kind == "template" and self.child_main is _zygote_worker:
                from envcore.sandbox.preload import template_main

                self.spawn(message, blob, template_main)
            elif kind == "kill":
                pid = int(message["pid"])
                if pid in self.live:
                    os.kill(pid, signal.SIGKILL)
            elif kind == "status":
                self.status(message)
            elif kind == "ping":
                send_frame(self.sock, {"type": "pong", "id": message.get("id"), "workers": len(self.live)})
            elif kind == "warmup":
                self.warm_up(message.get("apps", []))
                send_frame(self.sock, {"type": "warm", "id": message.get("id")})
            self.reap()

    def shutdown(self) -> None:
        for pid in list(self.live):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main(argv: list[str]) -> int:
    fd, parent = int(argv[0]), int(argv[1])
    containment.tie_to_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the parent to handle
    preload_libraries()  # the libraries apps may use, loaded by trusted code before the first fork
    keep_sqlite_journals_in_memory()
    importable_modules()  # worked out once, here, for every worker
    zygote = Zygote(socket.socket(fileno=fd))
    try:
        zygote.serve()
    except (PeerClosed, BrokenPipeError, ConnectionResetError):
        pass
    finally:
        zygote.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
