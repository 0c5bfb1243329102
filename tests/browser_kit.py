"""Shared kit for tests that drive the Space: a running ``python app.py`` and Debian's Chromium.

The browser is always the system's Chromium (``A01_CHROMIUM``, default ``/usr/bin/chromium``) driven
by Playwright with ``executable_path``, never a downloaded one, with the flags a closed network
needs. ``A01_BROWSER_TESTS=skip`` leaves the browser tests out knowingly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from envcore.env.bench import free_port, start_server

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
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


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
