"""Cache refresh: a new cache version built from a factory job, with its lineage.

:func:`refresh` reads the parent cache and the job, then builds ``n`` new scenarios with the
factory. The config is the parent's own factory config with the job's changes merged over it, and
the seeds follow the parent's, so no scenario repeats. New scenarios come only from the
``train``-split domains (default ``splits=("train",)``), so the held-out validation and test
scenarios stay exactly the parent's and evaluations stay comparable across versions. The new
version holds every parent scenario, with its bundle bytes copied unchanged, plus the new ones.
Its manifest's ``lineage`` records:

- the parent version and its path;
- the job file, its config changes and its reason;
- the analysis the job came from;
- the seeds used and how many scenarios were added and rejected.

The parent is never modified, so old versions stay loadable. The output folder must not exist yet,
so a refresh never overwrites a version.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from envcore.cache import BUNDLES, CacheEntry, ScenarioCache, write_cache
from envcore.factory.config import FactoryConfig
from envcore.factory.jobs import FactoryJob
from envcore.version import GENERATOR_VERSION


class RefreshError(ValueError):
    """The refresh cannot run as asked; the message says why."""


def parent_config(cache: ScenarioCache) -> tuple[FactoryConfig, int]:
    """The factory config the parent was built with, and the first seed after the ones it used."""
    stored = dict(cache.manifest.get("config") or {})
    seed, n = int(stored.pop("seed", 0) or 0), int(stored.pop("n", 0) or 0)
    known = set(FactoryConfig.model_fields)
    config = FactoryConfig.model_validate({k: v for k, v in stored.items() if k in known})
    return config, seed + max(n, len(cache))


def refresh(parent: str | Path | None, job_path: str | Path, out: str | Path, *, n: int, seed: int | None = None,
            splits: tuple[str, ...] = ("train",), workers: int | None = None,
            progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Build the new version into ``out``; return its manifest (see the module docstring)."""
    from envcore.factory.build import build

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise RefreshError(f"{out} exists and is not empty: a refresh writes a new version, never over one")
    if n < 1:
        raise RefreshError("n must be at least 1")
    cache = ScenarioCache.open(parent)
    try:
        job = FactoryJob.load(job_path)
    except (OSError, ValueError) as exc:
        raise RefreshError(f"cannot read the job {job_path}: {exc}") from None
    base, next_seed = parent_config(cache)
    try:
        config = base.merged(job.config)
    except ValueError as exc:
        raise RefreshError(f"the job's config does not apply: {exc}") from None
    domains = [d for d in config.domains if config.split_of(d) in splits]
    if not domains:
        raise RefreshError(f"no domain of the config belongs to the splits {list(splits)}")
    config = config.model_copy(update={"domains": domains})
    first = next_seed if seed is None else seed
    report = build(config, range(first, first + n), workers=workers, progress=progress)
    inherited = [CacheEntry(row=row, data=(cache.root / BUNDLES / f"{row['scenario_id']}.json.gz").read_bytes())
                 for row in cache.rows]
    lineage = {
        "parent": cache.root.name, "parent_path": str(cache.root), "parent_scenarios": len(cache),
        "job": str(job_path), "job_config": job.config, "reason": job.reason, "analysis": job.analysis,
        "seeds": [first, first + n], "splits": list(splits), "added": len(report.accepted),
        "rejected": len(report.rejects),
    }
    stored = {"seed": first, "n": n, **config.model_dump(mode="json")}
    return write_cache(out, [*inherited, *report.accepted], generator=GENERATOR_VERSION, config=stored,
                       lineage=lineage, rejects=report.rejects)
