"""Where the server writes: one data folder, so the app folder and the root file system can be read-only.

The only things a running server writes are its logs (the human play log, the optional episode log),
the sandbox's workers' folders (:func:`envcore.sandbox.posture.workspace_parent`: ``A01_SANDBOX_DIR``,
``/dev/shm`` or the temporary folder) and Gradio's upload cache (``GRADIO_TEMP_DIR``, the temporary
folder). The logs go under :func:`data_dir`:

1. ``A01_DATA_DIR`` when set (created if missing; an unusable one stops the server at start);
2. ``/data/a01-repair-gym`` when ``/data`` is a writable folder: a Hugging Face Space's persistent
   storage, kept across restarts;
3. ``artifacts/`` of the checkout when it is writable (a developer's machine: ``artifacts/human/``
   as always, where the dashboard's shipped sets live too);
4. otherwise a folder in the temporary folder (a read-only app folder in a container with a tmpfs
   ``/tmp``): it works, and the start-up log says that it is lost when the container stops.

Each log keeps its own override (``A01_HUMAN_LOG``, ``A01_EPISODE_LOG``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envcore.settings import SettingError

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
SPACE_STORAGE = Path("/data")


@dataclass(frozen=True)
class DataDir:
    path: Path
    source: str
    """``A01_DATA_DIR``, ``persistent storage``, ``the checkout`` or ``temporary``."""

    @property
    def persistent(self) -> bool:
        return self.source != "temporary"

    def describe(self) -> str:
        if self.source == "temporary":
            return (f"data folder {self.path} (temporary: lost when the server's machine or container stops; "
                    f"set A01_DATA_DIR or mount a volume at {SPACE_STORAGE} to keep it)")
        return f"data folder {self.path} ({self.source})"


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def data_dir(environ: dict[str, str] | None = None) -> DataDir:
    """The folder the server writes its logs to (see the module docstring), created if needed."""
    env = os.environ if environ is None else environ
    chosen = env.get("A01_DATA_DIR", "").strip()
    if chosen:
        path = Path(chosen)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SettingError(f"A01_DATA_DIR must be a folder the server can write, not {chosen!r} ({exc.strerror})") from None
        if not _writable(path):
            raise SettingError(f"A01_DATA_DIR must be a folder the server can write, not {chosen!r}")
        return DataDir(path, "A01_DATA_DIR")
    if _writable(SPACE_STORAGE):
        path = SPACE_STORAGE / "a01-repair-gym"
        try:
            path.mkdir(exist_ok=True)
            return DataDir(path, "persistent storage")
        except OSError:
            pass
    if _writable(ARTIFACTS):
        return DataDir(ARTIFACTS, "the checkout")
    path = Path(tempfile.gettempdir()) / "a01-repair-gym"
    path.mkdir(exist_ok=True)
    return DataDir(path, "temporary")


def human_log_path(environ: dict[str, str] | None = None) -> str:
    """The human play log: ``A01_HUMAN_LOG`` (empty: none), else ``human/episodes.jsonl`` in the data folder."""
    env = os.environ if environ is None else environ
    if "A01_HUMAN_LOG" in env:
        return env["A01_HUMAN_LOG"]
    return str(data_dir(environ).path / "human" / "episodes.jsonl")
