"""The page's per-visitor state against a visitor who makes up page ids (``ui/page_state.py``).

Gradio creates a page's state for any session hash a request names and, past its capacity, forgets the
least recently used page without its delete callbacks: a script could evict every other visitor's
page, and the play sessions those pages held kept their slots. Over HTTP against ``python app.py``:
``tests/test_space_attacks.py::test_made_up_page_ids_from_one_address_are_refused_past_its_allowance``.
"""

from __future__ import annotations

import gradio as gr
import pytest
from fastapi import HTTPException
from gradio.state_holder import StateHolder

from envcore.server.guard import CURRENT_CLIENT, ClientPolicy
from tests.test_sessions import Clock
from ui.page_state import guard_page_states

VISITOR, SCRIPT = "198.51.100.7", "203.0.113.9"


@pytest.fixture
def page():
    """A page with one per-page state whose delete callback records the session it held, its holder
    guarded (3 new pages per visitor per 10 minutes, 6 pages kept), and what was closed."""
    closed, forgotten, clock = [], [], Clock()
    with gr.Blocks() as demo:
        sid = gr.State(None, delete_callback=closed.append)
    demo.state_session_capacity = 6
    StateHolder().set_blocks(demo)
    holder = guard_page_states(demo, policy=ClientPolicy(), on_forget=forgotten.append,
                               environ={"A01_UI_NEW_PAGES_PER_CLIENT": "3"})
    holder.clock = clock
    return {"holder": holder, "sid": sid, "closed": closed, "forgotten": forgotten, "clock": clock}


def open_page(page, client: str | None, page_id: str, session: str | None = None):
    token = CURRENT_CLIENT.set(client)
    try:
        state = page["holder"][page_id]
        if session is not None:
            state[page["sid"]._id] = session
        return state
    finally:
        CURRENT_CLIENT.reset(token)


def test_made_up_page_ids_from_one_address_cannot_evict_another_visitors_page(page):
    open_page(page, VISITOR, "visitor-page", "visitor-session")
    refused = 0
    for i in range(50):
        try:
            open_page(page, SCRIPT, f"made-up-{i}")
        except HTTPException as exc:
            assert exc.status_code == 429 and "pages" in exc.detail
            refused += 1
    assert refused == 47  # three admitted, then every new id refused before any state was made
    assert "visitor-page" in page["holder"] and page["closed"] == [] and page["forgotten"] == []
    assert len(page["holder"].session_data) == 4
    open_page(page, VISITOR, "visitor-page")  # the visitor's own page goes on
    open_page(page, SCRIPT, "made-up-0")  # and so do the script's admitted pages: it is only rationed


def test_the_allowance_comes_back_with_time_and_in_process_callers_are_not_rationed(page):
    for i in range(3):
        open_page(page, VISITOR, f"reload-{i}")
    with pytest.raises(HTTPException):
        open_page(page, VISITOR, "reload-3")
    page["clock"].now += 601
    open_page(page, VISITOR, "reload-3")
    for i in range(10):  # no client address: a caller inside the process
        open_page(page, None, f"internal-{i}")


def test_a_page_forgotten_for_capacity_closes_the_sessions_it_held(page):
    open_page(page, VISITOR, "oldest", "session-of-the-oldest-page")
    for i in range(6):
        open_page(page, f"192.0.2.{i}", f"later-{i}")
    assert "oldest" not in page["holder"]
    assert page["closed"] == ["session-of-the-oldest-page"] and page["forgotten"] == ["oldest"]
    assert len(page["holder"].session_data) == 6


def test_a_players_session_has_no_page_lifetime_of_its_own():
    """Gradio counts a state's ``time_to_live`` from when its value was set, which for the session id is
    the episode's start: a player still acting lost the session 15 minutes in. The page's session ids
    have none; the hub closes a session idle for its TTL counted from the last action
    (``tests/test_sessions.py::test_idle_sessions_are_closed_after_the_ttl_and_logged_as_abandoned``)."""
    from envcore.cache import ScenarioCache
    from envcore.env.environment import Runtime
    from envcore.env.sampler import CurriculumSampler
    from envcore.server.sessions import SessionHub
    from ui import play_tab, watch_tab

    hub = SessionHub(Runtime(sampler=CurriculumSampler(ScenarioCache.open())), ttl_s=900, sweep_every_s=0)
    with gr.Blocks():
        play = play_tab.build(hub, bug_classes=[], domains=[])
        watch = watch_tab.build(hub, ScenarioCache.open().root.parent.parent)
    states = [play["sid"], watch["live_sid"]]
    assert all(isinstance(s, gr.State) and s.time_to_live in (None, float("inf")) and s.delete_callback == hub.close
               for s in states), [s.time_to_live for s in states]
    hub.shutdown()
