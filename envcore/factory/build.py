"""The factory pipelines: seeds -> drafts -> specs -> bundles -> checked -> cache, and re-verifying
a cache that already exists.

Every seed is authored, compiled and checked independently, so the work spreads over a process pool
(one in-process runner per worker, forked from a parent that has already imported FastAPI). A seed
whose scenario fails the check is not an error: it becomes a *reject* row with the stage and reason,
written next to the cache, and counted in the build report.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from envcore.cache import CacheEntry, CorruptEntryError, ScenarioCache
from envcore.factory.check import check_scenario
from envcore.factory.compiler import compile_spec
from envcore.factory.config import FactoryConfig
from envcore.factory.draft import DraftError
from envcore.factory.template_author import author_spec
from envcore.runner.base import ProbeRunner
from envcore.runner.inprocess import InProcessRunner
from envcore.scenario.bundle import Bundle


@dataclass
class BuildReport:
    """What a build produced."""

    accepted: list[CacheEntry] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    seeds: int = 0
    elapsed_s: float = 0.0
    workers: int = 1

    @property
    def verified_per_s(self) -> float:
        return len(self.accepted) / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def reject_share(self) -> float:
        return len(self.rejects) / self.seeds if self.seeds else 0.0


_WORKER: dict[str, Any] = {}

BUILD_SKIPS = ("partial_fixes", "pass_to_pass")
"""Checks a fresh template build leaves to ``factory check``: whether fixing one site of a two-site
variant leaves the other open, and whether a variant's flaw leaves every hidden regression and trap
probe passing, are properties of the variant's code, which the tests prove for every variant of every
bug class. Both run on every entry of a cache in ``factory check`` and in the slow test suite over the
shipped cache; the LLM author, whose drafts may hold new domains, runs the whole check."""

BATCH_GC_THRESHOLD = (20_000, 10, 10)
"""Collector thresholds while building. Every check loads a few FastAPI apps, so allocations come in
large bursts and the default thresholds (700, 10, 10) run the collector thousands of times over a
heap of ~500k live objects: measured, a quarter of the build time. Collecting less often costs
~150 MB more peak memory per worker and stays flat over thousands of scenarios."""


def _tune_gc() -> None:
    gc.collect()
    gc.freeze()  # imported libraries never die: keep them out of every later collection
    gc.set_threshold(*BATCH_GC_THRESHOLD)


@contextmanager
def batch_gc():
    """Collect garbage less often for the duration of a build (restored afterwards)."""
    previous = gc.get_threshold()
    _tune_gc()
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()


def _init_worker(config_json: str, skip: tuple[str, ...], scratch: str) -> None:
    _WORKER["config"] = FactoryConfig.model_validate_json(config_json)
    _WORKER["skip"] = skip
    # a pool's workers end by a signal, with no chance to clean up: their folders live in ``scratch``,
    # which the parent removes
    _WORKER["runner"] = InProcessRunner(scratch_parent=scratch)
    _tune_gc()


def build_seed(
    config: FactoryConfig, seed: int, runner: InProcessRunner, skip: tuple[str, ...] = BUILD_SKIPS
) -> tuple[Bundle | None, dict | None]:
    """Author, compile and check one seed; return (bundle, None) or (None, reject row)."""
    stage = "author"
    try:
        spec = author_spec(config, seed)
        stage = "compile"
        bundle = compile_spec(spec)
        stage = "check"
        report = check_scenario(bundle, runner, skip=skip)
    except (DraftError, ValueError) as exc:
        return None, {"seed": seed, "stage": stage, "reason": str(exc)}
    if not report.ok:
        return None, {
            "seed": seed,
            "stage": "check",
            "scenario_id": bundle.scenario_id,
            "bug_class": bundle.bug_class,
            "variant": bundle.variant,
            "reason": "; ".join(report.problems),
        }
    return bundle, None


def _work(seed: int) -> tuple[CacheEntry | None, dict | None]:
    config = _WORKER["config"]
    bundle, reject = build_seed(config, seed, _WORKER["runner"], _WORKER["skip"])
    return (CacheEntry.of(bundle, config.split_for(bundle)) if bundle else None), reject


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


def build(
    config: FactoryConfig,
    seeds: Iterable[int],
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    full_check: bool = False,
) -> BuildReport:
    """Build every seed; ``progress`` is called with the number of seeds finished so far.

    With ``full_check`` every scenario goes through the whole scenario check, ``BUILD_SKIPS`` included."""
    skip = () if full_check else BUILD_SKIPS
    seeds = list(seeds)
    workers = workers or default_workers()
    report = BuildReport(seeds=len(seeds), workers=workers)
    started = time.perf_counter()
    done = 0

    def collect(entry: CacheEntry | None, reject: dict | None) -> None:
        nonlocal done
        done += 1
        if entry is not None:
            report.accepted.append(entry)
        if reject is not None:
            report.rejects.append(reject)
        if progress:
            progress(done)

    if workers == 1:
        runner = InProcessRunner()
        try:
            with batch_gc():
                for seed in seeds:
                    bundle, reject = build_seed(config, seed, runner, skip)
                    collect(CacheEntry.of(bundle, config.split_for(bundle)) if bundle else None, reject)
        finally:
            runner.close()
    else:
        ctx = multiprocessing.get_context("fork")
        with tempfile.TemporaryDirectory(prefix="a01-build-") as scratch, \
                ctx.Pool(workers, initializer=_init_worker, initargs=(config.model_dump_json(), skip, scratch)) as pool:
            for entry, reject in pool.imap(_work, seeds, chunksize=4):
                collect(entry, reject)
    report.elapsed_s = time.perf_counter() - started
    return report


def _init_verifier(root: str, scratch: str, diagnostics: bool = False) -> None:
    _WORKER["cache"] = ScenarioCache.open(root)
    # every probe on the app exactly as loaded, as in grading and in the sandbox (see _init_worker)
    _WORKER["runner"] = InProcessRunner(scratch_parent=scratch, diagnostics=diagnostics, isolate_probes=True)
    _tune_gc()


def check_entry(cache: ScenarioCache, scenario_id: str, runner: ProbeRunner, *,
                quick: bool) -> tuple[list[str], list[str]]:
    """(problems, diagnostics) of one cached scenario: a failed hash check, or (unless ``quick``) the
    full check, with what its runner collected for the author (:attr:`CheckReport.diagnostics`, then
    its warnings: a load near its deadline)."""
    try:
        bundle = cache.load(scenario_id)
    except CorruptEntryError as exc:
        return [f"CORRUPT {exc}"], []
    if quick:
        return [], []
    report = check_scenario(bundle, runner, fail_fast=False)
    return report.problems, report.diagnostics + [f"warning: {warning}" for warning in report.warnings]


def verify_entry(cache: ScenarioCache, scenario_id: str, runner: ProbeRunner, *, quick: bool) -> list[str]:
    """Problems of one cached scenario: a failed hash check, or (unless ``quick``) the full check."""
    return check_entry(cache, scenario_id, runner, quick=quick)[0]


def _verify_one(job: tuple[str, bool]) -> tuple[str, tuple[list[str], list[str]]]:
    scenario_id, quick = job
    return scenario_id, check_entry(_WORKER["cache"], scenario_id, _WORKER["runner"], quick=quick)


def verify_cache(
    root: Path,
    scenario_ids: list[str],
    *,
    quick: bool = False,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    sandboxed: bool = False,
    diagnostics: dict[str, list[str]] | None = None,
) -> dict[str, list[str]]:
    """Load (hash-verify) and, unless ``quick``, fully re-check every scenario; return problems by id.

    With ``sandboxed`` the apps run in sandboxed workers (:mod:`envcore.sandbox`), for caches whose
    apps are not the factory's own; ``workers`` threads then share one sandbox. Given a
    ``diagnostics`` dict, the runners collect what explains the problems for the scenarios' authors
    (:mod:`envcore.runner.diagnostics`) and each scenario's blocks are added to it by id."""
    workers = workers or default_workers()
    problems: dict[str, list[str]] = {}
    diagnose = diagnostics is not None

    def collect(done: int, scenario_id: str, found: tuple[list[str], list[str]]) -> None:
        if found[0]:
            problems[scenario_id] = found[0]
        if found[1] and diagnostics is not None:
            diagnostics[scenario_id] = found[1]
        if progress:
            progress(done)

    if sandboxed and not quick:
        from concurrent.futures import ThreadPoolExecutor

        from envcore.sandbox import SandboxRunner

        cache, runner = ScenarioCache.open(root), SandboxRunner(diagnostics=diagnose)
        with ThreadPoolExecutor(workers) as pool:
            found_all = pool.map(lambda sid: (sid, check_entry(cache, sid, runner, quick=False)), scenario_ids)
            for done, (scenario_id, found) in enumerate(found_all, 1):
                collect(done, scenario_id, found)
        return problems

    if workers == 1:
        cache, runner = ScenarioCache.open(root), InProcessRunner(diagnostics=diagnose, isolate_probes=True)
        try:
            with batch_gc():
                for done, scenario_id in enumerate(scenario_ids, 1):
                    collect(done, scenario_id, check_entry(cache, scenario_id, runner, quick=quick))
        finally:
            runner.close()
        return problems
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="a01-verify-") as scratch, \
            ctx.Pool(workers, initializer=_init_verifier, initargs=(str(root), scratch, diagnose)) as pool:
        jobs = [(sid, quick) for sid in scenario_ids]
        for done, (scenario_id, found) in enumerate(pool.imap(_verify_one, jobs, chunksize=4), 1):
            collect(done, scenario_id, found)
    return problems
