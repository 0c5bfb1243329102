"""Every ``python -m envcore bench`` command, run as a user runs it, on a small input: it exits 0
and prints its figures. A command that takes ``--cache`` runs on every shipped cache found under
artifacts/scenarios (each version its own scenario styles, splits and credentials).

``bench factory`` is the default run's smoke of the command line (seconds); every other command is a
whole benchmark run of 10-40 s and is marked slow: the parts each one times (verification, episodes in
process and over ``/ws``, rollouts, providers, the UI's controllers) are tested by default in their own
suites.

Commands smoked elsewhere are not repeated here: ``private`` (tests/test_private_split.py), ``load``
on the newest cache and ``ui --browser`` (tests/test_env_load.py, tests/test_ui_bench.py, slow).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from envcore.cache import DEFAULT_ROOT, MANIFEST, latest_version

ROOT = Path(__file__).resolve().parents[1]
NEWEST = latest_version()
CACHES = sorted((folder for folder in DEFAULT_ROOT.iterdir() if (folder / MANIFEST).is_file()),
                key=lambda folder: (folder != NEWEST, [-int(n) for n in re.findall(r"\d+", folder.name)], folder.name))
"""Every shipped cache: the newest (the default of every command) first, then by version, newer first."""


def each_cache(caches=CACHES):
    """``caches`` as parameters, each named by its folder."""
    return [pytest.param(folder, id=folder.name) for folder in caches]


def bench(*args: str, timeout: int = 300) -> str:
    """Run ``python -m envcore bench ARGS``; return what it printed (it must exit 0)."""
    proc = subprocess.run([sys.executable, "-m", "envcore", "bench", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout


def test_the_caches_are_discovered():
    assert NEWEST in CACHES and CACHES[0] == NEWEST
    assert all(folder.parent == DEFAULT_ROOT for folder in CACHES)


def test_bench_factory():
    out = bench("factory", "--n", "2", "--workers", "1")
    assert re.search(r"workers=1 \(build check\): \d/2 verified in [\d.]+s = [\d.]+ verified scenarios/s; "
                     r"rejects [\d.]+%; distinct hashes \d", out), out


@pytest.mark.slow
@pytest.mark.parametrize("cache", each_cache())
def test_bench_verify(cache):
    out = bench("verify", "--cache", str(cache), "--n", "1", "--rounds", "1", "--naive", "1", "--throughput-s", "0.5",
                "--spares", "1", timeout=600)
    assert "resolutions (reference fixes): {'full': 1}" in out, out
    for figure in ("sandbox, the isolation grading uses (whole verify() call):   p50",
                   "in-process floor, same isolation (one import, a fork per probe): p50",
                   "naive pytest + TestClient subprocess: p50",
                   "one probe in a fork of its own, no sandbox",
                   "one request through a live worker: p50", "unique memory (USS) per live worker: median",
                   "verifications/s", "containment layers: {"):
        assert figure in out, out


@pytest.mark.slow
@pytest.mark.parametrize("cache", [pytest.param(folder, id=folder.name) for folder in CACHES])
def test_bench_verify_families(cache):
    out = bench("verify", "--families", "--cache", str(cache), "--n", "1", "--rounds", "1", timeout=600)
    assert re.search(r"^compact +\d+ / \d+ +\d+ / \d+ +[\d.]+x", out, re.M), out
    assert re.search(r"^external +\d+ / \d+", out, re.M), out


@pytest.mark.slow
@pytest.mark.parametrize("cache", each_cache())
def test_bench_env(cache):
    out = bench("env", "--cache", str(cache), "--resets", "2", "--episodes", "1", "--ws-episodes", "1",
                "--clients", "1", "--scaling-episodes", "1")
    assert "oracle episodes in process, 1 thread(s):" in out and "(1/1 rewarded >= 0.95)" in out, out
    assert "oracle episodes over /ws, 1 concurrent clients:" in out and ", 0 errors (1/1 rewarded" in out, out
    assert re.search(r"^scaling(, oracle episodes in process, one episode thread per core: 1 core [\d.]+ episodes/s, "
                     r"2 cores [\d.]+ episodes/s|: not measured \(this process may use one core\))", out, re.M), out
    assert "reset, scenario loaded from the cache:  p50" in out and "reset, scenario already in memory:      p50" in out


@pytest.mark.slow
@pytest.mark.parametrize("cache", each_cache([folder for folder in CACHES if folder != NEWEST]))
def test_bench_load(cache):
    """On the caches tests/test_env_load.py does not play (it plays the newest)."""
    out = bench("load", "--cache", str(cache), "--episodes", "2", "--sessions", "2", "--block", "1")
    assert re.search(r"2 episodes in [\d.]+ s = [\d.]+ episodes/s over 2 sessions", out), out
    assert "errors: 0" in out and "server RSS growth" in out, out


@pytest.mark.slow
def test_bench_ui_server_side():
    out = bench("ui", "--cold-runs", "0", "--rounds", "1")
    for action in ("play: new episode", "play: send request", "play: submit", "watch: live agent step",
                   "dashboard: page load (all charts)"):
        assert re.search(rf"{re.escape(action)} +[\d.]+ +[\d.]+ +[\d.]+", out), out
    assert "slowest p50" in out


@pytest.mark.slow
@pytest.mark.parametrize("cache", each_cache())
def test_bench_rollouts(cache):
    out = bench("rollouts", "--cache", str(cache), "--episodes", "1", "--sessions", "1", "--servers", "1")
    assert out.count("1 episodes in") == 2 and "in process x1.00, through servers x1.00" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("cache", each_cache())
def test_bench_providers(cache):
    """The process provider (servers from this checkout): docker and uv need what a test machine may lack."""
    out = bench("providers", "--cache", str(cache), "--episodes", "1", "--sessions", "1", "--replicas", "1",
                "--providers", "process")
    assert re.search(r"^\| in process \| - \| 1 \| [\d.]+ \| [\d.]+ \| 1\.00x \|", out, re.M), out
    assert re.search(r"^\| process \| 1 \| 1 \| [\d.]+ \| [\d.]+ \| [\d.]+x \| [\d.]+ \|", out, re.M), out


@pytest.mark.slow
def test_bench_grpo_paths():
    out = bench("grpo-paths", "--steps", "1", timeout=600)
    for path in ("rollout_func", "environment_factory"):
        assert re.search(rf"^{path} +\S+ +[\d.]+ +[\d.]+% +[\d.]+x$", out, re.M), out
