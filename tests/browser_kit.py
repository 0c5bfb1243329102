"""Shared kit for tests that drive the Space: a running ``python app.py`` and Debian's Chromium.

The browser is always the system's Chromium (``A01_CHROMIUM``, default ``/usr/bin/chromium``) driven
by Playwright with ``executable_path``, never a downloaded one, with the flags a closed network
needs. ``A01_BROWSER_TESTS=skip`` leaves the browser tests out knowingly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from envcore.env.bench import free_port, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("A01_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = Path(os.environ.get("A01_SCREENSHOT_DIR", ROOT / "build" / "screenshots"))
TIMEOUT_MS = 30_000


def skip_unless_wanted() -> None:
    if os.environ.get("A01_BROWSER_TESTS") == "skip":
        pytest.skip("browser tests left out (A01_BROWSER_TESTS=skip)", allow_module_level=True)


@contextmanager
def running_space(env: dict[str, str], *, timeout_s: float = 120) -> Iterator[tuple[str, int, subprocess.Popen]]:
    """``python app.py`` on a free port with ``env`` added: (base URL, port, process); stopped after."""
    port = free_port()
    process = start_server(None, port, ready="/", timeout_s=timeout_s, env=env)
    try:
        yield f"http://127.0.0.1:{port}", port, process
    finally:
        stop_server(process)


@contextmanager
def chromium():
    """Debian's Chromium, headless, through Playwright."""
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.fail(f"Chromium is not installed at {CHROMIUM}: apt-get install chromium "
                    "(or set A01_BROWSER_TESTS=skip to leave the browser tests out)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


# ----- driving the page ---------------------------------------------------------------------------------
def open_page(browser, url: str, viewport: dict[str, int]):
    """A fresh context on ``url`` with the Play tab drawn: (context, page, JavaScript errors seen)."""
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_selector("#play-new")
    return context, page, errors


def shot(page, name: str, *, full_page: bool = True) -> None:
    """A screenshot under :data:`SHOTS` (look at it)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full_page)


def textbox(page, elem_id: str):
    return page.locator(f"#{elem_id}").get_by_role("textbox")


def choose(page, elem_id: str, option: str) -> None:
    """Pick ``option`` in the Gradio dropdown ``elem_id``."""
    box = page.locator(f"#{elem_id}").get_by_role("combobox")
    box.click()
    page.locator(f"#{box.get_attribute('aria-controls')}").get_by_role("option", name=option, exact=True).click()
    page.wait_for_function("([id, v]) => document.querySelector('#' + id + ' input')?.value === v",
                           arg=[elem_id, option])


def fill(page, elem_id: str, text: str, *, attempts: int = 3) -> None:
    """Type ``text`` into the Gradio textbox ``elem_id`` and wait until the box holds it.

    A tab's components are mounted when the tab is first opened, and a box filled in the same moment
    can be mounted again with its first value (seen on a loaded 2-core machine), so a box that does
    not hold the text after a few seconds is filled again; one that never keeps it is a failure that
    says what it holds."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = textbox(page, elem_id)
    for _ in range(attempts):
        box.fill(text)
        try:
            page.wait_for_function("([id, v]) => document.querySelector('#' + id + ' textarea, #' + id + ' input')"
                                   "?.value === v", arg=[elem_id, text], timeout=TIMEOUT_MS / attempts)
            return
        except PlaywrightTimeout:
            continue
    raise AssertionError(f"#{elem_id} does not keep {text!r}: after {attempts} tries it holds {box.input_value()!r}")


PENDING = ".progress-text, .eta-bar, .progress-bar-wrap"
"""What Gradio's status tracker draws inside a component while its event runs (the elapsed time,
"0.1s", and the progress bars): text that has changed but is not the answer yet."""

SETTLED_TEXT_JS = f"""id => {{
    const el = document.getElementById(id);
    return el && !el.querySelector({PENDING!r}) ? el.innerText : null;
}}"""
"""JavaScript: the element's text once no event is running on it (``null`` while one is)."""


def wait_settled_change(page, ids: list[str], before: list[str], timeout_ms: int = TIMEOUT_MS) -> None:
    """Wait until one of the elements ``ids`` shows other text than ``before`` and none of them is
    pending: a timer that appears while the event runs is a change, but not the answer."""
    page.wait_for_function(
        f"([ids, before]) => {{ const text = {SETTLED_TEXT_JS};"
        " const now = ids.map(text);"
        " return now.every(t => t !== null) && now.some((t, i) => t !== before[i]); }",
        arg=[ids, before], timeout=timeout_ms)


def send_request(page, path: str, user: str | None = None, timeout_ms: int = 60_000) -> str:
    """Send ``path`` (as ``user`` when given) from the Play tab's HTTP tab, which must be open; the
    response shown once it has changed, or a failure that says what the page showed instead."""
    fill(page, "play-path", path)
    if user is not None:
        choose(page, "play-as-user", user)
    before = [page.locator("#play-response").inner_text(), page.locator("#play-http-msg").inner_text()]
    page.click("#play-send")
    try:
        wait_settled_change(page, ["play-response", "play-http-msg"], before, timeout_ms)
    except Exception as exc:  # Playwright's TimeoutError
        raise AssertionError(f"no response to {path}: the response box shows "
                             f"{page.locator('#play-response').inner_text()!r}, the message beside Send "
                             f"{page.locator('#play-http-msg').inner_text()!r}, the status "
                             f"{page.locator('#play-status').inner_text()!r}") from exc
    message = page.locator("#play-http-msg").inner_text().strip()
    assert not message, f"{path} was refused by the page: {message}"
    return page.locator("#play-response").inner_text()


def text_of(page, elem_id: str) -> str:
    """What the element ``elem_id`` shows."""
    return page.locator(f"#{elem_id}").inner_text()


def wait_text(page, elem_id: str, text: str, timeout_ms: float = TIMEOUT_MS) -> None:
    """Wait until the element ``elem_id`` shows ``text``."""
    page.wait_for_function("([id, t]) => (document.getElementById(id)?.innerText || '').includes(t)",
                           arg=[elem_id, text], timeout=timeout_ms)


def no_error_overlay(page) -> None:
    assert page.get_by_text("Error", exact=True).count() == 0, "an error overlay is on the page"
    assert page.locator(".toast-body").count() == 0, "a toast popped up"
