"""The client: :class:`A01Env`, an OpenEnv ``EnvClient`` for a running A01 repair gym server.

It imports only the wire types (:mod:`envcore.env.actions`), never server code. Async first, with
OpenEnv's ``.sync()`` wrapper for plain code::

    from envcore.env.client import A01Env
    from envcore.env.actions import ReadFile, Submit

    with A01Env(base_url="http://localhost:7860").sync() as env:
        result = env.reset(seed=7, split="test")
        print(result.observation.text)
        result = env.step(ReadFile(path="app/main.py"))
        result = env.step(Submit())
        print(result.reward, result.observation.reward_breakdown)

Actions may also be given as plain dicts (``{"tool": "read_file", "path": "app/main.py"}``); they
are validated here before they are sent, so a typo fails fast with pydantic's full message.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from envcore.env.actions import A01Observation, A01State, _Tool, parse_action


class A01Env(EnvClient[Any, A01Observation, A01State]):
    """One WebSocket session with the server (one episode at a time)."""

    def _step_payload(self, action: _Tool | dict[str, Any]) -> dict[str, Any]:
        tool = action if isinstance(action, _Tool) else parse_action(action)
        return tool.model_dump(mode="json", exclude={"metadata"} if not tool.metadata else None)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[A01Observation]:
        data = dict(payload.get("observation") or {})
        data["reward"] = payload.get("reward")
        data["done"] = bool(payload.get("done", False))
        observation = A01Observation.model_validate(data)
        return StepResult(observation=observation, reward=observation.reward, done=observation.done,
                          metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> A01State:
        return A01State.model_validate(payload)
