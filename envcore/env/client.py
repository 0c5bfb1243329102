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

**Connections that drop.** The socket sends keepalive pings every 20 s from the client's own event
loop (``.sync()`` runs it on a thread of its own), so a long generation between two steps does not
let a proxy close an idle connection. If the connection drops anyway during an episode, the server
ends that episode (logged as abandoned, no reward) and frees its slot; the next ``step`` then raises
:class:`EpisodeLost` instead of silently stepping a fresh session that has no episode, and the next
``reset`` reconnects and starts a new one. A session the server closed for being idle too long
(``A01_SESSION_TIMEOUT_S``) answers its next step with a final observation without reward saying so.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from envcore.env.actions import A01Observation, A01State, _Tool, parse_action


class EpisodeLost(ConnectionError):
    """The connection dropped during an episode: the server ended it; ``reset`` starts another."""


class A01Env(EnvClient[Any, A01Observation, A01State]):
    """One WebSocket session with the server (one episode at a time)."""

    _episode_socket: Any = None
    """The socket the current episode was reset on (``None``: no episode in progress)."""

    async def _reset_async(self, **kwargs: Any) -> StepResult[A01Observation]:
        self._episode_socket = None
        result = await super()._reset_async(**kwargs)
        self._episode_socket = self._ws
        return result

    async def _step_async(self, action: Any, **kwargs: Any) -> StepResult[A01Observation]:
        socket = self._episode_socket
        if socket is not None and (self._ws is not socket or socket.state in (State.CLOSING, State.CLOSED)):
            self._lose_episode()
        try:
            result = await super()._step_async(action, **kwargs)
        except ConnectionClosed:
            self._lose_episode()
        if result.done:
            self._episode_socket = None
        return result

    def _lose_episode(self) -> None:
        self._episode_socket = None
        raise EpisodeLost("the connection to the server dropped during the episode, so the server ended it (no "
                          "reward; logged as abandoned). Call reset() to start another episode: the client "
                          "reconnects by itself.")

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
