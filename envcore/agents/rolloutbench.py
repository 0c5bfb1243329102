"""Figures for ``python -m envcore bench rollouts``: how rollout throughput scales with sessions.

The heuristic agent (reads every file, patches, submits: the shape of a real agent's episode, with
no model time) plays ``--episodes`` episodes with 1, 2 and 4 parallel sessions, first in process
(one shared runtime and sandbox), then as WebSocket clients of two ``python app.py`` server
processes on loopback, each new session on the least-loaded of them (:func:`run_rollouts` with two
URLs; equal idle servers fill in turn).
Each configuration plays its own unseen scenarios (disjoint slices of the split, sorted by id), so
no run profits from templates an earlier one built; a few untimed episodes first start each
sandbox. For each it prints episodes per second, the
speed-up over one session of the same kind, the machine-wide CPU per episode and the ceiling that
implies on this machine's cores, and any failed episode.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from envcore.agents.heuristic import HeuristicAgent
from envcore.agents.rollouts import EpisodeSpec, RolloutResult, run_rollouts
from envcore.cache import ScenarioCache
from envcore.env.bench import MachineCpu, free_port, start_server, stop_server
from envcore.env.environment import Runtime
from envcore.env.sampler import CurriculumSampler


def _slices(cache: ScenarioCache, split: str | None, per_run: int, runs: int, warmup: int) -> list[list[EpisodeSpec]]:
    """``runs`` disjoint slices of ``per_run`` scenarios, then one of ``warmup`` for the warm-ups."""
    ids = sorted(cache.ids(split=split) if split else cache.ids())
    sizes = [per_run] * runs + [warmup]
    if len(ids) < sum(sizes):
        raise SystemExit(f"{len(ids)} scenarios in the split: {runs} runs of {per_run} and {warmup} warm-ups need "
                         f"{sum(sizes)} (lower --episodes)")
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return [[EpisodeSpec.of(i, scenario=s) for i, s in enumerate(ids[start:start + size])]
            for start, size in zip(starts, sizes)]


def _play(specs: list[EpisodeSpec], sessions: int, agent_id: str, **where) -> RolloutResult:
    with tempfile.TemporaryDirectory(prefix="a01-bench-rollouts-") as folder:
        return run_rollouts(HeuristicAgent, specs, log=Path(folder) / "episodes.jsonl", parallel=sessions,
                            agent_id=agent_id, source="benchmark", **where)


def _warm_up(specs: list[EpisodeSpec], **where) -> None:
    """Untimed episodes that start the sandbox (its zygote, the agent's imports) before the timing."""
    _play(specs, len(specs), "warm-up", **where)


def _measure(label: str, sessions: int, specs: list[EpisodeSpec], **where) -> tuple[float, list[str]]:
    with MachineCpu() as cpu:
        result = _play(specs, sessions, "heuristic", **where)
    rate = result.played / result.elapsed_s if result.elapsed_s else 0.0
    print(f"  {label:<24} {sessions} session(s): {result.played:4d} episodes in {result.elapsed_s:6.1f} s = "
          f"{rate:5.2f} episodes/s; {cpu.per_episode_line(result.played)}")
    return rate, result.failed


def run(cache_root: str, *, episodes: int, sessions: list[int], split: str | None, servers: int) -> int:
    cache = ScenarioCache.open(cache_root)
    *runs, warmup = _slices(cache, split, episodes, 2 * len(sessions), warmup=2 * servers)
    slices = iter(runs)
    failures: list[str] = []
    print(f"machine: {os.cpu_count()} CPUs; heuristic agent, {episodes} episodes per run, "
          f"split {split or 'any'}, unseen scenarios in every run")

    print("in process (one runtime, one sandbox):")
    runtime = Runtime(sampler=CurriculumSampler(cache), sessions=max(sessions))
    local: dict[int, float] = {}
    _warm_up(warmup[:servers], runtime=runtime)
    for n in sessions:
        local[n], failed = _measure("in process", n, next(slices), runtime=runtime)
        failures += failed

    print(f"through {servers} server processes on loopback (/ws, sessions on the least-loaded):")
    processes = []
    remote: dict[int, float] = {}
    try:
        ports = [free_port() for _ in range(servers)]
        processes = [start_server(str(cache.root), port, max(sessions)) for port in ports]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        _warm_up(warmup[servers:], urls=urls)
        for n in sessions:
            remote[n], failed = _measure(f"{servers} servers", n, next(slices), urls=urls)
            failures += failed
    finally:
        for process in processes:
            process.terminate()  # all at once, then each waited for
        for process in processes:
            stop_server(process)

    base = sessions[0]
    print("speed-up over one session of the same kind (same run):")
    for n in sessions:
        print(f"  {n} session(s): in process x{local[n] / local[base]:.2f}, "
              f"through servers x{remote[n] / remote[base]:.2f}; servers / in process x{remote[n] / local[n]:.2f}")
    for failure in failures[:10]:
        print(f"  failed: {failure}")
    return 1 if failures else 0
