"""Figures for ``python -m envcore bench providers``: episodes per second in process and on 1, 2 and 4
replicas that OpenEnv's providers start (:mod:`envcore.agents.providers`), side by side in one run.

A scripted agent (the oracle by default: the reference fix, then submit, so every episode is one full
grading; or the heuristic, which reads every file first) plays the same ``--episodes`` scenarios of
the split in every configuration, with ``--sessions`` sessions at once: first in process (one
runtime, one sandbox: the default of ``eval`` and training), then for each provider and replica
count on a fresh set of replicas, each new session on the least-loaded replica. Before each timed
run a few untimed episodes on other scenarios start the sandboxes (one per replica), so no
configuration pays for a cold start inside its timing, and none profits from a warm one another left.
Each row says how long the replicas took to become healthy, the machine-wide CPU per episode (all
processes: servers, sandboxes, clients) and the ratio of its episodes per second to in process.

A provider that cannot run here (no Docker engine, no image, no uv on PATH) is one line saying why,
and the rest still run. On a machine with few cores the replicas share those cores with each other
and with the clients: more replicas add processes, not CPU, so the ceiling is what the cores allow
(``cores / CPU per episode``), and in process already keeps every core busy through the sandbox's
worker processes.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envcore.agents.catalog import agent_factory
from envcore.agents.providers import ProviderError, ProviderSpec, Replicas, unavailable
from envcore.agents.rollouts import EpisodeSpec, RolloutResult, run_rollouts
from envcore.cache import ScenarioCache
from envcore.env.bench import MachineCpu


@dataclass
class Row:
    label: str
    replicas: str
    played: int = 0
    seconds: float = 0.0
    start_s: float | None = None
    cpu_ms: float = 0.0
    failed: int = 0
    skipped: str | None = None

    @property
    def rate(self) -> float:
        return self.played / self.seconds if self.seconds else 0.0


def _play(factory: Any, specs: list[EpisodeSpec], sessions: int, agent_id: str, **where: Any) -> RolloutResult:
    with tempfile.TemporaryDirectory(prefix="a01-bench-providers-") as folder:
        return run_rollouts(factory, specs, log=Path(folder) / "episodes.jsonl", parallel=sessions,
                            agent_id=agent_id, source="benchmark", **where)


def _measure(row: Row, factory: Any, specs: list[EpisodeSpec], warmup: list[EpisodeSpec], sessions: int,
             **where: Any) -> Row:
    _play(factory, warmup, len(warmup), "warm-up", **where)
    with MachineCpu() as cpu:
        result = _play(factory, specs, sessions, "bench", **where)
    row.played, row.seconds, row.failed = result.played, result.elapsed_s, len(result.failed)
    row.cpu_ms = cpu.seconds / max(result.played, 1) * 1000
    for failure in result.failed[:3]:
        print(f"  failed ({row.label} x{row.replicas}): {failure}", flush=True)
    print(f"  {row.label:<11} {row.replicas:>8}: {row.played} episodes in {row.seconds:.1f} s = {row.rate:.2f}/s",
          flush=True)
    return row


def run(cache_root: str | None, *, episodes: int, sessions: int, replicas: list[int], kinds: list[str], image: str,
        agent: str, split: str | None) -> int:
    cache = ScenarioCache.open(cache_root)
    ids = sorted(cache.ids(split=split) if split else cache.ids())
    warm = max(replicas)
    if len(ids) < episodes + warm:
        raise SystemExit(f"{len(ids)} scenarios in the split; {episodes} episodes and {warm} warm-ups need "
                         f"{episodes + warm} (lower --episodes)")
    specs = [EpisodeSpec.of(i, scenario=s) for i, s in enumerate(ids[:episodes])]
    warm_specs = [EpisodeSpec.of(i, scenario=s) for i, s in enumerate(ids[episodes:episodes + warm])]
    factory, _ = agent_factory(agent, cache=cache)
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} at the start; {agent} agent, {episodes} "
          f"episodes of split {split or 'any'} (the same in every row), {sessions} sessions at once", flush=True)

    from envcore.env.environment import Runtime
    from envcore.env.sampler import CurriculumSampler

    rows = [_measure(Row("in process", "-"), factory, specs, warm_specs[:1], sessions,
                     runtime=Runtime(sampler=CurriculumSampler(cache), sessions=sessions))]
    for kind in kinds:
        problem = unavailable(kind, image)
        if problem:
            rows.append(Row(kind, "-", skipped=problem))
            print(f"  {kind:<11} skipped: {problem}", flush=True)
            continue
        for count in replicas:
            spec = ProviderSpec.of(kind, replicas=count, image=image if kind in ("docker", "swarm") else None,
                                   sessions=sessions, cache_dir=cache_root)
            row = Row(kind, str(count))
            try:
                with Replicas(spec, cache=cache) as servers:
                    row.start_s = servers.start_s
                    rows.append(_measure(row, factory, specs, warm_specs[:count], sessions, urls=servers.urls))
            except ProviderError as exc:
                row.skipped = str(exc).splitlines()[0][:200]
                rows.append(row)
                print(f"  {kind:<11} {count:>8}: could not start: {row.skipped}", flush=True)
    end_load = os.getloadavg()
    print()
    print(table(rows))
    print()
    print(f"load average {load[0]:.1f} -> {end_load[0]:.1f} (1 min). CPU is the whole machine's (every process, "
          "other work included); machine busy: that CPU over wall time x cores; ceiling: cores / CPU per episode. "
          "Replicas add processes, not cores.")
    return 1 if any(r.failed for r in rows) else 0


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table, ratios against the in-process row."""
    base = rows[0].rate
    cores = os.cpu_count() or 1
    lines = ["| provider | replicas | episodes | seconds | episodes/s | vs in process | start s | CPU ms/episode "
             "| machine busy | ceiling/s |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.skipped:
            lines.append(f"| {r.label} | {r.replicas} | skipped: {r.skipped} | | | | | | | |")
            continue
        ratio = f"{r.rate / base:.2f}x" if base else "n/a"
        start = "-" if r.start_s is None else f"{r.start_s:.1f}"
        ceiling = f"{cores / (r.cpu_ms / 1000):.2f}" if r.cpu_ms else "n/a"
        failed = f" ({r.failed} failed)" if r.failed else ""
        busy = r.cpu_ms / 1000 * r.played / (r.seconds * cores) if r.seconds else 0.0
        lines.append(f"| {r.label} | {r.replicas} | {r.played}{failed} | {r.seconds:.1f} | {r.rate:.2f} | {ratio} | "
                     f"{start} | {r.cpu_ms:.0f} | {busy:.0%} | {ceiling} |")
    return "\n".join(lines)
