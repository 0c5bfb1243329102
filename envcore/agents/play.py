"""Playing one episode: an agent against an environment, in process or through the client.

:func:`play_episode` resets the environment, hands the first observation to the agent and steps
until the episode is done. The environment may be an :class:`~envcore.env.environment.A01Environment`
(in process) or a synchronous :class:`~envcore.env.client.A01Env` (``A01Env(...).sync()``): both
answer ``reset``/``step``, one with observations, the other with step results. The environment's
own step budget ends every episode, so a looping agent cannot hang the caller.
"""

from __future__ import annotations

from typing import Any

from envcore.agents.base import Agent
from envcore.env.actions import A01Observation


def _observation(result: Any) -> A01Observation:
    return result.observation if hasattr(result, "observation") else result


def play_episode(env: Any, agent: Agent, *, seed: int, agent_id: str | None = None, **options: Any) -> A01Observation:
    """Play one episode of ``agent`` (reset with ``seed`` and ``options``: split, tier, bug_class,
    scenario, max_steps); return the final observation (reward and breakdown included). The episode
    is logged under ``agent_id`` (default: the agent's name)."""
    observation = _observation(env.reset(seed=seed, agent_id=agent_id or agent.name, **options))
    agent.begin(observation, seed=seed)
    while not observation.done:
        observation = _observation(env.step(agent.act(observation)))
    return observation
