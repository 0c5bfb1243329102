"""Putting a folder back as it was: how a run gives every probe the app's files exactly as loaded.

A probe may write the app's files (a data file, a SQLite database). When the next probe runs in the
same folder (the in-process runner's forks, a sandbox template's workers), the parent first takes a
:class:`FolderSnapshot` of the folder as it was after the app loaded, and restores it after each
probe: what is new is removed, what is gone is recreated, what changed is rewritten. A file is
judged unchanged by its inode, size and modification time, which a write always changes (and which a
sandboxed app cannot set back: ``utime`` is refused to it).
"""

from __future__ import annotations

import os
import shutil


class FolderSnapshot:
    """A folder's files and sub-folders as the parent last saw them, to put the folder back."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.folders: set[str] = set()
        self.files: dict[str, tuple[bytes, tuple[int, int, int]]] = {}
        for folder, names, files in os.walk(root):
            rel = os.path.relpath(folder, root)
            if rel != ".":
                self.folders.add(rel)
            for name in files:
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    data = handle.read()
                self.files[os.path.relpath(path, root)] = (data, _signature(path))

    def restore(self) -> None:
        """Make the folder what it was: remove what is new, recreate what is gone, rewrite what changed."""
        for folder, names, files in os.walk(self.root, topdown=True):
            rel_folder = os.path.relpath(folder, self.root)
            for name in list(names):
                rel = os.path.normpath(os.path.join(rel_folder, name))
                if rel not in self.folders:
                    shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
                    names.remove(name)
            for name in files:
                rel = os.path.normpath(os.path.join(rel_folder, name))
                if rel not in self.files:
                    os.unlink(os.path.join(folder, name))
        for rel in sorted(self.folders):
            os.makedirs(os.path.join(self.root, rel), exist_ok=True)
        for rel, (data, signature) in self.files.items():
            path = os.path.join(self.root, rel)
            try:
                if _signature(path) == signature:
                    continue
            except FileNotFoundError:
                pass
            with open(path, "wb") as handle:  # same inode when it still exists
                handle.write(data)
            self.files[rel] = (data, _signature(path))


def _signature(path: str) -> tuple[int, int, int]:
    """What changes when a file is written, replaced or removed (a worker cannot set times back)."""
    info = os.stat(path)
    return info.st_ino, info.st_size, info.st_mtime_ns
