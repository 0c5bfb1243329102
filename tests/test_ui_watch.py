"""The Watch tab without a browser: it opens on a pair that shows a difference, every attempt of a
scenario is reachable, a link opens one episode at one step (and a garbled one opens the page with a
message), a live run streams one view per step and stops when asked, and a model's empty reply says so.

Rollout sets are written to ``tmp_path`` as the evaluation writes them (``episodes.jsonl`` beside a
``summary.json`` naming the model and adapter), so each rule is checked on sets made to test it; the
shipped artifacts are checked for the first view a visitor gets.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from pathlib import Path
from unittest.mock import MagicMock
from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import pytest

from envcore.env.environment import Runtime
from envcore.env.episode_log import EpisodeLogger, EpisodeRecord, StepEntry
from envcore.env.sampler import CurriculumSampler
from envcore.server.sessions import SessionHub
from ui import artifact_sets, rollout_view, watch_tab
from ui.watch_tab import WatchController
from ui.wiring import UserError, bind, bind_stream

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


# ----- synthetic sets -------------------------------------------------------------------------------
def record(scenario: str, agent: str, reward: float | None, *, outcome: str = "submitted", steps: int = 2,
           episode_id: str | None = None, started_at: float = 1_700_000_000.0) -> EpisodeRecord:
    entries = [StepEntry(step=n, action={"tool": "read_file", "path": f"app/{agent}-{n}.py"},
                         observation={"tool": "read_file", "text": f"{agent} step {n}", "error": None, "done": False},
                         elapsed_ms=1.0) for n in range(1, steps + 1)]
    breakdown = None if reward is None else {"reward": reward, "resolution": "full" if reward > 0.5 else "no",
                                             "components": []}
    return EpisodeRecord(
        episode_id=episode_id or f"{agent}-{scenario}-{started_at}", agent_id=agent, source="evaluation",
        scenario_id=scenario, scenario_hash="0" * 64, bug_class="idor_read", tier=1, seed=0, started_at=started_at,
        ended_at=started_at + 1, outcome=outcome, max_steps=10, steps=entries, reward=reward,
        reward_breakdown=breakdown)


def write_set(root: Path, name: str, records: list[EpisodeRecord], *, model: str | None = None,
              adapter: str | None = None, summary: bool = True) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    with EpisodeLogger(folder / "episodes.jsonl") as log:
        for r in records:
            log.write(r)
    if summary:
        (folder / "summary.json").write_text(json.dumps({"run": {"agent": name, "model": model, "adapter": adapter}}))
    return folder


def played(agent: str, rewards: dict[str, float]) -> list[EpisodeRecord]:
    return [record(sid, agent, reward) for sid, reward in rewards.items()]


SCENARIOS = ("s1", "s2", "s3")


def scripted(root: Path) -> None:
    write_set(root, "evals/v2/noop", played("noop", dict.fromkeys(SCENARIOS, 0.0)))
    write_set(root, "evals/v2/heuristic", played("heuristic", {"s1": 0.0, "s2": 0.99, "s3": 0.4}))
    write_set(root, "evals/v2/oracle", played("oracle", dict.fromkeys(SCENARIOS, 1.0)))


def trained_run(root: Path, run: str, trained: dict[str, float], base: dict[str, float], *,
                model: str = "models/m") -> None:
    write_set(root, f"training/{run}/eval/trained", played(f"{run}+lora", trained), model=model,
              adapter=f"adapters/{run}")
    write_set(root, f"training/{run}/eval/base", played(f"{run}-base", base), model=model)
    write_set(root, f"training/{run}", played(f"{run}@train", trained), summary=False)  # its training rollouts


def text(markdown: str) -> str:
    """What escaped Markdown reads as (``human\\:ada`` is ``human:ada``)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def pair(root: Path) -> tuple[str | None, str | None]:
    return artifact_sets.default_pair(artifact_sets.discover(root))


# ----- the default pair ------------------------------------------------------------------------------
def test_a_trained_agent_that_beats_its_base_is_compared_with_its_base(tmp_path):
    scripted(tmp_path)
    trained_run(tmp_path, "grpo", trained={"s1": 0.6, "s2": 0.9}, base={"s1": 0.1, "s2": 0.2})
    assert pair(tmp_path) == ("training/grpo/eval/base", "training/grpo/eval/trained")


def test_a_trained_agent_that_does_not_beat_its_base_gives_way_to_heuristic_against_noop(tmp_path):
    scripted(tmp_path)
    trained_run(tmp_path, "grpo", trained={"s1": 0.1, "s2": 0.2}, base={"s1": 0.1, "s2": 0.2})
    assert pair(tmp_path) == ("evals/v2/noop", "evals/v2/heuristic")


def test_beating_the_base_counts_only_the_scenarios_both_played(tmp_path):
    scripted(tmp_path)
    # Higher mean overall (thanks to s3, which the base never played), lower on what both played.
    trained_run(tmp_path, "grpo", trained={"s1": 0.0, "s3": 1.0}, base={"s1": 0.5, "s2": 0.0})
    assert pair(tmp_path) == ("evals/v2/noop", "evals/v2/heuristic")


def test_the_best_trained_agent_that_beats_its_base_is_chosen(tmp_path):
    scripted(tmp_path)
    trained_run(tmp_path, "small", trained={"s1": 0.3, "s2": 0.3}, base={"s1": 0.0, "s2": 0.0}, model="models/a")
    trained_run(tmp_path, "large", trained={"s1": 0.9, "s2": 0.8}, base={"s1": 0.5, "s2": 0.5}, model="models/b")
    trained_run(tmp_path, "stale", trained={"s1": 1.0, "s2": 1.0}, base={"s1": 1.0, "s2": 1.0}, model="models/c")
    assert pair(tmp_path) == ("training/large/eval/base", "training/large/eval/trained")


def test_with_no_scripted_pair_a_trained_agent_is_still_shown_against_its_base(tmp_path):
    trained_run(tmp_path, "grpo", trained={"s1": 0.0}, base={"s1": 0.5})
    assert pair(tmp_path) == ("training/grpo/eval/base", "training/grpo/eval/trained")


def test_the_base_is_the_same_model_with_no_adapter_the_nearest_first(tmp_path):
    trained_run(tmp_path, "grpo", trained={"s1": 0.9}, base={"s1": 0.1})
    # Another evaluation of the same model elsewhere, and one of another model: neither is its base.
    write_set(tmp_path, "evals/v2/m", played("m", {"s1": 0.0}), model="models/m")
    write_set(tmp_path, "evals/v2/other", played("other", {"s1": 0.0}), model="models/other")
    sets = {s.name: s for s in artifact_sets.discover(tmp_path)}
    base = artifact_sets.base_of(sets["training/grpo/eval/trained"], list(sets.values()))
    assert base is not None and base.name == "training/grpo/eval/base"
    (tmp_path / "training/grpo/eval/base/summary.json").unlink()  # no longer an evaluation of the model
    sets = {s.name: s for s in artifact_sets.discover(tmp_path)}
    base = artifact_sets.base_of(sets["training/grpo/eval/trained"], list(sets.values()))
    assert base is not None and base.name == "evals/v2/m"


def test_the_oracle_is_never_a_competitor_and_training_rollouts_are_not_an_evaluation(tmp_path):
    write_set(tmp_path, "evals/v2/oracle", played("oracle", {"s1": 1.0}))
    assert pair(tmp_path) == (None, None)
    write_set(tmp_path, "training/grpo", played("grpo", {"s1": 0.9}), summary=False)
    write_set(tmp_path, "evals/v2/random", played("random", {"s1": 0.0}))
    assert pair(tmp_path) == ("training/grpo", "evals/v2/random")  # the first two competitors, in kind order


LEARNED = ("training/tiny-learn/eval/trained/base", "training/tiny-learn/eval/trained/sft_grpo")


def test_the_shipped_artifacts_open_on_the_trained_run_against_its_untrained_base():
    # tiny-learn's last stage (SFT+GRPO) beats the model it started from on the scenarios it learned;
    # the GRPO-only tiny adapter does not beat its base (both write empty replies)
    assert pair(ARTIFACTS) == LEARNED
    from ui import dashboard_tab
    assert dashboard_tab.default_pair is artifact_sets.default_pair  # the dashboard compares the same pair first


# ----- the first view -----------------------------------------------------------------------------------
def test_watch_opens_on_the_default_pair_and_the_scenario_where_they_differ_most(tmp_path):
    scripted(tmp_path)
    ctrl = WatchController(None, tmp_path)  # no hub: recorded sets only
    out = ctrl.refresh()
    assert (out["left_set"]["value"], out["right_set"]["value"]) == ("evals/v2/noop", "evals/v2/heuristic")
    assert out["scenario"]["value"] == "s2"  # heuristic +0.99 against noop 0.00
    assert [sid for _, sid in out["scenario"]["choices"]] == ["s2", "s3", "s1"]  # biggest difference first
    assert "vs FULL +0.99" in out["scenario"]["choices"][0][0]
    assert "**noop**" in text(out["left_title"]) and "**heuristic**" in text(out["right_title"])
    assert out["right_column"]["visible"] and "biggest difference first" in out["scenario"]["label"]
    ctrl.pick_sets("evals/v2/noop", "evals/v2/heuristic")
    later = ctrl.show("evals/v2/noop", "evals/v2/heuristic", "s2", 2)  # noop's episode has 2 steps too
    assert "ended here" not in later["left_title"]
    write_set(tmp_path, "evals/v2/short", [record("s2", "short", 0.0, steps=1)])
    later = ctrl.show("evals/v2/short", "evals/v2/heuristic", "s2", 2)
    assert "Step 1 of 1" in text(later["left_title"]) and "its episode ended here" in text(later["left_title"])
    assert "No\\-op" in out["left_about"] and "Heuristic baseline" in out["right_about"]


# ----- the opening: a held-out scenario two agents part on -----------------------------------------------
def played_out(scenario: str, agent: str, resolution: str, reward: float, *, split: str = "test",
               patch_at: tuple[int, ...] = (), steps: int = 4, refused: tuple[int, ...] = ()) -> EpisodeRecord:
    """An episode of ``steps`` steps ending in a submit, patching the app at ``patch_at`` (the
    environment refusing the steps ``refused``)."""
    entries = []
    for n in range(1, steps + 1):
        if n == steps:
            action, result = {"tool": "submit"}, None
        elif n in patch_at:
            action, result = {"tool": "apply_patch", "diff": "..."}, {"changed_files": ["app.py"]}
        else:
            action, result = {"tool": "read_file", "path": "app.py"}, {"content": "x"}
        error = "format error: no JSON action found in the reply" if n in refused else None
        entries.append(StepEntry(step=n, action=action, observation={
            "tool": action["tool"], "text": "", "error": error, "done": n == steps, "result": result},
            elapsed_ms=1.0))
    return EpisodeRecord(
        episode_id=f"{agent}-{scenario}", agent_id=agent, source="evaluation", scenario_id=scenario,
        scenario_hash="0" * 64, bug_class="idor_read", tier=1, split=split, seed=0, started_at=1_700_000_000.0,
        ended_at=1_700_000_001.0, outcome="submitted", max_steps=10, steps=entries,
        diff="--- a/app.py\n+++ b/app.py\n" if patch_at else "", reward=reward,
        reward_breakdown={"reward": reward, "resolution": resolution, "components": []})


def held_out_sets(root: Path, *, trained_fixes: bool) -> None:
    """A training run's stages on the test split beside their base, the same run on the scenarios it
    learned (where it fixes everything), and the scripted agents of one evaluation."""
    learned = "training/run/eval/trained"
    write_set(root, f"{learned}/base", [played_out("t1", "base", "no", -0.1, split="train")], model="models/b")
    write_set(root, f"{learned}/sft", [played_out("t1", "sft", "full", 0.99, split="train", patch_at=(2,))],
              model="models/b-sft")
    fixed = played_out("h2", "sft", "full", 0.98, patch_at=(2, 3), steps=5) if trained_fixes else \
        played_out("h2", "sft", "no", -0.05)
    write_set(root, "training/run/eval/test/base", [played_out("h1", "base", "no", -0.14, refused=(1, 2, 3)),
                                                    played_out("h2", "base", "no", -0.14, refused=(1, 2, 3))],
              model="models/b")
    write_set(root, "training/run/eval/test/sft", [played_out("h1", "sft", "no", -0.02), fixed],
              model="models/b-sft")  # an SFT model of its own: no adapter names the base
    write_set(root, "evals/v9/noop", [played_out(s, "noop", "no", -0.0004, steps=1) for s in ("h1", "h2", "h3")])
    write_set(root, "evals/v9/heuristic", [played_out("h1", "heuristic", "no", 0.0),
                                           played_out("h2", "heuristic", "no", 0.0),
                                           played_out("h3", "heuristic", "full", 0.99, patch_at=(3,), steps=6)])
    write_set(root, "evals/v9/oracle", [played_out(s, "oracle", "full", 1.0) for s in ("h1", "h2", "h3")])


def test_watch_opens_on_a_trained_model_that_fixes_a_held_out_scenario_its_base_does_not(tmp_path):
    held_out_sets(tmp_path, trained_fixes=True)
    ctrl = WatchController(None, tmp_path)
    out = ctrl.refresh()
    assert (out["left_set"]["value"], out["right_set"]["value"]) == ("training/run/eval/test/base",
                                                                   "training/run/eval/test/sft")
    assert out["scenario"]["value"] == "h2"  # a test-split scenario, not one the run learned
    assert out["index"]["value"] == 3  # the step that decides it: the trained model's last patch
    assert "Step 3 of 5 · apply_patch" in text(out["right_title"])
    story = text(out["story"])
    assert story.startswith("**On scenario h2 (idor_read, tier 1)** (test split, held out):")
    assert "fixed it, FULL +0.98, with the patch at step 3" in story
    assert "base model (untrained) scored NO -0.14 (the environment refused 3 of its 4 actions)" in story


def test_without_such_a_model_watch_opens_on_the_heuristic_against_doing_nothing(tmp_path):
    held_out_sets(tmp_path, trained_fixes=False)
    out = WatchController(None, tmp_path).refresh()
    assert (out["left_set"]["value"], out["right_set"]["value"]) == ("evals/v9/noop", "evals/v9/heuristic")
    assert out["scenario"]["value"] == "h3" and out["index"]["value"] == 3
    story = text(out["story"])
    assert "**the heuristic** fixed it, FULL +0.99, with the patch at step 3" in story
    assert "doing nothing (No-op) scored NO +0.00 (it submitted the app unchanged)" in story  # never -0.00
    assert "Step 1 of 1 · submit · _its episode ended here_" in text(out["left_title"])  # its last step


def test_the_opening_is_never_a_run_on_the_scenarios_its_model_learned_nor_the_oracle(tmp_path):
    held_out_sets(tmp_path, trained_fixes=False)
    sets = artifact_sets.discover(tmp_path)
    trained, scripted = watch_tab.candidate_pairs(sets)
    assert trained == [("training/run/eval/test/base", "training/run/eval/test/sft")]
    assert scripted == [("evals/v9/noop", "evals/v9/heuristic")]
    (tmp_path / "evals/v9/noop/episodes.jsonl").unlink()
    write_set(tmp_path, "evals/v9/deny_all", [played_out(s, "deny_all", "no", -0.5, steps=2) for s in ("h1", "h3")])
    out = WatchController(None, tmp_path).refresh()
    assert (out["left_set"]["value"], out["right_set"]["value"]) == ("evals/v9/deny_all", "evals/v9/heuristic")
    assert "denying everything (Deny-all) scored NO -0.50" in text(out["story"])


def test_with_no_held_out_difference_watch_opens_on_the_default_pair_where_it_parts(tmp_path):
    scripted(tmp_path)  # records that name no split: nothing is known to be held out
    out = WatchController(None, tmp_path).refresh()
    assert (out["left_set"]["value"], out["right_set"]["value"]) == ("evals/v2/noop", "evals/v2/heuristic")
    assert out["scenario"]["value"] == "s2" and out["index"]["value"] == 2  # the heuristic's submit


@pytest.mark.parametrize("left, right, step, description", [
    (played_out("s", "a", "no", 0.0), played_out("s", "b", "full", 0.9, patch_at=(2,), steps=5), 2,
     "the better episode's patch"),
    (played_out("s", "a", "no", 0.0), played_out("s", "b", "full", 0.9, patch_at=(1, 3), steps=5), 3,
     "its last patch: after it the app is the one graded"),
    (played_out("s", "a", "full", 0.9, patch_at=(2,), steps=4), played_out("s", "b", "partial", 0.5, patch_at=(1,)),
     2, "the better one may be on the left"),
    (played_out("s", "a", "no", -0.5, patch_at=(1,), steps=3), played_out("s", "b", "no", 0.0, steps=2), 2,
     "a better episode that changed nothing: its last step, the submit"),
    (played_out("s", "a", "no", 0.0), played_out("s", "b", "no", 0.001), 0, "episodes that end alike do not part"),
    (played_out("s", "a", "no", 0.0), None, 0, "one episode alone"),
])
def test_the_step_that_decides_it(left, right, step, description):
    assert rollout_view.deciding_step(left, right) == step, description


def test_the_shipped_watch_tab_opens_on_a_held_out_scenario_at_the_step_that_decides_it():
    """The shipped opening: a trained model (scratch-26m after SFT, which fixes 8 unseen test apps its
    base fixes none of) against its untrained base, on a test-split scenario, at the patch that fixed
    it; a banner says so in words; no warning box, no empty pane."""
    ctrl = WatchController(None, ARTIFACTS)
    out = ctrl.refresh()
    left, right, scenario = out["left_set"]["value"], out["right_set"]["value"], out["scenario"]["value"]
    assert (left, right) == ("training/scratch-26m/eval/test/base", "training/scratch-26m/eval/test/sft")
    base, trained = ctrl.records(left)[scenario], ctrl.records(right)[scenario]
    assert ctrl.split_of(trained) not in (None, "train")
    assert rollout_view.resolution_rank(trained) == 2 and rollout_view.resolution_rank(base) == 0
    step = out["index"]["value"]
    assert step == rollout_view.last_code_change(trained) > 0
    story = text(out["story"])
    assert story.startswith("**On HR reviews API: open redirect (unvalidated next)** (test split, held out)")
    assert f"**scratch-26m after SFT** fixed it, FULL +0.99, with the patch at step {step}" in story
    assert "scratch-26m base model (untrained) scored NO -0.14" in story
    for name in ("story", "left_about", "right_about", "left_title", "right_title"):
        assert "⚠️" not in out[name], (name, out[name])
    for side in ("left", "right"):
        assert out[f"{side}_action"].strip() and out[f"{side}_observation"].strip(), side
        assert f"Step {step} of" in out[f"{side}_title"]


def test_markup_in_a_forged_log_or_manifest_is_text_in_the_banner(tmp_path):
    from markdown_it import MarkdownIt

    payload = "<img src=x onerror=alert(1)>[link](javascript:alert(1))`code`"
    forged = played_out("h1", payload, "full", 0.9, split=payload, patch_at=(1,)).model_copy(
        update={"reward_breakdown": {"reward": 0.9, "resolution": payload, "components": []}})
    write_set(tmp_path, "evals/v9/heuristic", [forged])
    write_set(tmp_path, "evals/v9/noop", [played_out("h1", "noop", "no", 0.0, split=payload)])
    manifest = tmp_path / "scenarios" / "v1" / "manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"scenarios": [{"scenario_id": "h1", "title": payload, "split": payload}]}))
    story = WatchController(None, tmp_path).pick_sets("evals/v9/noop", "evals/v9/heuristic")["story"]
    html = MarkdownIt("commonmark", {"html": True}).render(story)
    tags = set(re.findall(r"<(\w+)", html))
    assert tags <= {"p", "strong"}, (tags, html)  # no image, link or code made by the payload
    assert payload in text(story)  # shown as it is, as text


def test_watch_code_panes_wrap_and_size_to_their_text(tmp_path):
    hub = MagicMock()  # the layout only asks it for its live agents
    hub.live_agents.return_value = {}
    with gr.Blocks():
        c = watch_tab.build(hub, tmp_path, pace_s=0)
    for side in ("left", "right", "live"):
        for field in ("action", "observation"):
            code = c[f"{side}_{field}"]
            # wrapped (no sideways scrolling on a phone); no line numbers, by which Gradio would size a
            # wrapped box many times its text
            assert code.wrap_lines and not code.show_line_numbers, (side, field)


def test_the_start_of_an_episode_says_so_in_its_action_pane():
    shown = watch_tab.side_outputs("left", played_out("s", "a", "no", 0.0), 0, "a")
    assert shown["left_action"] == watch_tab.START_ACTION
    assert "reset" not in shown["left_observation"]  # the page's words: the button says New episode


def test_a_reward_that_rounds_to_zero_is_never_written_with_a_minus():
    record = played_out("s", "a", "no", -0.0004).model_copy(update={"reward_breakdown": {
        "reward": -0.0004, "resolution": "no", "components": [{"name": "steps_used", "value": -0.0004,
                                                              "measured": 1, "detail": ""}]}})
    written = [rollout_view.badge(record), rollout_view.outcome_markdown(record),
               rollout_view.breakdown_markdown(record.reward_breakdown), watch_tab.live_status(record, running=False)]
    for shown in written:
        assert "-0.00" not in shown.replace("\\", "") and "+0.00" in shown.replace("\\", ""), shown


def test_a_set_with_a_caveat_says_so_above_its_side():
    ctrl = WatchController(None, ARTIFACTS)
    out = ctrl.pick_sets("training/tiny-grpo/eval/base", "training/tiny-grpo/eval/trained")
    for side in ("left_about", "right_about"):
        assert "Pipeline check, not a skilled agent" in out[side], out[side]
    assert "pipeline check" not in ctrl.pick_sets("evals/v2/noop", "evals/v2/heuristic")["left_about"].lower()


def test_the_same_set_twice_is_shown_once(tmp_path):
    scripted(tmp_path)
    out = WatchController(None, tmp_path).pick_sets("evals/v2/heuristic", "evals/v2/heuristic")
    assert out["right_set"]["value"] == "" and out["right_column"]["visible"] is False
    assert out["scenario"]["label"] == "Scenario (outcome and reward of the first set)"
    assert out["scenario"]["choices"] == rollout_view.scenario_choices(
        WatchController(None, tmp_path).records("evals/v2/heuristic").values())


def test_two_sets_that_share_no_scenario_list_the_first_sets_scenarios(tmp_path):
    write_set(tmp_path, "evals/v2/a", played("a", {"s1": 0.5}))
    write_set(tmp_path, "evals/v2/b", played("b", {"s9": 0.5}))
    out = WatchController(None, tmp_path).pick_sets("evals/v2/a", "evals/v2/b")
    assert out["scenario"]["value"] == "s1"
    assert out["right_title"] == "This set has no episode of the chosen scenario."


# ----- every attempt ------------------------------------------------------------------------------------
def attempts_set(root: Path) -> None:
    write_set(root, "human", [
        record("s1", "human:ada", 0.2, started_at=1_700_000_000.0, episode_id="ep-1"),
        record("s2", "human:ada", 0.5, started_at=1_700_000_100.0, episode_id="ep-2"),
        record("s1", "human:bob", 0.99, steps=3, started_at=1_700_000_200.0, episode_id="ep-3"),
        record("s1", "human:cy", None, outcome="abandoned", steps=1, started_at=1_700_000_300.0, episode_id="ep-4"),
    ], summary=False)


def test_every_attempt_of_a_scenario_is_reachable_the_counted_one_by_default(tmp_path):
    attempts_set(tmp_path)
    ctrl = WatchController(None, tmp_path)
    out = ctrl.pick_sets("human", "")
    assert out["scenario"]["value"] == "s1"
    attempts = out["left_attempt"]
    assert [value for _, value in attempts["choices"]] == ["3", "2", "1"]  # newest first
    assert attempts["value"] == "2"  # the last one not abandoned: what the dashboard counts
    labels = {value: label for label, value in attempts["choices"]}
    assert labels["3"].startswith("3 of 3 · human:cy · 2023-11-14 22:18 UTC · ABANDONED")
    assert labels["1"].startswith("1 of 3 · human:ada") and "NO +0.20" in labels["1"]
    assert attempts["interactive"]
    assert "human:bob" in text(out["left_title"])
    for number, agent in (("1", "human:ada"), ("2", "human:bob"), ("3", "human:cy")):
        shown = ctrl.show_attempt("human", "", "s1", number, None)
        assert agent in text(shown["left_title"]) and f"attempt={number}" in shown["link"]
    assert "human:ada" in text(ctrl.step_forward("human", "", "s1", 0, "1")["left_title"])
    assert ctrl.step_forward("human", "", "s1", 5, "1")["index"]["value"] == 2  # that attempt's own length
    assert "human:bob" in text(ctrl.show("human", "", "s1", 0, "junk")["left_title"])  # a bad attempt: the default
    for index in (float("inf"), float("nan"), "x", -3):  # what a request may send as the step
        assert ctrl.step_forward("human", "", "s1", index, "1")["index"]["value"] == 0
    assert ctrl.records("human")["s1"].episode_id == "ep-3"


def test_a_growing_log_shows_its_new_attempt(tmp_path):
    attempts_set(tmp_path)
    ctrl = WatchController(None, tmp_path)
    assert len(ctrl.attempts("human").attempts["s2"]) == 1
    with EpisodeLogger(tmp_path / "human" / "episodes.jsonl") as log:
        log.write(record("s2", "human:dee", 0.7, started_at=1_700_000_400.0, episode_id="ep-5"))
    index = ctrl.attempts("human")
    assert len(index.attempts["s2"]) == 2 and index.shown["s2"] == 2
    assert len([key for key in ctrl._by_scenario if key[0] == "human"]) == 1  # the older index is dropped


# ----- links --------------------------------------------------------------------------------------------
def params_of(link_markdown: str) -> dict[str, str]:
    query = link_markdown.split("](", 1)[1].split(")", 1)[0]
    return dict(parse_qsl(urlsplit(query).query))


def test_a_link_opens_the_same_episode_at_the_same_step(tmp_path):
    attempts_set(tmp_path)
    scripted(tmp_path)
    ctrl = WatchController(None, tmp_path)
    here = ctrl.step_forward("human", "evals/v2/heuristic", "s1", 1, "1", "1")
    params = params_of(here["link"])
    assert params == {"set": "human", "scenario": "s1", "attempt": "1", "step": "2", "vs": "evals/v2/heuristic",
                      "vs_attempt": "1"}
    opened = ctrl.open_link(params)
    assert opened["tabs"].selected == "watch" and "refused" not in opened
    assert opened["left_set"]["value"] == "human" and opened["right_set"]["value"] == "evals/v2/heuristic"
    assert opened["scenario"]["value"] == "s1" and opened["left_attempt"]["value"] == "1"
    for name in ("left_title", "right_title", "left_action", "link"):
        assert opened[name] == here[name], name
    assert opened["index"]["value"] == 2


def test_an_episode_id_link_finds_its_set_and_attempt(tmp_path):
    attempts_set(tmp_path)
    scripted(tmp_path)
    opened = WatchController(None, tmp_path).open_link({"episode": "ep-1", "step": "1"})
    assert "refused" not in opened
    shown = (opened["left_set"]["value"], opened["scenario"]["value"], opened["left_attempt"]["value"])
    assert shown == ("human", "s1", "1")
    assert "human:ada" in text(opened["left_title"]) and "Step 1 of 2" in text(opened["left_title"])


def test_a_page_without_a_link_opens_as_usual():
    ctrl = WatchController(None, ARTIFACTS)
    opened = ctrl.open_link({"__theme": "dark"})
    assert "tabs" not in opened and "refused" not in opened
    assert opened["right_set"]["value"] == ctrl.refresh()["right_set"]["value"]


@pytest.mark.parametrize("params, says, description", [
    ({"set": "../../etc/passwd"}, "no rollout set '../../etc/passwd'", "an unknown set: the default pair"),
    ({"set": "human", "scenario": "nope"}, "has no episode of scenario 'nope'", "an unknown scenario"),
    ({"set": "human", "scenario": "s1", "attempt": "7"}, "no attempt '7' of that scenario (it has 3)", "past the last"),
    ({"set": "human", "scenario": "s1", "attempt": "0"}, "no attempt '0'", "attempts count from 1"),
    ({"set": "human", "scenario": "s1", "attempt": "-1"}, "no attempt '-1'", "negative"),
    ({"set": "human", "scenario": "s1", "attempt": "²"}, "no attempt '²'", "a digit Python reads, int() does not"),
    ({"set": "human", "scenario": "s1", "step": "two"}, "the step 'two' is not a number", "a step in words"),
    ({"set": "human", "scenario": "s1", "step": "999"}, "the episode has 3 steps: showing the last", "past the end"),
    ({"set": "human", "vs": "evals/none"}, "no rollout set 'evals/none' to show beside it", "an unknown second set"),
    ({"episode": "ep-404"}, "no episode 'ep-404' in any rollout set", "an unknown episode id"),
    ({"scenario": "s1"}, "names no rollout set", "a scenario without its set"),
    ({"set": "<img src=x onerror=alert(1)>"}, "no rollout set", "markup"),
])
def test_a_garbled_link_opens_the_page_with_a_message_saying_what_was_not_found(tmp_path, params, says, description):
    attempts_set(tmp_path)
    scripted(tmp_path)
    ctrl = WatchController(None, tmp_path)
    opened = ctrl.open_link(params)
    assert says in opened["refused"], (description, opened["refused"])
    assert opened["tabs"].selected == "watch"
    assert opened["left_set"]["value"] in ctrl.rollout_sets()  # something real is on screen
    assert "Pick a rollout set" not in text(opened["left_title"])
    names = {name: name for name in [*watch_tab.EVERYTHING, "msg", "tabs"]}
    shown = bind(ctrl.open_link, names, at="msg")(params)  # as the page load binds it: a message, escaped
    assert shown["msg"].startswith("⚠️")
    assert "<" not in shown["msg"].replace("\\<", "")  # every < escaped: shown as text, it makes no element


def test_a_link_parameter_is_cut_before_it_is_looked_up(tmp_path):
    scripted(tmp_path)
    ctrl = WatchController(None, tmp_path)
    opened = ctrl.open_link({"set": "x" * 100_000})
    assert len(opened["refused"]) < 3 * watch_tab.LINK_CHARS
    assert {key[0] for key in ctrl._by_scenario} <= set(ctrl.rollout_sets())


def test_link_queries_hold_only_url_safe_characters():
    query = watch_tab.link_query("evals/v2/a b", None, "s)1](x", 2, None, 3)
    assert query == "?set=evals/v2/a+b&scenario=s%291%5D%28x&attempt=2&step=3"
    assert watch_tab.link_query(None, None, "s1", None, None, 0) == ""


# ----- live runs ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hub(shipped, sandbox):
    runtime = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    hub = SessionHub(runtime, ttl_s=600, max_sessions=4, sweep_every_s=0)
    yield hub
    hub.shutdown()


@pytest.fixture
def live(hub, shipped):
    ctrl = WatchController(hub, ARTIFACTS)
    # a test scenario the heuristic plays in many steps (its shipped run on this cache says how many)
    records = ctrl.records("evals/v5/heuristic")
    scenario = max(sorted(records), key=lambda sid: len(records[sid].steps))
    assert scenario in shipped.ids(split="test") and len(records[scenario].steps) >= 5
    sid = ctrl.start_live(None, "heuristic", scenario)["live_sid"]
    yield ctrl, sid
    hub.close(sid)


def step_of(view: dict) -> int:
    title = view["live_title"]
    return 0 if "Start" in title else int(title.split("Step ", 1)[1].split(" ", 1)[0])


def test_a_live_run_streams_one_view_per_step_to_the_end(live):
    ctrl, sid = live
    views = list(ctrl.live_run(sid))
    record = ctrl.hub.record(sid)
    assert record.outcome == "submitted" and len(views) == len(record.steps) >= 2
    assert [step_of(v) for v in views] == list(range(1, len(views) + 1))
    assert all("Running" in v["live_status"] for v in views[:-1])
    assert views[-1]["live_status"].startswith("**Over** after") and "reward" in views[-1]["live_outcome"]
    with pytest.raises(UserError, match="over"):  # checked at once, not at the first step
        ctrl.live_run(sid)


def test_stop_ends_a_live_run_between_steps_and_the_episode_goes_on(live):
    ctrl, sid = live
    run = ctrl.live_run(sid)
    assert step_of(next(run)) == 1
    assert step_of(next(run)) == 2
    stopped = ctrl.live_stop(sid)
    assert step_of(stopped) == 2 and "**Paused** at step 2" in stopped["live_status"]
    assert stopped["live_outcome"].startswith("_Still playing: 2 of at most")  # not "abandoned": it plays on
    last = list(run)
    assert len(last) == 1 and step_of(last[0]) == 2  # no step after Stop: only where it stands
    assert len(ctrl.hub.record(sid).steps) == 2
    assert step_of(ctrl.live_step(sid)) == 3  # Next action still works
    rest = list(ctrl.live_run(sid))  # and so does Run to the end, from there
    assert step_of(rest[0]) == 4 and rest[-1]["live_status"].startswith("**Over**")
    assert ctrl._stops == {}  # nothing is kept for a run that ended
    assert ctrl.live_stop(sid)["notice"] == "Nothing was running."


def test_a_new_start_stops_the_run_of_the_last_episode(live, shipped):
    ctrl, sid = live
    run = ctrl.live_run(sid)
    next(run)
    ctrl.start_live(sid, "noop", shipped.ids(split="test")[1])
    assert len(list(run)) == 1  # it yields where it stands and ends


def test_a_live_run_of_a_scenario_from_another_cache_is_refused_in_words(hub):
    ctrl = WatchController(hub, ARTIFACTS)
    old = sorted(ctrl.records("evals/v2/heuristic"))[0]  # a run played on cache v2
    before = len(hub._sessions)
    with pytest.raises(UserError, match=r"not one this Space serves.*Pick a run played on cache v5") as caught:
        ctrl.start_live(None, "heuristic", old)
    assert "artifacts/" not in str(caught.value)  # no server path in it
    assert len(hub._sessions) == before  # the session opened for it kept no slot


def test_a_failing_step_is_a_message_in_the_live_slot_not_an_error(live, monkeypatch):
    ctrl, sid = live
    names = {name: name for name in [*watch_tab.LIVE, "live_msg"]}
    handler = bind_stream(ctrl.live_run, names, at="live_msg")
    assert inspect.isgeneratorfunction(handler)  # Gradio streams it

    calls = []

    def flaky(session_id):
        calls.append(session_id)
        if len(calls) == 2:
            raise RuntimeError("the model server went away")
        return real(session_id)

    real = ctrl.hub.agent_step
    monkeypatch.setattr(ctrl.hub, "agent_step", flaky)
    shown = list(handler(sid))
    assert len(shown) == 2 and shown[0]["live_msg"] == ""
    message = shown[1]["live_msg"]
    assert message.startswith("⚠️") and "RuntimeError: the model server went away" in text(message)
    assert "failed" in shown[1]["live_status"] and step_of(shown[1]) == 1
    monkeypatch.undo()
    assert step_of(ctrl.live_step(sid)) == 2  # the episode stayed where it was

    ctrl.hub.close(sid)  # the session ends (the page closed, the TTL ran out)
    ended = list(handler(sid))
    assert len(ended) == 1 and "press Start" in ended[0]["live_msg"]


def test_no_live_run_without_an_agent(hub):
    ctrl = WatchController(hub, ARTIFACTS)
    for sid in (None, "forged-session-id"):
        with pytest.raises(UserError, match="press Start"):
            ctrl.live_run(sid)
        with pytest.raises(UserError, match="press Start"):
            ctrl.live_stop(sid)


@pytest.mark.parametrize("value, pace", [("", watch_tab.DEFAULT_PACE_S), ("0", 0.0), ("1.5", 1.5)])
def test_live_steps_are_paced_as_configured(monkeypatch, value, pace):
    monkeypatch.setenv("A01_UI_LIVE_PACE_S", value)
    assert watch_tab.pace_from_env() == pace


@pytest.mark.parametrize("value", ["-1", "fast", "nan", "1e9"])
def test_a_bad_pace_is_refused_at_start_up(monkeypatch, value):
    monkeypatch.setenv("A01_UI_LIVE_PACE_S", value)
    with pytest.raises(ValueError, match="A01_UI_LIVE_PACE_S"):
        watch_tab.pace_from_env()


def test_the_run_and_stop_are_wired_so_the_page_stays_usable(hub):
    with gr.Blocks() as demo:
        c = watch_tab.build(hub, ARTIFACTS, pace_s=0)
    run = next(fn for fn in demo.fns.values() if fn.name == "live_run")
    assert inspect.isgeneratorfunction(run.fn) and run.show_progress == "hidden"
    assert [block._id for block in run.inputs] == [c["live_sid"]._id]
    cancelling = [fn for fn in demo.fns.values() if fn.is_cancel_function and run._id in fn.cancels]
    assert cancelling and all(target[0] == c["live_stop"]._id for fn in cancelling for target in fn.targets)
    # Its own concurrency group: a run waits for no other action and holds none up.
    assert [fn.name for fn in demo.fns.values() if fn.concurrency_id == run.concurrency_id] == ["live_run"]
    assert run.trigger_mode == "once"  # a second press while it runs is ignored, not queued


# ----- what a step shows --------------------------------------------------------------------------------
def test_an_empty_model_reply_says_the_model_produced_no_readable_action():
    blank = "\n" * 32
    error = "format error: the reply is empty. Reply with exactly one JSON object"
    entry = StepEntry(step=1, action={"tool": "reply", "text": blank},
                      observation={"tool": "reply", "text": f"Error: {error}", "error": error}, elapsed_ms=1.0)
    view = rollout_view.step_view(record("s1", "tiny", -0.1).model_copy(update={"steps": [entry]}), 1)
    assert view.action_json == ("(the model produced no readable action: its reply was 32 blank characters; "
                                "format error: the reply is empty)")
    empty = entry.model_copy(update={"action": {"tool": "reply", "text": ""}, "observation": {"tool": "reply"}})
    assert rollout_view.step_view(record("s1", "tiny", -0.1).model_copy(update={"steps": [empty]}), 1).action_json == \
        "(the model produced no readable action: its reply was empty)"


def test_trained_against_base_shows_words_not_two_blank_replies():
    ctrl = WatchController(None, ARTIFACTS)
    out = ctrl.pick_sets("training/tiny-grpo/eval/base", "training/tiny-grpo/eval/trained")
    shown = ctrl.step_forward("training/tiny-grpo/eval/base", "training/tiny-grpo/eval/trained",
                              out["scenario"]["value"], 0)
    for side in ("left", "right"):
        assert "no readable action" in shown[f"{side}_action"] and "format error" in shown[f"{side}_action"]


def test_rewards_of_a_set_count_as_comparisons_count(tmp_path):
    write_set(tmp_path, "evals/v2/a", [record("s1", "a", 0.2), record("s1", "a", 0.8),
                                       record("s2", "a", 0.5), record("s2", "a", None, outcome="abandoned"),
                                       record("s3", "a", None, outcome="infrastructure_error")])
    [rollout_set] = artifact_sets.discover(tmp_path)
    assert artifact_sets.scenario_rewards(rollout_set) == {"s1": 0.8, "s2": 0.5}
    assert math.isnan(rollout_view.difference(None, record("s1", "a", 0.1)))
