"""``bench load`` and what it guards: many sessions at once against the real server.

The load run itself (real ``python app.py``, real clients) is played small here; ``python -m envcore
bench load`` plays the full 5,000 episodes over 64 sessions. The server sizes its sandbox for its
sessions: with too few worker slots, concurrent episodes wait for each other and then lose their
reward to "pool exhausted"."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envcore.cache import ScenarioCache
from envcore.env import loadbench
from envcore.env.bench import free_port, start_server
from envcore.env.environment import Runtime, workers_for
from envcore.env.sampler import CurriculumSampler
from envcore.env.server import create_env_app
from envcore.sandbox.pool import DEFAULT_MAX_WORKERS

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "artifacts/scenarios/v2"


def test_players_mix_and_their_scripts():
    counts = {p: sum(loadbench.player_for(i) == p for i in range(200)) for p in ("oracle", "noop", "clumsy")}
    assert counts == {"oracle": 140, "noop": 30, "clumsy": 30}
    bundle = next(iter(ScenarioCache.open(CACHE)))
    for player in ("oracle", "noop", "clumsy"):
        actions = loadbench.actions_for(player, bundle)
        assert actions[-1] == {"tool": "submit"}
    assert any(a["tool"] == "apply_patch" and a["diff"] == bundle.reference_fix for a in loadbench.actions_for("oracle", bundle))


@pytest.mark.parametrize("player, reward, errors, wrong", [
    ("oracle", 0.99, 0, False), ("oracle", 0.9, 0, True), ("oracle", None, 0, True),
    ("noop", 0.0, 0, False), ("noop", 0.2, 0, True),
    ("clumsy", -0.1, 3, False), ("clumsy", -0.1, 2, True), ("clumsy", 0.5, 3, True),
])
def test_judge_counts_wrong_rewards_and_missing_errors(player, reward, errors, wrong):
    assert (loadbench.judge(player, reward, errors) is not None) is wrong


@pytest.mark.slow  # a load run; the server's session limits are tested by default elsewhere
def test_a_load_run_through_the_real_server_has_no_errors_and_reports_memory_per_block(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the server's log file goes
    result = loadbench.measure(str(CACHE), episodes=24, sessions=6, block=8, split="train")
    assert list(tmp_path.iterdir()) == []  # the stopped server's log is removed with it
    assert result.errors == [], result.errors
    assert result.episodes == 24 and result.by_player == {"oracle": 18, "noop": 3, "clumsy": 3}
    assert [b["episodes"] for b in result.blocks] == [8, 16, 24]
    assert all(b["rss_end_mib"] > 50 and b["rate"] > 0 for b in result.blocks)
    assert result.rss_growth is not None


def test_a_server_that_cannot_start_says_why_and_leaves_no_log_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError, match="(?s)the server exited: .*A01_SANDBOX_WORKERS must be a positive integer"):
        start_server(None, free_port(), env={"A01_SANDBOX_WORKERS": "0"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a benchmark command's whole run; the parts it times are tested by default
def test_bench_load_command_prints_its_figures_and_refuses_bad_numbers():
    proc = subprocess.run([sys.executable, "-m", "envcore", "bench", "load", "--episodes", "6", "--sessions", "3",
                           "--block", "3"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "errors: 0" in proc.stdout and "server RSS growth" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "envcore", "bench", "load", "--sessions", "0"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode != 0 and "at least 1" in bad.stderr


def test_the_server_sizes_its_sandbox_for_its_sessions():
    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open(CACHE)))
    create_env_app(runtime, max_sessions=40)
    assert runtime.sessions == 40
    sandbox = runtime.get_sandbox()
    try:
        assert sandbox.max_workers == workers_for(40) > DEFAULT_MAX_WORKERS
    finally:
        sandbox.close()


def test_a_small_server_shares_the_default_sandbox():
    from envcore.sandbox import default_sandbox

    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open(CACHE)))
    create_env_app(runtime, max_sessions=4)
    assert runtime.get_sandbox() is default_sandbox()


def test_sessions_starting_at_once_share_one_sandbox():
    # every session's first step asks the runtime for its sandbox at about the same moment: one
    # zygote must serve them all (a sandbox each halved the server's throughput)
    import threading

    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open(CACHE)), sessions=40)
    barrier, got = threading.Barrier(8), []

    def ask():
        barrier.wait()
        got.append(runtime.get_sandbox())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(got) == 8 and len({id(s) for s in got}) == 1
    finally:
        got[0].close()


def test_sandbox_workers_can_be_set_and_a_bad_value_is_refused_at_start(monkeypatch):
    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open(CACHE)))
    monkeypatch.setenv("A01_SANDBOX_WORKERS", "12")
    create_env_app(runtime, max_sessions=40)
    assert runtime.sandbox_workers == 12
    for bad in ("0", "-3", "many"):
        monkeypatch.setenv("A01_SANDBOX_WORKERS", bad)
        with pytest.raises(ValueError, match="A01_SANDBOX_WORKERS"):
            create_env_app(Runtime(sampler=CurriculumSampler(ScenarioCache.open(CACHE))), max_sessions=4)
