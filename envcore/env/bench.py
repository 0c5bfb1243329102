"""Figures for ``python -m envcore bench env``: how fast the environment serves episodes.

* **reset**: ``A01Environment.reset`` in process, for a scenario seen before (its bundle in memory)
  and for one loaded from the cache for the first time;
* **http_request step**: one request tool call, including the live app's start on an episode's
  first request;
* **oracle episodes per second**, in process: a scripted agent that resets, reads two files, sends
  three requests, applies the reference fix, runs the visible tests and submits; with one thread
  and with one thread per CPU;
* the same oracle **over ``/ws``** against a server in its own process, with many concurrent clients
  (async :class:`~envcore.env.client.A01Env`), counting errors.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envcore.cache import ScenarioCache
from envcore.env.environment import A01Environment, Runtime
from envcore.env.sampler import CurriculumSampler
from envcore.procs import terminate


@dataclass
class Timings:
    samples_ms: list[float] = field(default_factory=list)

    def line(self) -> str:
        if not self.samples_ms:
            return "no samples"
        ordered = sorted(self.samples_ms)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        return f"p50 {statistics.median(ordered):.2f} ms, p95 {p95:.2f} ms (n={len(ordered)})"


def oracle_actions(bundle: Any) -> list[dict[str, Any]]:
    """The scripted oracle's actions after reset (reads, requests, the reference fix, tests, submit)."""
    py = sorted(p for p in bundle.files if p.endswith(".py"))
    user = bundle.users[0].username
    return [
        {"tool": "read_file", "path": py[0]},
        {"tool": "read_file", "path": py[-1]},
        {"tool": "http_request", "method": "GET", "path": "/api/me", "as_user": user},
        {"tool": "http_request", "method": "GET", "path": "/api/status"},
        {"tool": "http_request", "method": "GET", "path": "/docs"},
        {"tool": "apply_patch", "diff": bundle.reference_fix},
        {"tool": "run_tests"},
        {"tool": "submit"},
    ]


def play_oracle(env: A01Environment, seed: int, split: str | None, request_ms: Timings | None = None) -> float | None:
    observation = env.reset(seed=seed, split=split, agent_id="oracle")
    bundle = env.episode.bundle  # type: ignore[union-attr]
    for action in oracle_actions(bundle):
        started = time.perf_counter()
        observation = env.step(action)
        if request_ms is not None and action["tool"] == "http_request":
            request_ms.samples_ms.append((time.perf_counter() - started) * 1000)
    return observation.reward


def measure_reset(runtime: Runtime, seeds: range, split: str | None) -> tuple[Timings, Timings]:
    """(first load of each scenario, the same resets again with bundles in memory)."""
    env = A01Environment(runtime)
    cold, warm = Timings(), Timings()
    for timings in (cold, warm):
        for seed in seeds:
            started = time.perf_counter()
            env.reset(seed=seed, split=split)
            timings.samples_ms.append((time.perf_counter() - started) * 1000)
    env.close()
    return cold, warm


def measure_oracle(runtime: Runtime, seeds: list[int], split: str | None, threads: int) -> tuple[float, list[float | None], Timings]:
    """(episodes per second, rewards, request step timings) with ``threads`` envs playing at once."""
    rewards: list[float | None] = []
    requests = Timings()
    lock = threading.Lock()
    queue = list(seeds)

    def worker() -> None:
        env = A01Environment(runtime)
        local = Timings()
        while True:
            with lock:
                if not queue:
                    break
                seed = queue.pop()
            reward = play_oracle(env, seed, split, local)
            with lock:
                rewards.append(reward)
        with lock:
            requests.samples_ms.extend(local.samples_ms)
        env.close()

    started = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return len(seeds) / (time.perf_counter() - started), rewards, requests


class MachineCpu:
    """Busy CPU seconds of the whole machine, every process (server, sandbox, clients), over a block.

    Episodes per second on this machine can be no more than ``cores / cpu_per_episode``; printing
    both says whether a run was short of CPU or waiting on something."""

    def __enter__(self) -> "MachineCpu":
        self.seconds = 0.0
        self._start = _busy_cpu_s()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = _busy_cpu_s() - self._start

    def per_episode_line(self, episodes: int) -> str:
        per = self.seconds / max(episodes, 1)
        cores = usable_cores()
        ceiling = f"{cores / per:.1f}" if per > 0 else "n/a"
        return f"CPU per episode {per * 1000:.0f} ms, all processes (ceiling on {cores} cores: {ceiling} episodes/s)"


def _busy_cpu_s() -> float:
    import psutil

    t = psutil.cpu_times()  # on Linux guest time is already inside user; steal is not ours
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cache: str | None, port: int, sessions: int | None = None, log: str | None = None, *,
                 env: Mapping[str, str] | None = None, ready: str = "/health", timeout_s: float = 60) -> subprocess.Popen:
    """``python app.py`` on ``port`` in its own process, returned once ``GET ready`` answers 200.
    ``cache``, ``sessions`` and ``log`` set ``A01_CACHE``, ``A01_MAX_SESSIONS`` and ``A01_EPISODE_LOG``;
    ``env`` adds any other variables. The server's stderr goes to a file, ``process.log_path``; stop it
    with :func:`stop_server`, which removes that file too."""
    child_env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False",
                 **(env or {})}
    for name, value in (("A01_CACHE", cache), ("A01_MAX_SESSIONS", sessions), ("A01_EPISODE_LOG", log)):
        if value:
            child_env[name] = str(value)
    root = Path(__file__).resolve().parents[2]
    # The server's log goes to a file: a pipe nobody reads fills up and then stalls every process
    # that writes to it (the server, and the sandbox zygote, which shares its stderr).
    errors = tempfile.NamedTemporaryFile(prefix="a01-bench-server-", suffix=".log", delete=False)
    process = subprocess.Popen([sys.executable, str(root / "app.py")], cwd=root, env=child_env,
                               stdout=subprocess.DEVNULL, stderr=errors)
    process.log_path = errors.name  # type: ignore[attr-defined]
    errors.close()
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}{ready}", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.05)
        if process.poll() is not None:
            tail = Path(process.log_path).read_text(errors="replace")[-2000:]
            stop_server(process)
            raise RuntimeError(f"the server exited: {tail}")
    stop_server(process)
    raise RuntimeError(f"the server did not answer {ready} within {timeout_s:.0f} s")


def stop_server(process: subprocess.Popen, *, keep_log: bool = False, timeout_s: float = 10) -> None:
    """Stop a server :func:`start_server` started (killed if it has not stopped ``timeout_s`` after
    SIGTERM) and remove its log file unless ``keep_log`` (when an error message names it)."""
    terminate(process, timeout_s)
    log = getattr(process, "log_path", None)
    if log and not keep_log:
        Path(log).unlink(missing_ok=True)


async def _ws_oracle(url: str, seeds: list[int], clients: int, split: str | None,
                     bundles: CurriculumSampler) -> tuple[float, int, list[float | None], list[str]]:
    from envcore.env.client import A01Env

    queue = list(seeds)
    rewards: list[float | None] = []
    errors: list[str] = []

    async def client() -> None:
        async with A01Env(base_url=url, message_timeout_s=120) as env:
            while queue:
                seed = queue.pop()
                try:
                    result = await env.reset(seed=seed, split=split, agent_id="oracle-ws")
                    bundle = bundles.bundle(result.observation.scenario_id)
                    for action in oracle_actions(bundle):
                        result = await env.step(action)
                    rewards.append(result.reward)
                except Exception as exc:  # noqa: BLE001 - counted and shown
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(seeds) / (time.perf_counter() - started), len(errors), rewards, errors


def usable_cores() -> int:
    """The cores this process may run on (a container's or a pinning's, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def measure_scaling(runtime: Runtime, episodes: int, split: str | None, project_to: int) -> list[str]:
    """:mod:`envcore.env.scaling`: the same oracle episodes on one core and on two, and a projection."""
    from envcore.env import scaling
    from envcore.sandbox.pool import Sandbox

    def play(sandbox: Sandbox, seeds: list[int], threads: int) -> list[float | None]:
        _, rewards, _ = measure_oracle(Runtime(sampler=runtime.sampler, sandbox=sandbox), seeds, split, threads)
        return rewards

    seeds = list(range(7000, 7000 + episodes + 2))
    points = [scaling.measure(play, lambda lanes: Sandbox(probe_lanes=lanes).start(), seeds, cores)
              for cores in (1, 2)]
    return scaling.projection(points[0], points[1], project_to)


def isolation_floor(seeds: list[int], split: str | None, runtime: Runtime) -> tuple[float, float, float]:
    """(probes an oracle episode runs, ms one probe costs in a fork of its own with no sandbox, their
    product): the least CPU an episode can cost while every probe runs on a pristine copy of its app,
    whatever the sandbox does. Probes: the visible ones (``run_tests``) and all (``submit``) of the
    episodes ``seeds`` play; the probe's cost: bench verify's fork bound, on the first of them."""
    from envcore.verifier.bench import measure_fork_bound

    bundles = [runtime.sampler.choose(seed=seed, split=split)[0] for seed in seeds]
    probes = statistics.mean(len(b.probes) + sum(1 for p in b.probes if p.visible) for b in bundles)
    per_probe = measure_fork_bound(bundles[0], 60).pristine.p50
    return probes, per_probe, probes * per_probe


def run(cache_root: str, *, resets: int, episodes: int, ws_episodes: int, clients: int, split: str | None,
        scaling_episodes: int = 0, project_to: int = 16) -> int:
    cache = ScenarioCache.open(cache_root)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; cache {cache.root} ({len(cache)} scenarios)")
    runtime = Runtime(sampler=CurriculumSampler(cache))
    # Warm up the sandbox (zygote start) before any clock runs: a server does this once at start.
    play_oracle(A01Environment(runtime), 10**6, split)

    # Each run plays scenarios no run before it has seen, and resets are timed last: a scenario's
    # second episode starts building its template in the background (see Sandbox.prepare), which
    # would otherwise run during the next measurement.
    for run_index, threads in enumerate(sorted({1, usable_cores()})):
        seeds = list(range(1000 + run_index * episodes, 1000 + (run_index + 1) * episodes))
        with MachineCpu() as cpu:
            rate, rewards, requests = measure_oracle(runtime, seeds, split, threads)
        full = sum(1 for r in rewards if r is not None and r >= 0.95)
        print(f"oracle episodes in process, {threads} thread(s): {rate:.1f} episodes/s "
              f"({full}/{len(rewards)} rewarded >= 0.95)")
        print(f"  http_request step ({threads} thread(s)): {requests.line()}")
        print(f"  {cpu.per_episode_line(len(rewards))}")
        if threads == 1:
            probes, per_probe, floor = isolation_floor(seeds[:10], split, runtime)
            measured = cpu.seconds / max(len(rewards), 1) * 1000
            print(f"  isolation floor: {probes:.1f} probes an episode (run_tests + submit) x {per_probe:.1f} ms (one probe "
                  f"in a fork of its own, no sandbox) = {floor:.0f} ms of CPU; this run {measured:.0f} ms "
                  f"({measured / floor:.2f}x the floor)")

    if ws_episodes:
        port = free_port()
        server = start_server(str(cache.root), port, max(clients, 64))
        try:
            with MachineCpu() as cpu:
                rate, errors, rewards, messages = asyncio.run(_ws_oracle(
                    f"http://127.0.0.1:{port}", list(range(5000, 5000 + ws_episodes)), clients, split, runtime.sampler))
        finally:
            stop_server(server)
        full = sum(1 for r in rewards if r is not None and r >= 0.95)
        print(f"oracle episodes over /ws, {clients} concurrent clients: {rate:.1f} episodes/s, {errors} errors "
              f"({full}/{len(rewards)} rewarded >= 0.95)")
        print(f"  {cpu.per_episode_line(ws_episodes)}")
        for message in messages[:5]:
            print(f"  error: {message}")

    if scaling_episodes and usable_cores() >= 2:
        for line in measure_scaling(runtime, scaling_episodes, split, project_to):
            print(line)
    elif scaling_episodes:
        print("scaling: not measured (this process may use one core)")

    cold, warm = measure_reset(runtime, range(resets), split)
    print(f"reset, scenario loaded from the cache:  {cold.line()}")
    print(f"reset, scenario already in memory:      {warm.line()}")
    return 0
