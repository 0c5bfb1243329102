"""Scenario bases: one copy of an upstream app, shared by every scenario ported from it.

Whoever ports several bugs from one project keeps the project's app once, in a folder of its own
(``scenarios/external/_upstream/dvra/app/``), and each scenario's ``scenario.yaml`` names it::

    base: ../_upstream/dvra                        # a folder holding app/, relative to this folder
    base: {folder: ../_upstream/dvra, remove: [static/README.txt]}   # and base files left out

The scenario's own ``app/``, optional with a base, then holds only what the scenario changes or
adds: the app is the base's, less what ``remove`` names, with the scenario's files laid over it (a
file at the same path replaces the base's). A base may itself be a scenario folder whose
``scenario.yaml`` names a base; a folder without a ``scenario.yaml`` ends the chain.

The base is resolved as the folder is read (:func:`compose_app`, called by
:func:`envcore.factory.byo.load_bundle_dir`), and the bundle holds every file, exactly as if the
folder had carried the whole app: the same content hash, and export writes a self-contained folder.
Nothing after the import (cache, grading, episodes) knows that a base existed.

Refused, each problem named by the file and the key that say it: a base that does not exist or has
no ``app/``, an absolute path, a base outside the folder that holds the scenario folder (``../..``,
or a symbolic link leading out), a chain that comes back to a folder already in it, a chain deeper
than :data:`MAX_DEPTH`, and a ``remove`` path the base does not hold. The boundary is the point: an
imported folder must not pull files from elsewhere on the importer's machine into a bundle that
agents read and caches ship. It is the folder of scenarios the imported one sits in, so a base sits
beside the scenarios that use it (``../_upstream/<project>``) or below one of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envcore.factory import yaml_positions

BASE_KEY = "base"
METADATA = "scenario.yaml"
"""As :data:`envcore.factory.byo.METADATA` (which imports this module, so it cannot be imported here)."""
APP_DIR = "app"
"""As :data:`envcore.factory.byo.APP_DIR`."""
MAX_DEPTH = 8
"""Bases above bases, at most: a port is an app and a change or two on it, not a long history."""

AppReader = Callable[[Path, list[str], str], "dict[str, str] | None"]
"""Reads one ``app/`` folder: its files by path (``None`` when it cannot be read at all), every
problem added to the list and named ``<label>/<path>``."""


class BaseRef(BaseModel):
    """``scenario.yaml``'s ``base`` in its long form; the short form is the folder alone."""

    model_config = ConfigDict(extra="forbid")

    folder: str = Field(min_length=1)
    """The base folder (it holds ``app/``), relative to the folder whose ``scenario.yaml`` names it."""
    remove: list[str] = Field(default_factory=list)
    """Paths under the base's ``app/`` this scenario does not have: files, or folders with all they hold."""


@dataclass(frozen=True)
class _Link:
    """One folder of a chain and what its ``scenario.yaml`` says about its base."""

    folder: Path
    """Resolved (no ``..``, no links)."""
    label: str
    """The folder as messages show it, relative to the imported scenario folder (``.`` for that one)."""
    ref: BaseRef | None
    """Its base, or ``None`` when it ends the chain."""


def split_base(raw_meta: Any) -> tuple[Any, Any]:
    """``scenario.yaml``'s data without ``base``, and ``base`` (``None`` when absent or null)."""
    if isinstance(raw_meta, dict) and BASE_KEY in raw_meta:
        return {k: v for k, v in raw_meta.items() if k != BASE_KEY}, raw_meta[BASE_KEY]
    return raw_meta, None


def compose_app(folder: Path, raw_meta: Any, problems: list[str], read: AppReader) -> tuple[Any, dict[str, str] | None]:
    """The metadata without ``base`` and the scenario's app files, its base's laid under its own.

    Without a base this is ``read(folder / "app")``. With one, the files of every folder of the chain
    are read with ``read`` (so each base file is held to the rules of any app file, named by its
    path from the scenario folder) and composed, the deepest base first. ``None`` for the files when
    the chain or an ``app/`` cannot be read; the reasons are in ``problems``.
    """
    meta, raw = split_base(raw_meta)
    if raw is None:
        return meta, read(folder / APP_DIR, problems, APP_DIR)
    chain = _chain(folder.resolve(), raw, problems)
    if chain is None:
        return meta, None
    files: dict[str, str] | None = {}
    for i, link in enumerate(reversed(chain)):
        app_dir = link.folder / APP_DIR
        label = _join(link.label, APP_DIR)
        own = read(app_dir, problems, label) if i == 0 or os.path.lexists(app_dir) else {}
        if own is None or files is None:
            files = None
            continue
        if link.ref is not None:
            files = _removed(files, link.ref.remove, _join(link.label, METADATA), problems)
        files.update(own)
    return meta, files


def _chain(start: Path, raw: Any, problems: list[str]) -> list[_Link] | None:
    """The scenario folder and its bases, nearest first, or ``None`` with the problem added."""
    root = start.parent
    links: list[_Link] = []
    folder, label = start, "."
    while True:
        where = _join(label, METADATA)
        ref = _ref(raw, where, problems) if raw is not None else None
        if raw is not None and ref is None:
            return None
        links.append(_Link(folder=folder, label=label, ref=ref))
        if ref is None:
            return links
        if len(links) > MAX_DEPTH:
            problems.append(f"{where}: {BASE_KEY}: more than {MAX_DEPTH} bases in a chain "
                            f"({' -> '.join(link.label for link in links)})")
            return None
        named = Path(ref.folder)
        if named.is_absolute():
            problems.append(f"{where}: {BASE_KEY}: {ref.folder!r} is an absolute path; name the base relative to "
                            f"the folder {where} is in (../_upstream/<project>, say)")
            return None
        target = (folder / named).resolve()
        if not target.is_relative_to(root):
            problems.append(f"{where}: {BASE_KEY}: {ref.folder!r} leads out of {root}, the folder that holds the "
                            "scenario: a base must lie in it (beside the scenario: ../_upstream/<project>)")
            return None
        target_label = Path(os.path.relpath(target, start)).as_posix()
        if not target.is_dir():
            problems.append(f"{where}: {BASE_KEY}: {ref.folder!r} is not a folder ({target_label} "
                            f"{'is a file' if target.exists() else 'does not exist'})")
            return None
        if any(link.folder == target for link in links):
            cycle = " -> ".join([*(link.label for link in links), target_label])
            problems.append(f"{where}: {BASE_KEY}: {ref.folder!r} is a folder already in the chain, which never "
                            f"ends: {cycle}")
            return None
        folder, label = target, target_label
        raw = _base_of(folder / METADATA, _join(label, METADATA), problems)
        if raw is _UNREADABLE:
            return None


_UNREADABLE = object()


def _base_of(path: Path, where: str, problems: list[str]) -> Any:
    """The ``base`` a base folder's own ``scenario.yaml`` names (``None``: none, or no such file)."""
    if not path.is_file():
        return None
    try:
        data, _ = yaml_positions.load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        problems.append(f"{where}: not valid YAML (not UTF-8 text: {exc.reason} at byte {exc.start})")
        return _UNREADABLE
    except yaml_positions.YamlSyntaxError as exc:
        problems.append(f"{where}: not valid YAML ({exc})")
        return _UNREADABLE
    return split_base(data)[1]


def _ref(raw: Any, where: str, problems: list[str]) -> BaseRef | None:
    if isinstance(raw, str):
        raw = {"folder": raw}
    if not isinstance(raw, dict):
        problems.append(f"{where}: {BASE_KEY}: expected a folder relative to this one (../_upstream/<project>) "
                        f"or a mapping with folder and remove, not {type(raw).__name__}")
        return None
    try:
        return BaseRef.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            loc = ".".join(str(part) for part in (BASE_KEY, *error["loc"]))
            problems.append(f"{where}: {loc}: {error['msg']}")
        return None


def _removed(files: dict[str, str], remove: list[str], where: str, problems: list[str]) -> dict[str, str]:
    """``files`` less each path of ``remove`` (a file, or a folder and everything below it); a path
    that names nothing is a problem (a typo, or a file the base no longer has)."""
    kept = dict(files)
    for path in remove:
        clean = path.strip("/")
        gone = [rel for rel in kept if rel == clean or rel.startswith(clean + "/")] if clean else []
        if not gone:
            problems.append(f"{where}: {BASE_KEY}: remove: {path!r} is not a file or folder of the base's app/")
        for rel in gone:
            del kept[rel]
    return kept


def _join(label: str, name: str) -> str:
    return name if label == "." else f"{label}/{name}"
