"""Figures for ``python -m envcore bench verify``: the isolated verifier against its baselines.

Every figure comes from one run over the same bundles (from the shipped cache, each patched with
its reference fix, so every verification is a full pass over all probes), each verification on
shadow data drawn for it alone, every probe on the app exactly as loaded:

* **sandbox** (the isolation grading uses): :func:`envcore.verifier.verify`, the whole call (a fresh
  shadow, a template lent to the run and built for it, one contained worker per probe, grading);
  reference fixes that are more than body changes load afresh in every worker, and the two kinds
  are also reported apart;
* **sandbox, templates off**: every probe's worker imports the whole app;
* **in-process floor, same isolation**: the same probes on the same shadow data, the app imported
  once into this process and forked once per probe (:class:`~envcore.runner.inprocess.InProcessRunner`,
  one batch per probe): the same per-probe pristine state with no sandbox at all, the floor the
  sandbox is held to;
* **in-process, no isolation**: every probe on one shared app in this process, for scale (what
  grading cost before probes were isolated, and what it would cost if apps could remember);
* **naive**: pytest with Starlette's ``TestClient`` in a fresh subprocess per verification, what a
  SWE-bench-style harness does (:mod:`envcore.runner.pytest_subprocess`);
* the **fork bound**, measured in a clean interpreter warmed as the zygote is and holding one
  imported app: a fork, an immediate exit and the reaping (the least a probe in a process of its
  own can cost), and the same with one probe's requests run in the child, its login actors signing
  in to that copy first as in a probe's worker (all the work an isolated probe needs, with no
  containment and no grading around it), also from a copy that has served every probe once; times
  the median probe count, these bound any per-probe isolation against the naive harness on this
  machine;
* a **live worker**: one request's round trip (the probes' requests replayed on it, logins
  included), and the memory each live worker adds (USS);
* **throughput**: verifications per second with one thread per CPU keeping every core busy.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from envcore.cache import ScenarioCache
from envcore.patching import apply_patch
from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource
from envcore.runner.execute import ProbeExchange, probe_outcome
from envcore.runner.http import HttpRequest, HttpResponse
from envcore.runner.inprocess import InProcessRunner
from envcore.runner.pytest_subprocess import PytestSubprocessRunner
from envcore.sandbox.live import LiveApp
from envcore.sandbox.pool import PROJECT_ROOT, Sandbox
from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import ProbeOutcome
from envcore.verifier.verify import graded_source, grading_data, verify

ISOLATION = ("every probe in a worker of its own, forked from a trusted process (the template lent to the run, "
             "or the zygote) and stopped after the probe; shadow data drawn for every grading")


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
        if not self.samples_ms:
            return "none measured"
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


@dataclass
class SandboxFigures:
    all: Distribution = field(default_factory=Distribution)
    swapped: Distribution = field(default_factory=Distribution)
    """Verifications whose workers came from the run's template (the patch was swapped in)."""
    afresh: Distribution = field(default_factory=Distribution)
    """Verifications whose workers each imported the whole app (a patch beyond body changes)."""
    resolutions: dict[str, int] = field(default_factory=dict)


def measure_sandbox(sandbox: Sandbox, items, rounds: int) -> SandboxFigures:
    """``rounds`` verifications of every scenario, in turn (an evaluation loop)."""
    figures = SandboxFigures()
    for _ in range(rounds):
        for bundle, files in items:
            swapped_before = sandbox.stats["swapped"]
            started = time.perf_counter()
            report = verify(bundle, files, sandbox=sandbox)
            elapsed = (time.perf_counter() - started) * 1000
            figures.all.samples_ms.append(elapsed)
            (figures.swapped if sandbox.stats["swapped"] > swapped_before else figures.afresh).samples_ms.append(elapsed)
            key = report.resolution.value if report.resolution else report.outcome
            figures.resolutions[key] = figures.resolutions.get(key, 0) + 1
    return figures


def measure_inprocess(items, rounds: int, *, isolated: bool) -> Distribution:
    """The same probes on fresh shadow data in this process: with ``isolated`` the app is imported
    once and forked once per probe (the floor with the sandbox's isolation); without, every probe
    runs on one shared app."""
    dist = Distribution()
    with InProcessRunner(isolate_probes=isolated) as runner:
        for _ in range(rounds):
            for bundle, files in items:
                started = time.perf_counter()
                data = grading_data(bundle)
                source = graded_source(bundle, files, data.graded)
                actors = actors_of(data.graded.users)
                passed = all(o.passed for o in runner.run(source, data.graded.probes, actors).outcomes)
                dist.samples_ms.append((time.perf_counter() - started) * 1000)
                if not passed:
                    raise RuntimeError(f"the in-process baseline disagrees on {bundle.scenario_id}")
    return dist


_FORK_BOUND_SCRIPT = """
import asyncio, atexit, gc, json, os, shutil, sys, tempfile, time
from pathlib import Path
from envcore.runner.actors import actors_of
from envcore.runner.execute import ProbeExchange
from envcore.runner.http import Lifespan, call_asgi
from envcore.runner.loader import load_app, materialize
from envcore.sandbox.warmup import warmup_apps
from envcore.sandbox.worker import rehearse_all
from envcore.scenario.bundle import Bundle
bundle = Bundle.model_validate_json(sys.stdin.read())
n = int(sys.argv[1])
rehearse_all(warmup_apps())  # the zygote's warm-up
root = Path(tempfile.mkdtemp(prefix="a01-fork-bound-"))
atexit.register(shutil.rmtree, root, True)  # runs in this process only: the forks leave by os._exit
materialize(bundle.files, root)
app = load_app(root, bundle.files, bundle.entrypoint).app  # the working directory is now root
asyncio.new_event_loop().run_until_complete(Lifespan(app).startup())
actors = actors_of(bundle.users)
probes = bundle.probes


def walk(loop, probe):
    # one probe's requests on this process's app, each login actor signing in to it first, as a
    # probe's worker does; (every step answered, requests sent, logins included)
    exchange = ProbeExchange(probe.steps, actors, str(root))
    sent = 0
    while (request := exchange.next_request()) is not None:
        exchange.answer(loop.run_until_complete(call_asgi(app, request)))
        sent += 1
    return all(response.status is not None for response in exchange.answers), sent


def forks(n, probes):
    # n forks of this process, each running one probe (none without probes) and exiting
    gc.collect()
    gc.freeze()
    samples = []
    for i in range(n):
        read_fd, write_fd = os.pipe()
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            gc.disable()
            answered = True
            if probes:
                answered, _ = walk(asyncio.new_event_loop(), probes[i % len(probes)])
            os.write(write_fd, b"k" if answered else b"x")
            os._exit(0)
        os.close(write_fd)
        if os.read(read_fd, 1) != b"k":
            sys.exit("a probe in its fork got no response")
        os.waitpid(pid, 0)
        samples.append((time.perf_counter() - started) * 1000)
        os.close(read_fd)
    return samples


bare = forks(n, [])
pristine = forks(n, probes)
loop = asyncio.new_event_loop()  # serve every probe here once: no longer the app as loaded
sent = [walk(loop, probe)[1] for probe in probes]
served = forks(n, probes)
print(json.dumps({"bare": bare, "pristine": pristine, "served": served, "requests": sum(sent) / len(sent)}))
"""


@dataclass
class ForkBound:
    """What a probe in a process of its own costs with nothing but a fork around it."""

    bare: Distribution
    """Fork, immediate exit, reap: the least any process per probe costs."""
    pristine: Distribution
    """Fork, one probe's requests on the fresh copy of the app as loaded (each of the bundle's probes
    in turn), exit, reap: all the work one isolated probe needs, with no sandbox."""
    served: Distribution
    """The same, forked from a copy that has already served every probe once (its code paths warm):
    what isolation could cost at best, if a served app were allowed to stand for the app as loaded
    (it is not: serving changes its state)."""
    requests: float
    """Requests per probe (logins included), the mean over the bundle's probes."""


def measure_fork_bound(bundle: Bundle, n: int = 200) -> ForkBound:
    """The fork bound (see the module docstring), measured in a clean interpreter warmed as the
    zygote is, that has imported ``bundle``'s app."""
    done = subprocess.run([sys.executable, "-c", _FORK_BOUND_SCRIPT, str(n)], input=bundle.model_dump_json(),
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": PROJECT_ROOT}, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return ForkBound(*(Distribution(samples_ms=found[k]) for k in ("bare", "pristine", "served")),
                     requests=found["requests"])


def measure_naive(items) -> Distribution:
    dist = Distribution()
    with PytestSubprocessRunner() as runner:
        for bundle, files in items:
            data = grading_data(bundle)
            source = graded_source(bundle, files, data.graded)
            actors = actors_of(data.graded.users)
            started = time.perf_counter()
            report = runner.run(source, data.graded.probes, actors)
            dist.samples_ms.append((time.perf_counter() - started) * 1000)
            if not report.loaded or not all(o.passed for o in report.outcomes):
                raise RuntimeError(f"naive baseline disagrees on {bundle.scenario_id}: {report.load_error}")
    return dist


def replay_probes(bundle: Bundle, send: Callable[[HttpRequest], HttpResponse], requests: int) -> list[ProbeOutcome]:
    """Send ``requests`` requests to one app through ``send``: ``bundle``'s probes in turn, round
    again as long as needed, each walked with :class:`~envcore.runner.execute.ProbeExchange`, so an
    actor that signs in with a login request does so on that app first (its login counts as one of
    the requests, and what the app granted signs its steps). Return the outcome of every probe
    replayed whole, in order (the app is shared: a later round finds what earlier ones left)."""
    actors = actors_of(bundle.users)
    probes = [probe for probe in bundle.probes if probe.steps]
    outcomes: list[ProbeOutcome] = []
    sent = 0
    for probe in itertools.cycle(probes):
        if sent >= requests:
            break
        exchange = ProbeExchange(probe.steps, actors)
        while (request := exchange.next_request()) is not None and sent < requests:
            exchange.answer(send(request))
            sent += 1
        if request is None:
            outcomes.append(probe_outcome(probe, exchange.answers))
    return outcomes


def measure_live(sandbox: Sandbox, items, requests_per_app: int) -> tuple[Distribution, list[int]]:
    """Round trip of single requests through live workers (each bundle's probes replayed on its
    app: :func:`replay_probes`), and each worker's USS after serving."""
    dist, memory = Distribution(), []
    for bundle, files in items:
        with LiveApp(sandbox, AppSource(files, bundle.entrypoint)) as live:
            timed: list[float] = []

            def send(request: HttpRequest, live: LiveApp = live, timed: list[float] = timed) -> HttpResponse:
                started = time.perf_counter()
                response = live.request(request)
                timed.append((time.perf_counter() - started) * 1000)
                return response

            replay_probes(bundle, send, requests_per_app + 1)
            dist.samples_ms.extend(timed[1:])  # the first request loads the app: not a round trip
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


def warm(sandbox: Sandbox, items, on_result: Callable[[str], None] | None = None) -> None:
    """First contact: the zygote, spares and caches, untimed."""
    sandbox.ping()
    for bundle, files in items[:3]:
        report = verify(bundle, files, sandbox=sandbox)
        if on_result:
            on_result(report.outcome)
