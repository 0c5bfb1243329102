"""The dashboard's pure layers: rollout-set discovery and cached loading, records -> DataFrames,
DataFrames -> Plotly figures, and the rollout viewer, on synthetic records and on the shipped runs."""

from __future__ import annotations

import ast
import gzip
import json
import math
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from envcore.agents.evaluate import METRICS, compare, scenario_domains
from envcore.cache import ScenarioCache
from envcore.env.episode_log import EpisodeLogger, EpisodeRecord, StepEntry
from ui import artifact_sets, charts, data, rollout_view
from ui.artifact_sets import RolloutSet

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
SHIPPED = ("deny_all", "heuristic", "noop", "oracle", "random", "tiny-random-llm")
UI_MODULES = ("artifact_sets", "data", "charts", "rollout_view")


# ----- synthetic records --------------------------------------------------------------------------
def step(number: int, action: dict[str, Any], *, tool: str | None = None, result: Any = None,
         error: str | None = None, text: str = "") -> StepEntry:
    return StepEntry(step=number, action=action, elapsed_ms=1.0, observation={
        "text": text or (f"Error: {error}" if error else "ok"), "phase": "exploring",
        "tool": tool if tool is not None else action.get("tool"), "result": result, "error": error,
        "files": [], "steps_left": 10 - number, "done": False, "reward": 0.0, "reward_breakdown": None})


def make_record(scenario_id: str, *, agent: str = "agent", reward: float | None = 0.5, resolution: str = "full",
                tier: int = 1, bug_class: str = "idor_read", outcome: str = "submitted", seed: int | None = 0,
                security: float = 1.0, broken: float = 0.0, n_steps: int = 4, invalid: int = 0,
                steps: list[StepEntry] | None = None, verification: dict | None = None,
                episode_id: str | None = None) -> EpisodeRecord:
    breakdown = None
    if reward is not None:
        breakdown = {"reward": reward, "resolution": resolution, "gates": {}, "components": [
            {"name": "security_blocked", "value": 0.5 * security, "measured": security, "detail": ""},
            {"name": "legit_use_broken", "value": -0.5 * broken, "measured": broken, "detail": ""},
            {"name": "steps_used", "value": -0.001 * n_steps, "measured": float(n_steps), "detail": f"{n_steps}/10"},
            {"name": "invalid_actions", "value": -0.01 * invalid, "measured": float(invalid), "detail": ""},
        ]}
    return EpisodeRecord(
        episode_id=episode_id or f"{agent}-{scenario_id}-{seed}", agent_id=agent, source="evaluation",
        scenario_id=scenario_id, scenario_hash="0" * 64, bug_class=bug_class, tier=tier, seed=seed,
        started_at=0.0, ended_at=1.0, outcome=outcome, max_steps=10, steps=steps or [], reward=reward,
        reward_breakdown=breakdown, verification=verification)


# ----- the shipped runs, read once ----------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped() -> dict[str, RolloutSet]:
    return {s.name.rsplit("/", 1)[-1]: s for s in artifact_sets.discover(ARTIFACTS) if s.name.startswith("evals/v2/")}


@pytest.fixture(scope="module")
def shipped_frame(shipped) -> pd.DataFrame:
    domains = scenario_domains(ScenarioCache.open(None))
    return data.episode_frame({name: artifact_sets.load_records(s) for name, s in shipped.items()}, domains)


# ----- artifact sets ------------------------------------------------------------------------------
def test_discover_finds_the_shipped_runs_with_the_oracle_as_validation(shipped):
    sets = artifact_sets.discover(ARTIFACTS)
    evals = [s for s in sets if s.name.startswith("evals/v2/")]
    assert sorted(s.name.rsplit("/", 1)[-1] for s in evals) == sorted(SHIPPED)
    oracle = shipped["oracle"]
    assert (oracle.kind, oracle.label) == ("validation", "Oracle: the reference fix (validation only) · evals/v2")
    assert oracle.path == ARTIFACTS / "evals/v2/oracle/episodes.jsonl.gz"
    assert all(s.kind == "baseline" for name, s in shipped.items() if name != "oracle")
    assert shipped["heuristic"].label == "Heuristic baseline (scripted) · evals/v2"
    assert shipped["tiny-random-llm"].caveat == artifact_sets.PIPELINE_CHECK  # a 2-layer, 64-wide model
    assert shipped["tiny-random-llm"].label.endswith("pipeline check, not a skilled agent")
    assert not shipped["heuristic"].caveat
    assert evals[-1] == oracle  # validation runs after the competitors
    assert not any("scenarios" in s.name or "models" in s.name for s in sets)


def _write_log(path: Path, records: list[EpisodeRecord], *, compress: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(r.model_dump_json() + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(lines) if compress else lines)


def test_discover_names_kinds_and_skips(tmp_path):
    one = [make_record("s1")]
    _write_log(tmp_path / "evals/v2/heuristic/episodes.jsonl", one)
    _write_log(tmp_path / "evals/v2/heuristic/episodes.jsonl.gz", one, compress=True)  # the older copy
    _write_log(tmp_path / "evals/v2/tuned/episodes.jsonl.gz", one, compress=True)
    (tmp_path / "evals/v2/tuned/summary.json").write_text(json.dumps({"run": {"adapter": "adapters/lora-1"}}))
    (tmp_path / "evals/v2/plain/summary.json").parent.mkdir(parents=True)
    (tmp_path / "evals/v2/plain/summary.json").write_text(json.dumps({"run": {"adapter": None}}))
    _write_log(tmp_path / "evals/v2/plain/episodes.jsonl", one)
    _write_log(tmp_path / "evals/v2/oracle/episodes.jsonl", one)
    (tmp_path / "human").mkdir()
    (tmp_path / "human/episodes.jsonl").write_bytes(b"")  # the human log before its first episode
    _write_log(tmp_path / "training/run1/rollouts.jsonl", one)
    _write_log(tmp_path / "misc/play.jsonl.gz", one, compress=True)
    _write_log(tmp_path / "scenarios/v1/rejects.jsonl", one)
    _write_log(tmp_path / "models/m/episodes.jsonl", one)
    _write_log(tmp_path / ".cache/episodes.jsonl", one)
    (tmp_path / "misc/metrics.jsonl").write_text('{"loss": 1.0}\n')  # another tool's JSONL

    sets = artifact_sets.discover(tmp_path)
    assert [(s.name, s.kind) for s in sets] == [
        ("evals/v2/tuned", "trained"), ("training/run1/rollouts", "trained"),
        ("evals/v2/heuristic", "baseline"), ("evals/v2/plain", "baseline"),
        ("human", "human"), ("evals/v2/oracle", "validation"), ("misc/play", "other")]
    by_name = {s.name: s for s in sets}
    assert by_name["evals/v2/heuristic"].path.name == "episodes.jsonl"  # plain preferred over .gz
    assert by_name["evals/v2/oracle"].label == "Oracle: the reference fix (validation only) · evals/v2"
    assert by_name["human"].label == "Human players · this Space"
    assert by_name["training/run1/rollouts"].label == "run1 training rollouts"
    assert by_name["evals/v2/tuned"].label == "tuned · evals/v2"


def test_a_model_too_small_to_play_is_labelled_a_pipeline_check_wherever_its_runs_sit(tmp_path):
    def model(folder: str, hidden: int, layers: int) -> None:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text(json.dumps(
            {"hidden_size": hidden, "num_hidden_layers": layers, "vocab_size": 32000, "intermediate_size": 4 * hidden}))

    model("models/tiny", 64, 2)
    model("models/coder", 1536, 28)  # about 1.5 billion parameters
    one = [make_record("s1")]
    for name, run in {"evals/v2/tiny": {"model": "models/tiny", "adapter": None},
                      "evals/v2/coder": {"model": "models/coder", "adapter": None}}.items():
        _write_log(tmp_path / name / "episodes.jsonl", one)
        (tmp_path / name / "summary.json").write_text(json.dumps({"run": run}))
    _write_log(tmp_path / "training/t1/episodes.jsonl", one)
    (tmp_path / "training/t1/training.json").write_text(json.dumps({"model": "models/tiny"}))
    _write_log(tmp_path / "training/t1/eval/trained/episodes.jsonl", one)
    (tmp_path / "training/t1/eval/trained/summary.json").write_text(
        json.dumps({"run": {"model": "models/tiny", "adapter": "adapters/t1"}}))
    by_name = {s.name: s for s in artifact_sets.discover(tmp_path)}
    assert artifact_sets.model_parameters({"hidden_size": 1536, "num_hidden_layers": 28, "vocab_size": 151936}) > 1e9
    assert by_name["evals/v2/tiny"].caveat == artifact_sets.PIPELINE_CHECK
    assert by_name["evals/v2/coder"].caveat == ""
    assert by_name["evals/v2/coder"].label == "coder (model, untrained) · evals/v2"
    assert by_name["training/t1"].caveat == by_name["training/t1/eval/trained"].caveat == artifact_sets.PIPELINE_CHECK
    assert by_name["training/t1/eval/trained"].label == (
        "t1 after training · held-out eval · pipeline check, not a skilled agent")
    assert artifact_sets.discover(tmp_path / "absent") == []


def test_load_records_caches_and_rereads_a_growing_log(tmp_path):
    path = tmp_path / "human/episodes.jsonl"
    rollout_set = RolloutSet(name="human", path=path, kind="human", label="human")
    with EpisodeLogger(path) as logger:
        logger.write(make_record("s1", agent="human:a"))
    first = artifact_sets.load_records(rollout_set)
    again = artifact_sets.load_records(rollout_set)
    assert len(first) == 1 and again[0] is first[0]  # parsed once: the same objects
    with EpisodeLogger(path) as logger:
        logger.write(make_record("s2", agent="human:a"))
    grown = artifact_sets.load_records(rollout_set)
    assert [r.scenario_id for r in grown] == ["s1", "s2"]
    assert artifact_sets.load_problems(rollout_set) == []
    with open(path, "ab") as handle:
        handle.write(b'{"record_version": 1, "episode_id": "torn')
    assert len(artifact_sets.load_records(rollout_set)) == 2
    problems = artifact_sets.load_problems(rollout_set)
    assert len(problems) == 1 and problems[0].line == 3 and "torn" in problems[0].reason
    missing = RolloutSet(name="gone", path=tmp_path / "gone.jsonl", kind="other", label="gone")
    assert artifact_sets.load_records(missing) == [] and artifact_sets.load_problems(missing)


def test_load_records_from_many_threads(tmp_path):
    path = tmp_path / "log.jsonl"
    _write_log(path, [make_record(f"s{i}") for i in range(20)])
    rollout_set = RolloutSet(name="log", path=path, kind="other", label="log")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: artifact_sets.load_records(rollout_set), range(32)))
    assert all([r.scenario_id for r in result] == [f"s{i}" for i in range(20)] for result in results)


def test_load_cache_is_bounded(tmp_path):
    artifact_sets.clear_cache()
    for index in range(artifact_sets.CACHE_ENTRIES + 5):
        path = tmp_path / f"log{index}.jsonl"
        _write_log(path, [make_record(f"s{index}")])
        artifact_sets.load_records(RolloutSet(name=path.stem, path=path, kind="other", label=path.stem))
    assert len(artifact_sets._cache) == artifact_sets.CACHE_ENTRIES


# ----- records -> DataFrames ----------------------------------------------------------------------
def test_episode_frame_rows_columns_and_grading():
    records = [
        make_record("s1", reward=0.2, resolution="no", episode_id="old"),
        make_record("s1", reward=0.9, resolution="full", episode_id="new"),  # replayed: the last one counts
        make_record("s2", reward=None, outcome="infrastructure_error", tier=2),
        make_record("s3", outcome="abandoned"),
    ]
    frame = data.episode_frame({"mine": records}, domains={"s1": "tickets"})
    assert list(frame.columns[:len(data.EPISODE_COLUMNS)]) == list(data.EPISODE_COLUMNS)
    assert data.component_columns(frame) == ["component:security_blocked", "component:legit_use_broken",
                                             "component:steps_used", "component:invalid_actions"]
    assert frame["episode_id"].tolist() == ["new", "agent-s2-0"]
    assert frame["graded"].tolist() == [True, False]
    assert frame["domain"].tolist() == ["tickets", "unknown"]
    assert frame["tier"].dtype == "int64" and frame["tier"].tolist() == [1, 2]
    graded, ungraded = frame.iloc[0], frame.iloc[1]
    assert graded["full_fix"] == 1.0 and graded["reward"] == 0.9 and graded["component:security_blocked"] == 0.5
    assert all(math.isnan(ungraded[m]) for m in METRICS)
    assert math.isnan(ungraded["component:steps_used"])


def test_empty_inputs_give_empty_tables_with_their_columns():
    empty = data.episode_frame({})
    assert list(empty.columns) == list(data.EPISODE_COLUMNS) and empty.empty
    assert list(data.episode_frame({"a": []}).columns) == list(data.EPISODE_COLUMNS)
    assert list(data.rate_table(empty, "tier", "full_fix").columns) == list(data.RATE_COLUMNS)
    assert list(data.component_frame(empty).columns) == list(data.COMPONENT_COLUMNS)
    assert list(data.paired_delta_table(empty, "a", "b").columns) == list(data.DELTA_COLUMNS)
    assert list(data.set_summary(empty).columns) == list(data.SUMMARY_COLUMNS)
    assert list(data.manifest_frame([]).columns) == list(data.MANIFEST_COLUMNS)
    only_errors = data.episode_frame({"a": [make_record("s1", reward=None, outcome="infrastructure_error")]})
    assert data.rate_table(only_errors, "overall", "reward").empty


def test_rate_table_means_counts_and_order():
    a = [make_record("s1", reward=1.0, tier=2), make_record("s2", reward=0.0, resolution="no", tier=1),
         make_record("s3", reward=1.0, tier=1)]
    b = [make_record("s1", agent="b", reward=0.0, resolution="no", tier=2),
         make_record("s4", agent="b", reward=None, outcome="infrastructure_error", tier=1)]
    frame = data.episode_frame({"zeta": a, "alpha": b})
    table = data.rate_table(frame, "tier", "full_fix", samples=200)
    assert table[["set", "group", "n"]].values.tolist() == [["zeta", "1", 2], ["zeta", "2", 1], ["alpha", "2", 1]]
    assert table["mean"].tolist() == [0.5, 1.0, 0.0]
    assert (table["low"] <= table["mean"]).all() and (table["mean"] <= table["high"]).all()
    overall = data.rate_table(frame, "overall", "reward", samples=200)
    assert overall["group"].tolist() == ["overall", "overall"] and overall["n"].tolist() == [3, 1]
    with pytest.raises(ValueError):
        data.rate_table(frame, "tier", "nonsense")


def test_rate_table_equals_the_shipped_summary(shipped_frame):
    """Same metric values, same order, same seed: the dashboard's numbers are the report's numbers."""
    summary = json.loads((ARTIFACTS / "evals/v2/heuristic/summary.json").read_text())
    table = data.rate_table(shipped_frame[shipped_frame["set"] == "heuristic"], "tier", "full_fix")
    for row in table.itertuples():
        expected = summary["by"]["tier"][row.group]["full_fix"]
        assert row.mean == pytest.approx(expected["mean"])
        assert [row.low, row.high] == pytest.approx(expected["ci95"])
        assert row.n == summary["by"]["tier"][row.group]["episodes"]


def test_oracle_fixes_everything_and_the_summary_table(shipped_frame):
    summary = data.set_summary(shipped_frame).set_index("set")
    assert summary.loc["oracle", "full_fix"] == 1.0
    assert summary.loc["oracle", "episodes"] == 258 and summary.loc["oracle", "graded"] == 258
    assert summary.loc["noop", "full_fix"] == 0.0
    assert summary.loc["tiny-random-llm", "invalid_rate"] == pytest.approx(1.0)
    assert list(summary.index) == list(dict.fromkeys(shipped_frame["set"]))


def test_component_frame_is_long_and_graded_only():
    frame = data.episode_frame({"a": [make_record("s1", security=1.0, n_steps=5),
                                      make_record("s2", reward=None, outcome="infrastructure_error")]})
    long = data.component_frame(frame)
    assert len(long) == 4 and set(long["set"]) == {"a"}
    assert dict(zip(long["component"], long["value"])) == pytest.approx(
        {"security_blocked": 0.5, "legit_use_broken": 0.0, "steps_used": -0.005, "invalid_actions": 0.0})


def test_paired_delta_table_on_synthetic_pairs():
    base = [make_record("s1", reward=0.0, tier=1, bug_class="x"), make_record("s2", reward=0.5, tier=2, bug_class="y"),
            make_record("s3", reward=0.1, tier=1, bug_class="x"), make_record("only-base", reward=0.0)]
    other = [make_record("s1", agent="o", reward=1.0), make_record("s2", agent="o", reward=0.5),
             make_record("s3", agent="o", reward=0.4), make_record("only-other", agent="o", reward=1.0),
             make_record("s3", agent="o", reward=None, outcome="infrastructure_error", seed=1)]
    frame = data.episode_frame({"base": base, "other": other})
    table = data.paired_delta_table(frame, "base", "other", samples=200)
    assert table["slice"].tolist() == ["overall", "tier 1", "tier 2", "bug class: x", "bug class: y"]
    overall = table.iloc[0]
    assert overall["n"] == 3
    assert overall["delta"] == pytest.approx((1.0 + 0.0 + 0.3) / 3)
    assert overall["base"] == pytest.approx(0.2) and overall["other"] == pytest.approx(1.9 / 3)
    assert table.set_index("slice").loc["tier 2", "delta"] == pytest.approx(0.0)
    assert data.paired_delta_table(frame, "base", "nobody").empty
    assert list(data.paired_delta_table(frame, "base", "nobody").columns) == list(data.DELTA_COLUMNS)


def test_heuristic_beats_noop_paired_and_matches_compare(shipped, shipped_frame):
    table = data.paired_delta_table(shipped_frame, "noop", "heuristic")
    overall = table.iloc[0]
    assert overall["slice"] == "overall" and overall["n"] == 258
    assert overall["delta"] > 0 and overall["low"] > 0
    reference = compare(artifact_sets.load_records(shipped["noop"]), artifact_sets.load_records(shipped["heuristic"]))
    assert overall["delta"] == pytest.approx(reference["reward_difference"]["mean"])
    assert [overall["low"], overall["high"]] == pytest.approx(reference["reward_difference"]["ci95"])
    assert table["slice"].tolist()[1:4] == ["tier 1", "tier 2", "tier 3"]
    assert sum(table["slice"].str.startswith("bug class: ")) == 12


def test_manifest_frame_and_filters():
    rows = ScenarioCache.open(None).rows
    frame = data.manifest_frame(rows)
    assert list(frame.columns) == list(data.MANIFEST_COLUMNS) and len(frame) == len(rows)
    shipped = next(r for r in rows if r["split"] == "test" and r["traps"] == ["admin_access"])
    row = frame.set_index("scenario_id").loc[shipped["scenario_id"]]
    assert (row["traps"], row["security"], row["regression"], row["trap"], row["tier"]) == (
        "admin_access", shipped["probes"]["security"], shipped["probes"]["regression"], shipped["probes"]["trap"],
        shipped["tier"])
    assert len(data.filter_manifest(frame, split="test")) == sum(r["split"] == "test" for r in rows)
    assert len(data.filter_manifest(frame, split="any", tier=None)) == len(rows)
    tier3 = data.filter_manifest(frame, split="test", tier="3", bug_class="idor_read")
    assert len(tier3) > 0 and set(tier3["tier"]) == {3} and set(tier3["bug_class"]) == {"idor_read"}
    assert set(tier3["split"]) == {"test"}
    assert len(data.filter_manifest(frame, tier=3)) == len(data.filter_manifest(frame, tier="3"))
    prefix = shipped["scenario_id"][:8]
    assert data.filter_manifest(frame, text=prefix.upper())["scenario_id"].tolist() == [shipped["scenario_id"]]
    by_title = data.filter_manifest(frame, text="SUPPORT TICKET")
    assert len(by_title) > 0 and by_title["title"].str.contains("Support ticket").all()
    assert data.filter_manifest(frame, domain="no-such-domain").empty


# ----- DataFrames -> figures ----------------------------------------------------------------------
def test_the_rates_chart_names_tiers_and_draws_each_cell_from_the_table(shipped_frame):
    table = data.rate_table(shipped_frame, "tier", "full_fix", samples=300)
    figure = charts.rate_chart(table, by="tier", metric="full_fix")
    cells = figure.data[0]
    assert list(cells.y) == ["tier 1", "tier 2", "tier 3"]
    assert list(cells.x) == list(dict.fromkeys(table["set"]))
    column = list(cells.x).index("heuristic")
    assert [line[column] for line in cells.z] == pytest.approx(table[table["set"] == "heuristic"]["mean"].tolist())
    assert "Full-fix rate by tier" in figure.layout.title.text  # the title names the groups: no axis title


def test_charts_share_colours_given_one_mapping():
    frame = data.episode_frame({"b": [make_record("s1")], "a": [make_record("s1", agent="x", reward=0.1)],
                                "c": [make_record("s1", agent="y", reward=0.3)]})
    colors = charts.set_colors(["a", "b", "c"])
    assert colors == {"a": charts.PALETTE[0], "b": charts.PALETTE[1], "c": charts.PALETTE[2]}
    one = charts.delta_chart(data.paired_delta_table(frame, "b", "a", samples=50), base="b", other="a",
                             metric="reward", colors=colors)
    other = charts.delta_chart(data.paired_delta_table(frame, "c", "a", samples=50), base="c", other="a",
                               metric="reward", colors=colors)
    assert one.data[0].marker.color == other.data[0].marker.color == colors["a"]


@pytest.mark.parametrize("n", [2, 8, 9, 12, 24])
def test_every_set_gets_a_colour_of_its_own_for_any_number_of_sets(n):
    """Ten sets used to share eight colours (an adapter drawn in the heuristic's): now every set's
    colour differs from every other's by a visible CIELAB distance, the Okabe-Ito colours first."""
    from itertools import combinations

    names = [f"set-{i:02d}" for i in range(n)]
    drawn = list(charts.set_colors(names).values())
    assert len(set(drawn)) == n
    assert drawn[: min(n, 8)] == list(charts.PALETTE[: min(n, 8)])
    closest = min(charts.color_distance(a, b) for a, b in combinations(drawn, 2))
    assert closest >= charts.MIN_COLOR_DISTANCE, closest


def test_delta_chart_is_a_forest_plot_with_a_zero_line(shipped_frame):
    table = data.paired_delta_table(shipped_frame, "noop", "heuristic", samples=300)
    figure = charts.delta_chart(table, base="noop", other="heuristic", metric="reward")
    assert len(figure.data) == 1 and figure.data[0].type == "scatter"
    point = figure.data[0]
    assert list(point.x) == pytest.approx(table["delta"].tolist())
    assert len(point.y) == len(table) and point.y[0].startswith("overall")
    assert list(point.error_x.array) == pytest.approx((table["high"] - table["delta"]).tolist())
    assert [(s.type, s.x0, s.x1) for s in figure.layout.shapes] == [("line", 0, 0)]
    assert figure.layout.yaxis.autorange == "reversed"


def test_empty_inputs_give_honest_empty_figures():
    empty = data.episode_frame({})
    figures = [
        charts.empty_figure("nothing here"),
        charts.rate_chart(data.rate_table(empty, "tier", "full_fix"), by="tier", metric="full_fix"),
        charts.component_chart(data.component_means(empty)),
        charts.outcome_chart(data.outcome_table(empty)),
        charts.delta_chart(data.paired_delta_table(empty, "a", "b"), base="a", other="b", metric="reward"),
    ]
    for figure in figures:
        assert len(figure.data) == 0
        assert len(figure.layout.annotations) == 1 and figure.layout.annotations[0].text
    assert figures[0].layout.annotations[0].text == "nothing here"
    assert "a" in figures[-1].layout.annotations[0].text and "b" in figures[-1].layout.annotations[0].text


# ----- the rollout viewer -------------------------------------------------------------------------
def _played_record() -> EpisodeRecord:
    steps = [
        step(1, {"tool": "read_file", "path": "app/main.py"}, result={"content": "x"}, text="app/main.py ..."),
        step(2, {"tool": "http_request", "method": "POST", "path": "/api/items", "as_user": "alice",
                 "json_body": {"name": "``` evil"}},
             result={"status": 201, "headers": {}, "body": '{"id": 7}', "body_truncated": False}),
        step(3, {"tool": "reply", "text": 'I will look. {"tool": "http_request", "path": "/api/items/7"}'},
             tool="http_request", result={"status": 403, "headers": {}, "body": "x" * 1000}),
        step(4, {"tool": "reply", "text": "no idea"}, tool=None, error="format error: no JSON object"),
        step(5, {"tool": "apply_patch", "diff": "--- a/app/x.py\n+++ b/app/x.py\n"},
             result={"changed_files": ["app/x.py", "app/y.py"]}),
        step(6, {"tool": "http_request", "path": "/api/nope", "as_user": "mallory"}, result=None,
             error="no seeded user 'mallory'"),
    ]
    verification = {"resolution": "full", "security": {"passed": 1, "total": 1},
                    "regression": {"passed": 5, "total": 6}, "trap": {"passed": 2, "total": 2}, "probes": [
                        {"probe_id": "reg-1", "kind": "regression", "visible": True, "passed": True,
                         "expected": ["GET / as anonymous: status in [200]"], "got": ["200 ''"], "failures": []},
                        {"probe_id": "sec-1", "kind": "security", "visible": False, "passed": False,
                         "expected": ["GET /a as bob: status in [403]", "GET /b as bob: status in [404]"],
                         "got": ["200 'x'", "200 'y'"], "failures": ["status 200"]}]}
    return make_record("0082e5962f12344f", agent="heuristic", tier=3, bug_class="broken_authz_logic", reward=0.987,
                       steps=steps, verification=verification)


def test_step_view_titles_actions_transcript_and_clamping():
    record = _played_record()
    assert rollout_view.step_count(record) == 6
    start = rollout_view.step_view(record, 0)
    assert start.title == "Start" and start.action_json == "" and "0082e5962f12344f" in start.observation_text
    assert "broken_authz_logic" in start.observation_text and "tier 3" in start.observation_text
    assert rollout_view.step_view(record, -5) == start
    assert rollout_view.step_view(record, 99).index == 6

    first = rollout_view.step_view(record, 1)
    assert first.title == "Step 1 of 6 · read_file" and json.loads(first.action_json)["path"] == "app/main.py"
    assert first.transcript_markdown == "_No HTTP requests yet._"

    second = rollout_view.step_view(record, 2)
    assert "`POST /api/items as alice`" in second.transcript_markdown and "**201**" in second.transcript_markdown
    assert "````json" in second.transcript_markdown  # a body holding ``` cannot close the fence

    third = rollout_view.step_view(record, 3)
    assert third.title == "Step 3 of 6 · reply → http_request"
    assert third.action_json.startswith("I will look.")  # a reply is shown as written
    assert "`GET /api/items/7 as anonymous`" in third.transcript_markdown
    assert "**403**" in third.transcript_markdown and "more characters" in third.transcript_markdown
    assert third.transcript_markdown.index("POST /api/items") < third.transcript_markdown.index("GET /api/items/7")

    fourth = rollout_view.step_view(record, 4)
    assert fourth.title == "Step 4 of 6 · reply" and fourth.error == "format error: no JSON object"
    assert fourth.transcript_markdown == third.transcript_markdown

    assert rollout_view.step_view(record, 5).files_changed == ["app/x.py", "app/y.py"]
    assert rollout_view.step_view(record, 4).files_changed == []
    last = rollout_view.step_view(record, 6)
    assert "refused" in last.transcript_markdown and "mallory" in last.transcript_markdown


def test_outcome_breakdown_and_probes():
    record = _played_record()
    text = rollout_view.outcome_markdown(record)
    for expected in ("submitted", "FULL", "+0.987", "1/1", "5/6", "2/2", "`heuristic`", "`0082e5962f12344f`"):
        assert expected in text
    error = make_record("s9", reward=None, outcome="infrastructure_error")
    assert "infrastructure error" in rollout_view.outcome_markdown(error)

    breakdown = rollout_view.breakdown_frame(record.reward_breakdown)
    assert list(breakdown.columns) == list(rollout_view.BREAKDOWN_COLUMNS)
    assert breakdown["component"].tolist()[0] == "security_blocked" and breakdown["value"].iloc[0] == 0.5
    assert rollout_view.breakdown_frame(None).empty

    probes = rollout_view.probe_frame(record.verification)
    assert probes["probe"].tolist() == ["reg-1", "sec-1"]
    assert probes.iloc[1]["expected"] == "GET /a as bob: status in [403]; then GET /b as bob: status in [404]"
    assert probes["passed"].tolist() == [True, False] and probes.iloc[1]["failures"] == "status 200"
    assert rollout_view.probe_frame(record.verification, reveal_hidden=False)["probe"].tolist() == ["reg-1"]
    assert list(rollout_view.probe_frame(None).columns) == list(rollout_view.PROBE_COLUMNS)


def test_scenario_choices_and_the_record_shown_per_scenario():
    records = [
        make_record("ffff000011112222", reward=-0.2, resolution="no", tier=2, bug_class="list_leak"),
        _played_record(),
        make_record("aaaa000011112222", reward=None, outcome="infrastructure_error"),
        make_record("ffff000011112222", outcome="abandoned", seed=1),  # never hides the finished episode
    ]
    choices = rollout_view.scenario_choices(records)
    assert choices == [
        ("0082e596 · tier 3 · broken_authz_logic · FULL +0.99", "0082e5962f12344f"),
        ("aaaa0000 · tier 1 · idor_read · ERROR", "aaaa000011112222"),
        ("ffff0000 · tier 2 · list_leak · NO -0.20", "ffff000011112222"),
    ]
    assert rollout_view.shown_records(records)["ffff000011112222"].outcome == "submitted"
    assert "missing" not in rollout_view.shown_records(records)


def test_viewer_on_shipped_rollouts(shipped):
    records = artifact_sets.load_records(shipped["oracle"])
    choices = rollout_view.scenario_choices(records)
    assert len(choices) == 258 and all("FULL" in label for label, _ in choices)
    shown = rollout_view.shown_records(records)
    # the oracle played held-out scenarios: its runs (their patch is the reference fix) come as outcomes only
    assert all(r.split not in ("train", "val") and not r.steps and not r.diff for r in shown.values())
    heuristic = rollout_view.shown_records(artifact_sets.load_records(shipped["heuristic"]))
    record = next(r for r in heuristic.values() if any(s.action.get("tool") == "apply_patch" for s in r.steps))
    first_patch = next(i for i, s in enumerate(record.steps, 1) if s.action.get("tool") == "apply_patch")
    view = rollout_view.step_view(record, first_patch)
    assert view.title == f"Step {first_patch} of {rollout_view.step_count(record)} · apply_patch" and view.files_changed


# ----- boundaries ---------------------------------------------------------------------------------
def test_ui_modules_import_neither_gradio_nor_the_sandbox():
    forbidden = ("gradio", "envcore.sandbox", "envcore.runner", "envcore.verifier")
    for name in UI_MODULES:
        source = (ROOT / "ui" / f"{name}.py").read_text()
        tree = ast.parse(source)
        assert ast.get_docstring(tree), f"ui/{name}.py has no module docstring"
        imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [m for m in imported if m.startswith(forbidden)], f"ui/{name}.py imports {imported}"
    probe = ("import sys; import " + ", ".join(f"ui.{m}" for m in UI_MODULES) +
             "; print([m for m in sys.modules if m.startswith(('envcore.sandbox', 'envcore.runner', 'envcore.verifier'))])")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_leaderboard_is_shown_as_people_read_it():
    frame = data.episode_frame({
        "evals/a": [make_record("s1", reward=0.5, resolution="full"), make_record("s2", reward=0.25, resolution="no"),
                    make_record("s3", reward=None, outcome="infrastructure_error")],
        "evals/b": [make_record("s1", agent="b", reward=None, outcome="infrastructure_error")],
    })
    info = {"evals/a": data.SetInfo("Agent A · evals", caveat="pipeline check, not a skilled agent"),
            "evals/b": data.SetInfo("Agent B · evals")}
    shown = data.leaderboard_display(data.leaderboard_table(frame, info, samples=50, min_episodes=1))
    assert list(shown.columns) == list(data.LEADERBOARD_HEADERS)
    first = shown.iloc[0].to_dict()
    assert {k: v for k, v in first.items() if "CI" not in k} == {
        "#": "1", "agent or player": "Agent A", "mean reward": "+0.375", "full fixes": "50%", "partial": "0%",
        "episodes": "3 (2 graded)", "about": "evals · pipeline check, not a skilled agent"}
    assert re.fullmatch(r"\[\+0\.\d{3}, \+0\.\d{3}\]", first["reward 95% CI"])
    assert re.fullmatch(r"\[\d+%, \d+%\]", first["full fixes 95% CI"])
    assert shown.iloc[1]["#"] == "–" and shown.iloc[1]["mean reward"] == "" and shown.iloc[1]["reward 95% CI"] == ""
    assert shown.iloc[1]["about"] == "evals · no graded episode"


def test_a_models_parameters_are_counted_with_grouped_query_attention():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=2, intermediate_size=160, tie_word_embeddings=True)
    built = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    worked_out = artifact_sets.model_parameters(config.to_dict())
    assert abs(worked_out - built) / built < 0.01  # only the norms' few weights are left out


# ----- a compact first view that a newcomer reads at once -----------------------------------------
def _episodes(agent: str, rewards: list[float], *, bug_class: str = "idor_read") -> list[EpisodeRecord]:
    return [make_record(f"s{i}", agent=agent, reward=r, resolution="full" if r >= 0.9 else "no", bug_class=bug_class,
                        episode_id=f"{agent}-{i}") for i, r in enumerate(rewards)]


def test_one_lucky_human_episode_is_listed_unranked_below_an_agent_measured_on_hundreds():
    """One human episode at +0.897 (n = 1, an interval of zero width) used to rank first, above the
    heuristic's 322 episodes: an entrant with fewer than MIN_RANKED_EPISODES graded episodes is now
    listed with its n, after every ranked one."""
    threshold = data.MIN_RANKED_EPISODES
    frame = data.episode_frame({
        "human": _episodes("human:zoe", [0.897]) + _episodes("human:alice", [0.5] * threshold),
        "evals/heuristic": _episodes("heuristic", [0.2, 0.1, 0.3, 0.2, 0.2, 0.0, 0.4, 0.2]),
    })
    info = {"human": data.SetInfo("Human players · this Space", kind="human"),
            "evals/heuristic": data.SetInfo("Heuristic baseline (scripted) · evals")}
    board = data.leaderboard_table(frame, info, samples=50)
    assert board["name"].tolist() == ["alice (human player)", "Heuristic baseline (scripted)", "zoe (human player)"]
    assert board["rank"].tolist() == [1, 2, 0]  # enough episodes: ranked; one: listed, not ranked
    zoe = board.iloc[-1]
    assert zoe["standing"] == "unranked" and zoe["graded"] == 1
    assert "1 episode: too few to rank" in zoe["note"] and str(threshold) in zoe["note"]
    shown = data.leaderboard_display(board).iloc[-1]
    assert (shown["#"], shown["episodes"]) == ("–", "1")
    assert "too few to rank" in shown["about"]


def test_entrants_that_share_a_name_are_told_apart_in_the_name_itself():
    """Two heuristic runs (caches v2 and v5) and three stages of one model (three splits) were all
    called alike, told apart only by a column off a phone's screen."""
    sets = {name: _episodes(name, [0.1] * 5) for name in (
        "evals/v2/heuristic", "evals/v5/heuristic", "training/r/eval/test/sft", "training/r/eval/test_styles/sft",
        "training/r/eval/trained/sft", "evals/v5/noop")}
    info = {
        "evals/v2/heuristic": data.SetInfo("Heuristic baseline (scripted) · evals/v2", split="test", cache="v2"),
        "evals/v5/heuristic": data.SetInfo("Heuristic baseline (scripted) · evals/v5", split="test", cache="v5"),
        "training/r/eval/test/sft": data.SetInfo("r after SFT · held-out eval (test)", split="test", cache="v3"),
        "training/r/eval/test_styles/sft": data.SetInfo("r after SFT · held-out eval (test_styles)",
                                                        split="test_styles", cache="v3"),
        "training/r/eval/trained/sft": data.SetInfo("r after SFT · the scenarios it learned", split="trained"),
        "evals/v5/noop": data.SetInfo("No-op (submits the app unchanged) · evals/v5", split="test", cache="v5"),
    }
    board = data.leaderboard_table(data.episode_frame(sets), info, samples=20)
    names = dict(zip(board["set"], board["name"]))
    assert len(set(names.values())) == len(names), names
    assert names["evals/v2/heuristic"] == "Heuristic baseline (scripted) · cache v2"
    assert names["evals/v5/heuristic"] == "Heuristic baseline (scripted) · cache v5"
    assert names["training/r/eval/test_styles/sft"] == "r after SFT · test_styles split"
    assert names["training/r/eval/trained/sft"] == "r after SFT · its training scenarios"
    assert names["evals/v5/noop"] == "No-op (submits the app unchanged)"  # a name of its own keeps no tag
    # nothing that tells them apart but the folder: the folder
    alike = {"a/x": data.SetInfo("Same · a"), "b/x": data.SetInfo("Same · b")}
    assert data.distinct_names({"a/x": ("Same", alike["a/x"]), "b/x": ("Same", alike["b/x"])}) == {
        "a/x": "Same · a", "b/x": "Same · b"}


def test_the_split_filter_offers_every_split_the_cache_has():
    manifest = data.manifest_frame(ScenarioCache.open(None).rows)
    assert data.split_choices(manifest) == ["train", "val", "test", "test_styles", "external"]
    odd = data.manifest_frame([{"scenario_id": "a", "split": "zeta"}, {"scenario_id": "b", "split": "test"},
                               {"scenario_id": "c", "split": "alpha"}])
    assert data.split_choices(odd) == ["test", "alpha", "zeta"]  # the known ones in order, then the others


@pytest.mark.parametrize("rewards, expected, description", [
    ([-0.0004, 0.0, 0.0, 0.0, 0.0], "+0.000", "a mean that rounds to zero from below"),
    ([-0.0, -0.0, -0.0, -0.0, -0.0], "+0.000", "negative zero itself"),
    ([-0.002, -0.002, -0.002, -0.002, -0.002], "-0.002", "a real negative"),
])
def test_a_reward_that_rounds_to_zero_is_never_shown_as_minus_zero(rewards, expected, description):
    frame = data.episode_frame({"evals/a": _episodes("a", rewards)})
    row = data.leaderboard_display(data.leaderboard_table(frame, {}, samples=20)).iloc[0]
    assert row["mean reward"] == expected, description
    assert "-0.000" not in row["reward 95% CI"], description


def test_the_rates_chart_is_a_heatmap_of_slices_by_set_with_each_interval_on_hover(shipped_frame):
    """Fifteen sets drawn as grouped bars were fifteen hairlines per slice under a fifteen-entry legend
    of near-identical colours: each (slice, set) is now one cell, its value written in it."""
    table = data.rate_table(shipped_frame, "bug_class", "full_fix", samples=100)
    names = {"heuristic": "Heuristic <baseline>"}
    figure = charts.rate_chart(table, by="bug_class", metric="full_fix", names=names)
    assert len(figure.data) == 1 and figure.data[0].type == "heatmap"
    cells = figure.data[0]
    groups, sets = sorted(set(table["group"])), list(dict.fromkeys(table["set"]))
    assert list(cells.y) == groups and len(cells.x) == len(sets)
    assert "Heuristic &lt;baseline&gt;" in cells.x[sets.index("heuristic")].replace("<br>", " ")
    row, column = groups.index("idor_read"), sets.index("heuristic")
    expected = table[(table["group"] == "idor_read") & (table["set"] == "heuristic")].iloc[0]
    assert cells.z[row][column] == pytest.approx(expected["mean"])
    assert cells.text[row][column] == f"{expected['mean']:.0%}"
    assert cells.customdata[row][column][:3] == [f"{expected['low']:.0%}", f"{expected['high']:.0%}",
                                                 int(expected["n"])]
    assert (cells.zmin, cells.zmax) == (0, 1)
    assert figure.layout.height >= 24 * len(groups)  # a row per slice, tall enough for its label
    reward = charts.rate_chart(data.rate_table(shipped_frame, "tier", "reward", samples=50), by="tier", metric="reward")
    assert reward.data[0].zmid == 0 and all("-0.00" not in t for line in reward.data[0].text for t in line if t)


def test_every_chart_gives_each_row_room_for_its_wrapped_label():
    """Names of four lines in rows 46 pixels apart overlapped in "How the episodes ended"."""
    long = {f"set-{i}": f"a rather long name of a set number {i} · with where it came from · and a caveat"
            for i in range(6)}
    frame = data.episode_frame({name: [make_record("s1", agent=name, reward=0.1 * i)] for i, name in enumerate(long)})
    outcomes = charts.outcome_chart(data.outcome_table(frame), names=long)
    components = charts.component_chart(data.component_means(frame), names=long)
    for figure in (outcomes, components):
        labels = list(dict.fromkeys(figure.data[0].y))
        lines = max(label.count("<br>") + 1 for label in labels)
        assert lines >= 3
        assert figure.layout.height >= charts.FIXED_HEIGHT + len(labels) * lines * charts.LINE_HEIGHT, figure.layout.height
