"""The versioned scenario cache: a folder of verified bundles named by content hash, plus a manifest.

Layout of one cache version (``artifacts/scenarios/v2/`` ships with the project)::

    manifest.json             format and generator versions, counts by split / bug class / tier /
                              domain / code style, lineage, and one row per scenario (id, sha256,
                              split, tier, ...)
    bundles/<id>.json.gz      one bundle; <id> is the first 16 hex digits of its SHA-256
    rejects.jsonl             drafts the check refused, with the reason (when built here)

Loading verifies every bundle it hands out: the gzip must decode, the JSON must validate as a
:class:`Bundle`, and its recomputed content hash must equal both the file name and the manifest row.
A corrupt or tampered entry raises :class:`CorruptEntryError` naming it; iteration skips it and
records the problem in :attr:`ScenarioCache.problems`, so a bad entry is never silently used.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from pydantic import ValidationError

from envcore.scenario.bundle import ID_LENGTH, Bundle
from envcore.version import CACHE_FORMAT_VERSION

MANIFEST = "manifest.json"
BUNDLES = "bundles"
REJECTS = "rejects.jsonl"
DEFAULT_ROOT = Path(__file__).resolve().parent.parent / "artifacts" / "scenarios"


class CacheError(Exception):
    """The cache folder itself is unusable (missing or unreadable manifest, wrong format)."""


class CorruptEntryError(CacheError):
    """One entry failed verification; ``scenario_id`` names it."""

    def __init__(self, scenario_id: str, reason: str) -> None:
        super().__init__(f"scenario {scenario_id}: {reason}")
        self.scenario_id = scenario_id
        self.reason = reason


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; caches are read by other users (the Space runs as one)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _bytes_match(raw: bytes, scenario_id: str, digest: Any) -> bool:
    """Whether ``raw`` are the very bytes :class:`CacheEntry` wrote for a bundle whose content hash
    is ``digest``: its canonical JSON, which is the hashed JSON with the id as one more key. Checked
    on the bytes, without dumping the parsed bundle again (two thirds of a load); bytes written any
    other way are checked on the parsed bundle instead."""
    marker = f'"scenario_id":"{scenario_id}"'.encode()
    if not isinstance(digest, str) or raw.count(marker) != 1:
        return False
    for form in (b"," + marker, marker + b","):
        if raw.count(form) == 1:
            return hashlib.sha256(raw.replace(form, b"", 1)).hexdigest() == digest
    return False


@dataclass(frozen=True)
class CacheEntry:
    """A bundle ready to be written: its manifest row and its file bytes. Build workers send these
    (not bundles) to the process that writes the cache, so nothing is serialised twice."""

    row: dict[str, Any]
    data: bytes

    @classmethod
    def of(cls, bundle: Bundle, split: str) -> "CacheEntry":
        """Serialise once: the canonical JSON gives the hash, the same dump gives the file bytes
        (deterministic gzip, mtime fixed: the same bundle always gives the same bytes)."""
        data = bundle.model_dump(mode="json")
        data.pop("scenario_id")
        digest = hashlib.sha256(_canonical(data).encode("utf-8")).hexdigest()
        if bundle.scenario_id and bundle.scenario_id != digest[:ID_LENGTH]:
            raise ValueError(f"bundle {bundle.scenario_id} does not match its content hash")
        data["scenario_id"] = digest[:ID_LENGTH]
        row = {**bundle.summary(), "scenario_id": data["scenario_id"], "sha256": digest, "split": split}
        return cls(row=row, data=gzip.compress(_canonical(data).encode("utf-8"), compresslevel=6, mtime=0))

    @property
    def scenario_id(self) -> str:
        return self.row["scenario_id"]

    @property
    def split(self) -> str:
        return self.row["split"]

    def bundle(self) -> Bundle:
        return Bundle.model_validate_json(gzip.decompress(self.data))


def counts(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    rows = list(rows)
    out = {}
    for key in ("split", "bug_class", "tier", "domain", "code_style", "variant"):
        out[key] = dict(sorted(Counter(str(r[key]) for r in rows).items()))
    out["total"] = {"scenarios": len(rows)}
    return out


def _write_entries(root: Path, entries: Iterable[CacheEntry | tuple[Bundle, str]]) -> dict[str, dict]:
    """Write each entry's bundle file; return their manifest rows by id (a duplicate is written once)."""
    rows: dict[str, dict] = {}
    for item in entries:
        entry = item if isinstance(item, CacheEntry) else CacheEntry.of(*item)
        if entry.scenario_id not in rows:
            _atomic_write(root / BUNDLES / f"{entry.scenario_id}.json.gz", entry.data)
            rows[entry.scenario_id] = entry.row
    return rows


def _write_manifest(root: Path, rows: dict[str, dict], *, generator: str, config: dict, lineage: dict) -> dict:
    ordered = sorted(rows.values(), key=lambda r: r["scenario_id"])
    manifest = {
        "cache_format": CACHE_FORMAT_VERSION,
        "generator": generator,
        "version": root.name,
        "lineage": lineage,
        "config": config,
        "counts": counts(ordered),
        "scenarios": ordered,
    }
    _atomic_write(root / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return manifest


def write_cache(
    root: Path,
    entries: Iterable[CacheEntry | tuple[Bundle, str]],
    *,
    generator: str,
    config: dict[str, Any] | None = None,
    lineage: dict[str, Any] | None = None,
    rejects: Iterable[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Write bundles and the manifest into ``root`` (created if needed); return the manifest.

    ``entries`` are :class:`CacheEntry` values or ``(bundle, split)`` pairs; duplicates (same content
    hash) are written once."""
    root = Path(root)
    rows = _write_entries(root, entries)
    reject_rows = list(rejects)
    if reject_rows:
        _atomic_write(root / REJECTS, "".join(json.dumps(r, sort_keys=True) + "\n" for r in reject_rows).encode())
    return _write_manifest(root, rows, generator=generator, config=config or {}, lineage=lineage or {"parent": None})


def add_to_cache(root: Path, entries: Iterable[CacheEntry | tuple[Bundle, str]], *, generator: str) -> dict[str, Any]:
    """Add entries to the cache at ``root`` (created if missing, with ``generator``) without rewriting
    what is there: new bundle files are written, the manifest gains their rows and fresh counts, and
    its generator, config and lineage stay as they were."""
    root = Path(root)
    manifest: dict[str, Any] = ScenarioCache.open(root).manifest if (root / MANIFEST).exists() else {}
    rows = {r["scenario_id"]: r for r in manifest.get("scenarios", [])}
    rows.update(_write_entries(root, entries))  # a re-imported scenario takes its new row
    return _write_manifest(
        root,
        rows,
        generator=manifest.get("generator", generator),
        config=manifest.get("config", {}),
        lineage=manifest.get("lineage", {"parent": None}),
    )


def latest_version(base: Path = DEFAULT_ROOT) -> Path:
    """The newest ``vN`` folder under ``base`` (the default cache the runtime serves)."""
    versions = []
    for child in Path(base).glob("v*"):
        match = re.fullmatch(r"v(\d+)", child.name)
        if match and (child / MANIFEST).exists():
            versions.append((int(match.group(1)), child))
    if not versions:
        raise CacheError(f"no cache version (vN/{MANIFEST}) under {base}")
    return max(versions)[1]


@dataclass
class ScenarioCache:
    """Read access to one cache version, verifying every entry it returns."""

    root: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, root: str | Path | None = None) -> "ScenarioCache":
        root = Path(root) if root is not None else latest_version()
        path = root / MANIFEST
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise CacheError(f"{root} is not a scenario cache (no {MANIFEST})") from None
        except (OSError, ValueError) as exc:
            raise CacheError(f"cannot read {path}: {exc}") from None
        if manifest.get("cache_format") != CACHE_FORMAT_VERSION:
            raise CacheError(
                f"{path}: cache format {manifest.get('cache_format')!r}, this code reads {CACHE_FORMAT_VERSION}"
            )
        return cls(root=root, manifest=manifest)

    @property
    def rows(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("scenarios", []))

    def ids(self, **filters: Any) -> list[str]:
        """Scenario ids whose manifest row matches every ``key=value`` filter (``None`` = any)."""
        out = []
        for row in self.rows:
            if all(v is None or str(row.get(k)) == str(v) for k, v in filters.items()):
                out.append(row["scenario_id"])
        return out

    def _index(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """(row by scenario id, splits present), worked out once per manifest (a reset asks for both)."""
        scenarios = self.manifest.get("scenarios", [])
        cached = self.__dict__.get("_indexed")
        if cached is None or cached[0] is not scenarios or cached[1] != len(scenarios):
            by_id = {row["scenario_id"]: row for row in scenarios}
            present = {str(row.get("split")) for row in scenarios if row.get("split")}
            usual = [name for name in ("train", "val", "test") if name in present]
            cached = (scenarios, len(scenarios), by_id, usual + sorted(present - set(usual)))
            self.__dict__["_indexed"] = cached
        return cached[2], cached[3]

    def row(self, scenario_id: str) -> dict[str, Any]:
        row = self._index()[0].get(scenario_id)
        if row is None:
            raise KeyError(f"no scenario {scenario_id!r} in {self.root}")
        return row

    def resolve(self, prefix: str) -> str:
        """The unique scenario id starting with ``prefix`` (like git's short hashes)."""
        matches = [r["scenario_id"] for r in self.rows if r["scenario_id"].startswith(prefix)]
        if len(matches) != 1:
            raise KeyError(f"{prefix!r} matches {len(matches)} scenarios in {self.root}")
        return matches[0]

    def load(self, scenario_id: str) -> Bundle:
        """The verified bundle, or :class:`CorruptEntryError` saying what is wrong with it."""
        row = self.row(scenario_id)
        path = self.root / BUNDLES / f"{scenario_id}.json.gz"
        try:
            raw = gzip.decompress(path.read_bytes())
            bundle = Bundle.model_validate_json(raw)
        except FileNotFoundError:
            raise CorruptEntryError(scenario_id, f"bundle file {path.name} is missing") from None
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise CorruptEntryError(scenario_id, f"bundle file is not valid gzip ({exc})") from None
        except (ValidationError, ValueError) as exc:
            raise CorruptEntryError(scenario_id, f"bundle does not validate: {str(exc).splitlines()[0]}") from None
        if bundle.scenario_id != scenario_id or str(row.get("sha256", ""))[:ID_LENGTH] != scenario_id or not (
                _bytes_match(raw, scenario_id, row.get("sha256")) or bundle.content_hash() == row.get("sha256")):
            raise CorruptEntryError(scenario_id, "content hash mismatch: the bundle was modified after it was cached")
        return bundle

    def __iter__(self) -> Iterator[Bundle]:
        for scenario_id in self.ids():
            try:
                yield self.load(scenario_id)
            except CorruptEntryError as exc:
                self.problems.append(str(exc))

    def __len__(self) -> int:
        return len(self.rows)

    def split_of(self, scenario_id: str) -> str:
        return self.row(scenario_id)["split"]

    def splits(self) -> list[str]:
        """The splits this cache holds, in a reader's order: ``train``, ``val``, ``test`` first (those it
        has), then the others (``test_styles``, ``external`` ...) by name."""
        return list(self._index()[1])
