"""Figures for ``python -m envcore bench verify``: the sandboxed verifier against its baselines.

Every figure comes from one run over the same bundles (from the shipped cache, each patched with
its reference fix, so every verification is a full pass over all probes):

* **sandbox, template ready**: :func:`envcore.verifier.verify`, the whole call (shadow identities,
  file swap, worker, probes, grading), each scenario's verifications in a row with its template
  built beforehand (:mod:`envcore.sandbox.templates`), as for a GRPO group whose episodes prepared
  the template at reset;
* **sandbox, fresh load**: the same call with templates disabled, every worker importing the whole
  app: a scenario's first verification when nothing prepared it, or a patch that is more than a
  change of function bodies;
* **in-process**: the same probes against the same files imported into this process, with no
  isolation at all: the floor set by FastAPI's own work, for scale;
* **naive**: pytest with Starlette's ``TestClient`` in a fresh subprocess per verification, what a
  SWE-bench-style harness does (:mod:`envcore.runner.pytest_subprocess`);
* a **live worker**: one request's round trip, and the memory each live worker adds (USS);
* **throughput**: verifications per second with one thread per CPU keeping every core busy.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from envcore.cache import ScenarioCache
from envcore.patching import apply_patch
from envcore.runner.base import AppSource
from envcore.runner.execute import plan_requests
from envcore.runner.inprocess import InProcessRunner
from envcore.runner.pytest_subprocess import PytestSubprocessRunner
from envcore.sandbox.live import LiveApp
from envcore.sandbox.pool import Sandbox
from envcore.scenario.bundle import Bundle
from envcore.verifier.verify import graded_source, shadow_for, verify


@dataclass
class Distribution:
    samples_ms: list[float] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p95(self) -> float:
        ordered = sorted(self.samples_ms)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]

    def line(self) -> str:
        return f"p50 {self.p50:.1f} ms, p95 {self.p95:.1f} ms (n={len(self.samples_ms)})"


def uss_kb(pid: int) -> int:
    """Unique memory of a process (private pages: what killing it gives back), in KiB."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
        for line in rollup:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def patched_bundles(cache: ScenarioCache, n: int) -> list[tuple[Bundle, dict[str, str]]]:
    """The first ``n`` bundles of the cache (in id order, an even spread of classes and styles),
    each with its reference fix applied."""
    chosen = []
    for scenario_id in cache.ids()[:n]:
        bundle = cache.load(scenario_id)
        chosen.append((bundle, apply_patch(bundle.files, bundle.reference_fix)))
    return chosen


def _graded_source(bundle: Bundle, files: dict[str, str]) -> tuple[AppSource, Bundle]:
    shadow = shadow_for(bundle) or bundle
    return graded_source(bundle, files, shadow), shadow


def measure_sandbox(sandbox: Sandbox, items, rounds: int, on_result: Callable[[str], None], *,
                    grouped: bool = False) -> Distribution:
    """``rounds`` verifications of each scenario: in turn (an evaluation loop), or with ``grouped``
    one scenario's in a row after building its template untimed (a GRPO group after the episode's
    reset prepared the template)."""
    dist = Distribution()
    order = [(b, f) for b, f in items for _ in range(rounds)] if grouped else [x for _ in range(rounds) for x in items]
    for bundle, files in order:
        if grouped:
            sandbox.templates.get(_graded_source(bundle, bundle.files)[0])  # built before the clock starts
        started = time.perf_counter()
        report = verify(bundle, files, sandbox=sandbox)
        dist.samples_ms.append((time.perf_counter() - started) * 1000)
        on_result(report.resolution.value if report.resolution else report.outcome)
    return dist


def measure_inprocess(items, rounds: int) -> Distribution:
    dist = Distribution()
    with InProcessRunner() as runner:
        for _ in range(rounds):
            for bundle, files in items:
                source, shadow = _graded_source(bundle, files)
                tokens = {u.username: u.token for u in shadow.users}
                started = time.perf_counter()
                runner.run(source, shadow.probes, tokens)
                dist.samples_ms.append((time.perf_counter() - started) * 1000)
    return dist


def measure_naive(items) -> Distribution:
    dist = Distribution()
    with PytestSubprocessRunner() as runner:
        for bundle, files in items:
            source, shadow = _graded_source(bundle, files)
            tokens = {u.username: u.token for u in shadow.users}
            started = time.perf_counter()
            report = runner.run(source, shadow.probes, tokens)
            dist.samples_ms.append((time.perf_counter() - started) * 1000)
            if not report.loaded or not all(o.passed for o in report.outcomes):
                raise RuntimeError(f"naive baseline disagrees on {bundle.scenario_id}: {report.load_error}")
    return dist


def measure_live(sandbox: Sandbox, items, requests_per_app: int) -> tuple[Distribution, list[int]]:
    """Round trip of single requests through live workers, and each worker's USS after serving."""
    dist, memory = Distribution(), []
    for bundle, files in items:
        tokens = {u.username: u.token for u in bundle.users}
        requests = plan_requests(bundle.probes, tokens)
        with LiveApp(sandbox, AppSource(files, bundle.entrypoint)) as live:
            live.request(requests[0])  # load
            for i in range(requests_per_app):
                started = time.perf_counter()
                live.request(requests[i % len(requests)])
                dist.samples_ms.append((time.perf_counter() - started) * 1000)
            if live.pid is not None:
                memory.append(uss_kb(live.pid))
    return dist, memory


def measure_throughput(sandbox: Sandbox, items, seconds: float, threads: int) -> tuple[float, int]:
    """Verifications per second with ``threads`` threads verifying round-robin for ``seconds``."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def loop(k: int) -> None:
        i = k
        while time.monotonic() < stop:
            bundle, files = items[i % len(items)]
            verify(bundle, files, sandbox=sandbox)
            done[k] += 1
            i += threads

    started = time.perf_counter()
    workers = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - started
    return sum(done) / elapsed, sum(done)


def default_threads() -> int:
    return max(2, os.cpu_count() or 2)
