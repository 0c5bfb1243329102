"""SQLite database files shipped with an app, carried as text.

Every file of a scenario is UTF-8 text (agents read and patch text; bundles are hashed and diffed
as text), but a real app often ships its database: ``app.db`` beside ``main.py``. The import turns
such a file into its SQL dump headed by :data:`MARKER` and keeps it under the same path; before the
app loads, :func:`build_databases` turns every file that starts with the marker back into a SQLite
database at that path. So the agent reads the data as SQL, grading's shadow identities replace
values in it like in any data file, and the app opens ``app.db`` as it always did.

The statements are a scenario's data, perhaps edited by an agent, so they are run where the app's
own code would be: in a sandboxed worker before it loads the app (contained, writing only inside its
folder), in a template loading the original app, or in process for trusted apps; and with an
authorizer that refuses attaching other database files and loading extensions.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Mapping

MARKER = "-- SQLite database, kept as SQL text: it is rebuilt into a database file before the app loads.\n"
"""The first line of a database carried as text."""
SQLITE_HEADER = b"SQLite format 3\x00"


class DatabaseBuildError(ValueError):
    """The SQL text of a database does not build (the app's data is broken: a load error)."""


def is_sqlite_file(data: bytes) -> bool:
    return data.startswith(SQLITE_HEADER)


def dump_text(data: bytes) -> str:
    """The SQL text form of a SQLite database file's bytes (:data:`MARKER` first)."""
    with tempfile.TemporaryDirectory(prefix="a01-db-") as folder:
        path = os.path.join(folder, "dump.db")
        with open(path, "wb") as handle:
            handle.write(data)
        connection = sqlite3.connect(path)
        try:
            lines = list(connection.iterdump())
        finally:
            connection.close()
    return MARKER + "\n".join(lines) + "\n"


def _deny_attach(action: int, *_args: object) -> int:
    return sqlite3.SQLITE_DENY if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH) else sqlite3.SQLITE_OK


def build_databases(root: str | os.PathLike[str], files: Mapping[str, str]) -> list[str]:
    """Turn every file of ``files`` that is a database kept as text into a SQLite database at its
    path under ``root`` (replacing the text there); the paths built. :class:`DatabaseBuildError`
    naming the file when its SQL does not run."""
    built = []
    for rel, text in files.items():
        if not text.startswith(MARKER):
            continue
        path = os.path.join(root, rel)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        connection = sqlite3.connect(path)
        try:
            connection.set_authorizer(_deny_attach)
            connection.executescript(text[len(MARKER):])
            connection.commit()
        except sqlite3.Error as exc:
            raise DatabaseBuildError(f"{rel}: its SQL does not build a database ({exc})") from None
        finally:
            connection.close()
        built.append(rel)
    return built
