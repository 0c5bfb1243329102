"""Parallel rollouts: many episodes of one agent, in process or against server replicas, resumable.

:func:`run_rollouts` plays a list of :class:`EpisodeSpec` (a seed and reset options) with
``parallel`` sessions at once and appends one episode-log record per finished episode to ``log``:

* **in process** (no ``urls``): each session is an :class:`~envcore.env.environment.A01Environment`
  over one shared runtime, whose logger writes the records (with the full verification report);
* **remote** (``urls``): each session is an :class:`~envcore.env.client.A01Env` WebSocket session to
  one of the servers, each new session on the least-loaded of them by their ``/capacity``
  (:class:`~envcore.agents.providers.Balancer`; equal idle servers fill round-robin), which is how
  OpenEnv scales past one machine; :mod:`envcore.agents.providers` starts such servers. The record
  is written here, from what the client saw: every action and observation, the final diff (from
  the session's state) and the reward breakdown; the hidden verification report stays on the server.

**Resumable**: an episode that names its scenario (as evaluation's do) and whose record (same
agent, scenario and seed) is already in ``log`` is not played again, so an interrupted run continues
where it stopped. Agents are built per session by
``agent_factory`` (agents keep per-episode state). An episode that raises (a dropped connection, a
server that went away) is retried once in a fresh session and otherwise reported in the result,
never written as if it had been played.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envcore.agents.base import Agent
from envcore.agents.play import play_episode
from envcore.env.episode_log import EpisodeLogger, EpisodeRecord, StepEntry, read_episodes


@dataclass(frozen=True)
class EpisodeSpec:
    seed: int
    options: tuple[tuple[str, Any], ...] = ()
    """Reset options (``split``, ``scenario``, ``tier``, ``bug_class``, ``max_steps``) as sorted pairs."""

    @classmethod
    def of(cls, seed: int, **options: Any) -> "EpisodeSpec":
        return cls(seed, tuple(sorted((k, v) for k, v in options.items() if v is not None)))

    @property
    def scenario(self) -> str | None:
        return dict(self.options).get("scenario")


@dataclass
class RolloutResult:
    played: int = 0
    skipped: int = 0
    """Already in the log (resumed)."""
    failed: list[str] = field(default_factory=list)
    """Episodes that could not be played, with why."""
    elapsed_s: float = 0.0


def done_keys(log: Path, agent_id: str) -> set[tuple[str, int]]:
    """(scenario id, seed) of the episodes ``agent_id`` already finished in ``log``."""
    if not log.exists():
        return set()
    return {(r.scenario_id, r.seed) for r in read_episodes(log)
            if r.agent_id == agent_id and r.outcome != "abandoned" and r.seed is not None}


def run_rollouts(agent_factory: Callable[[], Agent], episodes: Iterable[EpisodeSpec], *, log: str | Path,
                 parallel: int = 1, urls: list[str] | None = None, runtime: Any = None, agent_id: str | None = None,
                 source: str = "evaluation", progress: Callable[[int], None] | None = None) -> RolloutResult:
    """Play ``episodes``; see the module docstring."""
    log = Path(log)
    specs = list(episodes)
    agent_id = agent_id or agent_factory().name
    finished = done_keys(log, agent_id)
    todo = [s for s in specs if not (s.scenario is not None and (s.scenario, s.seed) in finished)]
    result = RolloutResult(skipped=len(specs) - len(todo))
    lock = threading.Lock()
    queue = list(reversed(todo))
    count = [result.skipped]
    if progress:
        progress(count[0])
    logger = EpisodeLogger(log)
    if urls:
        session_factory: Callable[[int], Any] = remote_sessions(urls, logger, source)
    else:
        session_factory = local_sessions(runtime, logger, source)
    started = time.perf_counter()

    def session_loop(index: int) -> None:
        session = None
        agent = agent_factory()
        while True:
            with lock:
                if not queue:
                    break
                spec = queue.pop()
            error = None
            for attempt in (1, 2):
                try:
                    if session is None:
                        session = session_factory(index)
                    session.play(agent, spec, agent_id)
                    error = None
                    break
                except Exception as exc:  # noqa: BLE001 - retried once in a fresh session, then reported
                    error = f"seed {spec.seed} {dict(spec.options)}: {type(exc).__name__}: {exc}"[:500]
                    if session is not None:
                        session.close()
                    session = None
            with lock:
                if error:
                    result.failed.append(error)
                else:
                    result.played += 1
                count[0] += 1
                if progress:
                    progress(count[0])
        if session is not None:
            session.close()

    threads = [threading.Thread(target=session_loop, args=(i,), name=f"rollout-{i}") for i in range(max(1, parallel))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    logger.close()
    result.elapsed_s = time.perf_counter() - started
    return result


class LocalSession:
    """One in-process session: an :class:`~envcore.env.environment.A01Environment` over a shared runtime,
    whose logger writes each finished episode's record (with the full verification report)."""

    def __init__(self, runtime: Any) -> None:
        from envcore.env.environment import A01Environment

        self.env = A01Environment(runtime)

    def reset(self, *, seed: int, agent_id: str, **options: Any) -> Any:
        return self.env.reset(seed=seed, agent_id=agent_id, **options)

    def step(self, action: dict[str, Any]) -> Any:
        return self.env.step(action)

    def play(self, agent: Agent, spec: EpisodeSpec, agent_id: str) -> None:
        play_episode(self, agent, seed=spec.seed, agent_id=agent_id, **dict(spec.options))

    def close(self) -> None:
        self.env.close()


def local_sessions(runtime: Any, logger: EpisodeLogger | None, source: str) -> Callable[[int], LocalSession]:
    """A factory of in-process sessions sharing one runtime (``runtime`` or one from the environment
    variables) that log to ``logger`` as ``source``."""
    from dataclasses import replace

    from envcore.env.environment import Runtime

    shared = replace(runtime or Runtime.from_environ(), logger=logger, source=source)
    return lambda index: LocalSession(shared)


class RemoteSession:
    """One WebSocket session with a server. It writes each finished episode's record itself, from
    what the client saw: every action and observation, the final diff (from the session's state) and
    the reward breakdown; the hidden verification report stays on the server."""

    def __init__(self, url: str, logger: EpisodeLogger | None, source: str) -> None:
        from envcore.env.client import A01Env

        self.client = A01Env(base_url=url, message_timeout_s=300).sync()
        self.client.connect()
        self.url, self.logger, self.source = url.rstrip("/"), logger, source
        self._facts: dict[str, dict[str, Any]] = {}
        self._http: Any = None
        self._episode: dict[str, Any] | None = None

    def facts(self, scenario_id: str) -> dict[str, Any]:
        """The scenario's public catalog entry (bug class, tier, content hash), from the server."""
        if scenario_id not in self._facts:
            if self._http is None:
                import httpx

                self._http = httpx.Client(timeout=30)  # one connection for the session's lookups
            reply = self._http.get(f"{self.url}/scenarios/{scenario_id}")
            reply.raise_for_status()
            data = reply.json()
            self._facts[scenario_id] = {k: data.get(k) for k in ("bug_class", "tier", "content_hash", "domain")}
        return self._facts[scenario_id]

    def reset(self, *, seed: int, agent_id: str, **options: Any) -> Any:
        observation = self.client.reset(seed=seed, agent_id=agent_id, **options).observation
        self._episode = {"started": time.time(), "steps": [], "options": options, "seed": seed, "agent_id": agent_id}
        return observation

    def step(self, action: dict[str, Any]) -> Any:
        if self._episode is None:
            raise RuntimeError("reset the session before stepping it")
        started = time.perf_counter()
        observation = self.client.step(action).observation
        steps: list[StepEntry] = self._episode["steps"]
        steps.append(StepEntry(step=len(steps) + 1, action=action, observation=observation.model_dump(mode="json"),
                               elapsed_ms=(time.perf_counter() - started) * 1000))
        if observation.done:
            self._write(observation)
        return observation

    def _write(self, observation: Any) -> None:
        episode, self._episode = self._episode, None
        assert episode is not None
        if self.logger is None:
            return
        state = self.client.state()
        breakdown = observation.reward_breakdown or {}
        facts = self.facts(observation.scenario_id)
        exhausted = any(c.get("name") == "budget_exhausted" and c.get("measured") for c in breakdown.get("components", []))
        outcome = "infrastructure_error" if observation.reward is None else ("budget_exhausted" if exhausted else "submitted")
        self.logger.write(EpisodeRecord(
            episode_id=state.episode_id or uuid.uuid4().hex, agent_id=episode["agent_id"], source=self.source,
            scenario_id=observation.scenario_id, scenario_hash=facts["content_hash"] or observation.scenario_id,
            cache_version=None, bug_class=facts["bug_class"] or "", tier=int(facts["tier"] or 0),
            split=episode["options"].get("split"), seed=episode["seed"], started_at=episode["started"],
            ended_at=time.time(), outcome=outcome, max_steps=state.max_steps, steps=episode["steps"], diff=state.diff,
            verification=None, reward=observation.reward, reward_breakdown=observation.reward_breakdown,
            timings_ms={"total": (time.time() - episode["started"]) * 1000},
        ))

    def play(self, agent: Agent, spec: EpisodeSpec, agent_id: str) -> None:
        play_episode(self, agent, seed=spec.seed, agent_id=agent_id, **dict(spec.options))

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing a broken session
            pass
        if self._http is not None:
            self._http.close()
        release, self.on_close = self.on_close, None
        if release is not None:
            release()

    on_close: Callable[[], None] | None = None
    """Called once when the session is closed (the balancer counts it as ended)."""


def remote_sessions(urls: list[str], logger: EpisodeLogger | None, source: str) -> Callable[[int], RemoteSession]:
    """A factory of WebSocket sessions, each opened on the least-loaded of ``urls``
    (:class:`~envcore.agents.providers.Balancer`)."""
    from envcore.agents.providers import Balancer

    balancer = Balancer(urls)

    def open_session(index: int) -> RemoteSession:
        chosen = balancer.acquire()
        try:
            session = RemoteSession(balancer.urls[chosen], logger, source)
        except BaseException:
            balancer.release(chosen)
            raise
        session.on_close = lambda: balancer.release(chosen)
        return session

    open_session.balancer = balancer  # type: ignore[attr-defined]
    return open_session
