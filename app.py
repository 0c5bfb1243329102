"""Entry point of the A01 repair gym Space: ``python app.py``.

One process, one FastAPI app, on ``0.0.0.0:$PORT`` (7860 by default, as Hugging Face Spaces expect):

* the OpenEnv environment (``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``,
  ``/health``, ``/mcp``) and the read-only scenario catalog (``/scenarios``) over the default
  scenario cache (the newest ``artifacts/scenarios/vN``);
* the Gradio page at ``/``: play scenarios by hand, watch rollouts and live agents, dashboards
  (see :mod:`ui.app`), through a per-visitor session facade sharing the same cache and sandbox.

Configuration, all optional: ``A01_CACHE`` (another cache folder), ``A01_WEIGHTS`` (sampling weights),
``A01_EPISODE_LOG`` (episode-log JSONL of ``/ws`` sessions), ``A01_MAX_STEPS``, ``A01_MAX_SESSIONS``,
``A01_SESSION_TIMEOUT_S`` (OpenEnv sessions); ``A01_DATA_DIR`` (where the server writes, see
:mod:`envcore.server.storage`), ``A01_HUMAN_LOG`` (human play log, default ``human/episodes.jsonl`` in
the data folder; empty: none), ``A01_ALLOW_REDUCED_SANDBOX`` (grade although Landlock or seccomp is
missing, see ``docs/deploy.md``), ``A01_UI_MAX_SESSIONS`` (default 16),
``A01_UI_SESSION_TTL_S`` (idle visitors' sessions are closed after it, default 900),
``A01_ARTIFACTS`` (where the page looks for rollout sets), ``A01_UI=0`` (the API alone); see
``docs/environment.md`` and ``docs/space.md``. A number set to something it cannot take stops
``python app.py`` before it listens, with one line naming the variable (:mod:`envcore.settings`).

What keeps one anonymous client from taking the public server: per-client shares of the sessions
(``A01_MAX_SESSIONS_PER_CLIENT``, ``A01_UI_MAX_SESSIONS_PER_CLIENT``; the client address from
``X-Forwarded-For`` only behind ``A01_TRUSTED_PROXIES``, see :mod:`envcore.server.guard`), request
bodies and WebSocket messages at most ``A01_MAX_BODY_BYTES`` and ``A01_MAX_WS_MESSAGE_BYTES``, no
uploads, a capped human play log (``A01_HUMAN_LOG_MAX_BYTES``) and bounded page state (:mod:`ui.app`).
uvicorn's own reading of ``X-Forwarded-For`` (on by default, for loopback peers) is turned off: the
guard decides whom to believe, the same way under any server; uvicorn's WebSocket frame limit is set to
the message cap, so a larger message is refused before it is buffered.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from fastapi import FastAPI  # noqa: E402
from fastapi.responses import RedirectResponse  # noqa: E402

from envcore.env.environment import default_runtime  # noqa: E402
from envcore.env.server import create_env_app, ws_keepalive  # noqa: E402
from envcore.sandbox import posture  # noqa: E402
from envcore.sandbox.posture import allowed_missing  # noqa: E402
from envcore.server.guard import DEFAULT_MAX_WS_MESSAGE_BYTES, env_bytes  # noqa: E402
from envcore.server.storage import data_dir  # noqa: E402
from envcore.settings import SettingError  # noqa: E402


def build_app() -> FastAPI:
    """The served app. Says on stderr, before it listens, what protects the grader here and where the
    server writes (:mod:`envcore.sandbox.posture`, :mod:`envcore.server.storage`)."""
    allowed_missing()  # a bad A01_ALLOW_REDUCED_SANDBOX stops the start like any other bad setting
    app = _build()
    found = posture.current()
    print(f"app.py: {found.summary()}", file=sys.stderr, flush=True)
    if not found.grading:
        print(f"app.py: grading is REFUSED until this is fixed or {posture.ALLOW_VARIABLE} is set "
              "(docs/deploy.md); /health answers 503", file=sys.stderr, flush=True)
    print(f"app.py: {data_dir().describe()}", file=sys.stderr, flush=True)
    return app


def _build() -> FastAPI:
    runtime = default_runtime()
    app = create_env_app(runtime)
    if os.environ.get("A01_UI", "1") == "0":
        return app
    from envcore.server.sessions import ARTIFACTS, SessionHub
    from ui.app import mount_ui, warm

    hub = SessionHub.for_server(runtime)
    # The sandbox (started on first use) must hold the visitors' episodes (play and live share the
    # hub's slots) as well as the API's, which create_env_app has just counted.
    runtime.sessions = (runtime.sessions or 0) + hub.max_sessions
    artifacts = Path(os.environ.get("A01_ARTIFACTS") or ARTIFACTS)

    @app.get("/web", include_in_schema=False)
    def web() -> RedirectResponse:
        """``openenv push`` (with its web interface on, the default) opens a Space at ``/web``; the page is at ``/``."""
        return RedirectResponse("/", status_code=307)

    app = mount_ui(app, hub, artifacts)
    warm(artifacts)
    app.state.session_hub = hub
    return app


def _port() -> int:
    value = (os.environ.get("PORT") or "7860").strip()
    if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 65536:
        raise SettingError(f"PORT must be a port number from 1 to 65535, not {value!r}")
    return int(value)


def main() -> int:
    """Build the app and serve it; a bad setting is one line on stderr and exit status 2."""
    import uvicorn

    try:
        port = _port()
        served = build_app()
    except SettingError as exc:
        print(f"app.py: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(served, host=os.environ.get("HOST", "0.0.0.0"), port=port, ws="websockets-sansio", proxy_headers=False,
                ws_max_size=env_bytes("A01_MAX_WS_MESSAGE_BYTES", DEFAULT_MAX_WS_MESSAGE_BYTES), **ws_keepalive())
    return 0


def __getattr__(name: str) -> FastAPI:
    """``app``, built on first use: ``uvicorn app:app`` and other ASGI servers read it, while importing
    this module for its functions starts nothing."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = globals()["app"] = build_app()
    return built


if __name__ == "__main__":
    sys.exit(main())
