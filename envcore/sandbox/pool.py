"""The parent's side of the sandbox: a zygote to fork from and the workers it hands out.

:class:`Sandbox` starts the zygote (:mod:`envcore.sandbox.zygote`) with a scrubbed environment,
warms it up, and turns ``spawn(source)`` into a :class:`Worker`: a forked process that has loaded
the app and answers requests over its own socket. Workers are bounded by a pool (``max_workers``);
asking for one more than that waits ``pool_wait_s`` and then fails as an infrastructure error.

Failures are sorted by whose fault they are:

* the app's (it did not load, crashed, hung, broke the protocol): :class:`AppLoadFailure` when
  loading, :class:`WorkerGone` later. Graded as the app's behaviour.
* ours (the zygote died and could not be restarted, the pool is exhausted, the OS refused a
  process): :class:`~envcore.runner.base.RunnerInfrastructureError`. Graded as reward ``None``.

A dead zygote is restarted on the next spawn; workers of the old one die with it (they are tied to
it with ``PR_SET_PDEATHSIG``). The zygote is tied to this process the same way, and that signal
fires when the *thread* that forked it ends, so the zygote is always started from one thread that
lives as long as the sandbox (a server's request threads come and go). Linux only: see the README
for other systems.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import marshal
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from envcore.filetree import tree_problem
from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.runner.diagnostics import MAX_TRACEBACK_CHARS, LoadProfile, worth_showing
from envcore.runner.http import MAX_BODY_BYTES, HttpRequest, HttpResponse
from envcore.runner.loader import AppLoadError, materialize
from envcore.sandbox import posture
from envcore.sandbox.containment import can_leave_idle_priority
from envcore.sandbox.limits import SandboxLimits
from envcore.sandbox.posture import workspace_parent
from envcore.sandbox.templates import TemplateLink, TemplateLost, Templates
from envcore.sandbox.wire import FrameReader, PeerClosed, WireError, WireTimeout, exchange, send_frame
from envcore.sandbox.worker import request_to_json

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
MAX_RESPONSE_JSON = 256 * 1024
MAX_PLAN_BYTES = 16 << 20
"""The largest swap plan (marshalled code of the changed functions) a template's worker may send."""
ZYGOTE_START_TIMEOUT_S = 120.0
COMPILED_CACHE_SIZE = 1024
"""Trusted modules kept compiled (about 3 KB each, 7-8 a scenario): well over the sampler's bundles in memory."""
SPARE_READY_TIMEOUT_S = 60.0
SPAWN_ATTEMPTS = 3
"""Workers :meth:`Sandbox.spawn` starts for one app before calling the sandbox broken."""
OUR_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM, errno.EMFILE, errno.ENFILE,
                              errno.EROFS, errno.EAGAIN})
"""Errors writing an app's files that say something about the machine (a full disk, no memory, too
many open files), not about the files: infrastructure errors. Any other (a name too long, a file
where a folder must be) is the files' own fault."""
TRUSTED_FILENAME = "<trusted>"
"""Placeholder file name of code compiled here; the worker gives it the file's real path."""


class AppLoadFailure(Exception):
    """The app did not load in its worker (syntax or import error, startup crash, hang, exit).
    ``profile``: where the load's time went, for a worker asked for diagnostics."""

    def __init__(self, message: str, profile: LoadProfile | None = None) -> None:
        super().__init__(message)
        self.profile = profile


class WorkerGone(Exception):
    """The worker stopped serving: it crashed, hung past the deadline or broke the protocol."""


class SandboxRefused(RunnerInfrastructureError):
    """This machine lacks a layer the sandbox requires (:func:`envcore.sandbox.posture.refusal_here`)
    and the operator did not allow it: no app is run, so nothing is graded."""


class ZygoteLost(RunnerInfrastructureError):
    """The zygote process is gone; the sandbox restarts it on the next spawn."""


def _remove_stale_roots(parent_dir: str) -> None:
    """Delete sandbox folders left by grader processes that died without closing their sandbox
    (they hold apps' data files)."""
    try:
        names = os.listdir(parent_dir)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) >= 4 and name.startswith("a01-sandbox-") and parts[2].isdigit():
            try:
                os.kill(int(parts[2]), 0)
            except ProcessLookupError:
                shutil.rmtree(os.path.join(parent_dir, name), ignore_errors=True)
            except OSError:
                pass


def supported_platform() -> str | None:
    """``None`` where the sandbox runs, else why not."""
    if sys.platform != "linux":
        return f"the sandbox needs Linux (fork, prctl, seccomp, Landlock); this is {sys.platform}"
    return None


def _zygote_environment() -> dict[str, str]:
    """The whole environment the zygote (and so every worker) starts from: nothing of the caller's."""
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONPATH": PROJECT_ROOT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "MALLOC_ARENA_MAX": "2",
    }


def _usable_cores() -> int:
    """The cores this process may run on (its affinity: a container's cpuset, a pinning)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _source_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def _validate_response(message: dict[str, Any], body: bytes, diagnose: bool = False) -> HttpResponse:
    """A worker's response frame as an :class:`HttpResponse`; :class:`WireError` if malformed. The
    app's traceback is kept only when the worker was asked for one (``diagnose``): a traceback a
    worker sends unasked is the app talking, and is dropped."""
    status = message.get("status")
    headers = message.get("headers")
    error = message.get("error")
    if message.get("type") != "response" or not (status is None or (isinstance(status, int) and 100 <= status <= 999)):
        raise WireError("malformed response frame")
    if not isinstance(headers, list) or len(headers) > 256:
        raise WireError("malformed response headers")
    parsed: dict[str, str] = {}
    for item in headers:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            raise WireError("malformed response header")
        parsed[item[0][:256].lower()] = item[1][:8192]
    if error is not None and not isinstance(error, str):
        raise WireError("malformed response error")
    trace = message.get("traceback") if diagnose else None
    if trace is not None and not isinstance(trace, str):
        raise WireError("malformed response traceback")
    return HttpResponse(status, parsed, body, error[:2000] if error else None, bool(message.get("truncated")),
                        traceback=trace[:MAX_TRACEBACK_CHARS] if trace else None)


class Worker:
    """One forked process serving one version of an app. Not thread-safe: one user at a time."""

    def __init__(
        self, sandbox: "Sandbox", pid: int, sock: socket.socket, workspace: str, template: TemplateLink | None = None
    ) -> None:
        self.sandbox = sandbox
        self.template = template
        """The template this worker was forked from (its workspace is the template's), or ``None``."""
        self.swapped: bool | None = None
        """For a template's worker: whether the patch was swapped in (``False``: it fell back to a fresh load)."""
        self.fallback: Any = None
        """Called to get a fresh worker when a template's worker answers ``unswappable``."""
        self.unswappable_reason: str | None = None
        self.swap_plan: tuple[list, bytes] | None = None
        """For a template's worker that planned its swap: the plan (data, blob), for the run's next workers."""
        self.pid = pid
        self.sock = sock
        self.workspace = workspace
        self.reader = FrameReader(sock)
        self.containment: dict[str, Any] = {}
        self.load_timings_ms: dict[str, float] = {}
        """Where the worker spent its load time (files, import, startup), as it reported."""
        self.diagnose = False
        """Asked for diagnostics (the scenario's author's tools, never grading): the load's profile
        and the app's tracebacks are kept (:mod:`envcore.runner.diagnostics`)."""
        self.load_profile: LoadProfile | None = None
        """For a worker asked for diagnostics: where its load's time went, if it failed or was slow.
        A load that finished is described by the profile its final report carries, or by none; one
        that did not (stopped at its deadline, or its process ended) by the last one it streamed."""
        self._streamed_profile: LoadProfile | None = None
        """The profile the worker sent last while its load was still running (unfinished)."""
        self.closed = False
        self._how_ended: str | None = None
        self._template_lost = False
        self.handed_out = False
        self.zygote_generation = sandbox.zygote_restarts
        self.requests_served = 0
        self.last_used = time.monotonic()

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the app to load; return the containment layers or raise :class:`AppLoadFailure`."""
        deadline = time.monotonic() + timeout_s
        try:
            message, blob = self._read_load(deadline, MAX_PLAN_BYTES)
            if message.get("type") == "spare":  # (a prepared spare's was read when it was prepared)
                message, blob = self._read_load(deadline, MAX_PLAN_BYTES)
            if message.get("type") == "plan" and self.template is not None and self.swapped is None:
                # Sent before any patched code ran: what the worker computed from the patch, nothing else.
                if isinstance(message.get("plan"), list):
                    self.swap_plan = (message["plan"], blob)
                message, blob = self._read_load(deadline, 0)
            if blob:
                raise WireError("unexpected data with the load report")
        except WireTimeout:
            self.close()
            self.load_profile = self._streamed_profile
            raise AppLoadFailure(f"the app did not finish loading within {timeout_s:g} s", self.load_profile) from None
        except PeerClosed:
            try:
                ended = self._ended()
            except TemplateLost:
                if self.fallback is None:
                    raise
                # The template died (with its zygote, say) before this worker loaded anything: the
                # app is not to blame, and a fresh worker can load it.
                return self._fall_back("the template process was gone", deadline)
            self.load_profile = self._streamed_profile
            raise AppLoadFailure(f"the app's process ended while loading ({ended})", self.load_profile) from None
        except WireError as exc:
            self.close()
            raise AppLoadFailure(f"the app's process broke the protocol while loading: {exc}") from None
        self.load_profile = self._final_profile(message)
        self.containment = message.get("containment") or {}
        self.load_timings_ms = message.get("timings_ms") or {}
        if message.get("type") == "unswappable" and self.fallback is not None:
            # The patch changes more than function bodies: load it in a fresh worker instead.
            self.sandbox.stats["unswappable"] += 1
            return self._fall_back(str(message.get("reason"))[:500], deadline)
        if self.template is not None and self.swapped is None:
            self.swapped = True
            self.sandbox.stats["swapped"] += 1
        if message.get("type") == "load_error":
            self.close()
            raise AppLoadFailure(str(message.get("error"))[:4000], self.load_profile)
        if message.get("type") != "ready":
            self.close()
            raise AppLoadFailure("the app's process broke the protocol while loading")
        return self.containment

    def _read_load(self, deadline: float, max_blob: int) -> tuple[dict[str, Any], bytes]:
        """The worker's next frame while it loads. A worker asked for diagnostics sends the load's
        profile so far as it goes (kept for a load that does not finish, the frame skipped); from any
        other worker such a frame is a frame out of protocol, which fails its load."""
        while True:
            message, blob = self.reader.read(deadline, max_json=MAX_RESPONSE_JSON, max_blob=max_blob)
            if not (self.diagnose and message.get("type") == "profile" and not blob):
                return message, blob
            self._streamed_profile = LoadProfile.from_json(message.get("profile")) or self._streamed_profile

    def _final_profile(self, message: dict[str, Any]) -> LoadProfile | None:
        """The profile of a load that finished: the one its final report (``ready``, ``load_error``)
        carries, if the author should see it (a failed load's; a successful one's only if it was slow
        for the sandbox's load deadline, which it is given), else none. Never one streamed while the
        load was running: a fast load's report carries none, and it has nothing to show."""
        if not self.diagnose or "profile" not in message:
            return None
        profile = LoadProfile.from_json(message["profile"])
        if profile is None:
            return None
        deadline_s = self.sandbox.limits.load_timeout_s
        return worth_showing(replace(profile, finished=True, deadline_s=deadline_s),
                             loaded=message.get("type") == "ready", deadline_s=deadline_s)

    def _fall_back(self, reason: str, deadline: float) -> dict[str, Any]:
        """Become a fresh worker loading the same app (a template's worker could not load it)."""
        fallback = self.fallback
        self.close()
        fresh = fallback()
        self.__dict__.update(fresh.__dict__)
        self.swapped, self.unswappable_reason = False, reason
        return self.wait_ready(max(deadline - time.monotonic(), 0.0))

    def send(self, requests: Sequence[HttpRequest]) -> None:
        """Queue requests; the worker answers them in order, one :meth:`receive` each."""
        frame: dict[str, Any] = {"type": "requests", "requests": [request_to_json(r) for r in requests]}
        if self.diagnose:
            frame["diagnose"] = self.workspace  # the app's tracebacks, its frames under this folder
        try:
            send_frame(self.sock, frame)
        except (OSError, socket.timeout) as exc:
            ended = self._ended()
            raise WorkerGone(f"the app's process is not reading requests ({ended}): {exc}") from None
        self.last_used = time.monotonic()

    def receive(self, timeout_s: float) -> HttpResponse:
        """The next response; :class:`WorkerGone` (and the worker stopped) if it does not come."""
        try:
            message, body = self.reader.read(
                time.monotonic() + max(timeout_s, 0.0), max_json=MAX_RESPONSE_JSON, max_blob=MAX_BODY_BYTES
            )
            response = _validate_response(message, body, self.diagnose)
        except WireTimeout:
            self.close()
            raise WorkerGone(f"no response within {timeout_s:.3g} s; the app's process was stopped") from None
        except PeerClosed:
            raise WorkerGone(f"the app's process ended ({self._ended()})") from None
        except WireError as exc:
            self.close()
            raise WorkerGone(f"the app's process broke the protocol ({exc}); it was stopped") from None
        self.requests_served += 1
        self.last_used = time.monotonic()
        return response

    def request(self, request: HttpRequest, timeout_s: float) -> HttpResponse:
        self.send([request])
        return self.receive(timeout_s)

    def _ended(self) -> str:
        """How the worker's process ended (asks the zygote, which reaps it). :class:`ZygoteLost` if
        the zygote that forked it has died since (which is what killed it)."""
        self.close(kill=False)
        if self.template is not None:
            if self._template_lost:
                raise TemplateLost("the template process is gone (its workers died with it)")
            return self._how_ended or "unknown"
        return self.sandbox.worker_status(self.pid, self.zygote_generation)

    def close(self, *, kill: bool = True) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.close()
        finally:
            if self.template is not None:
                # A template's worker works in the template's folder: once it has ended, the folder
                # is put back for the next worker (see TemplateLink.settle).
                try:
                    self._how_ended = self.template.settle(self.pid, kill=kill)
                except TemplateLost:
                    self._template_lost = True
            elif kill:
                self.sandbox.kill_worker(self.pid)
            self.sandbox.release_slot(busy=self.handed_out)
            if self.template is None:
                self.sandbox.discard_workspace(self.workspace)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


DEFAULT_MAX_WORKERS = 32


class Sandbox:
    """A warm zygote and a bounded pool of workers forked from it. Thread-safe."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        max_workers: int = DEFAULT_MAX_WORKERS,
        pool_wait_s: float = 10.0,
        warm_up: bool = True,
        spares: int = 2,
        templates: int = 8,
        template_spares: int = 2,
        probe_lanes: int | None = None,
    ) -> None:
        problem = supported_platform()
        if problem:
            raise RunnerInfrastructureError(problem)
        self.limits = limits or SandboxLimits()
        self.max_workers = max_workers
        self.pool_wait_s = pool_wait_s
        self.warm_up = warm_up
        parent_dir = workspace_parent()
        _remove_stale_roots(parent_dir)
        self.root = tempfile.mkdtemp(prefix=f"a01-sandbox-{os.getpid()}-", dir=parent_dir)
        self._trash: "queue.SimpleQueue[str | None]" = queue.SimpleQueue()
        self._janitor = threading.Thread(target=self._empty_trash, name="sandbox-janitor", daemon=True)
        self._janitor.start()
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-zygote-starter")
        """The one thread every zygote is started from (its parent-death signal is tied to it)."""
        self.lane_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-probe-lane")
        """The thread that serves verifications' second lane (one, kept: a thread per run would leave
        a malloc arena per thread behind)."""
        self.zygote_restarts = 0
        self._zygote_started = False
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._process: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._reader: FrameReader | None = None
        self._closed = False
        self._live_apps: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._reaper: threading.Thread | None = None
        self._reaper_stop = threading.Event()
        self.spares = spares
        self.probe_lanes = max(1, min(2, _usable_cores()) if probe_lanes is None else probe_lanes)
        """Probes one verification may run at once (each in its own worker), when it is the only
        verification running; default: 2 where there are two CPUs."""
        self._runs = 0
        self._busy = 0
        """Workers handed out by :meth:`spawn` and not closed yet."""
        self.stats = {"spawns": 0, "from_spare": 0, "from_template": 0, "swapped": 0, "unswappable": 0,
                      "second_lane": 0}
        """Workers handed out; how many were prepared spares; how many were forked from a template,
        and of those how many loaded the patch by swapping bodies or fell back to a fresh load; how
        many probes ran in a verification's second lane."""
        self._compiled: OrderedDict[str, bytes] = OrderedDict()
        self._compiled_lock = threading.Lock()
        self._spares: deque[Worker] = deque()
        self._spare_lock = threading.Lock()
        self._want_spares = threading.Event()
        self._spare_thread: threading.Thread | None = None
        self.templates = Templates(self, templates, template_spares)
        """Template processes lent to runs (see :mod:`envcore.sandbox.templates`): at most ``templates``
        alive at once (``0`` turns them off), each with up to ``template_spares`` workers prepared."""

    # -- zygote -----------------------------------------------------------------------------
    @property
    def zygote_pid(self) -> int | None:
        return self._process.pid if self._process and self._process.poll() is None else None

    def start(self) -> "Sandbox":
        with self._lock:
            self._ensure_zygote()
        if self.spares and self._spare_thread is None:
            self._spare_thread = threading.Thread(target=self._keep_spares, name="sandbox-spares", daemon=True)
            self._spare_thread.start()
            self._want_spares.set()
        return self

    def _ensure_zygote(self) -> None:
        """Start the zygote if it is not running (caller holds the lock)."""
        if self._closed:
            raise RunnerInfrastructureError("the sandbox is closed")
        if self._process is not None and self._process.poll() is None and self._sock is not None:
            return
        if self._process is not None:
            self._discard_zygote()
        if self._zygote_started:  # counted however the old one was found dead: its spares are stale
            self.zygote_restarts += 1
        self._zygote_started = True
        parent, child = socket.socketpair()
        try:
            self._process = self._starter.submit(
                subprocess.Popen,
                [sys.executable, "-m", "envcore.sandbox.zygote", str(child.fileno()), str(os.getpid())],
                pass_fds=[child.fileno()],
                env=_zygote_environment(),
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            ).result()
        except (OSError, RuntimeError) as exc:  # RuntimeError: the starter was shut down (closing)
            parent.close()
            raise RunnerInfrastructureError(f"cannot start the sandbox zygote: {exc}") from exc
        finally:
            child.close()
        self._sock, self._reader = parent, FrameReader(parent)
        message: dict[str, Any] = {"type": "ping"}
        if self.warm_up:
            from envcore.sandbox.warmup import warmup_apps

            message = {"type": "warmup", "apps": list(warmup_apps())}
        try:
            self._call(message, timeout_s=ZYGOTE_START_TIMEOUT_S)
        except ZygoteLost as exc:
            self._discard_zygote()
            raise RunnerInfrastructureError(f"the sandbox zygote did not start: {exc}") from exc

    def _discard_zygote(self) -> None:
        if self._sock is not None:
            self._sock.close()
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
        self._process, self._sock, self._reader = None, None, None

    def _call(self, message: dict[str, Any], *, timeout_s: float = 10.0, fds: list[int] | None = None,
              blob: bytes = b"") -> dict:
        """Send a command to the zygote and read its reply (caller holds the lock)."""
        assert self._sock is not None and self._reader is not None
        try:
            return exchange(self._sock, self._reader, {**message, "id": next(self._ids)}, timeout_s, fds=fds, blob=blob)
        except (OSError, WireError) as exc:
            self._discard_zygote()
            raise ZygoteLost(f"the sandbox zygote is gone ({type(exc).__name__}: {exc})") from None

    def _tell(self, message: dict[str, Any]) -> None:
        """Send a command that has no reply; a lost zygote is noticed at the next spawn."""
        with self._lock:
            if self._sock is None:
                return
            try:
                send_frame(self._sock, message)
            except OSError:
                self._discard_zygote()

    def zygote_call(self, message: dict[str, Any], *, blob: bytes = b"", fds: list[int] | None = None) -> dict:
        """Send a command to the zygote (started if needed, retried once if it was lost) and return its reply."""
        with self._lock:
            for attempt in (1, 2):
                self._ensure_zygote()
                try:
                    return self._call(message, fds=fds, blob=blob)
                except ZygoteLost:
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def ping(self) -> int:
        """The number of live workers; starts the zygote if needed."""
        with self._lock:
            self._ensure_zygote()
            return int(self._call({"type": "ping"})["workers"])

    # -- verifications ----------------------------------------------------------------------
    def run_started(self) -> None:
        with self._lock:
            self._runs += 1

    def run_ended(self) -> None:
        with self._lock:
            self._runs -= 1

    def second_lane_free(self) -> bool:
        """Whether a verification may run a second probe alongside: it is the only one running (with
        others, every CPU already has work, and a second lane would only add a fresh import)."""
        with self._lock:
            return self.probe_lanes > 1 and self._runs <= 1

    # -- workers ----------------------------------------------------------------------------
    def _fork_worker(self, *, spare: bool = False, template: TemplateLink | None = None) -> Worker:
        """A new contained worker with no app yet; the caller holds a pool slot for it.

        A ``spare`` prepares at idle priority where it can. A zygote's spare rehearses an app load
        (:func:`envcore.sandbox.worker.rehearse`) only when no worker is busy: while a verification
        starts a worker per probe, a rehearsal per spare doubled the CPU a probe costs (12 ms more)
        and saved 2 ms of its load. A template's spare rehearses nothing: it inherits the loaded app."""
        if self._closed:
            raise RunnerInfrastructureError("the sandbox is closed")
        try:
            workspace = template.workspace if template else tempfile.mkdtemp(prefix="w-", dir=self.root)
            parent, child = socket.socketpair()
        except OSError as exc:
            raise RunnerInfrastructureError(f"cannot prepare a worker: {exc}") from exc
        idle = spare and can_leave_idle_priority()
        message = {"type": "spawn", "workspace": workspace, "limits": self.limits.to_json(),
                   "rehearse": spare and self._busy == 0, "idle_priority": idle, "writable": True}
        try:
            if template is not None:
                reply = template.call(message, fds=[child.fileno()])
            else:
                reply = self.zygote_call(message, fds=[child.fileno()])
            if reply.get("type") != "spawned":
                raise RunnerInfrastructureError(f"the zygote could not fork: {reply.get('error')}")
        except BaseException:
            parent.close()
            if template is None:
                shutil.rmtree(workspace, ignore_errors=True)
            raise
        finally:
            child.close()
        parent.settimeout(self.limits.request_timeout_s)  # bounds sendall to a worker that stopped reading
        return Worker(self, int(reply["pid"]), parent, workspace, template)

    def _take_slot_for_spare(self) -> bool:
        """Take a pool slot for a spare only if another one stays free for real work."""
        if not self._slots.acquire(blocking=False):
            return False
        if not self._slots.acquire(blocking=False):
            self._slots.release()
            return False
        self._slots.release()
        return True

    def fork_spare(self, template: TemplateLink | None = None) -> Worker | None:
        """A prepared spare (of the zygote, or of ``template``), or ``None`` if the pool is busy or
        preparing failed. It is returned only once prepared (at idle priority that may take a while)."""
        if self._closed or not self._take_slot_for_spare():
            return None
        try:
            worker = self._fork_worker(spare=True, template=template)
        except Exception:  # noqa: BLE001 - a failed spare is retried later
            self._slots.release()
            return None
        try:
            message, _ = worker.reader.read(time.monotonic() + SPARE_READY_TIMEOUT_S, max_json=1024, max_blob=0)
            ok = message.get("type") == "spare"
        except WireError:
            ok = False
        if not ok:
            worker.close()
            return None
        return worker

    def trust(self, files: Mapping[str, str]) -> None:
        """Compile the ``.py`` files of a trusted app (a bundle as shipped) here, once, so workers
        loading byte-identical files skip compiling them. Only code that came from the factory or
        the cache goes through this process's compiler: anything an agent wrote is compiled inside
        its worker, so a source file crafted to break the compiler can only break a worker."""
        for path, text in files.items():
            if not path.endswith(".py"):
                continue
            key = _source_key(text)
            with self._compiled_lock:
                if key in self._compiled:
                    self._compiled.move_to_end(key)
                    continue
            try:
                data = marshal.dumps(compile(text, TRUSTED_FILENAME, "exec", dont_inherit=True))
            except (SyntaxError, ValueError):
                continue
            with self._compiled_lock:
                self._compiled[key] = data
                while len(self._compiled) > COMPILED_CACHE_SIZE:
                    self._compiled.popitem(last=False)

    def load_message(self, source: AppSource) -> tuple[dict[str, Any], bytes]:
        compiled, blobs, offset = [], [], 0
        with self._compiled_lock:
            for path, text in source.files.items():
                if path.endswith(".py"):
                    data = self._compiled.get(_source_key(text))
                    if data is not None:
                        compiled.append([path, offset, len(data)])
                        blobs.append(data)
                        offset += len(data)
        message = {"type": "load", "files": dict(source.files), "entrypoint": source.entrypoint, "compiled": compiled}
        return message, b"".join(blobs)

    def spawn(self, source: AppSource, template: TemplateLink | None = None,
              plan: tuple[list, bytes] | None = None, *, diagnose: bool = False) -> Worker:
        """A worker that is loading ``source``: a spare if one is ready, else a fresh fork. Requests
        may be sent at once; :meth:`Worker.wait_ready` says whether the app loaded. With ``diagnose``
        (the scenario's author's tools, never grading) the worker profiles its load and sends the
        app's tracebacks (:mod:`envcore.runner.diagnostics`).

        With ``template`` (lent to the caller by :meth:`Templates.acquire`, for a base that ``source``
        fits), the worker is forked from that template and swaps the patch in (applying ``plan``, the
        swap an earlier worker of the run planned for the same patch, when given); if the patch is
        more than body changes it falls back to a fresh worker by itself (see :meth:`Worker.wait_ready`).

        A worker that dies before it is handed the app (a spare whose zygote was replaced, a
        template that died) is replaced, at most :data:`SPAWN_ATTEMPTS` times in all; then the
        sandbox is failing, which is an infrastructure error."""
        if self._closed:
            raise RunnerInfrastructureError("the sandbox is closed")
        # Decided from this process's own survey, never from what a worker reports: a worker's
        # messages come after its app's code ran, and an app could forge one that claims no layers
        # (which would turn its failing patch into an infrastructure error, no reward, no penalty).
        refused = posture.refusal_here()
        if refused:
            raise SandboxRefused(refused)
        problem = tree_problem(source.files)
        if problem is not None:  # no folder can hold these files: the patch's fault, before anything is written
            raise AppLoadFailure(f"the app's files cannot be written: {problem}")
        for _attempt in range(SPAWN_ATTEMPTS):
            try:
                if template is not None and template.alive:
                    worker = self._spawn_from_template(source, template, plan, diagnose)
                else:
                    worker = self._spawn_fresh(source, diagnose)
            except TemplateLost:
                continue  # it died (with its zygote, say): the next attempt loads afresh
            if worker is not None:
                return worker
        raise RunnerInfrastructureError(f"the sandbox could not start a worker in {SPAWN_ATTEMPTS} attempts")

    def _spawn_fresh(self, source: AppSource, diagnose: bool = False) -> Worker | None:
        """A zygote's worker loading ``source``; ``None`` if the worker died before it was given the app."""
        worker = self._take_spare()
        self.stats["spawns"] += 1
        self.stats["from_spare"] += worker is not None
        if worker is None:
            if not self._slots.acquire(timeout=self.pool_wait_s):
                raise RunnerInfrastructureError(f"sandbox pool exhausted ({self.max_workers} workers busy)")
            try:
                worker = self._fork_worker()
            except BaseException:
                self._slots.release()
                raise
        with self._spare_lock:
            self._busy += 1
        worker.handed_out = True
        self._write_files(worker, source.files)
        message, blob = self.load_message(source)
        worker.diagnose = message["diagnose"] = diagnose  # (the worker profiles its load when asked)
        try:
            send_frame(worker.sock, message, blob)
        except OSError:
            worker.close()  # a spare that died while waiting (its zygote was replaced): use a fresh one
            return None
        return worker

    @staticmethod
    def _write_files(worker: Worker, files: Mapping[str, str]) -> None:
        """Write ``files`` into ``worker``'s folder before it is given the app, sorting a failure by
        whose fault it is (the worker is stopped either way). The parent writes them, never the
        worker: once app code has run, anything a worker says (such as "my disk is full") could be
        the app talking."""
        try:
            materialize(files, Path(worker.workspace))
        except AppLoadError as exc:  # a path that climbs out of the app: the patch's fault
            worker.close()
            raise AppLoadFailure(str(exc)) from None
        except (OSError, UnicodeError) as exc:
            worker.close()
            if isinstance(exc, OSError) and exc.errno in OUR_WRITE_ERRORS:  # the disk or the system, not the files
                raise RunnerInfrastructureError(f"cannot write the app's files: {exc}") from exc
            raise AppLoadFailure(f"the app's files cannot be written: {exc}") from None

    def _spawn_from_template(self, source: AppSource, template: TemplateLink,
                             plan: tuple[list, bytes] | None = None, diagnose: bool = False) -> Worker | None:
        worker = self.templates.take_spare(template)
        self.stats["spawns"] += 1
        self.stats["from_spare"] += worker is not None
        self.stats["from_template"] += 1
        if worker is None:
            if not self._slots.acquire(timeout=self.pool_wait_s):
                raise RunnerInfrastructureError(f"sandbox pool exhausted ({self.max_workers} workers busy)")
            try:
                worker = self._fork_worker(template=template)
            except BaseException:
                self._slots.release()
                raise
        with self._spare_lock:
            self._busy += 1
        worker.handed_out = True
        worker.fallback = lambda: self.spawn(source, diagnose=diagnose)
        worker.diagnose = diagnose  # (the app's tracebacks; a template's worker does not profile its swap)
        # The patch's text on disk in the template's folder (put back as the template had it when
        # this worker is settled): the app reads its own files as it would after a fresh load.
        self._write_files(worker, template.changed_files(source.files))
        message = {"type": "load", "files": dict(source.files), "entrypoint": source.entrypoint,
                   "plan": plan[0] if plan else None}
        try:
            send_frame(worker.sock, message, plan[1] if plan else b"")
        except OSError:
            worker.close()  # the template or the spare died: the caller tries again
            return None
        return worker

    def prepare(self, base: AppSource) -> None:
        """Build a template of ``base`` in the background, for the next run that patches it (an
        episode calls this when it starts, so its first test run does not wait for the import).
        Nothing, where the sandbox refuses to run apps."""
        if posture.refusal_here() is None:
            self.templates.prepare(base)

    def load(self, source: AppSource, template: TemplateLink | None = None) -> Worker:
        """:meth:`spawn` and wait until the app is ready (:class:`AppLoadFailure` if it is not)."""
        worker = self.spawn(source, template)
        worker.wait_ready(self.limits.load_timeout_s)
        return worker

    def _take_spare(self) -> Worker | None:
        with self._lock:
            if self._process is not None and self._process.poll() is not None:
                # The zygote died since its spares were forked: they died with it (or are about
                # to). Restart it now, so they are known stale and none is handed out to die.
                self._ensure_zygote()
        with self._spare_lock:
            while self._spares:
                worker = self._spares.popleft()
                if worker.zygote_generation == self.zygote_restarts and not worker.closed:
                    return worker
                worker.close()
        return None

    def _keep_spares(self) -> None:
        """Background thread: keep ``spares`` contained workers waiting for an app."""
        while not self._closed:
            self._want_spares.wait(1.0)
            self._want_spares.clear()
            while not self._closed:
                with self._spare_lock:
                    if len(self._spares) >= self.spares:
                        break
                worker = self.fork_spare()
                if worker is None:
                    break  # the pool is busy (spares must not take slots from real work) or forking failed
                if self._closed:
                    worker.close()
                    break
                with self._spare_lock:
                    self._spares.append(worker)

    def kill_worker(self, pid: int) -> None:
        self._tell({"type": "kill", "pid": pid})

    def worker_status(self, pid: int, generation: int) -> str:
        """How a worker forked by zygote number ``generation`` ended. :class:`ZygoteLost` if that
        zygote died (which is what killed it), even if another has been started since: the spare
        thread may restart it between the worker's socket closing and this question."""
        with self._lock:
            if generation != self.zygote_restarts:
                raise ZygoteLost("the sandbox zygote died (its workers died with it)")
            if self._sock is None or self._process is None or self._process.poll() is not None:
                self._discard_zygote()
                raise ZygoteLost("the sandbox zygote died (its workers died with it)")
            return str(self._call({"type": "status", "pid": pid})["ended"])

    def discard_workspace(self, path: str) -> None:
        """Remove a finished worker's folder in the background (deleting is slow on some disks)."""
        self._trash.put(path)

    def _empty_trash(self) -> None:
        while (path := self._trash.get()) is not None:
            shutil.rmtree(path, ignore_errors=True)

    def release_slot(self, *, busy: bool = False) -> None:
        if busy:
            with self._spare_lock:
                self._busy -= 1
        self._slots.release()
        # Spares are replaced when a worker finishes, not when one is taken: forking and rehearsing a
        # spare while a verification runs would compete with it for the CPU.
        self._want_spares.set()
        self.templates.want_spares()

    # -- live apps --------------------------------------------------------------------------
    def register_live(self, app: Any) -> None:
        """Track a live app so that its worker is stopped after ``limits.idle_s`` without requests."""
        self._live_apps.add(app)
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap_idle, name="sandbox-reaper", daemon=True)
            self._reaper.start()

    def _reap_idle(self) -> None:
        interval = max(0.05, min(self.limits.idle_s / 4, 5.0))
        while not self._reaper_stop.wait(interval):
            self._stop_idle_apps()

    def _stop_idle_apps(self) -> None:
        """One sweep. (A function of its own: the thread's loop would otherwise keep the last app it
        looked at referenced between sweeps, and a closed session's app and files with it.)"""
        for app in list(self._live_apps):
            app.stop_if_idle(self.limits.idle_s)

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reaper_stop.set()
        self._want_spares.set()
        for app in list(self._live_apps):
            app.close()
        with self._spare_lock:
            spares, self._spares = list(self._spares), deque()
        for worker in spares:
            worker.close()
        self.templates.close()
        with self._lock:
            self._discard_zygote()
        self._starter.shutdown(wait=False)
        self.lane_pool.shutdown(wait=False)
        self._trash.put(None)
        self._janitor.join(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:
            pass

