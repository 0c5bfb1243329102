"""The Watch tab in a real browser, through a running Space (``python app.py``, Debian's Chromium).

What a visitor meets: the tab opens on a trained model against its base on a held-out scenario, at
the step that decides it, with a banner saying who fixed what, readable on a phone; nothing scrolls
sideways and no table header breaks inside a word; the link under the step controls opens the same
episode at the same step in a fresh page, and a garbled link opens the page with a message; a live
agent run to the end streams its steps while the rest of the page stays usable, and Stop leaves the
episode where it stopped. No error overlay, no toast, no JavaScript error. Screenshots
(``build/screenshots/``) at 1280x800 and on a phone (390x844).
"""

from __future__ import annotations

import re

import pytest

from tests.browser_kit import (
    SHOTS,
    TIMEOUT_MS,
    chromium,
    running_space,
    skip_unless_wanted,
    text_of,
    wait_settled_change,
    wait_text,
)

skip_unless_wanted()

pytestmark = pytest.mark.slow  # about 50 s; the default run's browser smoke is tests/test_ui_browser.py

PACE_S = 1.0
"""Seconds between two live steps here: slow enough to press Stop mid-way."""
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("space-watch") / "human.jsonl"
    env = {"A01_HUMAN_LOG": str(log), "A01_UI_LIVE_PACE_S": str(PACE_S)}
    with running_space(env, timeout_s=120) as (url, _, _):
        yield f"{url}/"


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


class Visit:
    """A fresh browser page on the Space, collecting its JavaScript errors."""

    def __init__(self, browser, viewport: dict[str, int]) -> None:
        self.context = browser.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def open(self, url: str):
        self.page.goto(url)
        self.page.wait_for_selector("#play-new", state="attached")  # hidden when a link opens Watch
        return self.page


@pytest.fixture
def visit(browser):
    opened: list[Visit] = []

    def make(viewport: dict[str, int] = DESKTOP) -> Visit:
        opened.append(Visit(browser, viewport))
        return opened[-1]

    yield make
    for v in opened:
        v.context.close()
        assert not v.errors, f"JavaScript errors on the page: {v.errors}"


def wait_changed(page, elem_id: str, before: str) -> str:
    """The element's new text, once its event has finished (not Gradio's timer while it runs)."""
    wait_settled_change(page, [elem_id], [before])
    return text_of(page, elem_id)


def choose(page, elem_id: str, option: str) -> None:
    box = page.locator(f"#{elem_id}").get_by_role("combobox")
    box.click()
    page.locator(f"#{box.get_attribute('aria-controls')}").get_by_role("option", name=option, exact=True).click()


def no_error_overlay(page) -> None:
    assert page.get_by_text("Error", exact=True).count() == 0, "an error overlay is on the page"
    assert page.locator(".toast-body").count() == 0, "a toast popped up instead of a message"


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def watch_tab_selected(page) -> bool:
    return page.get_by_role("tab", name="Watch").get_attribute("aria-selected") == "true"


def step_number(title: str) -> int:
    found = re.search(r"Step (\d+) of", title)
    return int(found.group(1)) if found else 0


OPENING = ("training/scratch-26m/eval/test/base", "training/scratch-26m/eval/test/sft")
"""The shipped opening: scratch-26m after SFT against its untrained base, on the test split."""

OVERFLOW_JS = """() => {
  const wide = [];
  for (const id of ['watch-story', 'watch-left-action', 'watch-right-action', 'watch-left-observation',
                    'watch-right-observation', 'watch-left-title', 'watch-right-title']) {
    const el = document.getElementById(id), box = el.getBoundingClientRect();
    if (box.left < 0 || box.right > window.innerWidth + 1) wide.push(id);
    const scroller = el.querySelector('.cm-scroller');  // a code pane that scrolls its text sideways
    if (scroller && scroller.scrollWidth > scroller.clientWidth + 1) wide.push(id + ' (scrolls sideways)');
  }
  if (document.documentElement.scrollWidth > window.innerWidth) wide.push('the page');
  return wide;
}"""
"""What sticks out of the screen sideways, or scrolls its text sideways (nothing should)."""

BROKEN_HEADERS_JS = """() => [...document.querySelectorAll('#tab-watch th')].filter(th => th.offsetParent)
  .filter(th => { const range = document.createRange(); range.selectNodeContents(th);
                  const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                  return lines.size > 1 && !th.innerText.trim().includes(' '); })
  .map(th => th.innerText)"""
"""The table headers of one word drawn on more than one line."""


def test_watch_opens_on_a_held_out_scenario_at_the_step_that_decides_it(visit, server):
    """Desktop and phone: a banner in the first screen names the scenario, its split and who fixed it at
    which step; both sides show that step; no warning box; nothing scrolls sideways; the breakdown's
    headers stay whole words."""
    from tests.browser_kit import ROOT
    from ui import rollout_view
    from ui.watch_tab import WatchController

    ctrl = WatchController(None, ROOT / "artifacts")
    opening = ctrl.opening()
    assert opening is not None and (opening.left, opening.right) == OPENING
    step = opening.step
    assert step == rollout_view.last_code_change(ctrl.records(opening.right)[opening.scenario])
    for name, viewport in (("watch-first-view", DESKTOP), ("watch-first-view-phone", PHONE)):
        page = visit(viewport).open(server)
        page.get_by_role("tab", name="Watch").click()
        wait_text(page, "watch-right-title", f"Step {step} of")
        story = page.locator("#watch-story")
        text = story.inner_text()
        assert "On HR reviews API: open redirect (unvalidated next) (test split, held out)" in text, text
        assert f"scratch-26m after SFT fixed it, FULL +0.99, with the patch at step {step}" in text, text
        assert "scratch-26m base model (untrained) scored NO -0.14" in text, text
        box = story.bounding_box()
        assert box and box["y"] + box["height"] <= viewport["height"], "the banner is in the first screen"
        assert page.locator("#watch-index input[type=number]").input_value() == str(step)
        assert f"Step {step} of 8" in text_of(page, "watch-left-title")
        assert "⚠️" not in page.locator("#tab-watch").inner_text()  # no warning box anywhere in the tab
        for side in ("left", "right"):
            assert text_of(page, f"watch-{side}-action").strip(), side  # no empty pane
        assert page.evaluate(OVERFLOW_JS) == []
        for accordion in page.get_by_text("Outcome, reward breakdown and final diff").all():
            accordion.click()
        wait_text(page, "watch-right-breakdown", "security_blocked")
        assert page.evaluate(BROKEN_HEADERS_JS) == []
        assert page.evaluate(OVERFLOW_JS) == []
        page.screenshot(path=f"/tmp/watchplay-{name}.png", full_page=False)
        no_error_overlay(page)
        shot(page, name)


def test_a_shared_link_opens_the_same_episode_at_the_same_step(visit, server):
    page = visit().open(server)
    page.get_by_role("tab", name="Watch").click()
    wait_text(page, "watch-right-title", "scratch-26m-sft")
    start = step_number(text_of(page, "watch-right-title"))  # it opens at the step that decides it
    step = start + 1
    page.click("#watch-forward")
    wait_text(page, "watch-right-title", f"Step {step}")
    link = page.locator("#watch-link a")
    wait_text(page, "watch-link", "Link to this episode")
    page.wait_for_function(f"() => document.querySelector('#watch-link a').href.includes('step={step}')")
    url = link.evaluate("a => a.href")
    assert url.startswith(server) and f"set={OPENING[0]}" in url and f"vs={OPENING[1]}" in url
    seen = {elem: text_of(page, elem) for elem in ("watch-left-title", "watch-right-title", "watch-right-action")}

    fresh = visit().open(url)  # another visitor, who was sent the link
    fresh.wait_for_function(f"() => document.querySelector('#watch-right-title')?.innerText.includes('Step {step}')")
    assert watch_tab_selected(fresh)
    for elem, text in seen.items():
        assert text_of(fresh, elem) == text, elem
    assert f"set={OPENING[0]}" in fresh.locator("#watch-link a").evaluate("a => a.href")
    assert text_of(fresh, "watch-msg").strip() == ""
    shot(fresh, "watch-opened-from-link")

    garbled = visit().open(server + "?set=evals/v2/heuristic&scenario=<b>nope</b>&attempt=x&step=%F0%9F%92%A5")
    wait_text(garbled, "watch-msg", "This link")
    message = text_of(garbled, "watch-msg")
    assert "has no episode of scenario '<b>nope</b>'" in message and "is not a number" in message
    assert garbled.locator("#watch-msg b").count() == 0  # the link's markup is shown as text
    assert watch_tab_selected(garbled)
    wait_text(garbled, "watch-left-title", "heuristic")  # the set it named, on its first scenario
    no_error_overlay(garbled)
    shot(garbled, "watch-garbled-link")


def long_heuristic_scenario() -> tuple[str, int]:
    """A scenario the heuristic plays in many steps (long enough to stop mid-way), and how many."""
    from tests.browser_kit import ROOT
    from ui.watch_tab import WatchController

    records = WatchController(None, ROOT / "artifacts").records("evals/v5/heuristic")  # a run on the cache served
    scenario = max(sorted(records), key=lambda sid: len(records[sid].steps))
    return scenario, len(records[scenario].steps)


def test_a_live_run_streams_its_steps_and_stop_leaves_the_episode_where_it_stopped(visit, server):
    scenario, steps = long_heuristic_scenario()
    assert steps >= 8
    # The live agent plays the scenario shown: a link opens the one wanted.
    page = visit().open(f"{server}?set=evals/v5/heuristic&scenario={scenario}")
    wait_text(page, "watch-left-title", "heuristic")
    page.get_by_text("Run an agent live on this scenario").click()
    choose(page, "watch-live-agent", "heuristic")
    page.click("#watch-live-start")
    wait_text(page, "watch-live-status", "Ready")

    page.click("#watch-live-run")
    wait_text(page, "watch-live-status", "Running")
    first = step_number(text_of(page, "watch-live-title"))
    second = step_number(wait_changed(page, "watch-live-title", text_of(page, "watch-live-title")))
    assert 1 <= first < second  # steps arrive one by one, before the end

    # The page is not locked while the agent plays: the recorded episodes still step.
    recorded = text_of(page, "watch-left-title")
    page.click("#watch-forward")
    assert "Step 1" in wait_changed(page, "watch-left-title", recorded)
    assert "Running" in text_of(page, "watch-live-status")

    page.click("#watch-live-stop")
    wait_text(page, "watch-live-status", "Next action plays one more")
    stopped = step_number(text_of(page, "watch-live-title"))
    assert second <= stopped < steps - 2  # mid-way
    page.wait_for_timeout(int(3 * PACE_S * 1000))
    assert step_number(text_of(page, "watch-live-title")) == stopped  # nothing played after Stop
    assert "Next action plays one more" in text_of(page, "watch-live-status")
    shot(page, "watch-live-stopped")

    page.click("#watch-live-step")  # Next action goes on from there
    wait_text(page, "watch-live-title", f"Step {stopped + 1} of")
    page.click("#watch-live-run")
    wait_text(page, "watch-live-status", "Over after")
    assert re.search(r"reward", text_of(page, "watch-live-outcome"), re.IGNORECASE)
    assert text_of(page, "watch-live-msg").strip() == ""
    no_error_overlay(page)
    shot(page, "watch-live-finished")


def test_the_tiny_models_runs_carry_their_caveat_and_its_empty_replies_read_as_words(visit, server):
    page = visit().open(f"{server}?set=training/tiny-grpo/eval/base&vs=training/tiny-grpo/eval/trained&step=1")
    wait_text(page, "watch-right-title", "Step 1")
    for side in ("left", "right"):
        about = text_of(page, f"watch-{side}-about")
        assert "Pipeline check, not a skilled agent" in about, about
        action = text_of(page, f"watch-{side}-action")
        assert "the model produced no readable action" in action and "format error" in action, action
    assert "tiny-grpo after training" in text_of(page, "watch-right-about")
    assert text_of(page, "watch-msg").strip() == ""
    no_error_overlay(page)
    shot(page, "watch-pipeline-check")
