"""The Dashboard tab without a browser: the headline card's numbers, the leaderboard's order and its
human players, stacked bars that reach 100%, a visitor's episode appearing when the tab is opened,
and toggles that redraw only what they change.

The controller runs on the shipped artifacts (and on folders made here) with a stand-in hub that
has what the dashboard reads of one (the scenario cache, the sampler's weights, the human log's
path): no sandbox is started.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from envcore.cache import ScenarioCache
from envcore.env.episode_log import EpisodeLogger
from tests.test_ui_data import make_record
from ui import artifact_sets, charts, dashboard_tab, data
from ui.failure_panel import FailurePanel

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


def stand_in_hub(human_log: Path | None) -> SimpleNamespace:
    weights = SimpleNamespace(by_bug_class={}, by_tier={})
    logger = SimpleNamespace(path=human_log) if human_log else None
    return SimpleNamespace(runtime=SimpleNamespace(cache=ScenarioCache.open(None), logger=logger,
                                                   sampler=SimpleNamespace(weights=weights)))


def controller(artifacts: Path, human_log: Path | None) -> dashboard_tab.DashboardController:
    with gr.Blocks():
        return dashboard_tab.build(stand_in_hub(human_log), artifacts)["controller"]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def shipped_ctrl(tmp_path_factory) -> dashboard_tab.DashboardController:
    return controller(ARTIFACTS, tmp_path_factory.mktemp("space") / "human.jsonl")


def human_record(name: str, scenario: str, *, reward: float = 1.0, resolution: str = "full", **options):
    return make_record(scenario, agent=f"human:{name}", reward=reward, resolution=resolution,
                       episode_id=f"{name}-{scenario}-{reward}", **options).model_copy(update={"source": "human"})


def stacked_sums(figure) -> dict[str, float]:
    """Each bar's total over the traces of a stacked horizontal bar chart."""
    totals: dict[str, float] = {}
    for trace in figure.data:
        for label, value in zip(trace.y, trace.x):
            assert not (isinstance(value, float) and math.isnan(value)), f"{trace.name}: a missing value at {label}"
            totals[label] = totals.get(label, 0.0) + value
    return totals


# ----- the headline card ---------------------------------------------------------------------------
def test_the_headline_names_the_best_agent_with_the_reports_intervals_and_not_the_oracle(shipped_ctrl):
    text = shipped_ctrl.headline()
    summary = json.loads((ARTIFACTS / "evals/v5/heuristic/summary.json").read_text())["overall"]
    fix, reward = summary["full_fix"], summary["reward"]
    # the same numbers as the evaluation's own summary (same values, order, seed and resamples)
    expected = data.pooled_stats(shipped_ctrl.frame(["evals/v5/heuristic"]))
    assert expected["full_fix_low"] == pytest.approx(fix["ci95"][0])
    assert expected["reward_high"] == pytest.approx(reward["ci95"][1])
    shown = text.replace("\\", "")  # Markdown escapes
    # the sets the leaderboard shows at first: the newest cache's heuristic, not the older one's
    assert ("**Best agent:** **Heuristic baseline (scripted)** (evals/v5): full fixes "
            f"{fix['mean']:.0%} [{fix['ci95'][0]:.0%}, {fix['ci95'][1]:.0%}], mean reward {reward['mean']:+.3f} "
            f"[{reward['ci95'][0]:+.3f}, {reward['ci95'][1]:+.3f}], n = 322.") in shown
    assert "It is only a scripted baseline: no trained agent beats it yet" in shown
    # the best trained one: the from-scratch job's SFT model on the test split, its numbers its own summary's
    job = json.loads((ARTIFACTS / "training/scratch-26m/eval/test/sft/summary.json").read_text())["overall"]["reward"]
    assert (f"The best trained agent, **scratch-26m after SFT** (held-out eval (test)), scores mean reward "
            f"{job['mean']:+.3f} [{job['ci95'][0]:+.3f}, {job['ci95'][1]:+.3f}], n = 96.") in shown
    assert "tiny model taught a few apps" not in shown  # trained on 10,293 apps, not a few
    assert "**Human players:** no human episodes yet: play one in the Play tab." in shown
    # what training did: the run that gained on apps it never saw, with its measured size
    stages = json.loads((ARTIFACTS / "training/scratch-26m/stages.json").read_text())["slices"]["test"]["stages"]
    assert ("**What training did** (scratch-26m, a 26.2M-parameter model): full fixes on 96 unseen scenarios of test: "
            f"base {stages['base']['overall']['full_fix']['mean']:.0%} → SFT {stages['sft']['overall']['full_fix']['mean']:.0%}") in shown
    assert "not expected to fix apps it has not seen" not in shown
    assert "**Validation:** **Oracle: the reference fix (validation only)**" in shown and "100% full fixes" in shown
    assert "Best agent:** **Oracle" not in shown
    assert "Broken Access Control" in shown and "held-out scenarios" in shown


@pytest.mark.parametrize("kind, scripted, expected", [
    ("trained", set(), "**Best agent:** **Tuned**"),
    ("baseline", {"evals/x"}, "only a scripted baseline"),
    ("baseline", set(), "only an untrained baseline"),
])
def test_the_headline_says_what_kind_of_agent_is_best(kind, scripted, expected):
    frame = data.episode_frame({"evals/x": [make_record("s1", reward=0.5)]})
    board = data.leaderboard_table(frame, {"evals/x": data.SetInfo("Tuned · evals", kind=kind)}, samples=20,
                                   min_episodes=1)
    text = dashboard_tab.headline_markdown(board, data.pooled_stats(frame.iloc[0:0]), scripted).replace("\\", "")
    assert expected in text
    assert ("no trained agent beats it" in text) == (kind != "trained")


def test_the_headline_escapes_what_players_and_folders_are_called():
    payload = "<img src=x onerror=alert(1)> [link](http://evil) **bold**"
    frame = data.episode_frame({"human": [human_record(payload, f"s{i}") for i in range(data.MIN_RANKED_EPISODES)],
                                f"evals/{payload}": [make_record("s1", reward=0.2)]})
    info = {"human": data.SetInfo("Human players · this Space", kind="human"),
            f"evals/{payload}": data.SetInfo(f"{payload} · evals")}
    board = data.leaderboard_table(frame, info, samples=20, min_episodes=1)
    text = dashboard_tab.headline_markdown(board, data.pooled_stats(frame[frame["player"] != ""], samples=20), set())
    html = MarkdownIt("commonmark", {"html": True}).render(text)  # raw HTML passed through, as Gradio's renderer
    tags = set(re.findall(r"<([a-z0-9]+)", html))
    assert tags <= {"h3", "p", "strong"}, tags  # the card's own markup: no image, link or emphasis from the names
    assert "best: <strong>&lt;img src=x onerror=alert(1)&gt; [link](http://evil) **bold**</strong>" in html
    names = dict(zip(board["entrant"], board["name"]))
    labels = [label for trace in charts.outcome_chart(data.outcome_table(frame), names=names).data for label in trace.y]
    assert labels and not any("<img" in label or "<a" in label for label in labels)  # Plotly renders some HTML
    assert any("&lt;img src=x" in label for label in labels)


# ----- the leaderboard ----------------------------------------------------------------------------
def board_of(sets: dict[str, list], info: dict[str, data.SetInfo], min_episodes: int = 1) -> pd.DataFrame:
    """The leaderboard of ``sets``, every entrant with ``min_episodes`` graded episodes ranked (one,
    unless a test is about how many it takes)."""
    return data.leaderboard_table(data.episode_frame(sets), info, samples=50, min_episodes=min_episodes)


def test_the_leaderboard_ranks_by_mean_reward_then_full_fixes_with_validation_and_training_apart():
    sets = {
        "evals/low": [make_record("s1", agent="low", reward=0.1, resolution="no")],
        "evals/tie-fixes": [make_record("s1", agent="t1", reward=0.5, resolution="full"),
                            make_record("s2", agent="t1", reward=0.5, resolution="full")],
        "evals/tie-partial": [make_record("s1", agent="t2", reward=0.5, resolution="partial"),
                              make_record("s2", agent="t2", reward=0.5, resolution="partial")],
        "evals/high": [make_record("s1", agent="hi", reward=0.9)],
        "evals/oracle": [make_record("s1", agent="oracle", reward=1.0)],
        "training/run/rollouts": [make_record("s1", agent="tr", reward=0.95)],
        "evals/broken": [make_record("s1", agent="br", reward=None, outcome="infrastructure_error")],
    }
    info = {name: data.SetInfo(f"{name.rsplit('/', 1)[-1]} · evals") for name in sets}
    info["evals/oracle"] = data.SetInfo("Oracle · evals", kind="validation", standing="validation")
    info["training/run/rollouts"] = data.SetInfo("rollouts · training", kind="trained", standing="unranked",
                                                 note="training rollouts, not a held-out evaluation")
    board = board_of(sets, info)
    assert board["set"].tolist() == ["evals/high", "evals/tie-fixes", "evals/tie-partial", "evals/low",
                                     "training/run/rollouts", "evals/broken", "evals/oracle"]
    assert board["rank"].tolist() == [1, 2, 3, 4, 0, 0, 0]
    assert board["standing"].tolist()[-3:] == ["unranked", "unranked", "validation"]
    assert board.set_index("set").loc["evals/broken", "note"] == "no graded episode"
    tied = board.set_index("set").loc["evals/tie-fixes"]
    assert (tied["reward"], tied["full_fix"], tied["episodes"]) == (0.5, 1.0, 2)
    assert tied["reward_low"] <= tied["reward"] <= tied["reward_high"]
    shown = data.leaderboard_display(board)
    assert shown["#"].tolist() == ["1", "2", "3", "4", "–", "–", "–"]
    assert shown["about"].iloc[-1] == "evals"  # the oracle's SetInfo here has no note; the dashboard's says validation
    assert shown["agent or player"].iloc[0] == "high"  # the set's words, not its folder


def test_the_shipped_leaderboard_is_led_by_the_heuristic_and_ends_with_the_oracle(shipped_ctrl):
    sets = shipped_ctrl.rollout_sets()
    shown = dashboard_tab.default_shown(list(sets.values()))
    assert "training/tiny-grpo" not in shown and "evals/v5/oracle" in shown  # training rollouts left out at first
    # an agent run on several caches shows its newest run at first; the older is a click away
    assert "evals/v2/heuristic" not in shown and "evals/v2/heuristic" in sets
    assert "evals/v2/tiny-random-llm" not in shown  # a pipeline check: behind the toggle
    board = shipped_ctrl.board(shown, sets)
    assert board["set"].iloc[0] == "evals/v5/heuristic" and board["rank"].iloc[0] == 1
    assert board["set"].iloc[-1] == "evals/v5/oracle" and board["standing"].iloc[-1] == "validation"
    ranked = board[board["standing"] == "ranked"]
    assert ranked["reward"].is_monotonic_decreasing
    everything = shipped_ctrl.board(list(sets), sets)
    tiny = everything.set_index("set").loc["evals/v2/tiny-random-llm"]
    assert tiny["caveat"] == artifact_sets.PIPELINE_CHECK and tiny["name"] == "tiny-random-llm (model, untrained)"
    display = data.leaderboard_display(everything)
    assert "evals/v2/heuristic" not in display["agent or player"].to_string()  # no folder paths as names


@pytest.mark.parametrize("agent_id, expected, description", [
    ("human:alice", "alice", "a nickname"),
    ("human:Alice_01", "Alice_01", "a nickname with a capital and digits"),
    ("human:BobSmith", "BobSmith", "a camel-case nickname"),
    ("human:player_1", "player_1", "a nickname with an underscore"),
    ("human:xK3_q9Zp", data.ANONYMOUS, "a session prefix: anonymous"),
    ("human:a9Bc-DeF", data.ANONYMOUS, "another session prefix"),
    ("human:", data.ANONYMOUS, "no name at all"),
    ("human:anonymous", data.ANONYMOUS, "said anonymous"),
    ("heuristic", "", "not a human"),
])
def test_a_human_episode_is_counted_for_the_player_who_played_it(agent_id, expected, description):
    assert data.player_name(agent_id) == expected, description


def test_every_human_player_has_a_row_of_their_own_and_anonymous_players_share_one():
    human = [human_record("alice", "s1", reward=1.0), human_record("alice", "s2", reward=0.5, resolution="partial"),
             human_record("bob", "s1", reward=-0.5, resolution="no"),
             human_record("xK3_q9Zp", "s1", reward=0.0, resolution="no"),
             human_record("a9Bc-DeF", "s2", reward=0.2, resolution="no")]
    sets = {"human": human, "evals/heuristic": [make_record("s1", agent="heuristic", reward=0.3)]}
    info = {"human": data.SetInfo("Human players · this Space", kind="human"),
            "evals/heuristic": data.SetInfo("Heuristic baseline (scripted) · evals")}
    board = board_of(sets, info)
    assert board["name"].tolist() == ["alice (human player)", "Heuristic baseline (scripted)",
                                      "anonymous players (2 sessions)", "bob (human player)"]
    alice = board.iloc[0]
    assert (alice["episodes"], alice["reward"], alice["full_fix"], alice["where"]) == (2, 0.75, 0.5, "this Space")
    pooled = data.pooled_stats(data.episode_frame({"human": human}))
    assert pooled["players"] == 4 and pooled["graded"] == 5  # two named, two anonymous sessions


# ----- stacked bars reach 100% ----------------------------------------------------------------------
def test_every_outcome_bar_of_every_shipped_set_sums_to_100_percent(shipped_ctrl):
    sets = shipped_ctrl.rollout_sets()
    frame = shipped_ctrl.frame(list(sets), sets)
    table = data.outcome_table(frame)
    sums = table.groupby("entrant")["share"].sum()
    assert set(sums.index) == {s for s in sets if artifact_sets.load_records(sets[s])}
    assert sums.to_numpy() == pytest.approx(1.0, abs=0.01)
    totals = stacked_sums(charts.outcome_chart(table))
    assert len(totals) == len(sums) and all(t == pytest.approx(1.0, abs=0.01) for t in totals.values())


@pytest.mark.parametrize("dimension", ["bug_class", "tier", "agent", "domain"])
def test_every_failure_bar_of_the_shipped_analysis_sums_to_100_percent(dimension):
    """The bar of ``random`` used to stop at about 85%: a category it never met was a NaN in the
    middle of the stack, which Plotly's typed arrays carry into the running sum."""
    panel = FailurePanel(ARTIFACTS)
    analysis = panel.load("baselines")
    table = panel.category_table(analysis, dimension)
    assert table.groupby("slice")["share"].sum().to_numpy() == pytest.approx(1.0, abs=0.01)
    titles = {c["name"]: c["title"] for c in analysis["categories"]}
    totals = stacked_sums(charts.failure_chart(table, by=dimension, titles=titles))
    assert set(totals) == set(analysis["by"][dimension]) and all(t == pytest.approx(1.0, abs=0.01)
                                                                 for t in totals.values())
    if dimension == "agent":
        random = table[table["slice"] == "random"].set_index("category")
        assert random.loc["wrong_site", "share"] == pytest.approx(37 / 258)  # the segment that went missing


def test_odd_outcomes_still_stack_to_100_percent():
    odd = [make_record("s1", reward=None, outcome="infrastructure_error"),
           make_record("s2", reward=-0.1, resolution="no", outcome="budget_exhausted"),
           make_record("s3", reward=0.5, resolution="partial"), make_record("s4", reward=1.0, resolution="full"),
           make_record("s5", reward=0.0, resolution="no"), make_record("s6", outcome="abandoned"),
           make_record("s7", reward=0.3, resolution=None)]
    frame = data.episode_frame({"odd": odd, "only-errors": [make_record("s1", agent="e", reward=None,
                                                                        outcome="infrastructure_error")]})
    table = data.outcome_table(frame)
    shares = table[table["entrant"] == "odd"].set_index("outcome")["count"].to_dict()
    assert shares == {"full_fix": 1, "partial": 1, "not_fixed": 2, "budget": 1, "not_graded": 1}  # abandoned: not kept
    assert all(t == pytest.approx(1.0) for t in stacked_sums(charts.outcome_chart(table)).values())
    analysis = {"categories": [{"name": "solved", "title": "solved", "excluded": False},
                               {"name": "no_patch", "title": "no patch", "excluded": False},
                               {"name": "infrastructure", "title": "infra", "excluded": True}],
                "by": {"agent": {
                    "a": {"graded": 10, "counts": {"solved": 3, "no_patch": 0, "infrastructure": 4, "new_kind": 2},
                          "rates": {"solved": 0.9}},  # rates that disagree with the counts, and an unknown category
                    "b": {"graded": 0, "counts": {"infrastructure": 2}, "rates": {}},
                    "c": {"graded": 5, "counts": {"no_patch": 5}, "rates": {"no_patch": 1.0}}}}}
    table = FailurePanel.category_table(analysis, "agent")
    assert set(table["slice"]) == {"a", "c"}  # nothing graded: no bar
    a = table[table["slice"] == "a"].set_index("category")
    assert a["share"].to_dict() == pytest.approx({"solved": 0.6, "no_patch": 0.0, "other": 0.4})
    totals = stacked_sums(charts.failure_chart(table, by="agent", titles={}))
    assert totals == pytest.approx({"a": 1.0, "c": 1.0})


# ----- a visitor's episode, when the tab is opened ----------------------------------------------------
@pytest.fixture
def small_artifacts(tmp_path) -> Path:
    root = tmp_path / "artifacts"
    for agent in ("heuristic", "oracle"):
        folder = root / "evals/v2" / agent
        folder.mkdir(parents=True)
        shutil.copy(ARTIFACTS / "evals/v2" / agent / "episodes.jsonl.gz", folder)
        shutil.copy(ARTIFACTS / "evals/v2" / agent / "summary.json", folder)
    return root


def test_a_human_episode_is_on_the_dashboard_the_next_time_the_tab_is_opened(small_artifacts, tmp_path):
    log = tmp_path / "elsewhere" / "human.jsonl"  # A01_HUMAN_LOG, outside the artifacts folder
    ctrl = controller(small_artifacts, log)
    assert ctrl.rollout_sets()["human"].label == artifact_sets.HUMAN_LABEL
    page = ctrl.refresh()
    shown, seen = page["sets"]["value"], page["seen"]
    assert "human" in shown and "no human episodes yet" in page["headline"]
    assert ctrl.on_open(seen, shown, "Tier", "Full fix", None, None, "Reward") == {}  # nothing changed: no redraw

    scenario = artifact_sets.load_records(ctrl.rollout_sets()["evals/v2/heuristic"])[0].scenario_id
    EpisodeLogger(log).write(human_record("zoe", scenario, reward=0.98))
    opened = ctrl.on_open(seen, shown, "Tier", "Full fix", None, None, "Reward")
    assert opened["seen"] != seen
    board = opened["leaderboard"]
    # listed with its one episode, after the heuristic's 258: one lucky repair is not a rank
    assert board["agent or player"].iloc[0].startswith("Heuristic baseline") and board["#"].iloc[0] == "1"
    zoe = board[board["agent or player"] == "zoe (human player)"].iloc[0]
    assert (zoe["#"], zoe["episodes"]) == ("–", "1") and "too few to rank" in zoe["about"]
    assert "**Human players** (1 player): 1 episode so far" in opened["headline"].replace("\\", "")
    assert "zoe (human player)" in [label.replace("<br>", " ") for label in opened["outcomes"].data[0].y]
    assert ctrl.on_open(opened["seen"], shown, "Tier", "Full fix", None, None, "Reward") == {}


def test_the_spaces_own_human_log_replaces_the_default_one_it_is_not_writing(small_artifacts, tmp_path):
    (small_artifacts / "human").mkdir()
    (small_artifacts / "human/episodes.jsonl").write_text("")
    log = tmp_path / "live.jsonl"
    sets = controller(small_artifacts, log).rollout_sets()
    assert sets["human"].path == log and list(sets)[-2:] == ["human", "evals/v2/oracle"]
    same = controller(small_artifacts, small_artifacts / "human/episodes.jsonl").rollout_sets()
    assert [s.name for s in same.values()].count("human") == 1


# ----- toggles redraw only what they change, from caches --------------------------------------------
def outputs_of(blocks: gr.Blocks, component: gr.components.Component, event: str) -> set[int]:
    (fn,) = [f for f in blocks.fns.values() if (component._id, event) in f.targets]
    return {o._id for o in fn.outputs}


def test_a_dimension_or_measure_toggle_redraws_the_rates_chart_alone(tmp_path):
    with gr.Blocks() as blocks:
        with gr.Tab("Dashboard") as tab:
            c = dashboard_tab.build(stand_in_hub(tmp_path / "h.jsonl"), ARTIFACTS)  # type: ignore[arg-type]
        dashboard_tab.bind_tab(tab, c)
    for toggle in ("dimension", "metric"):
        assert outputs_of(blocks, c[toggle], "input") == {c["rates"]._id}
    assert outputs_of(blocks, c["sets"], "input") == {c[n]._id for n in ("leaderboard", "outcomes", "rates",
                                                                         "components")}
    assert outputs_of(blocks, c["show_all"], "input") == {c[n]._id for n in ("sets", "leaderboard", "outcomes", "rates",
                                                                             "components")}
    assert c["headline"]._id in outputs_of(blocks, tab, "select")


def test_toggles_are_served_from_caches_keyed_by_known_sets_only(shipped_ctrl):
    names = ["evals/v2/heuristic", "evals/v2/noop", "evals/v2/random", "training/tiny-grpo/eval/trained"]
    assert set(names) <= set(shipped_ctrl.rollout_sets())
    first = shipped_ctrl.rates(names, "Domain", "Mean reward")["rates"]
    assert shipped_ctrl.rates(names, "Domain", "Mean reward")["rates"] is first
    assert shipped_ctrl.rates([*names, "../../etc/passwd", names[0]], "Domain", "Mean reward")["rates"] is first
    sets = shipped_ctrl.rollout_sets()  # found once: each lookup walks the artifacts folder (~40 ms)
    for made_up in range(3 * dashboard_tab.DERIVED_ENTRIES):
        shipped_ctrl.rates(names, f"dimension {made_up}", "Full fix", sets=sets)  # unknown: the default
    assert len(shipped_ctrl._derived) <= dashboard_tab.DERIVED_ENTRIES
    assert len(shipped_ctrl._frames) <= dashboard_tab.FRAME_ENTRIES
    drawn = shipped_ctrl.draw(names, "Tier", "Full fix")
    assert set(drawn) == {"leaderboard", "outcomes", "rates", "components"}
    assert drawn["rates"].data[0].x[0].startswith("Heuristic")  # best first, in a word or two


def test_the_components_chart_splits_each_sets_mean_reward_into_its_parts(shipped_ctrl):
    sets = shipped_ctrl.rollout_sets()
    frame = shipped_ctrl.frame(["evals/v2/deny_all", "evals/v2/oracle"], sets)
    means = data.component_means(frame)
    for set_name, part in means.groupby("set"):
        rewards = frame[(frame["set"] == set_name) & frame["graded"]]["reward"]
        assert part["mean"].sum() == pytest.approx(rewards.mean(), abs=1e-6)  # no episode was clipped here
    figure = charts.component_chart(means, rewards=data.rate_table(frame, "overall", "reward", samples=50))
    assert figure.layout.barmode == "relative" and figure.data[-1].type == "scatter"
    broken = next(t for t in figure.data if t.name == "legit_use_broken")
    assert broken.x[0] == pytest.approx(-0.5, abs=0.01)  # deny-all pays for the legitimate use it broke


def test_the_panels_below_draw_each_figure_once_and_only_for_what_exists(shipped_ctrl):
    failures, training = shipped_ctrl.failures, shipped_ctrl.training
    first = failures.draw("baselines", "Agent")["fail_chart"]
    assert failures.draw("baselines", "Agent")["fail_chart"] is first  # a toggle back costs no new figure
    runs = training.runs()
    curves = training.draw(runs, ["env/reward", "env/full_fix"])["train_curves"]
    assert training.draw(runs, ["env/reward", "env/full_fix"])["train_curves"] is curves
    for made_up in range(40):
        failures.draw("baselines", f"dimension {made_up}")
        failures.draw(f"../no-such-analysis-{made_up}", "Agent")
        training.draw([*runs, f"run {made_up}"], ["env/reward", f"metric {made_up}"])
    assert {key[0] for key in failures._charts} <= set(failures.analyses())
    assert len(training._charts) <= 3  # the made-up metrics and runs are not keys
    assert all(metric.startswith("env/") for key in training._charts for metric in key[2])


# ----- the first minute: a compact view, the rest one click away ------------------------------------
FIRST_VIEW = {"evals/v5/heuristic", "evals/v5/noop", "evals/v5/random", "evals/v5/deny_all", "evals/v5/oracle",
              "training/scratch-26m/eval/test/sft"}


def test_the_first_view_shows_about_six_agents_and_no_pipeline_check(shipped_ctrl):
    """Twenty entrants, mostly at zero or pipeline checks, used to open the dashboard: now the newest
    cache's baselines, the trained agents worth a look on the test split and the human players;
    everything else has a reason to wait behind the toggle."""
    sets = shipped_ctrl.rollout_sets()
    shown = dashboard_tab.default_shown(list(sets.values()))
    assert {n for n in shown if sets[n].kind != "human"} == FIRST_VIEW
    hidden = [s for s in sets.values() if s.name not in shown]
    reasons = {s.name: dashboard_tab.hidden_reason(s, list(sets.values())) for s in hidden}
    assert all(reasons.values()), reasons
    assert reasons["training/tiny-grpo/eval/trained"] == "pipeline checks"
    assert reasons["training/scratch-26m/eval/test/base"] == "untrained models"
    assert reasons["evals/v2/heuristic"] == "older caches"
    assert reasons["training/scratch-26m/eval/test_styles/sft"] == "other splits"
    assert not any(sets[n].caveat for n in shown)
    page = shipped_ctrl.refresh()
    assert page["sets"]["value"] == shown
    board = page["leaderboard"]
    assert len(board) <= 7 and board["#"].iloc[0] == "1"
    assert "pipeline check" not in board.to_string()
    toggle = page["show_all"]
    assert toggle["value"] is False and str(len(hidden)) in toggle["label"]


def test_the_toggle_shows_every_hidden_run_with_a_name_of_its_own_and_hides_them_again(shipped_ctrl):
    sets = shipped_ctrl.rollout_sets()
    everything = shipped_ctrl.show_all(True, "Bug class", "Full fix")
    assert everything["sets"]["value"] == list(sets)
    board = everything["leaderboard"]
    names = board["agent or player"].tolist()
    assert len(board) > 20 and len(set(names)) == len(names), [n for n in names if names.count(n) > 1]
    assert "Heuristic baseline (scripted) · cache v2" in names and "Heuristic baseline (scripted) · cache v5" in names
    assert any("pipeline check" in about for about in board["about"])
    outcome_rows = [label.replace("<br>", " ") for label in everything["outcomes"].data[0].y]
    assert len(set(outcome_rows)) == len(outcome_rows)
    columns = list(everything["rates"].data[0].x)
    graded = shipped_ctrl.board(list(sets), sets).groupby("set")["graded"].sum()
    measured = graded[graded >= data.MIN_RANKED_EPISODES]  # a set of fewer episodes has no rate per slice worth a column
    assert len(set(columns)) == len(columns) == len(measured) and len(measured) < len(sets) - 1
    back = shipped_ctrl.show_all(False, "Bug class", "Full fix")
    assert back["sets"]["value"] == dashboard_tab.default_shown(list(sets.values()))


def test_the_split_filter_lists_every_split_of_the_cache(tmp_path):
    with gr.Blocks():
        c = dashboard_tab.build(stand_in_hub(tmp_path / "h.jsonl"), ARTIFACTS)  # type: ignore[arg-type]
    splits = [value for _, value in c["f_split"].choices]
    assert splits == [dashboard_tab.ANY, "train", "val", "test", "test_styles", "external"]
    assert not c["controller"].scenarios("test_styles", dashboard_tab.ANY, dashboard_tab.ANY, dashboard_tab.ANY,
                                         "")["browser"].empty


def test_no_signed_number_the_dashboard_writes_reads_minus_zero(tmp_path):
    frame = data.episode_frame({"evals/x": [make_record(f"s{i}", reward=r, resolution="no", episode_id=f"x{i}")
                                            for i, r in enumerate([-0.0004, 0.0, -0.0, 0.0, 0.0])]})
    board = data.leaderboard_table(frame, {"evals/x": data.SetInfo("Tiny · evals")}, samples=20)
    text = dashboard_tab.headline_markdown(board, data.pooled_stats(frame.iloc[0:0]), set()).replace("\\", "")
    assert "mean reward +0.000 [+0.000, +0.000], n = 5" in text and "-0.000" not in text
    from ui import stages_view, teaching_view

    stage = {"episodes": 5, "format_error_rate": 0.0, "overall": {
        key: {"mean": -0.0001 if key == "reward" else 0.0, "ci95": [-0.0004, 0.0]}
        for key in ("reward", "full_fix", "security_pass", "regression_pass")}}
    table = {"run": "r", "description": "", "parameters": None, "slices": {"test": {
        "stages": {"base": stage, "sft": stage},
        "comparisons": {"sft vs base": {"scenarios": 5, "reward_difference": {"mean": -0.0002, "ci95": [-0.0004, 0.0]},
                                        "full_fix": {"only_other": 0, "only_base": 0}}}}}}
    assert "-0.000" not in stages_view.stages_markdown([table])
    assert "-0.000" not in teaching_view.debrief_markdown({"reward": -0.0003, "resolution": "none"})
