"""``python -m envcore bench ui`` runs end to end and prints every figure it promises (a smoke run:
one cold start, one round of every action; the figures themselves are quoted from a full run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_ui_prints_the_cold_start_and_every_action(tmp_path):
    result = subprocess.run([sys.executable, "-m", "envcore", "bench", "ui", "--cold-runs", "1", "--rounds", "1"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "A01_HUMAN_LOG": str(tmp_path / "human.jsonl")})
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "cold start of python app.py to first page served" in out
    for action in ("play: new episode", "play: apply edit", "play: submit", "watch: step forward",
                   "watch: live agent step", "dashboard: page load (all charts)", "dashboard: compare two sets"):
        assert action in out, out
    assert "slowest p50" in out
