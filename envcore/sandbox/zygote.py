"""The zygote: a warm process that forks one worker per app version.

Started by :class:`~envcore.sandbox.pool.Sandbox` as ``python -m envcore.sandbox.zygote FD PARENT``
with a scrubbed environment. It imports FastAPI, Starlette, Pydantic, the libraries apps may use
(:mod:`envcore.sandbox.app_runtime`, adapted to a worker's single thread by
:mod:`envcore.sandbox.one_thread`) and the worker code once, then
*warms up*: it loads the sample apps the parent sends and serves them a few requests, so that the
first-use work every app needs (building validators, analysing dependencies, compiling route
patterns) is done here once and inherited by every fork instead of being repeated in each. Then it
freezes the heap (``gc.freeze``) so collections in workers do not copy the shared pages.

Commands arrive as frames on the socket to the parent: those of every forking process
(:mod:`envcore.sandbox.forker`: ``spawn`` a worker, ``kill``, ``status``, ``ping``) and two of its own:

* ``template`` (with a socket, as ``spawn``): fork a template holding a scenario's original app,
  which then serves the forker's protocol for the workers it forks (see :mod:`envcore.sandbox.preload`);
* ``warmup``: load the sample apps and serve them their requests (above); reply ``warm``.

It never receives probes, reference fixes or anything else secret: only app files and requests to
warm up with. When the parent goes away the zygote exits (``PR_SET_PDEATHSIG`` and end of input),
and its workers follow it the same way.
"""

from __future__ import annotations

import gc
import signal
import socket
import sqlite3  # noqa: F401  (imported here, before the first fork, like the libraries below)
import sys
from typing import Any

# Everything a worker needs is imported here, before the first fork.
import anyio.to_thread  # noqa: F401
import fastapi  # noqa: F401
import fastapi.testclient  # noqa: F401  (pulls in the rest of Starlette's optional modules)
import pydantic  # noqa: F401

from envcore.sandbox import containment
from envcore.sandbox.app_runtime import (
    importable_modules,
    keep_ca_bundle_in_memory,
    keep_sqlite_journals_in_memory,
    preload_libraries,
    resolve_without_name_servers,
)
from envcore.sandbox.forker import Forker
from envcore.sandbox.one_thread import run_on_one_thread
from envcore.sandbox.preload import template_main
from envcore.sandbox.wire import PeerClosed, send_frame
from envcore.sandbox.worker import rehearse_all, worker_main


class Zygote:
    """The zygote's state around its :class:`~envcore.sandbox.forker.Forker`: what every child is
    told (the folders it may read, the sample a spare rehearses) and the warm-up."""

    def __init__(self, sock: socket.socket) -> None:
        self.read_roots = containment.python_read_roots()
        self.rehearsal: dict[str, Any] | None = None
        self.forker = Forker(sock, self._worker, extend_spawn=self._extend,
                             handlers={"template": self._template, "warmup": self._warm_up})

    @staticmethod
    def _worker(fd: int, me: int, message: dict[str, Any], blob: bytes) -> None:
        worker_main(fd, me, message)

    def _extend(self, message: dict[str, Any]) -> None:
        message["read_roots"] = self.read_roots
        message["rehearsal"] = self.rehearsal

    def _template(self, forker: Forker, message: dict[str, Any], blob: bytes) -> None:
        forker.spawn(message, blob, template_main)

    def _warm_up(self, forker: Forker, message: dict[str, Any], blob: bytes) -> None:
        apps = message.get("apps", [])
        rehearse_all(apps)  # the same load-and-serve a spare rehearses, here once for every fork
        self.rehearsal = apps[0] if apps else None
        gc.collect()
        gc.freeze()
        send_frame(forker.sock, {"type": "warm", "id": message.get("id")})


def main(argv: list[str]) -> int:
    fd, parent = int(argv[0]), int(argv[1])
    containment.tie_to_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal is for the parent to handle
    preload_libraries()  # the libraries apps may use, loaded by trusted code before the first fork
    keep_sqlite_journals_in_memory()
    keep_ca_bundle_in_memory()  # HTTP clients read it when they are made, after the worker is sealed
    resolve_without_name_servers()  # a name lookup fails at once, as on a machine without a network
    run_on_one_thread()  # the libraries that would start a thread do their work in place
    importable_modules()  # worked out once, here, for every worker
    forker = Zygote(socket.socket(fileno=fd)).forker
    try:
        forker.serve()
    except (PeerClosed, BrokenPipeError, ConnectionResetError):
        pass
    finally:
        forker.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
