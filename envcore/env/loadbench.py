"""Figures for ``python -m envcore bench load``: the server under a long, concurrent load.

Many WebSocket sessions (64 by default) play thousands of episodes (5,000) against ``python app.py``
in its own process, each session keeping its connection across its episodes, as a training job's
rollout workers do. Episodes mix three scripted players, so that more than the happy path is
exercised:

* **oracle** (14 in 20): reads, requests, the reference fix, ``run_tests``, ``submit``; its reward
  must be at least 0.95;
* **no-op** (3 in 20): reads a file and submits the app unchanged; its reward must be at most 0;
* **clumsy** (3 in 20): a read outside the app, a diff that does not apply, an unknown path, then
  submits unchanged; every bad action must come back as an observation ``error`` and the reward
  must be at most 0.

Counted as **errors**: anything the client raised (transport, protocol, timeouts), an episode
without a reward (the verifier could not run) and a reward on the wrong side of its bound. Episodes
without a reward are also reported on their own as the **infrastructure-error rate** (goal 0): the
sandbox failing, never an agent's doing. The
server's resident memory is sampled every half second; the figure is its growth between the end
of the first block of episodes (1,000 by default) and the end of the last, after the caches have
filled (a leak grows without bound, a cache does not). The number of sandbox processes is reported
too, so a leaked worker shows up.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from envcore.cache import ScenarioCache
from envcore.env.bench import free_port, oracle_actions, start_server, stop_server
from envcore.env.sampler import CurriculumSampler

PLAYERS = ("oracle",) * 14 + ("noop",) * 3 + ("clumsy",) * 3


def player_for(index: int) -> str:
    return PLAYERS[index % len(PLAYERS)]


def actions_for(player: str, bundle: Any) -> list[dict[str, Any]]:
    """The scripted actions of ``player`` after reset."""
    if player == "oracle":
        return oracle_actions(bundle)
    first = sorted(p for p in bundle.files if p.endswith(".py"))[0]
    if player == "noop":
        return [{"tool": "read_file", "path": first}, {"tool": "submit"}]
    return [
        {"tool": "read_file", "path": "../../etc/passwd"},
        {"tool": "apply_patch", "diff": "--- a/nowhere.py\n+++ b/nowhere.py\n@@ -1 +1 @@\n-x\n+y\n"},
        {"tool": "read_file", "path": "no/such/file.py"},
        {"tool": "submit"},
    ]


def judge(player: str, reward: float | None, errors_seen: int) -> str | None:
    """Why the episode's end is wrong, or ``None``."""
    if reward is None:
        return "no reward (the verifier could not run)"
    if player == "oracle" and reward < 0.95:
        return f"oracle rewarded {reward}"
    if player in ("noop", "clumsy") and reward > 0:
        return f"{player} rewarded {reward}"
    if player == "clumsy" and errors_seen != 3:
        return f"clumsy saw {errors_seen} observation errors, not 3"
    return None


@dataclass
class MemorySampler:
    """Samples the server's RSS and its sandbox's process count in a thread, tagged with progress."""

    pid: int
    done: list[int]
    interval_s: float = 0.5
    samples: list[tuple[int, int, int]] = field(default_factory=list)
    """(episodes finished, server RSS in bytes, sandbox processes)."""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> "MemorySampler":
        self._thread.start()
        return self

    def sample(self) -> tuple[int, int, int] | None:
        try:
            process = psutil.Process(self.pid)
            rss = process.memory_info().rss
            children = len(process.children(recursive=True))
        except psutil.Error:
            return None
        value = (self.done[0], rss, children)
        self.samples.append(value)
        return value

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class LoadResult:
    episodes: int
    elapsed_s: float
    errors: list[str]
    by_player: dict[str, int]
    blocks: list[dict[str, float]]
    infrastructure_errors: int = 0
    """Episodes that ended without a reward (the verifier could not run)."""
    """Per block of episodes: episodes/s, RSS at its end and its mean (MiB), sandbox processes at its end."""

    @property
    def rss_growth(self) -> float | None:
        """RSS at the end of the last block relative to the end of the first."""
        if len(self.blocks) < 2:
            return None
        return self.blocks[-1]["rss_end_mib"] / self.blocks[0]["rss_end_mib"] - 1


async def play(url: str, episodes: int, sessions: int, split: str | None, sampler: CurriculumSampler,
               done: list[int], on_block: Any, block: int, seed0: int = 100_000,
               no_reward: list[int] | None = None) -> tuple[list[str], dict[str, int]]:
    """Play ``episodes`` episodes over ``sessions`` concurrent sessions; (errors, episodes per player).
    ``no_reward[0]`` counts the episodes that ended without a reward."""
    from envcore.env.client import A01Env

    next_index = [0]
    errors: list[str] = []
    by_player: dict[str, int] = {}

    async def session() -> None:
        env: A01Env | None = None
        try:
            while next_index[0] < episodes:
                index = next_index[0]
                next_index[0] += 1
                player = player_for(index)
                try:
                    if env is None:
                        env = A01Env(base_url=url, message_timeout_s=300)  # connects on first use
                    result = await env.reset(seed=seed0 + index, split=split, agent_id=f"load-{player}")
                    bundle = sampler.bundle(result.observation.scenario_id)
                    errors_seen = 0
                    for action in actions_for(player, bundle):
                        result = await env.step(action)
                        errors_seen += result.observation.error is not None and action["tool"] != "submit"
                    if result.reward is None and no_reward is not None:
                        no_reward[0] += 1
                    problem = judge(player, result.reward, errors_seen)
                    if problem:
                        said = f": {result.observation.error}" if result.observation.error else ""
                        errors.append(f"episode {index} ({player}, {result.observation.scenario_id}): {problem}{said}"[:600])
                except Exception as exc:  # noqa: BLE001 - counted and shown; the session reconnects
                    errors.append(f"episode {index} ({player}): {type(exc).__name__}: {exc}"[:400])
                    if env is not None:
                        await _close_quietly(env)
                    env = None
                by_player[player] = by_player.get(player, 0) + 1
                done[0] += 1
                if done[0] % block == 0:
                    on_block(done[0])
        finally:
            if env is not None:
                await _close_quietly(env)

    await asyncio.gather(*(session() for _ in range(sessions)))
    return errors, by_player


async def _close_quietly(env: Any) -> None:
    try:
        await env.close()
    except Exception:  # noqa: BLE001 - the connection is being dropped anyway
        pass


def measure(cache_root: str, *, episodes: int, sessions: int, block: int, split: str | None,
            progress: Any = None) -> LoadResult:
    """Start the server, play the episodes, return what was measured (the server is stopped)."""
    cache = ScenarioCache.open(cache_root)
    sampler = CurriculumSampler(cache)
    port = free_port()
    server = start_server(str(cache.root), port, sessions)
    done, no_reward = [0], [0]
    memory = MemorySampler(server.pid, done).start()
    marks: list[tuple[int, float, tuple[int, int, int] | None]] = []
    started = time.perf_counter()

    def on_block(count: int) -> None:
        marks.append((count, time.perf_counter(), memory.sample()))
        if progress is not None:
            progress(count)

    try:
        errors, by_player = asyncio.run(play(f"http://127.0.0.1:{port}", episodes, sessions, split, sampler,
                                             done, on_block, block, no_reward=no_reward))
    finally:
        elapsed = time.perf_counter() - started
        memory.stop()
        stop_server(server, timeout_s=30)
    blocks = []
    previous_count, previous_time = 0, started
    for count, at, sample in marks:
        in_block = [rss for n, rss, _ in memory.samples if previous_count <= n <= count]
        end = sample or (count, in_block[-1] if in_block else 0, 0)
        blocks.append({
            "episodes": count,
            "rate": (count - previous_count) / max(at - previous_time, 1e-9),
            "rss_end_mib": end[1] / 2**20,
            "rss_mean_mib": statistics.fmean(in_block) / 2**20 if in_block else end[1] / 2**20,
            "sandbox_processes": end[2],
        })
        previous_count, previous_time = count, at
    return LoadResult(episodes=done[0], elapsed_s=elapsed, errors=errors, by_player=by_player, blocks=blocks,
                      infrastructure_errors=no_reward[0])


def run(cache_root: str, *, episodes: int, sessions: int, block: int, split: str | None) -> int:
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; {sessions} sessions, "
          f"{episodes} episodes (oracle/no-op/clumsy {PLAYERS.count('oracle')}/{PLAYERS.count('noop')}/"
          f"{PLAYERS.count('clumsy')} in {len(PLAYERS)}), blocks of {block}")

    def progress(count: int) -> None:
        print(f"  ... {count} episodes", flush=True)

    result = measure(cache_root, episodes=episodes, sessions=sessions, block=block, split=split, progress=progress)
    for b in result.blocks:
        print(f"episodes up to {b['episodes']:>6}: {b['rate']:.1f} episodes/s; server RSS {b['rss_end_mib']:.1f} MiB "
              f"at the end (mean {b['rss_mean_mib']:.1f}); sandbox processes {b['sandbox_processes']}")
    growth = result.rss_growth
    print(f"{result.episodes} episodes in {result.elapsed_s:.1f} s = {result.episodes / result.elapsed_s:.1f} episodes/s "
          f"over {sessions} sessions; {result.by_player}")
    print(f"errors: {len(result.errors)}")
    rate = result.infrastructure_errors / result.episodes if result.episodes else 0.0
    print(f"infrastructure-error rate: {result.infrastructure_errors}/{result.episodes} = {rate:.2%} (goal 0)")
    for message in result.errors[:10]:
        print(f"  {message}")
    if growth is not None:
        print(f"server RSS growth, end of the first block to end of the last: {growth:+.1%}")
    return 1 if result.errors or result.episodes < episodes else 0
