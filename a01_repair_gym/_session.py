"""One episode per sample: the environment sessions of a task, and what each sample keeps of its episode.

A sample plays one episode in a session of its own:

* **in process** (:class:`LocalSession`): an :class:`~envcore.env.environment.A01Environment` over the
  task's :class:`~envcore.env.environment.Runtime` (one cache, one sandbox for all its sessions).
  Sessions are cheap; their blocking calls run in worker threads, so samples play concurrently;
* **against a server** (:class:`RemoteSession`): an :class:`~envcore.env.client.A01Env` WebSocket
  session, the way every other remote client plays.

:class:`Episodes` is a task's table of them, keyed by the sample's ``TaskState.uuid`` (unique per
sample and epoch), owned by the task (never a module global: samples run concurrently, and two tasks
of one run must not share sessions). It also bounds how many episodes are open at once (``parallel``):
each open episode holds sandbox workers (its live app, a test run), and a sandbox asked for more than
it has makes episodes wait and then fail as infrastructure errors.

What a sample keeps of its episode lives in Inspect's sample store (:class:`EpisodeProgress`, plain
JSON): the steps taken, whether the episode ended, which Inspect limit stopped the agent, and the final
observation's reward and breakdown. The scorer reads it from there, so a log can be rescored without
the sessions.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from inspect_ai.solver import TaskState
from inspect_ai.util import StoreModel
from pydantic import Field, ValidationError

from envcore.env.actions import LIMITS, A01Observation, clip, parse_action


class Session(Protocol):
    """One environment session: an episode at a time."""

    async def reset(self, **options: Any) -> A01Observation: ...

    async def step(self, action: dict[str, Any]) -> A01Observation: ...

    async def diff(self) -> str:
        """The episode's current diff against the original app."""
        ...

    async def close(self) -> None: ...


class LocalSession:
    """An in-process environment session; its blocking calls run in a worker thread."""

    def __init__(self, runtime: Any) -> None:
        from envcore.env.environment import A01Environment

        self.env = A01Environment(runtime)

    async def reset(self, **options: Any) -> A01Observation:
        return await anyio.to_thread.run_sync(functools.partial(self.env.reset, **options))

    async def step(self, action: dict[str, Any]) -> A01Observation:
        return await anyio.to_thread.run_sync(self.env.step, action)

    async def diff(self) -> str:
        episode = self.env.episode
        return await anyio.to_thread.run_sync(episode.diff) if episode is not None else ""

    async def close(self) -> None:
        await anyio.to_thread.run_sync(self.env.close)


class RemoteSession:
    """A WebSocket session with a running A01 server.

    The client validates an action before it sends it (a typo fails fast there); an action that does
    not validate is sent as the model's reply instead, which the server reads and refuses as an invalid
    step. Either way the server counts it, as it would for any other client."""

    def __init__(self, url: str, *, message_timeout_s: float = 300.0) -> None:
        from envcore.env.client import A01Env

        self.client = A01Env(base_url=url, message_timeout_s=message_timeout_s)
        self._connected = False

    async def reset(self, **options: Any) -> A01Observation:
        if not self._connected:
            await self.client.connect()
            self._connected = True
        return (await self.client.reset(**options)).observation

    async def step(self, action: dict[str, Any]) -> A01Observation:
        try:
            parse_action(action)
        except ValidationError:
            action = {"tool": "reply", "text": clip(json.dumps(action, default=str), LIMITS["reply_chars"])}
        return (await self.client.step(action)).observation

    async def diff(self) -> str:
        return (await self.client.state()).diff

    async def close(self) -> None:
        if self._connected:
            await self.client.close()


class EpisodeProgress(StoreModel):
    """What a sample keeps of its episode, in Inspect's sample store."""

    steps: int = Field(default=0)
    """Steps sent to the environment (the environment's own count is in the reward breakdown)."""
    done: bool = Field(default=False)
    """Whether the episode has ended (submitted, or its step budget used up)."""
    limit: str | None = Field(default=None)
    """The Inspect limit (``token``, ``message``, ``time`` ...) that stopped the agent, if one did."""
    final: dict[str, Any] | None = Field(default=None)
    """The final observation: ``reward`` (``None`` when the verifier could not run), ``reward_breakdown``,
    ``result`` (outcome, resolution, probe counts), ``text`` and ``error``."""


@dataclass(frozen=True)
class Planned:
    """How one sample's episode is reset: its scenario (never shown in the sample) and its seed."""

    scenario: str
    seed: int


@dataclass
class Episodes:
    """A task's sessions, one per running sample; see the module docstring."""

    open_session: Callable[[], Session]
    plan: dict[str, Planned]
    """Each sample's reset, by sample id."""
    reset_options: dict[str, Any] = field(default_factory=dict)
    """Reset options every episode of the task gets (``max_steps``)."""
    parallel: int = 8
    """The most episodes open at once."""
    _sessions: dict[str, Session] = field(default_factory=dict, repr=False)
    _slots: anyio.Semaphore | None = field(default=None, repr=False)

    def _repr_params_(self) -> str:
        """How the solvers and the scorer that hold this table are named in a log's parameters."""
        return f"Episodes(parallel={self.parallel})"

    async def start(self, state: TaskState, **options: Any) -> A01Observation:
        """Open the sample's session and reset it to the sample's scenario; the first observation."""
        if self._slots is None:  # made here, inside the running event loop
            self._slots = anyio.Semaphore(self.parallel)
        await self._slots.acquire()
        try:
            session = self.open_session()
        except BaseException:
            self._slots.release()
            raise
        self._sessions[state.uuid] = session
        planned = self.plan[str(state.sample_id)]
        # split None: the scenario is named, whatever split the cache files it under (a private cache
        # has no other); the environment's default split would refuse a scenario outside it
        observation = await session.reset(scenario=planned.scenario, seed=planned.seed, split=None,
                                          **self.reset_options, **options)
        progress = state.store_as(EpisodeProgress)
        progress.steps, progress.done, progress.limit, progress.final = 0, False, None, None
        return observation

    def session(self, state: TaskState) -> Session | None:
        return self._sessions.get(state.uuid)

    async def step(self, state: TaskState, action: dict[str, Any]) -> A01Observation:
        """Run one action as a step of the sample's episode, and keep what it says in the store."""
        session = self._sessions.get(state.uuid)
        if session is None:
            raise RuntimeError("this sample has no episode: the task's setup starts one")
        observation = await session.step(action)
        progress = state.store_as(EpisodeProgress)
        progress.steps += 1
        if observation.done and not progress.done:
            progress.done = True
            progress.final = {"reward": observation.reward, "reward_breakdown": observation.reward_breakdown,
                              "result": observation.result, "text": observation.text, "error": observation.error}
        return observation

    async def close(self, state: TaskState) -> None:
        """End the sample's session (an unfinished episode is logged as abandoned) and free its slot."""
        session = self._sessions.pop(state.uuid, None)
        if session is None:
            return
        try:
            with anyio.CancelScope(shield=True):
                await session.close()
        finally:
            if self._slots is not None:
                self._slots.release()
