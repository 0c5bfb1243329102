"""Entry point of the A01 repair gym service: ``python app.py``.

Serves the OpenEnv environment (``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata``,
``/health``, ``/mcp``) and the read-only scenario catalog (``/scenarios``) over the default scenario
cache (the newest ``artifacts/scenarios/vN``) on ``0.0.0.0:$PORT`` (7860 by default, as Hugging Face
Spaces expect). Configuration, all optional: ``A01_CACHE`` (another cache folder), ``A01_WEIGHTS``
(sampling weights), ``A01_EPISODE_LOG`` (episode-log JSONL path), ``A01_MAX_STEPS``,
``A01_MAX_SESSIONS``, ``A01_SESSION_TIMEOUT_S``; see ``docs/environment.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from envcore.env.server import create_env_app  # noqa: E402


def build_app():
    return create_env_app()


app = build_app()

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host=os.environ.get("HOST", "0.0.0.0"), port=int(os.environ.get("PORT", "7860")),
                ws="websockets-sansio")
