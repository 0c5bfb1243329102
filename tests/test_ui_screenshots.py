"""The README's pictures come from the running Space (``python -m ui.screenshots``), so they can be
made again whenever the page changes. Slow (a Space and Chromium, about a minute): ``-m slow``."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser_kit import skip_unless_wanted

ROOT = Path(__file__).resolve().parents[1]
PICTURES = ("watch.png", "play.png", "play-debrief.png", "dashboard.png")

pytestmark = pytest.mark.slow
skip_unless_wanted()


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def test_the_readme_pictures_are_made_again_from_the_running_space(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ui.screenshots", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(PICTURES)
    for name in PICTURES:
        width, height = png_size(tmp_path / name)
        assert width >= 1000 and height >= 300, (name, width, height)
    assert png_size(tmp_path / "dashboard.png")[1] <= 3 * 800 + 100  # the default view: about three screens
    readme = (ROOT / "README.md").read_text()
    assert all(f"docs/images/{name}" in readme for name in PICTURES)
