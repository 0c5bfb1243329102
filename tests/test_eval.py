"""Evaluation: summaries with bootstrap intervals, the eval and compare commands, resuming, and
rollouts through the real server (two sessions, records written from the client's view)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envcore.agents.baselines import NoopAgent
from envcore.agents.evaluate import bootstrap_ci, compare, evaluation_episodes, render_report, summarize
from envcore.agents.rollouts import EpisodeSpec, run_rollouts
from envcore.cache import ScenarioCache
from envcore.env.environment import Runtime
from envcore.env.episode_log import EpisodeRecord, read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.env.server import create_env_app
from tests.test_env_server import serve_in_thread

ROOT = Path(__file__).resolve().parents[1]


def record(scenario, reward, resolution, *, agent="a", bug_class="idor_read", tier=1, security=1.0, broken=0.0, seed=0):
    components = [{"name": "security_blocked", "value": 0.0, "measured": security, "detail": ""},
                  {"name": "legit_use_broken", "value": 0.0, "measured": broken, "detail": ""}]
    return EpisodeRecord(episode_id=f"{scenario}-{agent}-{seed}", agent_id=agent, scenario_id=scenario, scenario_hash="h",
                         bug_class=bug_class, tier=tier, seed=seed, started_at=0, ended_at=1, outcome="submitted",
                         max_steps=30, reward=reward,
                         reward_breakdown=None if reward is None else {"resolution": resolution, "components": components})


def test_bootstrap_interval_holds_the_mean_and_is_reproducible():
    values = [0.0] * 30 + [1.0] * 10
    low, high = bootstrap_ci(values)
    assert low < 0.25 < high and 0.05 < low and high < 0.45
    assert bootstrap_ci(values) == (low, high)
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_summary_rates_groups_and_infrastructure_errors():
    records = [record("s1", 1.0, "full"), record("s2", 0.4, "partial", security=0.5, tier=2),
               record("s3", -0.5, "no", security=0.0, broken=1.0, bug_class="tenant_leak", tier=2),
               record("s4", None, None)]
    summary = summarize(records, domains={"s1": "clinic", "s2": "clinic", "s3": "shop"})
    assert summary["episodes"] == 4 and summary["infrastructure_errors"] == 1
    assert summary["infrastructure_error_rate"] == 0.25
    overall = summary["overall"]
    assert overall["episodes"] == 3
    assert overall["full_fix"]["mean"] == pytest.approx(1 / 3) and overall["partial"]["mean"] == pytest.approx(1 / 3)
    assert overall["security_pass"]["mean"] == pytest.approx(0.5) and overall["regression_pass"]["mean"] == pytest.approx(2 / 3)
    assert set(summary["by"]["bug_class"]) == {"idor_read", "tenant_leak"}
    assert summary["by"]["tier"]["2"]["episodes"] == 2 and summary["by"]["domain"]["clinic"]["episodes"] == 2
    report = render_report(summary, title="t")
    assert "## By bug class" in report and "| tenant_leak | 1 |" in report and "33% [" in report
    assert "infrastructure-error rate 25.0%, goal 0" in report


def test_a_replayed_episode_counts_once_and_compare_pairs_on_common_scenarios():
    base = [record("s1", 0.0, "no"), record("s2", 0.0, "no"), record("s3", 0.0, "no", seed=0)]
    other = [record("s1", 1.0, "full", agent="b"), record("s2", 0.0, "no", agent="b"), record("s2", 1.0, "full", agent="b"),
             record("s9", 1.0, "full", agent="b")]
    assert summarize(other)["episodes"] == 3  # s2 twice (a resumed replay): the later one counts
    result = compare(base, other)
    assert result["scenarios"] == 2 and result["only_in_base"] == 1 and result["only_in_other"] == 1
    assert result["reward_difference"]["mean"] == pytest.approx(1.0)
    assert result["full_fix"]["only_other"] == 2 and result["full_fix"]["only_base"] == 0


def test_evaluation_episodes_are_the_same_for_every_agent(shipped):
    a = evaluation_episodes(shipped, split="test", n=5)
    assert a == evaluation_episodes(shipped, split="test", n=5) and len(a) == 5
    assert all(shipped.split_of(s.scenario) == "test" for s in a)
    assert len(evaluation_episodes(shipped, split="test", n=None)) == len(shipped.ids(split="test"))


def run_cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "envcore", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_eval_and_compare_commands_oracle_against_noop_resumable(tmp_path):
    oracle, noop = tmp_path / "oracle", tmp_path / "noop"
    for agent, out in (("oracle", oracle), ("noop", noop)):
        proc = run_cli("eval", "--agent", agent, "--n", "4", "--out", str(out), "--parallel", "2")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["episodes"] == 4 and summary["run"]["played"] == 4
        assert (out / "report.md").read_text().startswith(f"# {agent} on test")
    assert json.loads((oracle / "summary.json").read_text())["overall"]["full_fix"]["mean"] == 1.0
    assert json.loads((noop / "summary.json").read_text())["overall"]["full_fix"]["mean"] == 0.0

    again = run_cli("eval", "--agent", "noop", "--n", "4", "--out", str(noop))
    assert again.returncode == 0 and "0 played, 4 resumed" in again.stdout
    assert len(list(read_episodes(noop / "episodes.jsonl"))) == 4

    proc = run_cli("compare", str(noop), str(oracle), "--out", str(tmp_path / "cmp.md"))
    assert proc.returncode == 0, proc.stderr
    assert "Paired on 4 scenarios" in proc.stdout and "fixed only by oracle / only by noop | 4 / 0" in proc.stdout


def test_eval_refuses_bad_arguments(tmp_path):
    assert run_cli("eval", "--agent", "nobody", "--out", str(tmp_path)).returncode == 2
    bad = run_cli("eval", "--agent", "noop", "--adapter", str(tmp_path), "--out", str(tmp_path))
    assert bad.returncode != 0 and "language-model agents" in bad.stderr
    assert "at least 1" in run_cli("eval", "--agent", "noop", "--n", "0", "--out", str(tmp_path)).stderr
    assert "no episodes.jsonl" in run_cli("compare", str(tmp_path), str(tmp_path)).stderr


@pytest.fixture(scope="module")
def server_url(sandbox):
    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open(None)), sandbox=sandbox)  # the cache eval picks from
    with serve_in_thread(create_env_app(runtime, max_sessions=4)) as url:
        yield url


def test_rollouts_through_the_server_write_client_side_records_and_resume(server_url, shipped, tmp_path):
    log = tmp_path / "remote.jsonl"
    specs = [EpisodeSpec.of(i, scenario=s) for i, s in enumerate(sorted(shipped.ids(split="test"))[:4])]
    result = run_rollouts(NoopAgent, specs, log=log, parallel=2, urls=[server_url, server_url], agent_id="noop-remote")
    assert result.played == 4 and not result.failed
    records = list(read_episodes(log))
    assert {r.scenario_id for r in records} == {s.scenario for s in specs}
    for r in records:
        bundle = shipped.load(r.scenario_id)
        assert r.scenario_hash == bundle.content_hash() and r.bug_class == bundle.bug_class and r.tier == bundle.tier
        assert r.outcome == "submitted" and r.reward <= 0 and r.steps[-1].action == {"tool": "submit"}
        assert r.verification is None  # hidden probes stay on the server
    again = run_rollouts(NoopAgent, specs, log=log, parallel=2, urls=[server_url], agent_id="noop-remote")
    assert again.played == 0 and again.skipped == 4


def test_eval_against_a_server_plays_the_scenarios_its_catalogue_lists(server_url, shipped):
    from envcore.agents.served import EvaluationError, served_scenarios

    # the server's cache is the local one: its test split, as the server lists it
    assert served_scenarios([server_url, server_url], split="test", cache=shipped) == sorted(shipped.ids(split="test"))
    # a local cache other than the one served: stopped before the first episode, saying what to pass
    other = ScenarioCache.open(Path(shipped.root).parent / "v2")
    with pytest.raises(EvaluationError, match="pass --cache with a copy of the cache the server serves"):
        served_scenarios([server_url], split="test", cache=other)


def test_a_dead_server_is_reported_not_written(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "dead.jsonl"
    result = run_rollouts(NoopAgent, [EpisodeSpec.of(0, split="test")], log=log, urls=[f"http://127.0.0.1:{port}"],
                          agent_id="noop")
    assert result.played == 0 and len(result.failed) == 1
    assert not list(read_episodes(log)) if log.exists() else True


@pytest.mark.slow  # a second whole eval run; resuming is tested by default in the oracle-against-noop test
def test_eval_compress_leaves_a_gzipped_log_that_compare_reads_and_a_rerun_resumes(tmp_path):
    out = tmp_path / "noop"
    proc = run_cli("eval", "--agent", "noop", "--n", "2", "--out", str(out), "--compress")
    assert proc.returncode == 0, proc.stderr
    assert (out / "episodes.jsonl.gz").is_file() and not (out / "episodes.jsonl").exists()
    assert len(list(read_episodes(out / "episodes.jsonl.gz"))) == 2
    again = run_cli("eval", "--agent", "noop", "--n", "3", "--out", str(out), "--compress")
    assert again.returncode == 0 and "1 played, 2 resumed" in again.stdout
    assert len(list(read_episodes(out / "episodes.jsonl.gz"))) == 3
    proc = run_cli("compare", str(out), str(out))
    assert proc.returncode == 0 and "Paired on 3 scenarios" in proc.stdout


def test_a_truncated_compressed_log_yields_its_whole_records_and_reports_the_rest(tmp_path):
    import gzip

    lines = [record(f"s{i}", 0.5, "full").model_dump_json() + "\n" for i in range(50)]
    packed = gzip.compress("".join(lines).encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(packed[: len(packed) * 2 // 3])
    problems = []
    kept = list(read_episodes(tmp_path / "cut.jsonl.gz", problems))
    assert 0 < len(kept) < 50 and [r.scenario_id for r in kept] == [f"s{i}" for i in range(len(kept))]
    assert problems and any("ends early" in p.reason or "torn" in p.reason for p in problems)


@pytest.mark.slow  # a benchmark command's whole run; the parts it times are tested by default
def test_bench_rollouts_prints_local_and_remote_rates():
    proc = run_cli("bench", "rollouts", "--episodes", "2", "--sessions", "1,2", "--servers", "1", "--split", "val")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.count("episodes/s;") == 4 and "in process x" in out and "through servers x" in out
    assert "through 1 server processes on loopback" in out
    assert run_cli("bench", "rollouts", "--sessions", "1,x").returncode != 0
