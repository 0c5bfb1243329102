"""Which file trees an app folder can hold: the limits, and why a path or a file set can never be written.

An app is a ``{relative path: text}`` mapping until something writes it to disk: the sandbox writes
it into a worker's folder, the runner into its workspace, an export into a scenario folder. Some
mappings can never be written there, whoever writes them: a path the filesystem refuses (a name over
255 bytes, a control character, text that is not Unicode), a path that climbs out of the folder, a
path that is both a file and a folder (``data/seed.json`` and ``data/seed.json/x.py``), or more
than a worker can be sent. Whoever produced such a mapping (an agent's patch, an imported app) is
at fault, so the question is answered here, once, before anything is written:
:func:`path_problem` for one path and :func:`tree_problem` for a whole file set. Each returns
``None`` or a sentence that names the path and says what to do instead; the episode refuses a
patch with that sentence as an invalid action, and the grader can ask the same question.

The limits sit well above what apps use (the shipped scenarios have at most 16 files, 20 KB in all,
paths of 37 bytes, 3 levels deep; an imported app may have 200 files of 500 KB) and well below what
breaks: Linux's 255-byte name limit, and the 64 MiB frame in which a worker receives an app. That
frame holds the files as JSON, where one byte of text takes at most six (a control character
becomes ``\\u001f``): :data:`MAX_TOTAL_BYTES` x 6 leaves room for the data files and the rest of the
message.

This module is pure: it reads nothing and writes nothing.
"""

from __future__ import annotations

import unicodedata
from typing import Mapping

MAX_COMPONENT_BYTES = 255
"""One file or folder name, in UTF-8 bytes (``NAME_MAX`` of Linux filesystems)."""
MAX_PATH_BYTES = 512
"""A whole relative path, in UTF-8 bytes (far under ``PATH_MAX``, 4,096, with the sandbox's folder in front)."""
MAX_DEPTH = 16
"""Names in one path (``app/routers/admin.py`` has 3)."""
MAX_FILES = 256
"""Files in one app."""
MAX_FILE_BYTES = 1024 * 1024
"""One file's text, in UTF-8 bytes."""
MAX_TOTAL_BYTES = 8 * 1024 * 1024
"""All of an app's files together, in UTF-8 bytes (see the module docstring for why 8 MiB)."""
RESERVED_NAMES = frozenset({"__pycache__"})
"""Names no file or folder of an app may have: Python writes its bytecode caches there, and readers
of an app folder skip them, so a file there would vanish between writing and grading."""

_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
"""Control characters (NUL, newline, tab, DEL, U+0085 ...), lone surrogates and the Unicode line and
paragraph separators: a path holding one cannot be written, or cannot be shown on one line."""


def _shown(path: str, limit: int = 80) -> str:
    """``path`` as a message quotes it: ``repr`` (so control characters are visible), cut at ``limit``."""
    text = repr(path)
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def _utf8_size(text: str) -> int | None:
    """``text``'s size in UTF-8 bytes, or ``None`` if it is not encodable (a lone surrogate)."""
    if text.isascii():  # O(1) in CPython: no copy for the common case
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


def path_problem(path: str) -> str | None:
    """Why ``path`` can never be written as a file under an app folder, or ``None`` if it can.

    A path is relative, uses ``/`` between names, and each name is a real name: not empty (``a//b``,
    a trailing ``/``), not ``.`` or ``..``, not reserved (:data:`RESERVED_NAMES`), at most
    :data:`MAX_COMPONENT_BYTES` bytes, with no control character; the whole path is valid Unicode,
    at most :data:`MAX_PATH_BYTES` bytes and :data:`MAX_DEPTH` names deep."""
    if not isinstance(path, str):
        return f"a file path must be text, not {type(path).__name__}"
    if not path:
        return "a file path is empty; name a file relative to the app folder, e.g. 'app/main.py'"
    shown = _shown(path)
    size = _utf8_size(path)
    if size is None:
        return f"the file path {shown} is not valid Unicode (it holds a lone surrogate); use a real character"
    for char in path:
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            return (f"the file path {shown} contains the control or line-break character {char!r}; "
                    "file names cannot hold one")
    if "\\" in path:
        return f"the file path {shown} contains a backslash; separate folders with '/'"
    if path.startswith("/"):
        return f"the file path {shown} is absolute (it escapes the app folder); paths are relative, e.g. 'app/main.py'"
    if size > MAX_PATH_BYTES:
        return f"the file path {shown} is {size:,} bytes long; at most {MAX_PATH_BYTES:,} bytes"
    names = path.split("/")
    if len(names) > MAX_DEPTH:
        return f"the file path {shown} is {len(names)} names deep; at most {MAX_DEPTH}"
    for name in names:
        if name == "":
            return f"the file path {shown} has an empty name ('//' or a trailing '/'); name each folder once"
        if name in (".", ".."):
            tidy = "/".join(n for n in names if n not in ("", "."))
            hint = ("it escapes the app folder" if name == ".."
                    else f"write it as {_shown(tidy)}" if tidy else "name a file")
            return f"the file path {shown} has a {name!r} component; {hint}"
        if name in RESERVED_NAMES:
            return f"the file path {shown} uses the reserved name {name!r} (Python's bytecode cache); choose another name"
        name_size = _utf8_size(name)
        if name_size is not None and name_size > MAX_COMPONENT_BYTES:
            return (f"the file path {shown} has a name of {name_size:,} bytes ({_shown(name, 40)}); "
                    f"file and folder names are at most {MAX_COMPONENT_BYTES} bytes")
    return None


def tree_problem(files: Mapping[str, str]) -> str | None:
    """Why the file set ``files`` (``{relative path: text}``) can never be written as one app folder,
    or ``None`` if it can: any :func:`path_problem`, a path that is both a file and a folder of
    another path, text that is not valid Unicode, more than :data:`MAX_FILES` files, a file over
    :data:`MAX_FILE_BYTES` or all of them over :data:`MAX_TOTAL_BYTES`."""
    if len(files) > MAX_FILES:
        return f"the app would have {len(files):,} files; at most {MAX_FILES}"
    for path in files:
        problem = path_problem(path)
        if problem is not None:
            return problem
    folders: dict[str, str] = {}
    """Every folder the paths need, with one path inside it (for the message)."""
    for path in files:
        cut = path.rfind("/")
        while cut > 0:
            folder = path[:cut]
            if folder in folders:
                break  # its parents were recorded with it
            folders[folder] = path
            cut = path.rfind("/", 0, cut)
    for path in files:
        if path in folders:
            return (f"{_shown(path)} is a file, so it cannot also be a folder holding {_shown(folders[path])}; "
                    "rename one of them")
    total = 0
    for path, text in files.items():
        if not isinstance(text, str):
            return f"the content of {_shown(path)} must be text, not {type(text).__name__}"
        size = _utf8_size(text)
        if size is None:
            return (f"the content of {_shown(path)} is not valid Unicode (it holds a lone surrogate, e.g. from a "
                    "'\\ud800' escape); write the character itself")
        if size > MAX_FILE_BYTES:
            return f"{_shown(path)} would be {size:,} bytes; a file is at most {MAX_FILE_BYTES:,} bytes"
        total += size
    if total > MAX_TOTAL_BYTES:
        return f"the app's files would be {total:,} bytes in all; at most {MAX_TOTAL_BYTES:,} bytes"
    return None
