"""Playing one episode: an agent against an environment, in process or through the client.

:func:`play_episode` resets the environment, hands the first observation to the agent and steps
until the episode is done. The environment may be an :class:`~envcore.env.environment.A01Environment`
(in process) or a synchronous :class:`~envcore.env.client.A01Env` (``A01Env(...).sync()``): both
answer ``reset``/``step``, one with observations, the other with step results. The environment's
own step budget ends every episode, so a looping agent cannot hang the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from envcore.agents.base import Action, Agent
from envcore.env.actions import A01Observation

OnStep = Callable[[Action, A01Observation, float], None]
"""Called after each step with the action, the observation that answered it and the step's milliseconds."""


def _observation(result: Any) -> A01Observation:
    return result.observation if hasattr(result, "observation") else result


def play_episode(env: Any, agent: Agent, *, seed: int, agent_id: str | None = None, on_step: OnStep | None = None,
                 **options: Any) -> A01Observation:
    """Play one episode of ``agent`` (reset with ``seed`` and ``options``: split, tier, bug_class,
    scenario, max_steps); return the final observation (reward and breakdown included). The episode
    is logged under ``agent_id`` (default: the agent's name); ``on_step`` sees every step."""
    observation = _observation(env.reset(seed=seed, agent_id=agent_id or agent.name, **options))
    agent.begin(observation, seed=seed)
    while not observation.done:
        action = agent.act(observation)
        started = time.perf_counter()
        observation = _observation(env.step(action))
        if on_step is not None:
            on_step(action, observation, (time.perf_counter() - started) * 1000)
    return observation
