"""An episode log capped on disk, for logs that anyone on the internet can make grow.

The Space logs every visitor's episode (``A01_HUMAN_LOG``) and a server may log every ``/ws``
episode (``A01_EPISODE_LOG``); on a public server both are written by anonymous clients, as fast as
they care to play. :class:`CappedEpisodeLog` writes the same records through
:class:`~envcore.env.episode_log.EpisodeLogger` (same format, same durability) and keeps the file under
a cap by moving it aside when full: recent episodes are kept, the disk is never filled. Readers
(the page, failure analysis) find only the current file: ``<name>.1`` is not an episode log's name.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from envcore.env.episode_log import EpisodeLogger, EpisodeRecord


class CappedEpisodeLog:
    """An episode log that stays under ``max_bytes`` on disk.

    It writes through :class:`~envcore.env.episode_log.EpisodeLogger` (same format, same durability).
    Before a record would take the file past ``max_bytes``, the file is moved aside to ``<name>.1``
    (replacing the previous one) and a new file begun: the log and its one predecessor hold at most
    ``2 * max_bytes``, or one record more when a single record is larger than the cap (records are
    bounded by the episode log's own per-record cap). ``<name>.1`` is not an episode log's name, so
    the page shows only the current file. One process writes it (the Space's); a lock orders writers.
    """

    def __init__(self, path: str | Path, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.rotations = 0
        self._lock = threading.Lock()
        self._log = EpisodeLogger(self.path)

    @property
    def previous(self) -> Path:
        return self.path.with_name(self.path.name + ".1")

    def write(self, record: EpisodeRecord) -> None:
        size = len(record.model_dump_json().encode()) + 1
        with self._lock:
            try:
                current = self.path.stat().st_size
            except OSError:
                current = 0
            if current and current + size > self.max_bytes:
                self._log.close()
                os.replace(self.path, self.previous)
                self._log = EpisodeLogger(self.path)
                self.rotations += 1
            self._log.write(record)

    def close(self) -> None:
        with self._lock:
            self._log.close()
