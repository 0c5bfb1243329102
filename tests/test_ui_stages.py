"""The Space shows what training did: a stage table becomes a headline row and a panel table, markup
in a run's files is shown as text, a file that is not a stage table is skipped, and Watch opens on
the last stage against the untrained model it started from."""

from __future__ import annotations

import json
from pathlib import Path

from ui import artifact_sets, stages_view

ROOT = Path(__file__).resolve().parents[1]


def _stat(mean: float) -> dict:
    return {"mean": mean, "ci95": [max(mean - 0.1, 0.0), min(mean + 0.1, 1.0)]}


def _stage(full: float, fmt: float, n: int) -> dict:
    overall = {k: _stat(full) for k in ("full_fix", "security_pass", "regression_pass", "partial")}
    overall["reward"] = _stat(full - 0.1)
    return {"episodes": n, "overall": overall, "format_error_rate": fmt,
            "by": {"bug_class": {"idor_read": {"episodes": n, "full_fix": _stat(full)}},
                   "tier": {"1": {"episodes": n, "full_fix": _stat(full)}}}}


def _table(run: str, learned: tuple[float, float, float], held_out: tuple[float, float, float]) -> dict:
    def block(split, values, n):
        return {"split": split, "stages": {s: _stage(v, f, n) for s, v, f in zip(("base", "sft", "sft+grpo"), values,
                                                                                   (1.0, 0.05, 0.0))},
                "comparisons": {"sft vs base": {"scenarios": n, "reward_difference": _stat(0.5),
                                                "full_fix": {"only_other": 3, "only_base": 0}}}}

    return {"run": run, "stages": ["base", "sft", "sft+grpo"],
            "slices": {"trained": block("trained", learned, 4), "test": block("test", held_out, 16)}}


def _write(artifacts: Path, table: dict, *, description: str = "", model: str | None = None) -> None:
    folder = artifacts / "training" / table["run"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stages.json").write_text(json.dumps(table))
    (folder / "training.json").write_text(json.dumps({"model": model, "config": {"description": description}}))


def test_the_headline_row_names_the_run_that_gained_most_and_its_held_out_result(tmp_path):
    _write(tmp_path, _table("small-gain", (0.0, 0.25, 0.25), (0.0, 0.0, 0.0)))
    _write(tmp_path, _table("big-gain", (0.0, 0.5, 0.75), (0.0, 0.0, 0.0)), model="artifacts/models/tiny-random-llm")
    line = stages_view.learning_line(stages_view.read_stage_tables(tmp_path))
    assert "big\\-gain" in line and "base 0% → SFT 50% → SFT+GRPO 75%" in line  # escaped as Markdown text
    assert "format errors base 100% → SFT 5% → SFT+GRPO 0%" in line
    assert "16 unseen scenarios of test: base 0% → SFT 0% → SFT+GRPO 0%" in line


def test_a_gain_on_unseen_apps_leads_the_headline_over_a_bigger_one_on_learned_apps(tmp_path):
    # a tiny model that memorised four apps, and a from-scratch job's model that fixes some unseen ones
    _write(tmp_path, _table("memorised", (0.0, 1.0, 1.0), (0.0, 0.0, 0.0)), model="artifacts/models/tiny-random-llm")
    job = _table("from-scratch", (0.0, 0.25, 0.5), (0.0, 0.0625, 0.125))
    _write(tmp_path, job, model="artifacts/models/tiny-random-llm")
    line = stages_view.learning_line(stages_view.read_stage_tables(tmp_path))
    assert line.startswith("**What training did** (from\\-scratch")  # the run named is the job's
    assert "16 unseen scenarios of test: base 0% → SFT 6% → SFT+GRPO 12%" in line
    assert "not expected to fix apps it has not seen" not in line  # it does fix some: no such caveat


def test_a_small_models_held_out_failure_is_said_to_be_expected(tmp_path):
    # the shipped tiny model's folder (a real config.json): a model this small
    model = "artifacts/models/tiny-random-llm"
    _write(tmp_path, _table("tiny", (0.0, 1.0, 1.0), (0.0, 0.0, 0.0)), model=str(ROOT / model))
    line = stages_view.learning_line(stages_view.read_stage_tables(tmp_path))
    assert "not expected to fix apps it has not seen" in line and "M-parameter model" in line


def test_markup_in_a_run_and_a_broken_table_are_shown_as_text_or_skipped(tmp_path):
    table = _table("evil", (0.0, 1.0, 1.0), (0.0, 0.0, 0.0))
    table["slices"]["<img src=x onerror=alert(1)>"] = table["slices"].pop("test")
    _write(tmp_path, table, description="<script>alert(1)</script> **bold**")
    broken = tmp_path / "training" / "broken"
    broken.mkdir(parents=True)
    (broken / "stages.json").write_text('{"run": "broken", "slices": {"test": {"stages": {"base": {}}}}}')
    (tmp_path / "training" / "notjson").mkdir()
    (tmp_path / "training" / "notjson" / "stages.json").write_text("{")
    tables = stages_view.read_stage_tables(tmp_path)
    assert [t["run"] for t in tables] == ["evil"]
    for text in (stages_view.learning_line(tables), stages_view.stages_markdown(tables)):
        unescaped = text.replace("\\<", "")  # safe.markdown escapes '<': shown as text, never as a tag
        assert "<img" not in unescaped and "<script>" not in unescaped


def test_the_panel_table_has_every_stage_of_every_slice_and_the_comparisons(tmp_path):
    _write(tmp_path, _table("run-a", (0.0, 0.5, 0.75), (0.0, 0.0, 0.0)), description="What it is.")
    text = stages_view.stages_markdown(stages_view.read_stage_tables(tmp_path))
    for slice_name in ("trained", "test"):
        for stage in ("base", "SFT", "SFT+GRPO"):
            assert f"| {slice_name} | {stage} |" in text
    assert "| trained | SFT vs base | 4 |" in text and "What it is" in text
    assert "No run with an SFT stage yet" in stages_view.stages_markdown([])


def test_watch_opens_on_the_last_stage_against_the_untrained_base(tmp_path):
    """Three stages evaluated on the same scenarios: SFT and SFT+GRPO both beat the base; the default
    pair is (base, SFT+GRPO), not (SFT, SFT+GRPO) nor (base, SFT)."""
    from envcore.env.episode_log import EpisodeLogger, EpisodeRecord

    artifacts = tmp_path / "artifacts"
    models = artifacts / "models"
    (models / "run-base").mkdir(parents=True)
    (models / "run-base" / "config.json").write_text("{}")
    (models / "run-sft").mkdir(parents=True)
    (models / "run-sft" / "config.json").write_text("{}")
    (models / "run-sft" / "sft.json").write_text(json.dumps({"base": "artifacts/models/run-base"}))
    stages = {"base": ("artifacts/models/run-base", None, -0.14),
              "sft": ("artifacts/models/run-sft", None, 0.9),
              "sft_grpo": ("artifacts/models/run-sft", "artifacts/adapters/run", 0.95)}
    for stage, (model, adapter, reward) in stages.items():
        folder = artifacts / "training" / "run" / "eval" / "trained" / stage
        folder.mkdir(parents=True)
        logger = EpisodeLogger(folder / "episodes.jsonl")
        for i, scenario in enumerate(("a" * 16, "b" * 16)):
            logger.write(EpisodeRecord(episode_id=f"{stage}{i}", agent_id=f"llm:{stage}", source="evaluation",
                                       scenario_id=scenario, scenario_hash=scenario * 4, bug_class="idor_read", tier=1,
                                       seed=i, started_at=0, ended_at=1, outcome="submitted", max_steps=8, reward=reward,
                                       reward_breakdown={"resolution": "full" if reward > 0 else "no", "components": []}))
        (folder / "summary.json").write_text(json.dumps({"run": {"model": model, "adapter": adapter}}))
    sets = artifact_sets.discover(artifacts)
    assert artifact_sets.default_pair(sets) == ("training/run/eval/trained/base", "training/run/eval/trained/sft_grpo")
    by_name = {s.name: s for s in sets}
    assert artifact_sets.base_of(by_name["training/run/eval/trained/sft"], sets).name == "training/run/eval/trained/base"


def test_a_run_cut_off_before_grpo_is_titled_by_the_stages_it_reached_and_its_measured_size(tmp_path):
    table = _table("cut-off", (0.0, 0.25, 0.25), (0.0, 0.1, 0.1))
    for block in table["slices"].values():
        del block["stages"]["sft+grpo"]
    table["stages"] = ["base", "sft"]
    _write(tmp_path, table, model="artifacts/models/tiny-random-llm")
    training = json.loads((tmp_path / "training/cut-off/training.json").read_text())
    (tmp_path / "training/cut-off/training.json").write_text(json.dumps(training | {"parameters": 26_223_104}))
    text = stages_view.stages_markdown(stages_view.read_stage_tables(tmp_path))
    # what the run counted on its own model, not an estimate from another model's config
    assert "#### cut\\-off: base → SFT (a 26.2M-parameter model)" in text
    assert "SFT+GRPO" not in text
