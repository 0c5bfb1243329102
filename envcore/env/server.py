"""The HTTP service: OpenEnv's app for :class:`~envcore.env.environment.A01Environment`, plus the
read-only scenario catalog.

``create_env_app()`` builds it with :func:`openenv.core.env_server.http_server.create_app`, so the
routes are OpenEnv's own (``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``,
``/health``, ``/mcp``); the catalog adds ``/scenarios`` and ``/scenarios/{id}`` (public views only).
``max_concurrent_envs`` (``A01_MAX_SESSIONS``, default 64) bounds the WebSocket sessions; idle
sessions are closed after ``A01_SESSION_TIMEOUT_S`` (default 900 s). ``POST /reset`` with options
that cannot be satisfied (:class:`~envcore.env.environment.ResetError`) is a 422 saying why, not a 500.
"""

from __future__ import annotations

import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.types import ConcurrencyConfig

from envcore.env.actions import A01Action, A01Observation, A01State
from envcore.env.environment import A01Environment, ResetError, Runtime, default_runtime
from envcore.server.catalog import catalog_router

DEFAULT_MAX_SESSIONS = 64
DEFAULT_SESSION_TIMEOUT_S = 900.0


def create_env_app(runtime: Runtime | None = None, *, max_sessions: int | None = None,
                   session_timeout_s: float | None = None) -> FastAPI:
    runtime = runtime or default_runtime()
    sessions = max_sessions or int(os.environ.get("A01_MAX_SESSIONS", DEFAULT_MAX_SESSIONS))
    timeout = session_timeout_s if session_timeout_s is not None else float(
        os.environ.get("A01_SESSION_TIMEOUT_S", DEFAULT_SESSION_TIMEOUT_S))

    def make_env() -> A01Environment:
        return A01Environment(runtime)

    app = create_app(
        make_env, A01Action, A01Observation, env_name="a01_repair_gym", state_cls=A01State,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=sessions, session_timeout=timeout or None),
    )
    app.add_exception_handler(ResetError, _reset_refused)
    app.include_router(catalog_router(runtime.cache, health=False))
    return app


async def _reset_refused(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": str(exc)})
