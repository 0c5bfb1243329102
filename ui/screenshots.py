"""The README's pictures of the Space, taken from the running page, so they cannot go stale.

    python -m ui.screenshots [--url URL] [--out docs/images] [--chromium PATH]

Without ``--url`` it starts the Space on a free port (with a scratch human log, so nothing of yours is
shown or written) and stops it afterwards. In Debian's Chromium (``executable_path``, never a
downloaded browser), at 1280 x 800, as a first visitor:

* ``watch.png``: the Watch tab as it opens (two agents that part on a held-out scenario, at the
  step that decides it);
* ``play.png``: Play's first episode with a hint taken and the exploit reproduced (the request of the
  scenario's first hidden exploit, sent as its user: this tool reads the scenario from the local
  cache, which must be the one the Space serves);
* ``play-debrief.png``: the card after submitting the reference fix;
* ``dashboard.png``: the Dashboard's default view, whole.

Each picture is written only once the page shows what it is of; a step that never shows fails the
command with what it waited for, and no picture is left half made.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from ui.browser_bench import CHROMIUM, CHROMIUM_FLAGS

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images"
VIEWPORT = {"width": 1280, "height": 800}
WAIT_MS = 60_000
SETTLED_JS = """() => [...document.querySelectorAll('[data-testid="status-tracker"]:not(.hide)')]
  .every((tracker) => tracker.querySelector('.error'))"""


class ScreenshotError(RuntimeError):
    pass


def _settle(page: Any) -> None:
    page.wait_for_function(SETTLED_JS, timeout=WAIT_MS, polling=100)
    page.wait_for_timeout(400)  # the last frame painted (charts animate in)


def _text(page: Any, selector: str) -> str:
    locator = page.locator(selector).first
    return locator.inner_text() if locator.count() else ""


def _wait_text(page: Any, selector: str, words: str, what: str) -> None:
    try:
        page.wait_for_function("([s, w]) => (document.querySelector(s)?.innerText || '').includes(w)",
                               arg=[selector, words], timeout=WAIT_MS, polling=100)
    except Exception:
        raise ScreenshotError(f"{what}: {selector} never showed {words!r} (it shows {_text(page, selector)[:200]!r})") from None


def _choose(page: Any, elem_id: str, option: str) -> None:
    box = page.locator(f"#{elem_id}").get_by_role("combobox")
    box.click()
    page.locator(f"#{box.get_attribute('aria-controls')}").get_by_role("option", name=option, exact=True).click()
    page.wait_for_function("([id, v]) => document.querySelector('#' + id + ' input')?.value === v",
                           arg=[elem_id, option], timeout=WAIT_MS)


def _fill(page: Any, elem_id: str, text: str) -> None:
    box = page.locator(f"#{elem_id}").get_by_role("textbox").first
    box.fill(text)
    page.wait_for_function("([id, v]) => document.querySelector('#' + id + ' textarea, #' + id + ' input')?.value === v",
                           arg=[elem_id, text], timeout=WAIT_MS)


def _open(page: Any, elem_id: str) -> None:
    """Open the accordion ``elem_id`` (its header is a button) if it is closed."""
    header = page.locator(f"#{elem_id} > button").first
    if header.get_attribute("aria-expanded") != "true":
        header.click()
    page.wait_for_timeout(200)


def _tab(page: Any, name: str) -> None:
    page.locator(f"#tab-{name}-button").first.click()


def exploit_request(scenario_id: str) -> tuple[str, str, str | None]:
    """The method, path and user (``None``: anonymous) of the scenario's first hidden exploit, preferring
    a GET sent by a signed-in user."""
    from envcore.cache import ScenarioCache

    bundle = ScenarioCache.open(None).load(scenario_id)
    steps = [step for probe in bundle.probes if probe.kind == "security" for step in probe.steps]
    steps.sort(key=lambda step: (step.method != "GET", step.actor is None))
    if not steps:
        raise ScreenshotError(f"scenario {scenario_id} has no exploit")
    return steps[0].method, steps[0].path, steps[0].actor


def shoot_watch(page: Any, out: Path) -> None:
    _tab(page, "watch")
    _wait_text(page, "#watch-story", "step", "Watch: the opening banner")
    _settle(page)
    page.screenshot(path=str(out / "watch.png"), full_page=True)


def shoot_play(page: Any, out: Path) -> None:
    from envcore.cache import ScenarioCache

    _tab(page, "play")
    page.locator("#play-new").click()
    _wait_text(page, "#play-status", "Scenario", "Play: New episode")
    _settle(page)
    status = _text(page, "#play-status")
    cache = ScenarioCache.open(None)
    scenario_id = next((word.strip("`.,()") for word in status.split() if len(word.strip("`.,()")) >= 8
                        and any(row["scenario_id"].startswith(word.strip("`.,()")) for row in cache.rows)), None)
    if scenario_id is None:
        raise ScreenshotError(f"Play's status names no scenario of the local cache: {status[:200]!r}")
    scenario_id = cache.resolve(scenario_id)
    _open(page, "play-hint-box")
    page.locator("#play-hint").first.click()
    _wait_text(page, "#play-hints", "1", "Play: take a hint")
    _settle(page)
    method, path, user = exploit_request(scenario_id)
    page.get_by_role("tab", name="HTTP").first.click()
    _choose(page, "play-method", method)
    _fill(page, "play-path", path)
    _choose(page, "play-as-user", user or "(anonymous)")
    page.locator("#play-send").click()
    _wait_text(page, "#play-checklist", "✓ Reproduce", "Play: send the exploit")
    _settle(page)
    page.screenshot(path=str(out / "play.png"), full_page=True)
    bundle = cache.load(scenario_id)
    page.get_by_role("tab", name="Code").first.click()
    _open(page, "play-patch-box")
    _fill(page, "play-patch", bundle.reference_fix)
    page.locator("#play-apply-diff").click()
    _settle(page)
    page.get_by_role("tab", name="Submit").first.click()
    page.locator("#play-submit").click()
    _wait_text(page, "#play-debrief", "FULL", "Play: submit the reference fix")
    _settle(page)
    page.locator("#play-debrief").first.screenshot(path=str(out / "play-debrief.png"))


def shoot_dashboard(page: Any, out: Path) -> None:
    _tab(page, "dashboard")
    page.locator("#dash-rates .main-svg").first.wait_for(state="visible", timeout=WAIT_MS)
    _settle(page)
    page.screenshot(path=str(out / "dashboard.png"), full_page=True)


def take(url: str, out: Path, chromium: str = CHROMIUM) -> list[Path]:
    """Every picture of the module docstring from the page at ``url``, written to ``out`` only when all
    of them were taken."""
    from playwright.sync_api import sync_playwright

    scratch = Path(tempfile.mkdtemp(prefix="a01-shots-"))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            try:
                for shoot in (shoot_watch, shoot_play, shoot_dashboard):
                    context = browser.new_context(viewport=VIEWPORT)  # a first visitor each time
                    page = context.new_page()
                    page.goto(url, timeout=WAIT_MS)
                    page.wait_for_selector("#play-new", timeout=WAIT_MS)
                    try:
                        shoot(page, scratch)
                    finally:
                        context.close()
            finally:
                browser.close()
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for picture in sorted(scratch.glob("*.png")):
            shutil.copyfile(picture, out / picture.name)
            written.append(out / picture.name)
        return written
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running Space (default: start one on a free port)")
    parser.add_argument("--out", default=str(OUT), help=f"where the pictures go (default {OUT.relative_to(ROOT)})")
    parser.add_argument("--chromium", default=CHROMIUM)
    args = parser.parse_args(argv)
    if not Path(args.chromium).exists():
        print(f"ui.screenshots: Chromium is not at {args.chromium} (apt-get install chromium)", file=sys.stderr)
        return 1
    process = None
    url = args.url
    scratch = Path(tempfile.mkdtemp(prefix="a01-shots-log-"))
    try:
        if url is None:
            from envcore.env.bench import free_port, start_server

            port = free_port()
            process = start_server(None, port, ready="/", timeout_s=120, env={"A01_HUMAN_LOG": str(scratch / "human.jsonl")})
            url = f"http://127.0.0.1:{port}/"
        written = take(url, Path(args.out), args.chromium)
    except ScreenshotError as exc:
        print(f"ui.screenshots: {exc}", file=sys.stderr)
        return 1
    finally:
        if process is not None:
            from envcore.env.bench import stop_server

            stop_server(process)
        shutil.rmtree(scratch, ignore_errors=True)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
