"""The Inspect tasks, one per evaluation split: ``test``, ``test_styles``, ``external`` and ``private``.

``inspect eval a01_repair_gym/test --model openai/gpt-4o`` plays one episode per scenario of the
split and scores each with the environment's reward (docs/inspect.md). The splits:

* ``test``: the benchmark, two domains no training scenario uses;
* ``test_styles``: held-out code styles (layouts, auth schemes, data layers) of the training domains;
* ``external``: apps written outside the factory and imported (docs/bundle-format.md);
* ``private``: fresh test-split scenarios generated at evaluation time from a secret
  (:mod:`envcore.factory.private`), so nobody can have trained on them.

Options (``-T name=value``): ``cache`` (a cache folder; default the newest shipped one), ``n`` (the
first ``n`` scenarios by id), ``max_steps`` (the step budget; default the environment's), ``server``
(the URL of a running A01 server, played over its WebSocket; default: in process), ``seed`` (episode
``i`` is reset with ``seed + i``), ``parallel`` (episodes open at once) and ``episode_log`` (also write
the project's episode-log records, in process). The private task takes ``count`` and reads its secret
from ``A01_PRIVATE_SEED`` or from ``seed_file``, never from an option's value: Inspect writes every
option into the log.

Every task records in its metadata what its scores depend on: the cache version (or the server),
the split, the step budget and the hash of the reward's configuration.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import MemoryDataset

from a01_repair_gym._agent import repair_agent, start_episode
from a01_repair_gym._dataset import PlannedSamples, cache_samples, server_samples
from a01_repair_gym._scorer import environment_reward, mean_reward
from a01_repair_gym._session import Episodes, LocalSession, RemoteSession, Session
from envcore.cache import ScenarioCache

TASK_VERSION = 1
"""Bumped when a change could change a task's scores (its samples, its agent loop, its scoring)."""

DEFAULT_PARALLEL = 8
"""Episodes open at once, by default: the default sandbox has room for them with spares."""

TAGS = ["security", "code-repair", "access-control", "owasp-a01"]


def _max_steps(max_steps: int | None) -> int | None:
    from envcore.env.environment import MAX_STEPS_LIMIT

    if max_steps is not None and not 1 <= max_steps <= MAX_STEPS_LIMIT:
        raise ValueError(f"max_steps must be between 1 and {MAX_STEPS_LIMIT}, not {max_steps}")
    return max_steps


def _runtime(cache: ScenarioCache, max_steps: int | None, parallel: int, episode_log: str | None, *,
             private: bool = False) -> Any:
    """The in-process runtime every session of the task shares: the cache, the sandbox sized for
    ``parallel`` episodes, the step budget and, if asked, the episode log (for the private split,
    records scrubbed as ``eval --split private`` keeps them: hashes and results, no code, no steps'
    contents)."""
    from envcore.agents.private_eval import PrivateEpisodeLog
    from envcore.env.environment import Runtime
    from envcore.env.episode import DEFAULT_MAX_STEPS
    from envcore.env.episode_log import EpisodeLogger
    from envcore.env.sampler import CurriculumSampler
    from envcore.settings import positive_int

    log_class = PrivateEpisodeLog if private else EpisodeLogger
    logger = log_class(episode_log) if episode_log else None
    return Runtime(sampler=CurriculumSampler(cache), sessions=parallel, source="evaluation",
                   max_steps=max_steps or positive_int("A01_MAX_STEPS", DEFAULT_MAX_STEPS), logger=logger)


def _reward_hash() -> str:
    from envcore.env.reward import reward_configuration_hash

    return reward_configuration_hash()


def split_task(split: str, *, cache: str | None = None, n: int | None = None, max_steps: int | None = None,
               server: str | None = None, seed: int = 0, parallel: int = DEFAULT_PARALLEL,
               episode_log: str | None = None) -> Task:
    """The task for one split of a cache (in process) or of a server's catalog."""
    max_steps = _max_steps(max_steps)
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, not {parallel}")
    if server is not None:
        if cache is not None or episode_log is not None:
            raise ValueError("cache and episode_log are for in-process runs: a server plays its own cache and "
                             "writes its own episode log")
        planned = server_samples(server, split, n=n, seed=seed)
        return _task(split, planned, lambda: RemoteSession(server), max_steps=max_steps, parallel=parallel,
                     facts={"server": server})
    opened = ScenarioCache.open(cache)
    runtime = _runtime(opened, max_steps, parallel, episode_log)
    planned = cache_samples(opened, split, n=n, max_steps=runtime.max_steps, seed=seed)
    return _task(split, planned, lambda: LocalSession(runtime), max_steps=runtime.max_steps, parallel=parallel,
                 facts={"cache_version": opened.root.name})


def _task(split: str, planned: PlannedSamples, open_session: Callable[[], Session], *, max_steps: int | None,
          parallel: int, facts: dict[str, Any]) -> Task:
    episodes = Episodes(open_session, plan={str(sample.id): plan for sample, plan in planned},
                        reset_options={"max_steps": max_steps} if max_steps is not None else {}, parallel=parallel)
    return Task(
        dataset=MemoryDataset([sample for sample, _ in planned], name=split),
        setup=start_episode(episodes),
        solver=repair_agent(episodes),
        scorer=environment_reward(episodes),
        cleanup=episodes.close,
        epochs=Epochs(1, mean_reward()),
        version=TASK_VERSION,
        tags=TAGS,
        metadata={"split": split, **facts, "max_steps": max_steps, "reward_configuration": _reward_hash()},
    )


@task
def test(cache: str | None = None, n: int | None = None, max_steps: int | None = None, server: str | None = None,
         seed: int = 0, parallel: int = DEFAULT_PARALLEL, episode_log: str | None = None) -> Task:
    """The benchmark: repair Broken Access Control in apps of two domains no training scenario uses."""
    return split_task("test", cache=cache, n=n, max_steps=max_steps, server=server, seed=seed, parallel=parallel,
                      episode_log=episode_log)


@task
def test_styles(cache: str | None = None, n: int | None = None, max_steps: int | None = None,
                server: str | None = None, seed: int = 0, parallel: int = DEFAULT_PARALLEL,
                episode_log: str | None = None) -> Task:
    """Held-out code styles: training domains written in layouts, auth schemes and data layers no
    training scenario uses."""
    return split_task("test_styles", cache=cache, n=n, max_steps=max_steps, server=server, seed=seed,
                      parallel=parallel, episode_log=episode_log)


@task
def external(cache: str | None = None, n: int | None = None, max_steps: int | None = None,
             server: str | None = None, seed: int = 0, parallel: int = DEFAULT_PARALLEL,
             episode_log: str | None = None) -> Task:
    """Apps written outside the scenario factory (deliberately vulnerable APIs), imported and graded
    like generated ones."""
    return split_task("external", cache=cache, n=n, max_steps=max_steps, server=server, seed=seed,
                      parallel=parallel, episode_log=episode_log)


@task
def private(count: int = 100, max_steps: int | None = None, seed_file: str | None = None, seed: int = 0,
            parallel: int = DEFAULT_PARALLEL, episode_log: str | None = None) -> Task:
    """Test-split scenarios generated now from a secret (``A01_PRIVATE_SEED``, or the file ``seed_file``):
    nobody can have trained on them. Samples name their scenarios by content hash only."""
    from envcore.factory.private import private_cache

    max_steps = _max_steps(max_steps)
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, not {parallel}")
    secret = Path(seed_file).read_text().strip() if seed_file else None  # None: private_cache reads the variable
    opened = private_cache(secret, count=count, say=lambda text: print(text, file=sys.stderr))
    from envcore.agents.private_eval import set_digest

    runtime = _runtime(opened, max_steps, parallel, episode_log, private=True)
    planned = cache_samples(opened, "private", n=None, max_steps=runtime.max_steps, seed=seed, show_ids=False)
    hashes = sorted(str(sample.metadata["scenario_hash"]) for sample, _ in planned if sample.metadata)
    return _task("private", planned, lambda: LocalSession(runtime), max_steps=runtime.max_steps, parallel=parallel,
                 facts={"scenario_hashes": hashes, "scenario_hashes_sha256": set_digest(hashes)})
