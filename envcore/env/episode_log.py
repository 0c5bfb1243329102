"""The episode log: one versioned JSON line per episode, whoever played it.

Training rollouts, evaluation runs, the server and human play in the Space all write
:class:`EpisodeRecord` lines with :class:`EpisodeLogger`; the UI, failure analysis and reports read
them with :func:`read_episodes`. The schema is documented in ``docs/episode-log.md``; bump
:data:`RECORD_VERSION` when its meaning changes.

Durability: a record is written with a single ``write`` to a file opened with ``O_APPEND``, so
concurrent writers (threads or processes) never interleave inside a line, and a crash loses at
most the episode in flight: a torn last line (the process died mid-write) is skipped by the reader
and reported, every complete line before it is intact. ``fsync=True`` also survives a machine crash.

Bounded: a record is always written, and is at most ``LIMITS["log_record_bytes"]`` (see
:mod:`envcore.env.actions`). An episode keeps each step's entry bounded as it plays
(:func:`step_entry`: every text at most ``log_field_chars``, every list at most ``log_list_items``),
and :meth:`EpisodeLogger.write` shrinks a record that is still too large (texts and lists cut
shorter and shorter, the diff cut between files) rather than drop it. What is cut ends with a
marker that says so, and keeps its type, so every reader reads a cut record as it reads any other.
Lone surrogates (which JSON can carry and UTF-8 cannot) become U+FFFD. Human play in the Space
writes through the same logger, so the same caps hold there.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticSerializationError

from envcore.env.actions import LIMITS, bounded
from envcore.patching import clip_diff
from envcore.scenario.splits import disclosure_for

RECORD_VERSION = 1

Outcome = Literal["submitted", "budget_exhausted", "abandoned", "infrastructure_error"]


class StepEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int
    action: dict[str, Any]
    """The action as the agent sent it (before validation: a refused action is logged as sent)."""
    observation: dict[str, Any]
    """The observation returned, every field."""
    elapsed_ms: float


class EpisodeRecord(BaseModel):
    """One episode, as every producer writes it and every reader reads it."""

    model_config = ConfigDict(extra="forbid")

    record_version: int = RECORD_VERSION
    episode_id: str
    agent_id: str
    """Who played: a model name, ``oracle``, ``human:<session>`` ... (free text, set at reset)."""
    source: str = "server"
    """What produced the record: ``server``, ``training``, ``evaluation``, ``human`` ..."""
    scenario_id: str
    scenario_hash: str
    """The bundle's content hash (sha256): the exact scenario, whatever cache it came from."""
    cache_version: str | None = None
    bug_class: str
    tier: int
    split: str | None = None
    seed: int | None = None
    started_at: float
    """Unix time."""
    ended_at: float
    outcome: Outcome
    max_steps: int
    steps: list[StepEntry] = Field(default_factory=list)
    diff: str = ""
    """The final diff against the original app."""
    verification: dict[str, Any] | None = None
    """The full verification report (hidden probes included: logs are server-side artifacts)."""
    reward: float | None = None
    reward_breakdown: dict[str, Any] | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)
    """``reset``, ``verify`` (submit's verification), ``total`` (reset to end), ``steps`` (sum)."""
    hints: list[dict[str, Any]] = Field(default_factory=list)
    """Hints a person took (``level``, ``key``, ``title``, ``cost``, ``at_step``); empty for agents."""


def outcome_only(record: "EpisodeRecord") -> "EpisodeRecord":
    """``record`` without its steps and diff: how it ended, its reward and its verification (as logged,
    already in words for a held-out split), not how. For runs whose every step is an answer key: the
    oracle's episodes on a scenario whose hidden suite may be told in words only play its reference fix."""
    return record.model_copy(update={"steps": [], "diff": ""})


def answer_key_hidden(record: "EpisodeRecord") -> "EpisodeRecord":
    """An oracle's ``record`` as a page may show it: :func:`outcome_only` on a held-out scenario
    (:func:`~envcore.scenario.splits.disclosure_for` says ``words``), as it is on any other."""
    return outcome_only(record) if disclosure_for(record.split) == "words" else record


def is_outcome_only(record: "EpisodeRecord") -> bool:
    """Whether ``record`` is a held-out run shown without its steps and diff (:func:`answer_key_hidden`)."""
    return not record.steps and not record.diff and disclosure_for(record.split) == "words"


def step_entry(step: int, action: dict[str, Any], observation: dict[str, Any], elapsed_ms: float) -> StepEntry:
    """A step's log entry, bounded (see the module docstring); what an episode keeps of each step."""
    chars, items = LIMITS["log_field_chars"], LIMITS["log_list_items"]
    # model_construct: the values are built by the episode itself (validated once, when read back)
    return StepEntry.model_construct(step=step, action=bounded(action, chars, items),
                                     observation=bounded(observation, chars, items), elapsed_ms=elapsed_ms)


def record_line(record: "EpisodeRecord", max_bytes: int | None = None) -> bytes:
    """``record`` as one JSON line (UTF-8, ending in a newline) of at most ``max_bytes`` (default
    ``LIMITS["log_record_bytes"]``): as it is when it fits, else with its diff cut between files to a
    sixteenth of that and its steps' texts and lists cut shorter until it fits. Never fails for a
    record's content."""
    limit = max_bytes or LIMITS["log_record_bytes"]
    try:
        line = record.model_dump_json().encode() + b"\n"
        if len(line) <= limit:
            return line
    except PydanticSerializationError:  # a lone surrogate somewhere: write the bounded copy
        pass
    data = record.model_dump()  # plain values throughout: only its texts need care (see bounded)
    chars, items = LIMITS["log_field_chars"], LIMITS["log_list_items"]
    # The diff keeps a fixed share, whole files first (a text takes at most 6 bytes a character in JSON).
    share = max(limit // 16, 1)
    diff = bounded(clip_diff(data["diff"], share), share)
    while True:
        # the record's own fields keep every entry (a verification keeps every probe); its steps shrink
        shrunk = {key: bounded(value, chars) for key, value in data.items() if key not in ("steps", "diff")}
        shrunk["steps"] = [{**entry, "action": bounded(entry["action"], chars, items),
                            "observation": bounded(entry["observation"], chars, items)} for entry in data["steps"]]
        shrunk["diff"] = diff
        line = json.dumps(shrunk, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        if len(line) <= limit or chars <= 16:
            return line
        chars, items = chars // 2, max(items // 2, 4)


class EpisodeLogger:
    """Appends records to one JSONL file; thread- and process-safe (see the module docstring)."""

    def __init__(self, path: str | Path, *, fsync: bool = False, max_record_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.max_record_bytes = max_record_bytes or LIMITS["log_record_bytes"]
        """The largest line a record becomes (see :func:`record_line`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.written = 0
        # A writer that died mid-record left a torn last line: end it, or the first record written
        # now would be glued to it and lost with it. (If another writer is mid-record instead, the
        # newline lands after its line, O_APPEND: a blank line, which the reader skips.)
        with open(self.path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size and (handle.seek(size - 1), handle.read(1))[1] != b"\n":
                os.write(self._fd, b"\n")

    def write(self, record: EpisodeRecord) -> None:
        """Append ``record`` (bounded, see :func:`record_line`) as one line."""
        line = record_line(record, self.max_record_bytes)
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path}: the logger is closed")
            written = os.write(self._fd, line)
            if written != len(line):  # a full disk: never leave half a record that looks whole
                os.ftruncate(self._fd, os.lseek(self._fd, 0, os.SEEK_END) - written)
                raise OSError(f"{self.path}: short write ({written} of {len(line)} bytes)")
            if self.fsync:
                os.fsync(self._fd)
            self.written += 1

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> "EpisodeLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LogProblem(BaseModel):
    line: int
    reason: str


def _lines(handle: Any, problems: list[LogProblem] | None) -> Iterator[bytes]:
    """The handle's lines; a compressed file that ends early ends them (and is reported)."""
    try:
        yield from handle
    except (EOFError, OSError) as exc:
        if problems is not None:
            problems.append(LogProblem(line=0, reason=f"compressed log ends early: {exc}"))


def read_episodes(path: str | Path, problems: list[LogProblem] | None = None) -> Iterator[EpisodeRecord]:
    """The records of a log file (plain, or gzip-compressed when its name ends in ``.gz``), in order.
    Lines that are torn, not JSON, of another record version or invalid are skipped and described in
    ``problems`` (when given)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as handle:
        for number, raw in enumerate(_lines(handle, problems), 1):
            if not raw.endswith(b"\n"):
                if problems is not None:
                    problems.append(LogProblem(line=number, reason="torn last line (a writer stopped mid-record)"))
                break
            if raw == b"\n":  # holds no record (see EpisodeLogger.__init__)
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict) or data.get("record_version") != RECORD_VERSION:
                    raise ValueError(f"record_version {data.get('record_version') if isinstance(data, dict) else None!r}, "
                                     f"this code reads {RECORD_VERSION}")
                yield EpisodeRecord.model_validate(data)
            except (ValueError, ValidationError, RecursionError) as exc:  # RecursionError: absurdly nested JSON
                if problems is not None:
                    reason = (str(exc).splitlines() or [type(exc).__name__])[0]
                    problems.append(LogProblem(line=number, reason=reason[:300]))


LOG_SUFFIXES = (".jsonl.gz", ".jsonl")
_SNIFF_BYTES = 4096  # a record's first key after record_version is episode_id: always in the first bytes


def is_episode_log(path: Path, *, empty_ok: bool = False) -> bool:
    """Whether ``path`` starts like an episode log (another tool's JSONL does not); an empty file
    counts when ``empty_ok`` (a log that exists before its first episode)."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except (OSError, EOFError):
        return False
    return (empty_ok and not head.strip()) or b'"episode_id"' in head


def log_set_name(relative: Path) -> str:
    """A log's name from its path relative to a root: its folder for ``episodes.jsonl[.gz]``
    (``evals/v2/heuristic``), otherwise its path without the extension (``training/run3/rollouts``)."""
    stem = relative.name.removesuffix(".gz").removesuffix(".jsonl")
    if stem == "episodes":
        return relative.parent.as_posix() if relative.parent != Path(".") else "episodes"
    return (relative.parent / stem).as_posix()


def find_episode_logs(root: str | Path, *, skip_dirs: frozenset[str] = frozenset(), empty_ok: bool = False) -> dict[str, Path]:
    """Every episode log under ``root`` by :func:`log_set_name`, skipping hidden folders and
    ``skip_dirs`` wherever they are (pruned, so a cache's bundles are never walked). When a folder
    holds both ``episodes.jsonl`` and ``episodes.jsonl.gz``, the plain one wins: a resumed run
    unpacks the compressed log and appends to it, so the plain copy is the newer one."""
    root = Path(root)
    found: dict[str, Path] = {}
    if not root.is_dir():
        return found
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skip_dirs)
        for file in sorted(files):
            if file.startswith(".") or not file.endswith(LOG_SUFFIXES):
                continue
            path = Path(folder) / file
            name = log_set_name(path.relative_to(root))
            if name in found and not found[name].name.endswith(".gz"):
                continue
            if is_episode_log(path, empty_ok=empty_ok):
                found[name] = path
    return found
