"""The HTTP service: OpenEnv's app for :class:`~envcore.env.environment.A01Environment`, plus the
read-only scenario catalog.

``create_env_app()`` builds it with :func:`openenv.core.env_server.http_server.create_app`, so the
routes are OpenEnv's own (``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``,
``/health``, ``/mcp``); the catalog adds ``/scenarios`` and ``/scenarios/{id}`` (public views only), and
``/capacity`` says how many sessions the server takes and how many are open (what a trainer checks
before it opens one session per rollout of its generation batch).
``max_concurrent_envs`` (``A01_MAX_SESSIONS``, default 64) bounds the WebSocket sessions; idle
sessions are closed after ``A01_SESSION_TIMEOUT_S`` (default 900 s). The sandbox gets worker slots
for every session (two each: its live app and a verification; ``A01_SANDBOX_WORKERS`` overrides).

The server is public, so no single client may take it (:mod:`envcore.server.guard` says who a client
is): one client holds at most ``A01_MAX_SESSIONS_PER_CLIENT`` sessions (default a quarter of
``A01_MAX_SESSIONS``), however it opens them (``/ws``, the ``/mcp`` WebSocket, or ``/mcp``'s
``openenv/session/create``); one more is refused with OpenEnv's capacity error saying so, while other
clients still get theirs. Request bodies are at most ``A01_MAX_BODY_BYTES`` (default 8 MiB; more is a
413) and WebSocket messages at most ``A01_MAX_WS_MESSAGE_BYTES`` (default 8 MiB; more closes that
connection with code 1009). The episode log (``A01_EPISODE_LOG``) keeps every record unless
``A01_EPISODE_LOG_MAX_BYTES`` is set; then it is a :class:`~envcore.server.capped_log.CappedEpisodeLog`
(moved aside to ``<name>.1`` when full), which a server open to the public should use. The app is OpenEnv's, built as :func:`openenv.core.env_server.http_server.
create_fastapi_app` builds it, with :class:`_SessionPool` (OpenEnv's server, counting sessions per
client) in place of its server class. ``POST /reset`` with options
that cannot be satisfied (:class:`~envcore.env.environment.ResetError`) is a 422 saying why, not a 500,
and error bodies are rendered so that they cannot fail: a request's ``NaN``/``Infinity`` literal or lone
surrogate escape (both accepted by Python's JSON parser) echoed in a 422's details would otherwise
make FastAPI's renderer raise, turning the 422 into a 500.
"""

from __future__ import annotations

import json
import math
import os
import weakref
from collections import Counter
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (
    ConcurrencyConfig,
    EnvironmentMetadata,
    HealthResponse,
    HealthStatus,
    ServerMode,
)
from starlette.exceptions import HTTPException

from envcore.env.actions import A01Action, A01Observation, A01State
from envcore.env.environment import A01Environment, ResetError, Runtime, default_runtime
from envcore.env.episode_log import EpisodeLogger
from envcore.sandbox import posture
from envcore.server.capped_log import CappedEpisodeLog
from envcore.server.catalog import catalog_router
from envcore.server.guard import (
    CURRENT_CLIENT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_WS_MESSAGE_BYTES,
    ClientGuard,
    ClientPolicy,
    env_bytes,
    per_client_cap,
)
from envcore.settings import positive_int, seconds

DEFAULT_MAX_SESSIONS = 64
DEFAULT_SESSION_TIMEOUT_S = 900.0
DEFAULT_WS_PING_INTERVAL_S = 20.0
DEFAULT_WS_PING_TIMEOUT_S = 60.0


def ws_keepalive() -> dict[str, float]:
    """uvicorn's WebSocket keepalive: a ping every ``A01_WS_PING_INTERVAL_S`` (default 20 s, under
    the idle limits of the usual proxies and of Hugging Face Spaces), and a connection whose client
    answers none within ``A01_WS_PING_TIMEOUT_S`` (default 60 s) is closed, ending its episode and
    freeing its slot. A client's pings are answered on the client's own event loop, so a long
    generation between two steps keeps its episode; an episode idle (no step) for longer than the
    session timeout is still closed, pings or not: that is a leaked session."""
    return {"ws_ping_interval": seconds("A01_WS_PING_INTERVAL_S", DEFAULT_WS_PING_INTERVAL_S, zero=False),
            "ws_ping_timeout": seconds("A01_WS_PING_TIMEOUT_S", DEFAULT_WS_PING_TIMEOUT_S, zero=False)}


class _SessionPool(HTTPEnvServer):
    """OpenEnv's server, refusing a client's session beyond its share (see the module docstring).

    Every way of opening a session goes through ``_create_session``; the client is the request's
    (:data:`~envcore.server.guard.CURRENT_CLIENT`, set by the guard in front of the app). A client's
    count is its sessions still open (whichever way they closed: a socket that left, ``openenv/session/
    close``, the idle reaper) plus those being created, checked and taken with no ``await`` between,
    so two requests at once cannot both take the last one."""

    def __init__(self, *args: Any, per_client: int, policy: ClientPolicy, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_client = per_client
        self.policy = policy
        self._owners: dict[str, str] = {}
        self._opening: Counter[str] = Counter()

    def sessions_of(self, client: str) -> int:
        for session_id in [sid for sid in self._owners if sid not in self._sessions]:
            del self._owners[session_id]
        return sum(1 for owner in self._owners.values() if owner == client) + self._opening[client]

    async def _create_session(self) -> tuple[str, Environment]:
        client = CURRENT_CLIENT.get()
        if not self.policy.is_capped(client):
            return await super()._create_session()
        assert client is not None
        held = self.sessions_of(client)
        if held >= self.per_client:
            raise SessionCapacityError(
                active_sessions=held, max_sessions=self.per_client,
                message=f"this client ({client}) already holds {held} of the server's sessions, the most one client "
                        f"may hold (A01_MAX_SESSIONS_PER_CLIENT={self.per_client}); close one and try again")
        self._opening[client] += 1
        try:
            session_id, env = await super()._create_session()
        finally:
            self._opening[client] -= 1
            if not self._opening[client]:
                del self._opening[client]
        self._owners[session_id] = client
        return session_id, env


def create_env_app(runtime: Runtime | None = None, *, max_sessions: int | None = None,
                   session_timeout_s: float | None = None, max_sessions_per_client: int | None = None,
                   policy: ClientPolicy | None = None) -> FastAPI:
    runtime = runtime or default_runtime()
    sessions = max_sessions or positive_int("A01_MAX_SESSIONS", DEFAULT_MAX_SESSIONS)
    timeout = session_timeout_s if session_timeout_s is not None else seconds(
        "A01_SESSION_TIMEOUT_S", DEFAULT_SESSION_TIMEOUT_S, zero=False)
    per_client = max_sessions_per_client or per_client_cap(sessions, "A01_MAX_SESSIONS_PER_CLIENT")
    policy = policy or ClientPolicy.from_environ()

    log_cap = env_bytes("A01_EPISODE_LOG_MAX_BYTES", 0)  # 0: unset, every record kept
    if log_cap and isinstance(runtime.logger, EpisodeLogger):
        runtime.logger.close()  # the same file, from now on kept under the cap
        runtime.logger = CappedEpisodeLog(runtime.logger.path, log_cap)  # type: ignore[assignment]  # writes like one

    if runtime.sandbox is None:
        runtime.sessions = max(runtime.sessions or 0, sessions)
        workers = positive_int("A01_SANDBOX_WORKERS", 0)  # 0: unset, sized for the sessions
        if workers:
            runtime.sandbox_workers = workers

    live: weakref.WeakSet[A01Environment] = weakref.WeakSet()

    def make_env() -> A01Environment:
        env = A01Environment(runtime)
        live.add(env)
        return env

    app = FastAPI(title="A01 repair gym", version="1.0.0",
                  description="The A01 repair gym environment over OpenEnv: `/ws` sessions, `/reset`, `/step`, "
                              "`/state`, `/schema`, `/metadata`, `/mcp`; and the scenario catalog.")
    server = _SessionPool(
        make_env, A01Action, A01Observation, env_name="a01_repair_gym", state_cls=A01State,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=sessions, session_timeout=timeout or None),
        per_client=per_client, policy=policy)
    server.register_routes(app, mode=os.environ.get("OPENENV_MODE", ServerMode.SIMULATION.value))
    app.add_middleware(ClientGuard, policy=policy,
                       max_body_bytes=env_bytes("A01_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
                       max_message_bytes=env_bytes("A01_MAX_WS_MESSAGE_BYTES", DEFAULT_MAX_WS_MESSAGE_BYTES))
    app.state.session_pool = server
    app.state.client_policy = policy
    app.add_exception_handler(ResetError, _reset_refused)
    app.add_exception_handler(RequestValidationError, _request_invalid)
    app.add_exception_handler(HTTPException, _http_error)
    app.include_router(catalog_router(runtime.cache, health=False))
    _report_sandbox(app, make_env)

    @app.get("/capacity", tags=["catalog"])
    def capacity() -> dict[str, int]:
        """Concurrent sessions: the most this server takes, how many are open, how many are free."""
        active = sum(1 for env in list(live) if not env.closed)
        return {"max_sessions": sessions, "active_sessions": active, "available": max(sessions - active, 0)}

    return app


class SandboxHealth(HealthResponse):
    """OpenEnv's health answer with what protects the grader: ``healthy`` when apps are run and graded
    (every layer, or a missing one the operator allowed), ``unhealthy`` (HTTP 503) when grading is
    refused (see :mod:`envcore.sandbox.posture`)."""

    sandbox: dict[str, Any]


class SandboxMetadata(EnvironmentMetadata):
    """OpenEnv's metadata with the sandbox's posture (the same as ``/health``'s)."""

    sandbox: dict[str, Any]


def sandbox_report() -> dict[str, Any]:
    """The sandbox's posture as ``/health`` and ``/metadata`` give it (surveyed once per process)."""
    found = posture.current()
    return {key: value for key, value in found.to_json().items() if key != "layers"} | {
        "layers": {k: v for k, v in found.layers.items() if k != "checks"}, "checks": found.layers.get("checks", {})}


def _report_sandbox(app: FastAPI, make_env: Any) -> None:
    """Put OpenEnv's ``/health`` and ``/metadata`` in place with ones that also say what protects the
    grader (same paths, same fields, one more)."""
    app.router.routes[:] = [route for route in app.router.routes
                            if getattr(route, "path", None) not in ("/health", "/metadata")]

    @app.get("/health", response_model=SandboxHealth, tags=["Health"], summary="Health check",
             responses={503: {"model": SandboxHealth, "description": "grading is refused: a sandbox layer is missing"}})
    def health(response: Response) -> SandboxHealth:
        """``healthy`` while apps are run and graded; 503 ``unhealthy`` when a required sandbox layer is
        missing and the operator did not allow it. ``sandbox`` says which layers are in force."""
        report = sandbox_report()
        if not report["grading"]:
            response.status_code = 503
        return SandboxHealth(status=HealthStatus.HEALTHY if report["grading"] else HealthStatus.UNHEALTHY,
                             sandbox=report)

    @app.get("/metadata", response_model=SandboxMetadata, tags=["Environment Info"], summary="Get environment metadata")
    def metadata() -> SandboxMetadata:
        """Name, description, README, version, and the sandbox's posture."""
        env = make_env()
        try:
            base = env.get_metadata()
        finally:
            env.close()
        return SandboxMetadata(**base.model_dump(), sandbox=sandbox_report())


async def _reset_refused(request: Request, exc: Exception) -> Response:
    return _error_response(422, str(exc))


async def _request_invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return _error_response(422, exc.errors())


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    try:
        return await http_exception_handler(request, exc)
    except (UnicodeEncodeError, ValueError, RecursionError):  # details echoing a lone surrogate, a NaN ...
        return _error_response(exc.status_code, exc.detail, headers=getattr(exc, "headers", None))


def _error_response(status_code: int, detail: Any, headers: Mapping[str, str] | None = None) -> Response:
    """``{"detail": detail}`` as JSON that always renders: non-ASCII escaped (a lone surrogate cannot
    be UTF-8 encoded, but ``"\\ud800"`` is valid JSON), NaN and infinities as strings, and validation
    errors whose input is nested too deep to encode given without it."""
    try:
        body = _dumps({"detail": jsonable_encoder(detail)})
    except RecursionError:
        if isinstance(detail, (list, tuple)):
            detail = [{k: v for k, v in e.items() if k != "input"} if isinstance(e, dict) else e for e in detail]
        else:
            detail = "the request is nested too deeply"
        body = _dumps({"detail": jsonable_encoder(detail)})
    return Response(body, status_code=status_code, headers=headers, media_type="application/json")


def _dumps(content: Any) -> bytes:
    return json.dumps(_finite(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
