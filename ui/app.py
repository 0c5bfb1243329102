"""The Space's page: three tabs (Play, Watch, Dashboard) over one session facade.

:func:`build_ui` lays out the page and wires what crosses tabs (a scenario chosen in the dashboard's
browser opens in Play). :func:`mount_ui` puts it on the environment's FastAPI app at ``/``, so one
process serves the OpenEnv API (``/ws``, ``/step``, ``/mcp`` ...) and the page. The UI reaches the
environment only through :class:`~envcore.server.sessions.SessionHub`; it never imports the sandbox.
Rollout sets are read lazily and cached; :func:`warm` reads them in the background after start-up, so
the first visitor's dashboard does not wait for the logs to be parsed.

The page is public, so what Gradio itself offers and keeps is bounded too (:func:`mount_ui`):

* no uploads: the page has no file input, so Gradio's upload routes (and the deep-link route, which
  writes a file per call) are refused (:data:`REFUSED_ROUTES`), and ``max_file_size`` is one byte in
  case a route is missed; no run history is recorded; errors that are not the visitor's are shown as
  a plain "Error", not their text;
* Gradio keeps the state of at most ``A01_UI_PAGE_SESSIONS`` browser pages (default 256; about a
  quarter of a megabyte each, as a copy of the page's configuration), the least recently used
  forgotten first, instead of its default 10,000; its queue holds at most ``A01_UI_QUEUE_SIZE`` waiting
  events (default 256), beyond which a visitor is told the queue is full;
* a visitor's sessions end when their page does (``demo.unload``), or when it is forgotten for
  capacity (:mod:`ui.page_state`, which also rations new pages per visitor, so a script making up
  page ids cannot evict other visitors' pages); otherwise when they have been idle for the hub's TTL,
  counted from the last action (the page's own state has no lifetime of its own).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gradio as gr
from fastapi import FastAPI

from envcore.server.guard import RefusedRoutes
from envcore.server.sessions import ARTIFACTS, SessionHub
from envcore.settings import positive_int
from ui import artifact_sets, dashboard_tab, diff_view, play_tab, watch_tab
from ui.page_state import guard_page_states
from ui.wiring import bind

TITLE = "A01 repair gym"
INTRO = (
    "# A01 repair gym\n"
    "Find and repair **Broken Access Control** (OWASP A01) bugs in generated FastAPI apps. "
    "**Play** a scenario by hand with the agent's own tools, **Watch** recorded or live agent episodes step by "
    "step, and compare agents on the **Dashboard**. The same environment is served to agents over OpenEnv "
    "(`/ws`, `/mcp`) by this process."
)
DEFAULT_PAGE_SESSIONS = 256
DEFAULT_QUEUE_SIZE = 256
REFUSED_ROUTES = ("/gradio_api/upload", "/gradio_api/upload_progress", "/gradio_api/process_recording",
                  "/gradio_api/deep_link", "/upload", "/process_recording")
"""Gradio's routes that store what a visitor sends (files, a page's state as a file): the page needs none."""
CSS = """
.gradio-container {max-width: 1400px !important}
.a01-msg p {margin: 2px 0 !important}
.a01-msg {color: #8a4b00; min-height: 0 !important}
.a01-posture p {margin: 0 !important; font-size: 0.85em; opacity: 0.8}
@media (max-width: 600px) {
  .gradio-container {padding: 0 6px !important}
  .tab-container button {padding: 0 7px !important; font-size: 14px !important}
}
""" + diff_view.CSS


def build_ui(hub: SessionHub, artifacts: Path = ARTIFACTS) -> gr.Blocks:
    cache = hub.runtime.cache
    bug_classes = sorted({row["bug_class"] for row in cache.rows})
    domains = sorted({row.get("domain", "unknown") for row in cache.rows})
    with gr.Blocks(title=TITLE) as demo:
        gr.Markdown(INTRO, elem_id="intro")
        gr.Markdown(hub.sandbox_line(), elem_id="sandbox-posture", elem_classes=["a01-posture"])
        with gr.Tabs() as tabs:
            with gr.Tab("Play", id="play", elem_id="tab-play"):
                play = play_tab.build(hub, bug_classes=bug_classes, domains=domains)
            with gr.Tab("Watch", id="watch", elem_id="tab-watch"):
                watch = watch_tab.build(hub, artifacts)
            with gr.Tab("Dashboard", id="dashboard", elem_id="tab-dashboard") as dashboard_page:
                dashboard = dashboard_tab.build(hub, artifacts)

        def play_selected(event: gr.SelectData) -> dict[Any, Any]:
            row = event.row_value or []
            if not row:
                return gr.skip()
            return {play["scenario"]: row[0], tabs: gr.Tabs(selected="play")}

        dashboard["browser"].select(play_selected, None, [play["scenario"], tabs])
        watch_ctrl, dash_ctrl = watch["controller"], dashboard["controller"]
        watch_named = {k: v for k, v in watch.items() if k != "controller"}
        dash_named = {k: v for k, v in dashboard.items() if k != "controller"}

        def watch_selected(event: gr.SelectData) -> dict[Any, Any]:
            link = dash_ctrl.failures.example_link(event.row_value or [])
            if link is None:
                return gr.skip()
            shown = watch_ctrl.open_episode(*link)
            return {**{watch_named[k]: v for k, v in shown.items() if k in watch_named}, tabs: gr.Tabs(selected="watch")}

        dashboard["fail_examples"].select(watch_selected, None, [*watch_named.values(), tabs])
        watch_tab.wire_page_load(demo, watch, tabs)  # a link (?set=...&scenario=...) opens Watch on its episode
        demo.load(bind(dash_ctrl.refresh, dash_named), None, list(dash_named.values()))
        dashboard_tab.bind_tab(dashboard_page, dashboard)  # opening the tab shows episodes played since

        def page_closed(request: gr.Request) -> None:
            hub.close_page(request.session_hash)

        demo.unload(page_closed)
    demo.queue(default_concurrency_limit=hub.max_sessions, max_size=positive_int("A01_UI_QUEUE_SIZE", DEFAULT_QUEUE_SIZE))
    # Gradio copies the page's configuration for every browser page it has seen; keep fewer of them.
    demo.state_session_capacity = positive_int("A01_UI_PAGE_SESSIONS", DEFAULT_PAGE_SESSIONS)
    return demo


def mount_ui(app: FastAPI, hub: SessionHub, artifacts: Path = ARTIFACTS) -> FastAPI:
    """Serve the page at ``/`` on ``app`` (after its own routes, which keep precedence), with the
    bounds of the module docstring."""
    app.add_middleware(RefusedRoutes, prefixes=REFUSED_ROUTES, message="file uploads are turned off on this server")
    demo = build_ui(hub, artifacts)
    mounted = gr.mount_gradio_app(app, demo, path="/", css=CSS, theme=gr.themes.Soft(), footer_links=["api"],
                                  run_history=False, max_file_size=1, show_error=False)
    guard_page_states(demo, policy=hub.policy, on_forget=hub.close_page)
    return mounted


def warm(artifacts: Path = ARTIFACTS) -> threading.Thread:
    """Parse every rollout set in the background (their records are cached afterwards)."""

    def run() -> None:
        for rollout_set in artifact_sets.discover(artifacts):
            try:
                artifact_sets.load_records(rollout_set)
            except Exception:  # a bad log is reported when someone opens it, not at start-up
                pass

    thread = threading.Thread(target=run, name="ui-warm", daemon=True)
    thread.start()
    return thread
