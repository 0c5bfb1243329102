"""An episode log capped on disk, for logs that anyone on the internet can make grow, fair to each writer.

The Space logs every visitor's episode (``A01_HUMAN_LOG``) and a server may log every ``/ws``
episode (``A01_EPISODE_LOG``); on a public server both are written by anonymous clients, as fast as
they care to play. :class:`CappedEpisodeLog` writes the same records through
:class:`~envcore.env.episode_log.EpisodeLogger` (same format, same durability) and keeps the disk
bounded without letting one writer erase the others:

* **Generations.** When the file would pass ``max_bytes`` it becomes ``<name>.1`` (``.1`` becomes
  ``.2``, and so on) and a new file begins; ``generations`` old files are kept, the oldest dropped.
  The log holds at most ``(generations + 1) * max_bytes``, and readers see all of it
  (:func:`log_generations`, oldest first, then the current file): records are not lost at a rotation,
  only when ``generations`` more files have filled after them.
* **A quota per visitor.** A visitor (a client address) may add at most ``visitor_bytes`` to the log in
  ``window_s`` (the server counts, in memory); past it their episodes are still played and scored but
  not recorded, and :meth:`CappedEpisodeLog.write` says so. So the records one visitor can push out are
  bounded by what all the others wrote: to drop anyone's records, a writer must fill every generation,
  which takes ``(generations + 1) * max_bytes / visitor_bytes`` visitors' quotas.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from envcore.env.episode_log import EpisodeLogger, EpisodeRecord

DEFAULT_GENERATIONS = 4
DEFAULT_WINDOW_S = 24 * 3600.0


def log_generations(path: str | Path) -> list[Path]:
    """The rotated files of the log at ``path`` that exist (``<name>.1``, ``<name>.2``...), oldest first."""
    path = Path(path)
    pattern = re.compile(re.escape(path.name) + r"\.(\d+)")
    found = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    for name in names:
        match = pattern.fullmatch(name)
        if match:
            found.append((int(match.group(1)), path.parent / name))
    return [p for _, p in sorted(found, reverse=True)]


class CappedEpisodeLog:
    """An episode log that stays under ``(generations + 1) * max_bytes`` on disk, with a quota per
    visitor (see the module docstring). One process writes it (the Space's); a lock orders writers."""

    def __init__(self, path: str | Path, max_bytes: int, *, generations: int = DEFAULT_GENERATIONS,
                 visitor_bytes: int | None = None, window_s: float = DEFAULT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_bytes < 1 or generations < 1:
            raise ValueError("max_bytes and generations must be positive")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.generations = generations
        self.visitor_bytes = visitor_bytes if visitor_bytes is not None else max(1, max_bytes // 8)
        """What one visitor may add in ``window_s`` (default an eighth of a file)."""
        self.window_s = window_s
        self.rotations = 0
        self.refused = 0
        self._clock = clock
        self._written: dict[str, list[tuple[float, int]]] = {}
        self._lock = threading.Lock()
        self._log = EpisodeLogger(self.path)

    @property
    def previous(self) -> Path:
        return self.generation(1)

    def generation(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    def write(self, record: EpisodeRecord, visitor: str | None = None) -> bool:
        """Append ``record`` for ``visitor`` (``None``: the server itself, no quota); ``False`` if the
        visitor's quota is used up and the record was not written."""
        size = len(record.model_dump_json().encode()) + 1
        with self._lock:
            if visitor is not None and not self._within_quota(visitor, size):
                self.refused += 1
                return False
            try:
                current = self.path.stat().st_size
            except OSError:
                current = 0
            if current and current + size > self.max_bytes:
                self._rotate()
            self._log.write(record)
            return True

    def quota_left(self, visitor: str | None) -> int | None:
        """Bytes ``visitor`` may still add in the current window (``None``: no quota)."""
        if visitor is None:
            return None
        with self._lock:
            return self.visitor_bytes - self._recent(visitor)

    def for_visitor(self, visitor: str | None) -> VisitorLog:
        """A writer that writes for ``visitor`` (what a play session's environment is given)."""
        return VisitorLog(self, visitor)

    def _recent(self, visitor: str) -> int:
        now = self._clock()
        entries = [(t, n) for t, n in self._written.get(visitor, ()) if now - t < self.window_s]
        if entries:
            self._written[visitor] = entries
        else:
            self._written.pop(visitor, None)
        return sum(n for _, n in entries)

    def _within_quota(self, visitor: str, size: int) -> bool:
        if self._recent(visitor) + size > self.visitor_bytes:
            return False
        self._written.setdefault(visitor, []).append((self._clock(), size))
        return True

    def _rotate(self) -> None:
        self._log.close()
        oldest = self.generation(self.generations)
        if oldest.exists():
            oldest.unlink()
        for n in range(self.generations - 1, 0, -1):
            if self.generation(n).exists():
                os.replace(self.generation(n), self.generation(n + 1))
        os.replace(self.path, self.generation(1))
        self._log = EpisodeLogger(self.path)
        self.rotations += 1

    def close(self) -> None:
        with self._lock:
            self._log.close()


class VisitorLog:
    """The shared log as one visitor's episodes write to it (see :meth:`CappedEpisodeLog.for_visitor`)."""

    def __init__(self, log: CappedEpisodeLog, visitor: str | None) -> None:
        self.log, self.visitor = log, visitor
        self.path = log.path
        self.last_refused = False
        """Whether the last record was left out for this visitor's quota."""

    def write(self, record: EpisodeRecord) -> None:
        self.last_refused = not self.log.write(record, self.visitor)

    def close(self) -> None:
        """The shared log outlives any one visitor: nothing to close."""
