"""The parent's side of templates: a process holding one app's trusted original, forking its workers.

Every probe runs in a worker of its own (see :mod:`envcore.sandbox.runner`), so a verification of
a patched app starts as many workers as it has probes. A fresh worker imports the whole app; when
the caller says which trusted app the patch was made from (its *base*: the bundle's files with the
data files being graded), the run can instead hold a **template** for that base
(:mod:`envcore.sandbox.preload`): a process that imported the original app once and forks each
worker, which swaps in only the changed function bodies. The import is paid once per run instead of
once per probe.

A template belongs to **one run at a time** (:meth:`Templates.acquire`, :meth:`Templates.release`)
and its workers run one at a time. Each worker works in the template's own folder with the rights a
fresh worker has in its private folder (write the app's existing files, create none), so a patch
behaves the same whichever kind of worker serves it. When a worker has ended (killed and reaped by
the template) the parent puts the folder back exactly as it was after the template's import
(:meth:`TemplateLink.settle`): the next worker reads what the first one read, whatever the first
one wrote or deleted. A template whose import left a file open or a shared mapping (which workers
would share, offsets and all) is refused and the run loads afresh.

A template also runs its app's startup once for all its workers, where no worker could tell (see
:mod:`envcore.sandbox.preload`); a base whose startup leaves a thread, a pending task or an object
bound to its event loop is remembered and its templates leave the startup to each worker.

A template is used only when the patch keeps the base's entrypoint, its set of Python files and
every other file byte for byte (:func:`fits`); the worker itself decides whether the code change
qualifies and otherwise says ``unswappable``, and the run falls back to fresh workers. At most
``max_templates`` templates live at once; past that a run loads afresh. :meth:`Templates.prepare`
builds one in the background for a base that a run is about to want (an episode announces its
scenario at reset), so that the first run finds it ready, and taking a prepared template prepares
the next one for the same base (an episode's next test run), unless the run says its base will not
come back (a shadow drawn for one grading); a template that fails to import its (trusted) app is
remembered as such and not retried.
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Protocol

from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.runner.loader import AppLoadError, materialize, safe_relpath
from envcore.runner.snapshot import FolderSnapshot
from envcore.sandbox.limits import SandboxLimits
from envcore.sandbox.wire import FrameReader, WireError, exchange, send_frame


class SpareWorker(Protocol):
    """A worker forked from a template and kept, contained, until a run takes it."""

    closed: bool

    def close(self) -> None: ...


class TemplateHost(Protocol):
    """What templates need from the sandbox that owns them (:class:`~envcore.sandbox.pool.Sandbox`):
    this layer sits below it and never imports it."""

    limits: SandboxLimits
    root: str
    zygote_restarts: int

    def zygote_call(self, message: dict[str, Any], *, blob: bytes = b"", fds: list[int] | None = None) -> dict: ...

    def load_message(self, source: AppSource) -> tuple[dict[str, Any], bytes]: ...

    def fork_spare(self, template: "TemplateLink | None" = None) -> SpareWorker | None: ...

    def kill_worker(self, pid: int) -> None: ...

    def discard_workspace(self, path: str) -> None: ...


TEMPLATE_READY_TIMEOUT_S = 30.0
FAILED_MEMORY = 256
PREPARED_TTL_S = 300.0
"""A prepared template nobody acquired within this time is retired."""


class StartupRefused(Exception):
    """A template's app started, but left what a worker starting it would not have (a thread, a
    pending task...): its startup must run in each worker."""


class TemplateLost(RunnerInfrastructureError):
    """A template process is gone; its workers died with it."""


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


_OWNER: ContextVar[str | None] = ContextVar("a01_template_owner", default=None)


@contextmanager
def owned_by(owner: str) -> Iterator[None]:
    """Templates prepared or acquired (with ``again``) in this context belong to ``owner`` (an
    episode's test runs): kept between its runs, never lent to another owner, retired by
    :meth:`Templates.drop`. A base drawn for one grading is never kept."""
    token = _OWNER.set(owner)
    try:
        yield
    finally:
        _OWNER.reset(token)


def _slot(key: str, owner: str | None) -> str:
    """Where a template of base ``key`` waits between runs: its owner's alone, if it has one."""
    return key if owner is None else f"{key}/{owner}"


class TemplateLink:
    """The parent's connection to one template process. Thread-safe."""

    def __init__(self, key: str, pid: int, sock: socket.socket, reader: FrameReader, workspace: str,
                 info: dict[str, Any]) -> None:
        self.key, self.pid, self.sock, self.reader, self.workspace, self.info = key, pid, sock, reader, workspace, info
        self.alive = True
        self.owner: str | None = None
        """The owner it is kept for between runs (see :func:`owned_by`), or ``None``: one run only."""
        self.generation = 0
        """The zygote generation that forked it (see ``Sandbox.zygote_restarts``)."""
        self.spares: deque[SpareWorker] = deque()
        self.snapshot: FolderSnapshot | None = None
        self.prepared_at = time.monotonic()
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

    def settle(self, pid: int, *, kill: bool) -> str:
        """End worker ``pid`` (killing it if ``kill``), wait until the template has reaped it, and put
        the folder back as it was after the import; return how the worker ended. :class:`TemplateLost`
        if the template is gone (its workers died with it)."""
        if kill:
            self.kill(pid)
        ended = self.status(pid)
        if self.snapshot is not None:
            try:
                self.snapshot.restore()
            except OSError as exc:
                self.close()  # a folder the parent cannot put back is never used again
                raise TemplateLost(f"the template's folder could not be restored: {exc}") from None
        return ended

    def changed_files(self, files: Mapping[str, str]) -> dict[str, str]:
        """The files of a patch that fits this template's base (:func:`fits`) whose text differs from
        what the template's folder holds once put back: what the parent writes there before a worker
        is given the patch, so the worker reads its patch's text on disk, not the template's."""
        held = self.snapshot.files if self.snapshot is not None else {}
        changed = {}
        for path, text in files.items():
            try:
                same = held.get(safe_relpath(path)) == text.encode("utf-8")
            except (AppLoadError, UnicodeError):
                same = False  # writing it says what is wrong with it
            if not same:
                changed[path] = text
        return changed

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


class Templates:
    """Template processes, each lent to one run at a time. Thread-safe."""

    def __init__(self, sandbox: TemplateHost, max_templates: int, spares: int) -> None:
        self.sandbox = sandbox
        self.max_templates = max_templates
        self.spares = spares
        """Workers kept forked and contained, waiting for the patch, per template in use."""
        self.stats = {"built": 0, "failed": 0, "prepared_used": 0, "refused": 0, "started": 0, "warmed": 0, "build_ms": 0.0}
        """Templates built, failed to import, prepared ahead and then used, refused (their import
        left something workers would share), built with the app started for their workers, and the
        milliseconds spent building them."""
        self._live: set[TemplateLink] = set()
        self._prepared: OrderedDict[str, TemplateLink] = OrderedDict()
        self._preparing: set[str] = set()
        self._in_use: list[TemplateLink] = []
        self._failed: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        """Notified whenever a template being prepared is ready (or failed)."""
        self._want_spares = threading.Event()
        self._spare_thread: threading.Thread | None = None
        self._closed = False
        self.start_apps = True
        """Whether a template runs its app's startup for its workers when they could not tell (see
        :mod:`envcore.sandbox.preload`); off only to measure what that saves."""
        self.warm_requests = True
        """Whether a template serves the one request only library code answers before it forks (see
        :mod:`envcore.runner.request_warmup`); off only to measure what that saves."""
        self._dropped: OrderedDict[str, None] = OrderedDict()
        """Owners whose templates were dropped (a template still being prepared for one is retired)."""
        self._start_refused: OrderedDict[str, str] = OrderedDict()
        """Bases whose startup left what a worker's would not (and what): their templates leave it to
        each worker."""

    @property
    def enabled(self) -> bool:
        return self.max_templates > 0

    # -- lending ----------------------------------------------------------------------------
    def acquire(self, base: AppSource, *, again: bool = True) -> TemplateLink | None:
        """A template of ``base`` for the caller alone (a prepared one, else built now), or ``None``
        when templates are off, too many are alive, or ``base`` does not import. Taking a prepared
        one prepares the next for the same base, unless ``again`` is false (a base drawn for one
        grading is never wanted twice). Inside :func:`owned_by` (and with ``again``) the template is
        the owner's: kept for its next run instead (:meth:`release`), never lent to anyone else."""
        if not self.enabled or self._closed:
            return None
        key = base_key(base)
        owner = _OWNER.get() if again else None
        slot = _slot(key, owner)
        self._expire_prepared()
        with self._lock:
            # one being prepared for this slot (at an episode's reset, say) is waited for, not built twice
            deadline = time.monotonic() + TEMPLATE_READY_TIMEOUT_S
            while slot in self._preparing and not self._closed and time.monotonic() < deadline:
                self._ready.wait(deadline - time.monotonic())
            if key in self._failed:
                return None
            link = self._prepared.pop(slot, None)
            if link is None and len(self._live) >= self.max_templates:
                self._retire_oldest_prepared()
                if len(self._live) >= self.max_templates:
                    return None
            if link is not None:
                self.stats["prepared_used"] += 1
        if link is not None and not self._usable(link):
            self._retire(link)
            link = None
        elif link is not None and again and owner is None:
            self.prepare(base)  # wanted again (an episode's next test run): the next one builds meanwhile
        if link is None:
            link = self._build_or_none(key, base)
            if link is None:
                return None
        link.owner = owner
        with self._lock:
            self._in_use.append(link)
        self.want_spares()
        return link

    def release(self, link: TemplateLink) -> None:
        """The run is over: the template is retired (a template serves one run), or kept for its
        owner's next run. Its process has run no app code since its import (its workers are forks,
        its folder is put back after each), so the next run starts from the same template."""
        with self._lock:
            if link in self._in_use:
                self._in_use.remove(link)
            keep = link.owner is not None and link.alive and not self._closed
            if keep:
                slot = _slot(link.key, link.owner)
                displaced = self._prepared.pop(slot, None)
                link.prepared_at = time.monotonic()
                self._prepared[slot] = link
        if not keep:
            self._retire(link)
        elif displaced is not None:
            self._retire(displaced)

    def drop(self, owner: str) -> None:
        """Retire the templates kept for ``owner`` (its episode has ended), and any still being
        prepared for it once ready."""
        with self._lock:
            self._dropped[owner] = None
            while len(self._dropped) > FAILED_MEMORY:
                self._dropped.popitem(last=False)
            slots = [slot for slot, link in self._prepared.items() if link.owner == owner]
            links = [self._prepared.pop(slot) for slot in slots]
        for link in links:
            self._retire(link)

    def prepare(self, base: AppSource) -> None:
        """Build a template of ``base`` in the background for the next :meth:`acquire` of it (inside
        :func:`owned_by`: the owner's next one)."""
        if not self.enabled or self._closed:
            return
        key = base_key(base)
        owner = _OWNER.get()
        slot = _slot(key, owner)
        self._expire_prepared()
        with self._lock:
            if key in self._failed or slot in self._prepared or slot in self._preparing:
                return
            self._preparing.add(slot)
        threading.Thread(target=self._prepare, args=(key, base, owner), name="sandbox-template", daemon=True).start()

    def _prepare(self, key: str, base: AppSource, owner: str | None = None) -> None:
        slot = _slot(key, owner)
        link = None
        try:
            with self._lock:
                full = len(self._live) >= self.max_templates
                if full:
                    self._retire_oldest_prepared()
                    full = len(self._live) >= self.max_templates
            link = None if full else self._build_or_none(key, base)
        except RunnerInfrastructureError:
            link = None  # the run that wants it builds it (or reports the problem)
        finally:
            retire = None
            with self._lock:  # one step: a run waiting for it finds it ready, or knows to build its own
                self._preparing.discard(slot)
                if link is not None:
                    if self._closed or owner in self._dropped:
                        retire = link
                    else:
                        link.owner = owner
                        retire = self._prepared.pop(slot, None)
                        self._prepared[slot] = link
                self._ready.notify_all()
            if retire is not None:
                self._retire(retire)

    def _usable(self, link: TemplateLink) -> bool:
        fresh = time.monotonic() - link.prepared_at < PREPARED_TTL_S
        return link.alive and link.generation == self.sandbox.zygote_restarts and fresh

    def _expire_prepared(self) -> None:
        with self._lock:
            stale = [key for key, link in self._prepared.items() if not self._usable(link)]
            links = [self._prepared.pop(key) for key in stale]
        for link in links:
            self._retire(link)

    def _retire_oldest_prepared(self) -> None:
        """Give a prepared template's place to a run (caller holds the lock)."""
        if self._prepared:
            _, link = self._prepared.popitem(last=False)
            threading.Thread(target=self._retire, args=(link,), daemon=True).start()

    def _retire(self, link: TemplateLink) -> None:
        link.close()
        self.sandbox.kill_worker(link.pid)
        self.sandbox.discard_workspace(link.workspace)
        with self._lock:
            self._live.discard(link)

    # -- building ---------------------------------------------------------------------------
    def _build_or_none(self, key: str, base: AppSource) -> TemplateLink | None:
        try:
            try:
                return self._build(key, base, start=self.start_apps and key not in self._start_refused)
            except StartupRefused as refused:  # its startup must run in each worker: build it again that way
                with self._lock:
                    self._start_refused[key] = str(refused)
                    while len(self._start_refused) > FAILED_MEMORY:
                        self._start_refused.popitem(last=False)
                return self._build(key, base, start=False)
        except AppLoadError as exc:
            with self._lock:
                self._failed[key] = str(exc)
                while len(self._failed) > FAILED_MEMORY:
                    self._failed.popitem(last=False)
                self.stats["failed"] += 1
            return None

    def _build(self, key: str, base: AppSource, *, start: bool) -> TemplateLink:
        sandbox = self.sandbox
        started = time.perf_counter()
        try:
            workspace = tempfile.mkdtemp(prefix="t-", dir=sandbox.root)
            materialize(base.files, Path(workspace))
            parent, child = socket.socketpair()
        except OSError as exc:
            raise RunnerInfrastructureError(f"cannot prepare a template: {exc}") from exc
        message, blob = sandbox.load_message(base)
        message.update({"type": "template", "workspace": workspace, "start": start, "warm": self.warm_requests})
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
            sandbox.kill_worker(int(reply["pid"]))
            sandbox.discard_workspace(workspace)
            if ready.get("unstartable"):
                raise StartupRefused(str(ready.get("error")))
            if ready.get("refused"):  # it imported, but holds something its workers would share
                self.stats["refused"] += 1
            raise AppLoadError(str(ready.get("error")))
        parent.settimeout(sandbox.limits.request_timeout_s)
        link = TemplateLink(key, int(reply["pid"]), parent, reader, workspace, ready)
        link.generation = sandbox.zygote_restarts
        try:
            link.snapshot = FolderSnapshot(workspace)
        except OSError as exc:
            link.close()
            sandbox.discard_workspace(workspace)
            raise RunnerInfrastructureError(f"cannot read the template's folder: {exc}") from exc
        with self._lock:
            self._live.add(link)
        self.stats["built"] += 1
        self.stats["started"] += bool(ready.get("started"))
        self.stats["warmed"] += bool(ready.get("warmed"))
        self.stats["build_ms"] += (time.perf_counter() - started) * 1000
        return link

    # -- spares -----------------------------------------------------------------------------
    def want_spares(self) -> None:
        if self.spares <= 0 or self._closed:
            return
        if self._spare_thread is None:
            self._spare_thread = threading.Thread(target=self._keep_spares, name="sandbox-template-spares", daemon=True)
            self._spare_thread.start()
        self._want_spares.set()

    def take_spare(self, link: TemplateLink) -> SpareWorker | None:
        with self._lock:
            while link.spares:
                worker = link.spares.popleft()
                if not worker.closed:
                    return worker
        return None

    def _keep_spares(self) -> None:
        """Background thread: keep ``spares`` prepared workers for every template in use."""
        while not self._closed:
            self._want_spares.wait(1.0)
            self._want_spares.clear()
            while not self._closed:
                with self._lock:
                    link = next((t for t in self._in_use if t.alive and len(t.spares) < self.spares), None)
                if link is None:
                    break
                worker = self.sandbox.fork_spare(link)
                if worker is None:
                    break
                with self._lock:
                    if link in self._in_use and link.alive and not self._closed:
                        link.spares.append(worker)
                        continue
                worker.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            links = list(self._live)
            self._prepared.clear()
            self._in_use.clear()
            self._ready.notify_all()
        self._want_spares.set()
        for link in links:
            self._retire(link)
