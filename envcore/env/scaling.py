"""How episodes per second scale with cores, and where that stops: ``bench env``'s scaling figures.

The same oracle episodes are played in process on one core and then on two (this process and every
process it starts pinned to them, one episode thread per core, a fresh sandbox each time so its zygote
and workers inherit the pinning). Besides episodes per second, each run splits the CPU an episode
costs by process:

* **the parent** (this process: the environment, the grader, the wire to every worker): one Python
  process, so it can use at most one core however many the machine has;
* **the zygote** (forking every template and spare): one process too;
* **the apps' processes** (templates, workers, live apps): as many as there are episodes at once,
  spread over every core.

A projection to ``cores`` cores takes the two-core run's rate per core as what each added core
brings, and caps it at each one-process part's ceiling (``1 / its CPU per episode``); the lowest cap
is the part that stops scaling first. It is an estimate from two points on this machine, printed as
one, not a measurement of the bigger machine.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Callable

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class ScalingPoint:
    cores: int
    episodes: int
    episodes_per_s: float
    parent_cpu_s: float
    zygote_cpu_s: float
    apps_cpu_s: float

    def per_episode_ms(self, seconds: float) -> float:
        return seconds / max(self.episodes, 1) * 1000


def _process_times(pid: int) -> tuple[float, float]:
    """(own CPU seconds, CPU seconds of the descendants it reaped) of process ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(x) / TICK for x in fields[11:15])
    return utime + stime, cutime + cstime


def _pin(cpus: set[int]) -> None:
    """Pin every thread of this process to ``cpus`` (processes started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            continue


def measure(play: Callable[[object, list[int], int], list], make_sandbox: Callable[[int], object],
            seeds: list[int], cores: int) -> ScalingPoint:
    """Play ``seeds`` with ``cores`` episode threads on ``cores`` cores: ``play(sandbox, seeds,
    threads)`` plays them and returns their rewards; ``make_sandbox(lanes)`` starts a fresh sandbox."""
    original = os.sched_getaffinity(0)
    _pin(set(sorted(original)[:cores]))
    try:
        sandbox = make_sandbox(cores)
        try:
            play(sandbox, seeds[:2], cores)  # first contact (caches, templates' first import), untimed
            zygote = sandbox.zygote_pid
            own0 = resource.getrusage(resource.RUSAGE_SELF)
            z_own0, z_kids0 = _process_times(zygote)
            started = time.perf_counter()
            play(sandbox, seeds[2:], cores)
            elapsed = time.perf_counter() - started
            time.sleep(0.5)  # the last templates retired and reaped
            z_own1, z_kids1 = _process_times(zygote)
            own1 = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            sandbox.close()
    finally:
        _pin(original)
    episodes = len(seeds) - 2
    parent = (own1.ru_utime + own1.ru_stime) - (own0.ru_utime + own0.ru_stime)
    return ScalingPoint(cores, episodes, episodes / elapsed, parent, z_own1 - z_own0, z_kids1 - z_kids0)


def projection(one: ScalingPoint, two: ScalingPoint, cores: int) -> list[str]:
    """Lines saying how ``two`` scaled from ``one`` and what ``cores`` cores would give, and which
    one-process part caps it first."""
    lines = [f"scaling, oracle episodes in process, one episode thread per core: 1 core {one.episodes_per_s:.2f} "
             f"episodes/s, 2 cores {two.episodes_per_s:.2f} episodes/s "
             f"({two.episodes_per_s / max(one.episodes_per_s, 1e-9):.2f}x, "
             f"{two.episodes_per_s / max(2 * one.episodes_per_s, 1e-9):.0%} of linear)"]
    parent_ms, zygote_ms, apps_ms = (two.per_episode_ms(x) for x in (two.parent_cpu_s, two.zygote_cpu_s, two.apps_cpu_s))
    ceilings = {"the parent process (environment, grader, wire)": 1000 / parent_ms if parent_ms else float("inf"),
                "the zygote (forks)": 1000 / zygote_ms if zygote_ms else float("inf")}
    lines.append(f"  CPU per episode on 2 cores: parent {parent_ms:.0f} ms, zygote {zygote_ms:.0f} ms, apps' processes "
                 f"(templates, workers, live apps) {apps_ms:.0f} ms")
    linear = two.episodes_per_s / 2 * cores
    first, ceiling = min(ceilings.items(), key=lambda item: item[1])
    projected = min(linear, ceiling)
    lines.append(f"  projected to {cores} cores: {projected:.1f} episodes/s ({cores} x the 2-core rate per core is "
                 f"{linear:.1f}; {first}, one process on one core, caps it at {ceiling:.1f})")
    lines.append(f"  stops scaling first: {first if ceiling < linear else 'nothing before the cores run out'}")
    return lines
