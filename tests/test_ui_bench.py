"""``python -m envcore bench ui`` runs end to end and prints every figure it promises (a smoke run:
one cold start, one round of every action; the figures themselves are quoted from a full run), in
both modes: server-side, and ``--browser`` (click -> updated content painted, in Debian's Chromium)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envcore.cli import build_parser
from tests.browser_kit import CHROMIUM_FLAGS, skip_unless_wanted
from ui import browser_bench
from ui.browser_bench import ACTIONS, Report, quantile, table

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a benchmark command's whole run; the parts it times are tested by default
def test_bench_ui_prints_the_cold_start_and_every_action(tmp_path):
    result = subprocess.run([sys.executable, "-m", "envcore", "bench", "ui", "--cold-runs", "1", "--rounds", "1"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                            env={**os.environ, "A01_HUMAN_LOG": str(tmp_path / "human.jsonl")})
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "cold start of python app.py to first page served" in out
    for action in ("play: new episode", "play: apply edit", "play: submit", "watch: step forward",
                   "watch: live agent step", "dashboard: page load (all charts)", "dashboard: compare two sets"):
        assert action in out, out
    assert "slowest p50" in out


@pytest.mark.slow  # a benchmark command's whole run; the parts it times are tested by default
def test_bench_ui_browser_times_every_action_in_chromium(tmp_path):
    skip_unless_wanted()
    saved = tmp_path / "ui-browser.json"
    result = subprocess.run([sys.executable, "-m", "envcore", "bench", "ui", "--browser", "--rounds", "1",
                             "--json", str(saved)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    figures = json.loads(saved.read_text())
    assert [row["action"] for row in figures["actions"]] == list(ACTIONS)
    for row in figures["actions"]:
        assert row["n"] >= 1 and all(ms > 0 for ms in row["samples_ms"]), row
        assert row["p50_ms"] > 0 and row["target_ms"] == ACTIONS[row["action"]]
        assert row["action"] in out
    assert figures["chromium"] and len(figures["load_before"]) == len(figures["load_after"]) == 3
    assert f"Chromium {figures['chromium']}" in out and "load average (1/5/15 min): before" in out
    assert "p50 over target:" in out


def test_the_browser_bench_fails_clearly_when_it_cannot_measure(tmp_path):
    result = subprocess.run([sys.executable, "-m", "envcore", "bench", "ui", "--browser", "--rounds", "1",
                             "--chromium", str(tmp_path / "no-chromium")], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 2
    assert "the measurement failed: Chromium is not installed at" in result.stderr
    assert not result.stdout


def test_the_figures_table_says_ok_or_over_against_each_target():
    report = Report(rounds=2, chromium="150.0", chromium_path="/usr/bin/chromium", load_before=[1.0, 0.5, 0.25],
                    load_after=[2.0, 1.0, 0.5])
    report.samples["first page"] = [1200.0, 1400.0]
    report.samples["play: new episode"] = [250.0, 900.0]  # p50 575 ms: over 300 ms
    report.samples["dashboard: measure"] = [400.0, 600.0]
    report.phases["dashboard: measure"] = [{"send": 100.0, "server": 200.0, "draw": 100.0}]
    rows = {name: line.strip().removeprefix(name).split() for line in table(report).splitlines()
            for name in ACTIONS if line.strip().startswith(name + " ")}
    assert list(rows) == list(ACTIONS)
    assert rows["first page"][:6] == ["2", "1300", "1400", "<=", "3000", "ok"]
    assert rows["play: new episode"][:6] == ["2", "575", "900", "<=", "300", "over"]
    assert rows["dashboard: measure"] == ["2", "500", "600", "<=", "1000", "ok", "100", "/", "200", "/", "100"]
    assert rows["watch: step back"][:6] == ["0", "-", "-", "<=", "300", "-"]  # nothing measured: no verdict
    text = table(report)
    assert "load average (1/5/15 min): before 1.00 0.50 0.25, after 2.00 1.00 0.50" in text
    assert "p50 over target: play: new episode" in text


@pytest.mark.parametrize(("values", "q", "expected", "description"), [
    ([5.0], 0.95, 5.0, "one value is every quantile"),
    ([float(v) for v in range(1, 11)], 0.95, 10.0, "p95 of ten is the largest"),
    ([float(v) for v in range(1, 21)], 0.95, 19.0, "p95 of twenty is the nineteenth"),
    ([3.0, 1.0, 2.0], 0.5, 2.0, "values are sorted first"),
    ([], 0.95, None, "nothing measured"),
])
def test_quantile_is_nearest_rank(values, q, expected, description):
    assert quantile(values, q) == expected, description


def test_the_ui_command_offers_both_modes_and_keeps_browser_options_to_the_browser(capsys):
    parser = build_parser()
    args = parser.parse_args(["bench", "ui", "--browser", "--rounds", "3", "--json", "x.json", "--port", "7000",
                              "--chromium", "/opt/chromium"])
    assert (args.browser, args.rounds, args.json, args.port, args.chromium) == (True, 3, "x.json", 7000, "/opt/chromium")
    args = parser.parse_args(["bench", "ui", "--json", "x.json"])
    with pytest.raises(SystemExit, match="--json: only with --browser"):
        args.func(args)
    args = parser.parse_args(["bench", "ui", "--browser", "--rounds", "0"])
    with pytest.raises(SystemExit, match="at least 1"):
        args.func(args)


def test_the_bench_launches_chromium_with_the_browser_tests_flags():
    assert browser_bench.CHROMIUM_FLAGS == CHROMIUM_FLAGS
