"""Bring your own app: the on-disk bundle format, and import/export between it and a Bundle.

A scenario folder looks like this (see ``docs/bundle-format.md``)::

    scenario.yaml      metadata: title, domain, bug class, CWE ids, entrypoint, task, policy, users,
                       vulnerable sites, traps, optional tier
    probes.yaml        the declarative probes (same schema as in a bundle)
    app/               the vulnerable app, exactly as an agent will first see it
    fix.diff           optional: the reference fix, a unified diff against app/

:func:`load_bundle_dir` reads such a folder into a :class:`Bundle` and reports every problem with the
file it is in; ``python -m envcore factory import`` then runs the same scenario check as generated
scenarios go through. :func:`export_bundle_dir` writes any bundle out in this format, so a generated
scenario can be edited by hand and imported back.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envcore.filetree import tree_problem
from envcore.factory.compiler import difficulty_score, tier_of
from envcore.patching import PatchError, apply_patch, changed_lines
from envcore.scenario.bundle import Bundle, BundleMetrics, BundleUser
from envcore.scenario.probes import Probe
from envcore.scenario.spec import SiteRef, Trap

METADATA = "scenario.yaml"
PROBES = "probes.yaml"
APP_DIR = "app"
FIX = "fix.diff"
MAX_FILE_BYTES = 512_000
MAX_FILES = 200
"""Within the limits every app folder has (``envcore.filetree``), which the import also applies."""


class ImportProblem(ValueError):
    """The folder is not a valid scenario; the message lists every problem found, file by file."""


class ScenarioMetadata(BaseModel):
    """``scenario.yaml``."""

    model_config = ConfigDict(extra="forbid")

    title: str
    domain: str
    bug_class: str
    cwe: list[str] = Field(min_length=1)
    variant: str = "custom"
    code_style: str = "custom"
    entrypoint: str
    """``module:attribute`` relative to ``app/``, e.g. ``main:app``."""
    task: str
    policy: str
    users: list[BundleUser] = Field(min_length=1)
    sites: list[SiteRef] = Field(min_length=1)
    traps: list[Trap] = Field(default_factory=list)
    tier: int | None = Field(default=None, ge=1, le=3)


def _read_yaml(path: Path, problems: list[str]) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path.name}: missing")
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        problems.append(f"{path.name}: not valid YAML ({str(exc).splitlines()[0]})")
    return None


def _validation_lines(name: str, exc: ValidationError) -> list[str]:
    return [f"{name}: {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]


def _read_app(app_dir: Path, problems: list[str]) -> dict[str, str]:
    files: dict[str, str] = {}
    if not app_dir.is_dir():
        problems.append(f"{APP_DIR}/: missing (the app's source folder)")
        return files
    for path in sorted(app_dir.rglob("*")):
        if path.is_symlink():
            problems.append(f"{APP_DIR}/{path.relative_to(app_dir)}: symbolic links are not allowed")
            continue
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(app_dir).as_posix()
        if path.stat().st_size > MAX_FILE_BYTES:
            problems.append(f"{APP_DIR}/{rel}: larger than {MAX_FILE_BYTES} bytes")
            continue
        try:
            files[rel] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            problems.append(f"{APP_DIR}/{rel}: not UTF-8 text (binary files are not supported)")
    if len(files) > MAX_FILES:
        problems.append(f"{APP_DIR}/: more than {MAX_FILES} files")
    elif (problem := tree_problem(files)) is not None:  # what an agent's patch of it could never be
        problems.append(f"{APP_DIR}/: {problem}")
    if not any(rel.endswith(".py") for rel in files):
        problems.append(f"{APP_DIR}/: no Python files")
    return files


def _count_routes(files: dict[str, str]) -> int:
    pattern = re.compile(r"^\s*@\w+\.(get|post|put|patch|delete|api_route|head|options)\(", re.M)
    return sum(len(pattern.findall(text)) for rel, text in files.items() if rel.endswith(".py"))


def load_bundle_dir(folder: str | Path, *, require_fix: bool = True) -> Bundle:
    """Read a scenario folder into a bundle; raise :class:`ImportProblem` listing every problem."""
    folder = Path(folder)
    problems: list[str] = []
    if not folder.is_dir():
        raise ImportProblem(f"{folder}: not a folder")
    raw_meta = _read_yaml(folder / METADATA, problems)
    raw_probes = _read_yaml(folder / PROBES, problems)
    files = _read_app(folder / APP_DIR, problems)
    meta: ScenarioMetadata | None = None
    if raw_meta is None and (folder / METADATA).is_file() and not any(p.startswith(METADATA) for p in problems):
        problems.append(f"{METADATA}: empty")
    if raw_probes is None and (folder / PROBES).is_file() and not any(p.startswith(PROBES) for p in problems):
        problems.append(f"{PROBES}: empty (expected a list of probes)")
    if raw_meta is not None:
        try:
            meta = ScenarioMetadata.model_validate(raw_meta)
        except ValidationError as exc:
            problems += _validation_lines(METADATA, exc)
    probes: list[Probe] = []
    if raw_probes is not None:
        if not isinstance(raw_probes, list):
            problems.append(f"{PROBES}: expected a list of probes")
        else:
            for i, item in enumerate(raw_probes):
                try:
                    probes.append(Probe.model_validate(item))
                except ValidationError as exc:
                    problems += _validation_lines(f"{PROBES}[{i}]", exc)
    fix = ""
    fix_path = folder / FIX
    if fix_path.is_file():
        try:
            fix = fix_path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            problems.append(f"{FIX}: not UTF-8 text")
        if fix and files:
            try:
                apply_patch(files, fix)
            except PatchError as exc:
                problems.append(f"{FIX}: {exc}")
    elif fix_path.exists():
        problems.append(f"{FIX}: not a regular file")
    elif require_fix:
        problems.append(f"{FIX}: missing (the reference fix proves the scenario can be fixed)")
    if problems or meta is None:
        raise ImportProblem("\n".join(problems) or "unknown problem")
    fix_files, fix_lines = changed_lines(fix) if fix.strip() else (0, 0)
    metrics = {
        "files": sum(1 for p in files if p.endswith(".py")),
        "source_lines": sum(t.count("\n") for p, t in files.items() if p.endswith(".py")),
        "routes": _count_routes(files),
        "sites": len(meta.sites),
        "traps": len(meta.traps),
        "fix_lines": fix_lines,
        "fix_files": fix_files,
        "subtle_variant": False,
        "decoy_routes": 0,
    }
    score = difficulty_score(metrics, package=metrics["files"] > 1, helper_fix=False)
    bundle = Bundle(
        generator="import",
        title=meta.title,
        domain=meta.domain,
        bug_class=meta.bug_class,
        cwe=tuple(meta.cwe),
        variant=meta.variant,
        code_style=meta.code_style,
        tier=meta.tier or tier_of(score),
        entrypoint=meta.entrypoint,
        files=dict(sorted(files.items())),
        users=tuple(meta.users),
        task=meta.task,
        policy_text=meta.policy,
        probes=tuple(probes),
        reference_fix=fix,
        sites=tuple(meta.sites),
        traps=tuple(meta.traps),
        metrics=BundleMetrics(**metrics, score=score),
    )
    return bundle.with_id()


def _prune(value: Any) -> Any:
    """Drop empty values (None, {}, []) so exported probes read like hand-written ones."""
    if isinstance(value, dict):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def export_bundle_dir(bundle: Bundle, folder: str | Path) -> Path:
    """Write ``bundle`` as a scenario folder (the inverse of :func:`load_bundle_dir`)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} exists and is not empty")
    meta = {
        "title": bundle.title,
        "domain": bundle.domain,
        "bug_class": bundle.bug_class,
        "cwe": list(bundle.cwe),
        "variant": bundle.variant,
        "code_style": bundle.code_style,
        "entrypoint": bundle.entrypoint,
        "task": bundle.task,
        "policy": bundle.policy_text,
        "users": [u.model_dump() for u in bundle.users],
        "sites": [s.model_dump() for s in bundle.sites],
        "traps": [t.model_dump() for t in bundle.traps],
        "tier": bundle.tier,
    }
    for rel, text in bundle.files.items():
        target = folder / APP_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    (folder / METADATA).write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100))
    probes = [_prune(p.model_dump(mode="json")) for p in bundle.probes]
    (folder / PROBES).write_text(yaml.safe_dump(probes, sort_keys=False, allow_unicode=True, width=100))
    if bundle.reference_fix:
        (folder / FIX).write_text(bundle.reference_fix, encoding="utf-8")
    return folder
