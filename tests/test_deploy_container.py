"""The Space's image, built and run the ways docs/deploy.md describes (slow: minutes, and a Docker engine).

``deploy/container_check.py`` does the work and each test checks its figures: the image builds from the
checkout and from what ``openenv push`` uploads, stays slim, and its container serves and grades as a
Space runs it, hardened (read-only root, tmpfs /tmp, 64 MB /dev/shm, no capabilities, no new
privileges, memory and process limits) with tini reaping orphans and Docker's HEALTHCHECK healthy, and
refuses to grade on a platform that blocks Landlock unless the operator opts in.

Docker Hub may be out of reach: the base image is ``A01_DOCKER_BASE`` when set (``python:3.11-slim``
where it can be pulled), else a local stand-in built with debootstrap (``deploy/standin-base.sh``;
needs root and debootstrap). Without a Docker engine the tests are skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "deploy"))
import container_check  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base() -> str:
    problem = container_check.engine_problem()
    if problem:
        pytest.skip(problem)
    chosen = os.environ.get("A01_DOCKER_BASE")
    if chosen:
        return chosen
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.skip("no A01_DOCKER_BASE, and a stand-in base needs root and debootstrap (apt-get install debootstrap)")
    return "standin"


@pytest.mark.parametrize("source", ["checkout", "push"])
def test_the_image_builds_slim_and_its_container_serves_and_grades_as_deployed(base, source):
    figures = container_check.run(base, f"a01-repair-gym:test-{source}", keep=False, source=source)
    print(figures)
    assert figures["image_mb"] < 1000, figures["largest_packages"]
    assert not any(name.startswith(("torch", "transformers", "playwright", "pytest"))
                   for name in (p.split()[0] for p in figures["largest_packages"]))
    for run in ("as_a_space", "hardened"):
        assert figures[run]["reference_fix"]["resolution"] == "full" and figures[run]["untouched"]["resolution"] == "no"
    assert "Landlock" in figures["hardened"]["sandbox"] and "on memory" in figures["hardened"]["sandbox"]
    assert figures["pid1"].startswith("/usr/bin/tini") and figures["docker_health"] == "healthy"
    assert figures["cold_start_to_health_s"] < 60
    assert figures["without_landlock"] == "refused" and figures["without_landlock_opted_in"] == "reduced, reference fix full"
