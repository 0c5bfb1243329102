"""The parent's side of templates: one process per scenario holding its original app, kept warm.

A verification of a patched app normally forks a worker from the zygote, which imports the whole
app. When the caller says which trusted app the patch was made from (its *base*: the bundle's
files with the data files being graded), :class:`TemplateSet` keeps a template process for that
base (:mod:`envcore.sandbox.preload`) and the worker is forked from it instead, swapping in only
the changed function bodies. A group of rollouts on one scenario (GRPO) or an episode's repeated
requests and test runs pay for the import once.

A template is used only when the patch keeps the base's entrypoint, its set of Python files and
every other file byte for byte; the worker itself decides whether the code change qualifies and
otherwise says ``unswappable``, and the sandbox falls back to a fresh worker. At most
``max_templates`` templates live at once (least recently used goes first, never one with workers
out); up to ``spares`` contained workers are kept ready, prepared for the most recently used
template, with the template's pages already copied into them. A template that fails to load its (trusted) app is remembered as
such and not retried; one that dies is rebuilt on next use.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
import socket
import tempfile
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.runner.inprocess import AppLoadError, materialize
from envcore.sandbox.wire import FrameReader, WireError, exchange, send_frame

if TYPE_CHECKING:  # pragma: no cover
    from envcore.sandbox.pool import Sandbox, Worker

TEMPLATE_READY_TIMEOUT_S = 30.0
FAILED_MEMORY = 256


class TemplateLost(RunnerInfrastructureError):
    """A template process is gone; its workers died with it (rebuilt on next use)."""


def base_key(base: AppSource) -> str:
    digest = hashlib.sha256(base.entrypoint.encode())
    for path in sorted(base.files):
        digest.update(b"\0" + path.encode("utf-8", "surrogatepass") + b"\0")
        digest.update(base.files[path].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def fits(source: AppSource, base: AppSource) -> bool:
    """Whether a worker of ``base``'s template can serve ``source``: same entrypoint, same Python
    files (by path), every other file identical."""
    if source.entrypoint != base.entrypoint or source.files.keys() != base.files.keys():
        return False
    return all(source.files[p] == text for p, text in base.files.items() if not p.endswith(".py"))


class TemplateLink:
    """The parent's connection to one template process. Thread-safe."""

    def __init__(self, key: str, pid: int, sock: socket.socket, reader: FrameReader, workspace: str,
                 info: dict[str, Any]) -> None:
        self.key, self.pid, self.sock, self.reader, self.workspace, self.info = key, pid, sock, reader, workspace, info
        self.alive = True
        self.generation = 0
        """The zygote generation that forked it (see ``Sandbox.zygote_restarts``)."""
        self.busy = 0
        """Workers handed out and not closed yet (a template with workers out is never evicted)."""
        self.spares: deque["Worker"] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def call(self, message: dict[str, Any], *, fds: list[int] | None = None, timeout_s: float = 10.0) -> dict:
        with self._lock:
            if not self.alive:
                raise TemplateLost("the scenario's template process is gone")
            try:
                return exchange(self.sock, self.reader, {**message, "id": next(self._ids)}, timeout_s, fds=fds)
            except (OSError, WireError) as exc:
                self._lost()
                raise TemplateLost(f"the scenario's template process is gone ({type(exc).__name__}: {exc})") from None

    def tell(self, message: dict[str, Any]) -> None:
        with self._lock:
            if not self.alive:
                return
            try:
                send_frame(self.sock, message)
            except OSError:
                self._lost()

    def kill(self, pid: int) -> None:
        self.tell({"type": "kill", "pid": pid})

    def status(self, pid: int) -> str:
        return str(self.call({"type": "status", "pid": pid})["ended"])

    def _lost(self) -> None:
        self.alive = False
        try:
            self.sock.close()
        except OSError:
            pass

    def close(self) -> None:
        """Stop the template: it exits when its socket closes, and its workers follow it."""
        while self.spares:
            self.spares.popleft().close()
        with self._lock:
            self._lost()


INTEREST_KEPT = 4096
"""Bases whose :meth:`TemplateSet.prepare` calls are counted (least recently prepared forgotten first)."""


class TemplateSet:
    """Templates by base, least recently used first. Thread-safe."""

    def __init__(self, sandbox: "Sandbox", max_templates: int, spares: int, build_after: int = 1) -> None:
        self.sandbox = sandbox
        self.max_templates = max_templates
        self.spares = spares
        self.build_after = build_after
        """1: a base's template is built the first time a patch of it is loaded (the caller waits).
        ``n`` > 1: only once :meth:`prepare` has been called ``n`` times for it (``n`` episodes of
        one scenario, as in a GRPO group), in the background; until then patches load afresh. A
        template costs about as much as a fresh load to build, so it pays only when a scenario is
        played more than once."""
        self._interest: OrderedDict[str, int] = OrderedDict()
        self.stats = {"built": 0, "failed": 0, "evicted": 0, "build_ms": 0.0}
        self._links: OrderedDict[str, TemplateLink] = OrderedDict()
        self._failed: OrderedDict[str, str] = OrderedDict()
        self._building: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._mru: str | None = None
        self._mru_hits = 0
        self._want_spares = threading.Event()
        self._spare_thread: threading.Thread | None = None
        self._closed = False

    # -- lookup -----------------------------------------------------------------------------
    def for_patch(self, source: AppSource, base: AppSource) -> TemplateLink | None:
        """The template to fork ``source``'s worker from; ``None`` if the patch does not fit the base
        or the base has no template (disabled, failed to load, or, with ``build_after`` > 1, not yet
        wanted by enough episodes). With ``build_after`` 1 a missing template is built now."""
        if self.max_templates <= 0 or not fits(source, base):
            return None
        if self.build_after > 1:
            key = base_key(base)
            with self._lock:
                if not self._has(key):
                    return None
        return self.get(base)

    def get(self, base: AppSource) -> TemplateLink | None:
        key = base_key(base)
        while True:
            with self._lock:
                if self._closed:
                    return None
                link = self._links.get(key)
                if link is not None and link.generation != self.sandbox.zygote_restarts:
                    link.close()  # forked by a zygote that has died since: it died with it
                if link is not None and link.alive:
                    self._links.move_to_end(key)
                    self._touch(key)
                    evicted = self._evict(keep=key)  # templates kept past the limit while in use
                    break
                if link is not None:  # died: forget it and build again
                    del self._links[key]
                    self.sandbox.discard_workspace(link.workspace)
                if key in self._failed:
                    return None
                waiting = self._building.get(key)
                if waiting is None:
                    self._building[key] = threading.Event()
                    link = None
                    break
            waiting.wait(TEMPLATE_READY_TIMEOUT_S)
        if link is not None:
            for old in evicted:
                self._retire(old)
            return link
        try:
            link = self._build(key, base)
        except AppLoadError as exc:
            with self._lock:
                self._failed[key] = str(exc)
                while len(self._failed) > FAILED_MEMORY:
                    self._failed.popitem(last=False)
                self.stats["failed"] += 1
            return None
        finally:
            with self._lock:
                self._building.pop(key).set()
        with self._lock:
            self._links[key] = link
            self._touch(key)
            evicted = self._evict(keep=key)
        for old in evicted:
            self._retire(old)
        return link

    def _has(self, key: str) -> bool:
        """Whether ``key``'s template is alive or being built (call with the lock held)."""
        return key in self._building or (key in self._links and self._links[key].alive)

    def prepare(self, base: AppSource) -> None:
        """Say that patches of ``base`` are coming (an episode of its scenario starts): its template
        is built in the background once this has been said ``build_after`` times."""
        if self.max_templates <= 0:
            return
        key = base_key(base)
        with self._lock:
            if self._has(key):
                return
            count = self._interest.pop(key, 0) + 1
            self._interest[key] = count
            while len(self._interest) > INTEREST_KEPT:
                self._interest.popitem(last=False)
            if count < self.build_after:
                return
        threading.Thread(target=self._prepare, args=(base,), name="sandbox-template", daemon=True).start()

    def _prepare(self, base: AppSource) -> None:
        try:
            self.get(base)
        except RunnerInfrastructureError:
            pass  # the verification that needs it will build it (or report the problem)

    # -- building ---------------------------------------------------------------------------
    def _build(self, key: str, base: AppSource) -> TemplateLink:
        sandbox = self.sandbox
        started = time.perf_counter()
        try:
            workspace = tempfile.mkdtemp(prefix="t-", dir=sandbox.root)
            materialize(base.files, Path(workspace), skip_python=True)
            parent, child = socket.socketpair()
        except OSError as exc:
            raise RunnerInfrastructureError(f"cannot prepare a template: {exc}") from exc
        message, blob = sandbox.load_message(base)
        message.update({"type": "template", "workspace": workspace})
        try:
            reply = sandbox.zygote_call(message, blob=blob, fds=[child.fileno()])
            if reply.get("type") != "spawned":
                raise RunnerInfrastructureError(f"the zygote could not fork a template: {reply.get('error')}")
            reader = FrameReader(parent)
            try:
                ready, _ = reader.read(time.monotonic() + TEMPLATE_READY_TIMEOUT_S, max_json=64 * 1024, max_blob=0)
            except WireError as exc:
                sandbox.kill_worker(int(reply["pid"]))
                raise RunnerInfrastructureError(f"the template process did not start: {exc}") from None
        except BaseException:
            parent.close()
            shutil.rmtree(workspace, ignore_errors=True)
            raise
        finally:
            child.close()
        if not ready.get("ok"):
            parent.close()
            sandbox.discard_workspace(workspace)
            raise AppLoadError(str(ready.get("error")))
        parent.settimeout(sandbox.limits.request_timeout_s)
        link = TemplateLink(key, int(reply["pid"]), parent, reader, workspace, ready)
        link.generation = sandbox.zygote_restarts
        self.stats["built"] += 1
        self.stats["build_ms"] += (time.perf_counter() - started) * 1000
        return link

    def _evict(self, keep: str) -> list[TemplateLink]:
        """Templates past ``max_templates``, least recently used first, skipping ``keep`` (about to
        be used) and those with workers out (caller holds the lock)."""
        out = []
        for key in list(self._links):
            if len(self._links) <= self.max_templates:
                break
            link = self._links[key]
            if key != keep and link.busy == 0:
                del self._links[key]
                out.append(link)
                self.stats["evicted"] += 1
        return out

    def _retire(self, link: TemplateLink) -> None:
        link.close()
        self.sandbox.kill_worker(link.pid)
        self.sandbox.discard_workspace(link.workspace)

    # -- spares -----------------------------------------------------------------------------
    def _touch(self, key: str) -> None:
        """``key`` is now the most recently used template: new spares are prepared for it (caller
        holds the lock). At most ``spares`` exist in all; those of other templates are given up for
        it only once it is used twice in a row (a group of rollouts), so that scenarios verified in
        turn do not throw prepared work away at every switch."""
        self._mru_hits = self._mru_hits + 1 if self._mru == key else 1
        self._mru = key
        self.want_spares()

    def want_spares(self) -> None:
        if self.spares <= 0 or self._closed:
            return
        if self._spare_thread is None:
            self._spare_thread = threading.Thread(target=self._keep_spares, name="sandbox-template-spares", daemon=True)
            self._spare_thread.start()
        self._want_spares.set()

    def take_spare(self, link: TemplateLink) -> "Worker | None":
        with self._lock:
            while link.spares:
                worker = link.spares.popleft()
                if not worker.closed:
                    return worker
        return None

    def _keep_spares(self) -> None:
        while not self._closed:
            self._want_spares.wait(1.0)
            self._want_spares.clear()
            while not self._closed:
                with self._lock:
                    link = self._links.get(self._mru or "")
                    if link is None or not link.alive or len(link.spares) >= self.spares:
                        break
                    others = [other for other in self._links.values() if other is not link and other.spares]
                    reclaim = None
                    if len(link.spares) + sum(len(other.spares) for other in others) >= self.spares:
                        if self._mru_hits < 2 or not others:
                            break
                        reclaim = others[0].spares.popleft()  # least recently used template first
                if reclaim is not None:
                    reclaim.close()
                worker = self.sandbox.fork_spare(link)
                if worker is None:
                    break
                with self._lock:
                    if self._mru == link.key and link.alive and not self._closed:
                        link.spares.append(worker)
                        continue
                worker.close()
                break

    def close(self) -> None:
        with self._lock:
            self._closed = True
            links, self._links = list(self._links.values()), OrderedDict()
        self._want_spares.set()
        for link in links:
            self._retire(link)
