"""Entry point of the A01 repair gym service: ``python app.py``.

Serves the default scenario cache (the newest ``artifacts/scenarios/vN``) on ``0.0.0.0:$PORT``
(7860 by default, as Hugging Face Spaces expect). Set ``A01_CACHE`` to serve another cache folder.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from envcore.cache import ScenarioCache  # noqa: E402
from envcore.server.catalog import create_catalog_app  # noqa: E402


def build_app():
    cache = ScenarioCache.open(os.environ.get("A01_CACHE") or None)
    return create_catalog_app(cache)


app = build_app()

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host=os.environ.get("HOST", "0.0.0.0"), port=int(os.environ.get("PORT", "7860")))
