"""Putting a folder back as it was: how a run gives every probe the app's files exactly as loaded.

A probe may write the app's files (a data file, a SQLite database). When the next probe runs in the
same folder (the in-process runner's forks, a sandbox template's workers), the parent first takes a
:class:`FolderSnapshot` of the folder as it was after the app loaded, and restores it after each
probe: what is new is removed, what is gone is recreated, every file whose bytes or allocated blocks
differ from the snapshot's is rewritten, and **every** file and folder is given back its access and
modification times. Putting back only what changed would leave a trace: the times (and the change
time) of a file the probe wrote would differ from those of one it did not, one bit per file for the
next probe to read. Setting the times of every file moves every change time alike (setting a time is
a change), and the other times are set back exactly, so what the next probe sees does not depend on
what the last one did. A file is left unwritten only when it holds exactly the snapshot's bytes in
as many blocks as then: a probe that wrote the same bytes back, or made them sparse, or allocated
blocks past the end, has its file rewritten. Comparing costs a read where rewriting cost a write, a
third of the time on a folder of a dozen files, which matters since the app's code is in the folder too.
"""

from __future__ import annotations

import os
import shutil
import stat


class FolderSnapshot:
    """A folder's files and sub-folders as the parent last saw them, to put the folder back."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.folders: set[str] = set()
        self.files: dict[str, bytes] = {}
        self.times: dict[str, tuple[int, int]] = {}
        """(access, modification) times in nanoseconds of every file and folder (``.``: the root)."""
        self.blocks: dict[str, int] = {}
        """The blocks each file had allocated (``st_blocks``)."""
        for folder, names, files in os.walk(root):
            rel = os.path.relpath(folder, root)
            if rel != ".":
                self.folders.add(rel)
            for name in files:
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    data = handle.read()
                    blocks = os.fstat(handle.fileno()).st_blocks
                self.files[os.path.relpath(path, root)] = data
                self.blocks[os.path.relpath(path, root)] = blocks
        for rel in (*self.files, *self.folders, "."):
            self.times[rel] = _times(os.path.join(root, rel))

    def restore(self) -> None:
        """Make the folder what it was: remove what is new, recreate what is gone, rewrite every file that
        is not exactly as it was, and set every file's and folder's times back."""
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
        for rel, data in self.files.items():
            path = os.path.join(self.root, rel)
            if not self._intact(path, data, self.blocks[rel]):
                if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
                    os.unlink(path)  # a link or a pipe where the file was: never written through
                with open(path, "wb") as handle:  # same inode when it still exists
                    handle.write(data)
        # times last, deepest first: writing a file or a folder's entries moves its times
        for rel in sorted(self.times, key=lambda r: (r == ".", -r.count(os.sep), r)):
            os.utime(os.path.join(self.root, rel), ns=self.times[rel])


    @staticmethod
    def _intact(path: str, data: bytes, blocks: int) -> bool:
        """Whether ``path`` is a regular file holding exactly ``data`` in ``blocks`` blocks (never
        following a link, never waiting on a pipe: anything else is rewritten)."""
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return False
        with open(descriptor, "rb") as handle:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode) or info.st_size != len(data) or info.st_blocks != blocks:
                return False
            try:
                return handle.read(len(data) + 1) == data
            except OSError:
                return False


def _times(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_atime_ns, info.st_mtime_ns
