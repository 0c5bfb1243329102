"""The command line as a newcomer types it: build a small cache, check it, show and summarise it."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envcore.cli import main

ROOT = Path(__file__).resolve().parent.parent


LEFT_IN_TEMP: list[str] = []


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory):
    out = tmp_path_factory.mktemp("caches") / "v1"
    temp = tmp_path_factory.mktemp("temp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(temp))  # inherited by the build's forked workers
        assert main(["factory", "build", "--n", "12", "--seed", "100", "--out", str(out), "--workers", "2"]) == 0
    LEFT_IN_TEMP[:] = sorted(p.name for p in temp.iterdir())
    return out


def test_a_parallel_build_leaves_nothing_in_the_temp_folder(small_cache):
    # a pool's workers are ended by a signal and cannot clean up after themselves
    assert LEFT_IN_TEMP == []


def test_build_writes_a_manifest_and_bundles(small_cache, capsys):
    manifest = json.loads((small_cache / "manifest.json").read_text())
    assert manifest["counts"]["total"]["scenarios"] == 12
    assert len(list((small_cache / "bundles").glob("*.json.gz"))) == 12


@pytest.mark.slow  # the whole check of 12 scenarios; the quick check runs by default below
def test_check_passes_on_a_fresh_cache(small_cache, capsys):
    assert main(["factory", "check", str(small_cache), "--runner", "inprocess"]) == 0
    assert "12 of 12 scenarios valid" in capsys.readouterr().out


def test_check_fails_and_names_a_tampered_entry(small_cache, tmp_path, capsys):
    import shutil

    copy = tmp_path / "v1"
    shutil.copytree(small_cache, copy)
    victim = sorted((copy / "bundles").glob("*.json.gz"))[0]
    data = json.loads(gzip.decompress(victim.read_bytes()))
    data["task"] = "tampered"
    victim.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert main(["factory", "check", str(copy), "--quick"]) == 1
    assert f"CORRUPT scenario {victim.name.split('.')[0]}" in capsys.readouterr().out


def test_show_prints_task_policy_probes(small_cache, capsys):
    sid = json.loads((small_cache / "manifest.json").read_text())["scenarios"][0]["scenario_id"]
    assert main(["factory", "show", sid[:6], "--cache", str(small_cache), "--fix"]) == 0
    out = capsys.readouterr().out
    for part in ("Task", "Policy", "Users", "Probes", "security", "reference fix", "+++ b/"):
        assert part in out


def test_show_unknown_hash_is_a_clear_error(small_cache):
    with pytest.raises(SystemExit, match="matches 0 scenarios"):
        main(["factory", "show", "ffffffffff", "--cache", str(small_cache)])


def test_stats_prints_counts(small_cache, capsys):
    assert main(["factory", "stats", str(small_cache)]) == 0
    out = capsys.readouterr().out
    assert "by bug_class" in out and "by tier" in out and "by split" in out


def test_build_refuses_a_bad_config(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("domains: [atlantis]\n")
    with pytest.raises(ValueError, match="unknown domains"):
        main(["factory", "build", "--n", "1", "--out", str(tmp_path / "c"), "--config", str(cfg)])


def test_build_with_a_job_records_lineage(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("parent: v1\nreason: only notes apps\nconfig:\n  domains: [notes]\n  bug_classes: {tenant_leak: 0}\n")
    out = tmp_path / "v2"
    assert main(["factory", "build", "--n", "3", "--out", str(out), "--job", str(job), "--workers", "1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["lineage"]["parent"] == "v1"
    assert set(manifest["counts"]["domain"]) == {"notes"}
    assert manifest["config"]["bug_classes"]["tenant_leak"] == 0


@pytest.mark.parametrize("args", [[], ["factory"], ["factory", "build"], ["bench"]])
def test_help_and_usage_errors(args):
    proc = subprocess.run([sys.executable, "-m", "envcore", *args], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "usage:" in proc.stderr


@pytest.mark.parametrize("args", [["--help"], ["factory", "--help"], ["factory", "build", "--help"],
                                  ["factory", "import", "--help"], ["bench", "factory", "--help"]])
def test_help_everywhere(args):
    proc = subprocess.run([sys.executable, "-m", "envcore", *args], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "usage:" in proc.stdout


def test_help_imports_no_agent_and_no_web_stack():
    """``--help`` and usage errors answer at once: the agent names come from a module that imports
    no agent, so neither OpenEnv's server nor Gradio (seconds to import) is loaded to parse flags."""
    probe = ("import runpy, sys\nsys.argv = ['envcore', 'eval', '--help']\n"
             "try:\n    runpy.run_module('envcore', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "heavy = sorted(m for m in ('gradio', 'openenv', 'torch', 'envcore.agents.catalog') if m in sys.modules)\n"
             "print('HEAVY', heavy)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert "--agent {noop,deny_all,random,heuristic,oracle,transformers,openai}" in proc.stdout
    assert "HEAVY []" in proc.stdout, proc.stdout[-500:]


def test_the_command_lines_agent_names_are_the_catalogs():
    from envcore.agents.baselines import BASELINES
    from envcore.agents.catalog import AGENTS as BUILT
    from envcore.agents.names import AGENTS, BASELINE_NAMES

    assert tuple(BASELINES) == BASELINE_NAMES and BUILT == AGENTS
