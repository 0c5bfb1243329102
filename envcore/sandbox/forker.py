"""Process lifetime: a process that forks children on command, reaps them and says how they ended.

The zygote (:mod:`envcore.sandbox.zygote`) and every template (:mod:`envcore.sandbox.preload`) run
one :class:`Forker` on their socket to the parent. It sits below both: it knows frames
(:mod:`envcore.sandbox.wire`) and processes, nothing of apps, workers or templates; what a child
runs is the ``child_main`` it is given, and commands other than its own go to ``handlers``.

Commands (frames from the parent):

* ``spawn`` (with the child's socket end passed as SCM_RIGHTS): fork a child that runs
  ``child_main`` and never returns; reply ``spawned`` with its pid;
* ``kill``: SIGKILL a child that has not been reaped yet (this process reaps, so a pid is never
  reused under the parent's feet); no reply;
* ``status``: wait briefly for a child to end (killing it if it does not) and reply how it ended;
* ``ping``: reply ``pong`` with the number of live children.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import OrderedDict
from typing import Any, Callable, Mapping

from envcore.sandbox.wire import FrameReader, WireTimeout, send_frame

ChildMain = Callable[[int, int, dict, bytes], None]
"""What a forked child runs: (its socket's descriptor, the forker's pid, the spawn message, its
blob). Never returns."""
Handler = Callable[["Forker", dict, bytes], None]
"""A command of the owner's own (``template``, ``warmup``): called with the forker, the message and its blob."""

REAP_INTERVAL_S = 0.25
MAX_BLOB = 64 << 20
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


class Forker:
    """Forks children on command and reaps them."""

    def __init__(self, sock: socket.socket, child_main: ChildMain, *,
                 handlers: Mapping[str, Handler] | None = None,
                 extend_spawn: Callable[[dict], None] | None = None) -> None:
        self.sock = sock
        self.child_main = child_main
        self.handlers = dict(handlers or {})
        self.extend_spawn = extend_spawn
        """Adds what every child is told besides the parent's message (read roots, a rehearsal sample)."""
        self.reader = FrameReader(sock, collect_fds=True)
        self.live: set[int] = set()
        self.ended: OrderedDict[int, str] = OrderedDict()

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

    def spawn(self, message: dict[str, Any], blob: bytes = b"", child_main: ChildMain | None = None) -> None:
        if not self.reader.fds:
            send_frame(self.sock, {"type": "error", "id": message.get("id"), "error": "spawn without a socket"})
            return
        fd = self.reader.fds.pop(0)
        if self.extend_spawn is not None:
            self.extend_spawn(message)
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
        """Answer commands until the parent closes the socket (:class:`~envcore.sandbox.wire.PeerClosed`)."""
        while True:
            try:
                message, blob = self.reader.read(time.monotonic() + REAP_INTERVAL_S, max_blob=MAX_BLOB)
            except WireTimeout:
                self.reap()
                continue
            kind = message.get("type")
            if kind == "spawn":
                self.spawn(message)
            elif kind == "kill":
                pid = int(message["pid"])
                if pid in self.live:
                    os.kill(pid, signal.SIGKILL)
            elif kind == "status":
                self.status(message)
            elif kind == "ping":
                send_frame(self.sock, {"type": "pong", "id": message.get("id"), "workers": len(self.live)})
            elif kind in self.handlers:
                self.handlers[kind](self, message, blob)
            self.reap()

    def shutdown(self) -> None:
        for pid in list(self.live):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
