"""The Play tab's teaching loop in a real browser: the checklist ticks from the player's own requests,
a hint costs reward and says so, and the card after submit explains the bug, replays the exploit and
shows the reference fix; on a phone-sized screen too. Chromium and the Space as in
``tests/test_ui_browser.py``."""

from __future__ import annotations

import pytest

from envcore.cache import ScenarioCache
from tests.browser_kit import (
    choose,
    chromium,
    fill,
    no_error_overlay,
    open_page,
    running_space,
    shot,
    skip_unless_wanted,
    textbox,
    wait_text,
)

skip_unless_wanted()

pytestmark = pytest.mark.slow  # about 35 s; the default run's browser smoke is tests/test_ui_browser.py

IDOR_READ = "ab8f867487219d4e"
"""A training scenario: zoe.lindqvist70 owns note 32963 and viktor.kim89 must not read it."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("space") / "human.jsonl"
    with running_space({"A01_HUMAN_LOG": str(log)}, timeout_s=90) as (url, _port, _process):
        yield f"{url}/"


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def send(page, path: str, user: str) -> None:
    fill(page, "play-path", path)
    choose(page, "play-as-user", user)
    page.click("#play-send")


@pytest.mark.parametrize("width,height", [(1400, 900), (390, 844)], ids=["desktop", "phone"])
def test_the_checklist_hints_and_card_teach_a_player_who_fixes_the_bug(browser, server, width, height):
    bundle = ScenarioCache.open(None).load(IDOR_READ)
    context, page, errors = open_page(browser, server, {"width": width, "height": height})
    try:
        textbox(page, "play-scenario").fill(IDOR_READ)
        page.click("#play-new")
        wait_text(page, "play-status", IDOR_READ)
        wait_text(page, "play-checklist", "Reproduce the exploit")
        assert page.locator("#play-checklist").inner_text().count("○") == 4

        page.get_by_role("tab", name="HTTP").click()
        send(page, "/api/notes/32963", "zoe.lindqvist70")  # the owner: legitimate, not the exploit
        wait_text(page, "play-response", "HTTP 200")
        send(page, "/api/notes/32963", "viktor.kim89")  # another user reads it: the exploit
        wait_text(page, "play-checklist", "✓ Reproduce the exploit")
        assert "viktor.kim89" in page.locator("#play-checklist").inner_text()

        page.locator("#play-hint-box").get_by_text("Stuck?").click()
        page.click("#play-hint")
        wait_text(page, "play-hints", "Hint 1: Where to look")
        wait_text(page, "play-hint-msg", "costs 0.10")

        page.get_by_role("tab", name="Code").click()
        page.locator("#play-patch-box").get_by_text("Paste a unified diff instead").click()
        page.locator("#play-patch textarea").fill(bundle.reference_fix)
        page.click("#play-apply-diff")
        wait_text(page, "play-checklist", "✓ Patch the app")

        page.get_by_role("tab", name="HTTP").click()
        send(page, "/api/notes/32963", "viktor.kim89")
        wait_text(page, "play-checklist", "✓ See the exploit refused")
        send(page, "/api/notes/32963", "zoe.lindqvist70")
        wait_text(page, "play-checklist", "✓ Check that legitimate use still works")

        page.get_by_role("tab", name="Submit").click()
        page.click("#play-submit")
        wait_text(page, "play-debrief", "What was wrong")
        card = page.locator("#play-debrief").inner_text()
        assert "Insecure direct object reference (read)" in card and "CWE-639" in card
        assert "before your patch: it worked" in card and "after: refused" in card
        assert "1 hint(s) taken" in card
        assert "not allowed to view this note" in page.locator("#play-reference-fix").inner_text()
        no_error_overlay(page)
        shot(page, f"play-teaching-{width}")
        if width < 500:  # every control of the loop fits the phone's width
            for elem_id in ("play-new", "play-checklist", "play-debrief", "play-submit"):
                box = page.locator(f"#{elem_id}").bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 1, elem_id
    finally:
        context.close()
    assert not errors, errors


def test_a_bad_header_line_is_a_message_and_nothing_is_sent(browser, server):
    context, page, errors = open_page(browser, server, {"width": 1400, "height": 900})
    try:
        textbox(page, "play-scenario").fill(IDOR_READ)
        page.click("#play-new")
        wait_text(page, "play-status", "step 0 of")
        page.get_by_role("tab", name="HTTP").click()
        textbox(page, "play-headers").fill("X-Role admin")
        textbox(page, "play-path").fill("/api/me")
        page.click("#play-send")
        wait_text(page, "play-http-msg", "Header line 1 is not 'Name: value'")
        assert "step 0 of" in page.locator("#play-status").inner_text()
        assert textbox(page, "play-headers").input_value() == "X-Role admin"  # the text is kept
        no_error_overlay(page)
    finally:
        context.close()
    assert not errors, errors


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)], ids=["desktop", "phone"])
def test_a_newcomer_starts_on_a_friendly_scenario_and_never_loses_typed_text(browser, server, width, height):
    """A new visitor presses New episode without choosing anything: a tier-1 scenario whose app is one
    file. Text typed in the editor and not applied survives a pasted diff (kept on top of the patched
    file), and New episode asks before dropping it. Every split of the cache is offered."""
    from envcore.patching import make_diff
    from ui.play_tab import FIRST_EPISODE_NOTE, first_scenario

    cache = ScenarioCache.open(None)
    first = first_scenario(cache)
    bundle = cache.load(first)
    assert bundle.tier == 1 and [p for p in bundle.files if p.endswith(".py")] == ["app.py"]
    app = bundle.files["app.py"]
    context, page, errors = open_page(browser, server, {"width": width, "height": height})
    try:
        box = page.locator("#play-split").get_by_role("combobox")
        box.click()
        offered = page.locator(f"#{box.get_attribute('aria-controls')}").get_by_role("option").all_inner_texts()
        assert [o.split("\n")[-1].strip() for o in offered] == ["any", *cache.splits()]  # the chosen one has a ✓
        page.keyboard.press("Escape")

        page.click("#play-new")
        wait_text(page, "play-status", first)
        wait_text(page, "play-new-msg", FIRST_EPISODE_NOTE[:30])

        page.get_by_role("tab", name="Code").click()
        page.locator("#play-files").get_by_text("app.py", exact=True).click()
        wait_text(page, "play-editor", "import")
        editor = page.locator("#play-editor .cm-content")
        editor.click()
        page.keyboard.press("Control+End")
        page.keyboard.type("\n# my note, not applied yet")
        page.wait_for_function("() => document.querySelector('#play-editor .cm-content').innerText"
                               ".includes('# my note, not applied yet')")

        page.locator("#play-patch-box").get_by_text("Paste a unified diff instead").click()
        page.locator("#play-patch textarea").fill(make_diff({"app.py": app}, {"app.py": "# reviewed\n" + app}))
        page.click("#play-apply-diff")
        wait_text(page, "play-patch-msg", "kept on top of the patched file")
        text = page.locator("#play-editor .cm-content").inner_text()
        assert "# reviewed" in text and "# my note, not applied yet" in text  # the diff, and the typed text
        page.screenshot(path=f"/tmp/watchplay-play-editor-kept-{width}.png", full_page=False)

        page.click("#play-new")
        wait_text(page, "play-new-msg", "not applied yet")
        assert "press New episode again" in page.locator("#play-new-msg").inner_text()
        assert "step 2 of" in page.locator("#play-status").inner_text()  # nothing started (read, patch)
        page.click("#play-new")
        wait_text(page, "play-status", "step 0 of")
        assert "not applied" not in page.locator("#play-new-msg").inner_text()
        no_error_overlay(page)
        shot(page, f"play-first-episode-{width}")
        page.screenshot(path=f"/tmp/watchplay-play-{width}.png", full_page=True)
    finally:
        context.close()
    assert not errors, errors
