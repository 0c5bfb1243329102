"""What a scenario's author is told when the app misbehaves: its tracebacks and its load profile.

A scenario check that fails because the app answered ``500`` (``status 500 not in [200]``), or because
it "did not finish loading within 5 s", says what went wrong but not where. Two diagnostics say
where, for the person who brought the app (``python -m envcore factory import`` and ``factory
check``); a runner collects them only when it is built with ``diagnostics=True``:

* **The app's traceback** (:class:`AppError`): for a request the app answered with a 5xx status (or
  answered, then raised: a background task that fails after the response), or
  not at all, because an exception escaped it, the app's own frames (``app/<file>:<line> in
  <function>`` and the source line) and the exception, with the request it answered (probe, method,
  path, user). Frames of libraries are left out: they say nothing the author can change (an error
  raised inside FastAPI with no frame of the app says so).
* **The load profile** (:class:`LoadProfile`): while the app loads (import, start-up), a timer
  signal (``setitimer(ITIMER_REAL)``, ``SIGALRM``) samples the loading process's stack every 10 ms,
  and every line of the app's code on the stack is charged the wall time since the previous sample:
  so a line that waits (``time.sleep``, a lock) or runs C code (180 bcrypt hashes at cost 12) is
  charged as much as one that spins. A signal is the one way to look at a stack that suits a worker:
  it is a single thread (no sampling thread), under a seccomp allowlist that has ``setitimer`` and
  ``rt_sigaction`` but not ``ptrace``, and it is cheap (a few microseconds per sample). Nothing is
  sampled unless diagnostics were asked for. A worker whose load runs long sends the profile so far
  every quarter second, so a load the parent stops at its deadline still has one; a load that
  finishes is described by the profile its final report carries, or by none (a fast load's). A load
  that succeeds is shown when it took more than :data:`SLOW_LOAD_S`, or more than half of its load
  deadline (:func:`slow_load_s`), which also earns a warning (:func:`near_deadline`): on a busy
  machine such an app passes or fails its checks, and its grading, by chance.
* **A load that failed for one probe** (:attr:`AppError.load_failed`): in the sandbox every probe
  loads the app afresh, so a load can fail (overrun its deadline on a busy machine) after another
  load of the same app succeeded; the probe's requests then go unanswered, and the failure is kept
  next to that probe, with the profile of *that* load.

**Never for an agent.** Grading, ``run_tests`` and the live app behind ``http_request`` run without
diagnostics, so no traceback, no profile and no source line of a hidden probe's code path can reach
an observation; a worker is told per request whether to send a traceback, and a traceback or a
profile it sends unasked is dropped by the parent (:mod:`envcore.sandbox.pool`), so a patch cannot
turn them on.
"""

from __future__ import annotations

import linecache
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

MAX_FRAMES = 12
"""The app's frames kept per exception (the innermost ones)."""
MAX_TRACEBACK_CHARS = 4000
SAMPLE_INTERVAL_S = 0.01
REPORT_EVERY_S = 0.25
"""How often a worker whose load is still running sends the profile so far."""
SLOW_LOAD_S = 1.0
"""A load that succeeds is reported with its profile when it took longer than this (or than
:data:`NEAR_DEADLINE` of its load deadline, when that is less)."""
NEAR_DEADLINE = 0.5
"""The share of its load deadline past which a load that succeeds is warned about."""
WARNING_ENTRIES = 3
"""Lines of the profile a near-deadline warning names."""
TOP_ENTRIES = 6
MAX_TEXT = 300
"""Characters kept of a function name or a source line in a profile."""


def _app_path(filename: str, prefix: str) -> str:
    return "app/" + filename[len(prefix):]


def _source_line(filename: str, lineno: int, module_globals: dict | None) -> str:
    try:
        return linecache.getline(filename, lineno, module_globals).strip()
    except Exception:  # noqa: BLE001 - a missing line only makes the report shorter
        return ""


def _exception_line(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except Exception:  # noqa: BLE001 - an exception whose str() fails
        return type(exc).__name__


def app_traceback(exc: BaseException, root: str) -> str:
    """``exc`` as its author reads it: for it and the exceptions it was raised from or while handling
    (at most three, oldest first), the frames of the app's own files under ``root`` (innermost
    :data:`MAX_FRAMES`, each ``app/<file>:<line> in <function>`` and its source line), then the
    exception. Cut to :data:`MAX_TRACEBACK_CHARS`."""
    prefix = root.rstrip("/") + "/"
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 3 and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    blocks = []
    for item in reversed(chain):
        lines = []
        frames = [(frame, lineno) for frame, lineno in traceback.walk_tb(item.__traceback__)
                  if frame.f_code.co_filename.startswith(prefix)]
        if not frames:
            lines.append("  (raised outside the app's own files)")
        for frame, lineno in frames[-MAX_FRAMES:]:
            filename = frame.f_code.co_filename
            lines.append(f"  {_app_path(filename, prefix)}:{lineno} in {frame.f_code.co_name}")
            source = _source_line(filename, lineno, frame.f_globals)
            if source:
                lines.append(f"    {source}")
        lines.append(_exception_line(item))
        blocks.append("\n".join(lines))
    return "\n(while handling it, or raised from it:)\n".join(blocks)[:MAX_TRACEBACK_CHARS]


@dataclass(frozen=True)
class AppError:
    """A request the app answered with a 5xx status (or not at all) because an exception escaped it."""

    probe_id: str
    method: str
    path: str
    actor: str | None
    """The user it was sent as (``None``: anonymous)."""
    status: int | None
    traceback: str
    """:func:`app_traceback` of the exception."""
    login: bool = False
    """The request was the actor's login, sent before the probe's steps."""
    load_failed: bool = False
    """Not an exception: the app did not load for this probe (``traceback`` holds why), though it
    loaded for another probe of the run; ``method``, ``path`` and ``actor`` are the probe's first
    request, which went unanswered."""
    profile: LoadProfile | None = None
    """For a failed load: where that load's time went."""


def failed_answer(status: int | None) -> bool:
    """Whether an answer with ``status`` is one whose traceback is kept: a 5xx, or none at all."""
    return status is None or status >= 500


@dataclass(frozen=True)
class ProfileEntry:
    """One line of the app's code and the wall time spent with it on the stack while loading."""

    seconds: float
    path: str
    """``app/<file>``."""
    line: int
    function: str
    source: str


@dataclass(frozen=True)
class LoadProfile:
    """Where a load's time went, by line of the app's code (cumulative: a line is charged while any
    function it called runs)."""

    seconds: float
    """The load's wall time when the profile was taken."""
    finished: bool
    """``False``: the load was still running (a profile sent before the parent's deadline)."""
    entries: tuple[ProfileEntry, ...]
    """The lines charged the most time, most first (a caller after its callee when they tie)."""
    outside_s: float = 0.0
    """Time sampled with no frame of the app's code on the stack (libraries, the runner)."""
    deadline_s: float | None = None
    """The load deadline the load ran under (the sandbox's, set by the parent; never sent by a
    worker), or ``None`` where loads have none (in-process)."""

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "finished": self.finished, "outside_s": self.outside_s,
                "entries": [[e.seconds, e.path, e.line, e.function, e.source] for e in self.entries]}

    @classmethod
    def from_json(cls, data: Any) -> "LoadProfile | None":
        """A profile as a worker sent it, or ``None`` if it is not one (a worker is untrusted: every
        field is checked and every text cut)."""
        try:
            entries = []
            for item in data["entries"][:TOP_ENTRIES]:
                seconds, path, line, function, source = item
                if not (isinstance(path, str) and isinstance(function, str) and isinstance(source, str)
                        and isinstance(line, int) and isinstance(seconds, (int, float))):
                    return None
                entries.append(ProfileEntry(float(seconds), path[:MAX_TEXT], line, function[:MAX_TEXT],
                                            source[:MAX_TEXT]))
            seconds, outside = data["seconds"], data.get("outside_s", 0.0)
            if not (isinstance(seconds, (int, float)) and isinstance(outside, (int, float))):
                return None
            return cls(float(seconds), bool(data["finished"]), tuple(entries), float(outside))
        except (KeyError, TypeError, ValueError):
            return None


class LoadSampler:
    """Samples this process's stack while an app under ``root`` loads (see the module docstring).

    :meth:`start` does nothing off the main thread or where ``SIGALRM`` or the real-time timer is
    already in use (nobody else's handler is replaced); :meth:`stop` then returns ``None``. With
    ``report``, the profile so far is handed to it every :data:`REPORT_EVERY_S` while sampling.
    """

    def __init__(self, root: str, *, report: Callable[[LoadProfile], None] | None = None) -> None:
        self.prefix = root.rstrip("/") + "/"
        self.report = report
        self.active = False
        self._spent: dict[tuple[str, int, str], float] = {}
        self._depth: dict[tuple[str, int, str], int] = {}
        self._globals: dict[str, dict] = {}
        self._outside = 0.0
        self._started = self._last = self._next_report = 0.0
        self._previous: Any = None

    def start(self) -> "LoadSampler":
        if threading.current_thread() is not threading.main_thread():
            return self
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None) \
                or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            return self
        self._started = self._last = time.perf_counter()
        self._next_report = self._started + REPORT_EVERY_S
        self._previous = signal.signal(signal.SIGALRM, self._sample)
        signal.siginterrupt(signal.SIGALRM, False)  # restart interrupted calls (SQLite's, say)
        signal.setitimer(signal.ITIMER_REAL, SAMPLE_INTERVAL_S, SAMPLE_INTERVAL_S)
        self.active = True
        return self

    def stop(self) -> LoadProfile | None:
        """Stop sampling (once; later calls return ``None``) and return the profile."""
        if not self.active:
            return None
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, self._previous if self._previous is not None else signal.SIG_DFL)
        self.active = False
        return self.profile(finished=True)

    def _sample(self, signum: int, frame: Any) -> None:
        try:
            now = time.perf_counter()
            spent, self._last = now - self._last, now
            seen: set[tuple[str, int, str]] = set()
            while frame is not None:
                code = frame.f_code
                if code.co_filename.startswith(self.prefix):
                    key = (code.co_filename, frame.f_lineno, code.co_name)
                    if key not in seen:
                        seen.add(key)
                        self._spent[key] = self._spent.get(key, 0.0) + spent
                        self._depth[key] = min(self._depth.get(key, len(seen)), len(seen))
                        self._globals.setdefault(code.co_filename, frame.f_globals)
                frame = frame.f_back
            if not seen:
                self._outside += spent
            if self.report is not None and now >= self._next_report:
                self._next_report = now + REPORT_EVERY_S
                self.report(self.profile(finished=False))
        except Exception:  # noqa: BLE001 - sampling must never disturb the load it watches
            pass

    def profile(self, *, finished: bool) -> LoadProfile:
        """The profile so far."""
        ranked = sorted(self._spent, key=lambda k: (-round(self._spent[k], 3), self._depth[k]))[:TOP_ENTRIES]
        entries = tuple(
            ProfileEntry(round(self._spent[key], 3), _app_path(key[0], self.prefix), key[1], key[2][:MAX_TEXT],
                         _source_line(key[0], key[1], self._globals.get(key[0]))[:MAX_TEXT])
            for key in ranked)
        return LoadProfile(round(time.perf_counter() - self._started, 3), finished, entries, round(self._outside, 3))


def main_entries(profile: LoadProfile, count: int = 3) -> tuple[ProfileEntry, ...]:
    """The top ``count`` lines of ``profile``, without those charged less than a tenth of the top
    line's time (a sample or two of an import: noise, which would tell two loads apart)."""
    if not profile.entries:
        return ()
    floor = profile.entries[0].seconds / 10
    return tuple(e for e in profile.entries[:count] if e.seconds >= floor)


def slow_load_s(deadline_s: float | None) -> float:
    """How long a successful load may take before it is shown: :data:`SLOW_LOAD_S`, or less where
    :data:`NEAR_DEADLINE` of the load deadline ``deadline_s`` is less."""
    return SLOW_LOAD_S if deadline_s is None else min(SLOW_LOAD_S, deadline_s * NEAR_DEADLINE)


def worth_showing(profile: LoadProfile | None, *, loaded: bool, deadline_s: float | None = None) -> LoadProfile | None:
    """``profile`` if the author should see it: the load failed (and some time went anywhere), or it
    succeeded but took longer than :func:`slow_load_s` of its deadline ``deadline_s``."""
    if profile is None:
        return None
    if loaded:
        return profile if profile.seconds > slow_load_s(deadline_s) else None
    return profile if profile.entries or profile.outside_s else None


def near_deadline(profile: LoadProfile | None) -> bool:
    """Whether ``profile`` is of a load that succeeded in more than :data:`NEAR_DEADLINE` of its load
    deadline: one that a busier machine would make overrun it."""
    return (profile is not None and profile.finished and profile.deadline_s is not None
            and profile.seconds > profile.deadline_s * NEAR_DEADLINE)


def render_near_deadline(profile: LoadProfile, what: str = "the app") -> str:
    """The warning for a load :func:`near_deadline`, in one line: its time, its deadline and the top
    of its profile."""
    where = "; ".join(f"{e.path}:{e.line} in {e.function} ({e.seconds:.2f} s)" + (f" {e.source}" if e.source else "")
                      for e in main_entries(profile, WARNING_ENTRIES))
    text = (f"{what} took {profile.seconds:.2f} s to load, more than half of its {profile.deadline_s:g} s load "
            "deadline: on a busier machine some loads will overrun it, and checks and grading will fail by chance "
            "(slow start-up work, such as hashing seed passwords at a high cost, can be done ahead of time and its "
            "result kept in a data file); where the time went: "
            + (where or "no line of the app's code was on the stack when sampled"))
    return printable(text.replace("\n", " "))


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters other than a line break are shown
    escaped (an app's exception message is its author's, or anybody's, to write)."""
    return "".join(ch if ch == "\n" or (ch.isprintable() and ch not in "\x1b\x9b") else ch.encode("unicode_escape").decode()
                   for ch in text)


def _profile_key(profile: LoadProfile | None) -> tuple:
    """Where a profile's time went, as far as telling two loads apart goes: its main lines."""
    return () if profile is None else tuple((e.path, e.line) for e in main_entries(profile))


def _render_load_failure(group: list[AppError]) -> str:
    first = group[0]
    head = f"the app did not load for probe {first.probe_id} ({first.method} {first.path} as {first.actor or 'anonymous'})"
    more = sorted({e.probe_id for e in group[1:]} - {first.probe_id})
    if more:
        head += f", nor for {len(more)} more probe(s) ({', '.join(more[:5])})"
    lines = [f"{head}: {first.traceback}"]
    if first.profile is not None:
        lines += ["  " + line for line in render_load_profile(first.profile, "the app").splitlines()]
    return printable("\n".join(lines))


def render_app_errors(errors: list[AppError]) -> list[str]:
    """One block per distinct traceback: the first request that raised it, how many more did, and
    the traceback; and one per distinct failed load (its reason and where its time went): the first
    probe it failed, how many more, and that load's profile."""
    groups: dict[tuple, list[AppError]] = {}
    for error in errors:
        key = ("load", error.traceback, _profile_key(error.profile)) if error.load_failed else ("raised", error.traceback)
        groups.setdefault(key, []).append(error)
    blocks = []
    for key, group in groups.items():
        if key[0] == "load":
            blocks.append(_render_load_failure(group))
            continue
        text, first = key[1], group[0]
        if first.status is None:
            status = "no answer"
        elif first.status >= 500:
            status = f"status {first.status}"
        else:  # a background task, or code after the response: the client saw no error
            status = f"after answering {first.status}, so its client saw no error: a background task?"
        what = f"signing in for probe {first.probe_id}" if first.login else f"probe {first.probe_id}"
        head = f"the app raised on {first.method} {first.path} as {first.actor or 'anonymous'} ({what}, {status})"
        more = sorted({e.probe_id for e in group[1:]} - {first.probe_id})
        if len(group) > 1:
            head += f", and on {len(group) - 1} more request(s)" + (f" (probes {', '.join(more[:5])})" if more else "")
        blocks.append(printable(head + ":\n" + "\n".join("  " + line for line in text.splitlines())))
    return blocks


def render_load_profile(profile: LoadProfile, what: str = "the app") -> str:
    """The profile as a block of text: how long the load took, then one line per entry."""
    if profile.finished:
        head = f"{what} took {profile.seconds:.2f} s to load"
    else:
        head = f"{what} was still loading after {profile.seconds:.2f} s"
    lines = [head + "; where the time went (wall time with each line of the app's code on the stack):"]
    width = max((len(f"{e.path}:{e.line} in {e.function}") for e in profile.entries), default=0)
    for e in profile.entries:
        where = f"{e.path}:{e.line} in {e.function}"
        lines.append(f"  {e.seconds:6.2f} s  {where.ljust(width)}  {e.source}".rstrip())
    if not profile.entries:
        lines.append("  (no line of the app's code was on the stack when sampled)")
    if profile.outside_s >= 0.05:
        lines.append(f"  {profile.outside_s:6.2f} s  outside the app's code (libraries, the runner)")
    return printable("\n".join(lines))
