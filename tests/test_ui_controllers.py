"""The tabs' controllers without a browser: what each UI action does with good and bad input.

Bad input gets a clear message (a :class:`~ui.wiring.UserError`, shown beside the control that made
it) and loses nothing: no step is spent, no file changes. Environment refusals (an oversized patch, a
path outside the app) come back as refused steps, exactly as they would for an agent. An editor
filled before a patch can never undo it.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import pytest

from envcore.cache import ScenarioCache
from envcore.env.environment import Runtime
from envcore.env.episode_log import EpisodeLogger
from envcore.env.sampler import CurriculumSampler
from envcore.server.sessions import SessionHub
from ui import dashboard_tab, play_tab, watch_tab
from ui.wiring import UserError, bind

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
SCENARIO = ScenarioCache.open().ids(split="test")[0]
"""A test-split scenario of the newest shipped cache (the one the page serves)."""


@pytest.fixture(scope="module")
def hub(shipped, sandbox, tmp_path_factory):
    server = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    human = Runtime(sampler=server.sampler, source="human", max_steps=40, parent=server,
                    logger=EpisodeLogger(tmp_path_factory.mktemp("ui") / "human.jsonl"))
    hub = SessionHub(human, ttl_s=600, max_sessions=8, sweep_every_s=0)
    yield hub
    hub.shutdown()


@pytest.fixture(scope="module")
def tabs(hub):
    with gr.Blocks():
        play = play_tab.build(hub, bug_classes=[], domains=[])
        watch = watch_tab.build(hub, ARTIFACTS)
        dash = dashboard_tab.build(hub, ARTIFACTS)
    return {"play": play, "watch": watch, "dashboard": dash}


@pytest.fixture
def episode(tabs):
    ctrl = tabs["play"]["controller"]
    out = ctrl.new_episode(None, "any", "any", "any", "any", SCENARIO, None, 40, "tester")
    yield ctrl, out["sid"]
    ctrl.hub.close(out["sid"])


def steps(ctrl, sid) -> int:
    return ctrl.hub.state(sid).step_count


def test_every_named_output_of_a_controller_has_a_component(tabs, episode):
    ctrl, sid = episode
    components = {k: v for k, v in tabs["play"].items() if k != "controller"}
    handler = bind(ctrl.view_diff, components, at="tests_msg")
    assert set(handler(sid)) <= set(components.values())


def test_a_mistake_goes_to_the_message_beside_its_control_and_changes_nothing_else(tabs):
    components = {k: v for k, v in tabs["play"].items() if k != "controller"}
    ctrl = tabs["play"]["controller"]
    out = bind(ctrl.send_request, components, at="http_msg")(None, "GET", "/", "(anonymous)", "")
    assert list(out) == [components["http_msg"]]
    assert "New episode" in out[components["http_msg"]] and out[components["http_msg"]].startswith("⚠️")


def test_actions_without_an_episode_say_so_and_spend_nothing(tabs):
    ctrl = tabs["play"]["controller"]
    for call in (lambda: ctrl.run_tests(None), lambda: ctrl.submit("forged-session-id"),
                 lambda: ctrl.open_file(None, "app.py")):
        with pytest.raises(UserError, match="New episode"):
            call()


def test_a_bad_scenario_or_filter_is_a_message_not_a_crash(tabs):
    ctrl = tabs["play"]["controller"]
    with pytest.raises(UserError, match="hexadecimal"):
        ctrl.new_episode(None, "any", "any", "any", "any", "'; drop table --", None, 40, "")
    with pytest.raises(UserError, match="no validated scenario matches .*'domain': 'atlantis'"):
        ctrl.new_episode(None, "any", "any", "any", "atlantis", "", None, 40, "")


def test_an_unchanged_editor_and_an_invalid_json_body_spend_no_step(episode):
    ctrl, sid = episode
    path = next(f for f in _files(ctrl, sid) if f.endswith(".py"))
    editing = ctrl.open_file(sid, path)["editing"]
    before = steps(ctrl, sid)
    with pytest.raises(UserError, match="nothing to apply"):
        ctrl.apply_edit(sid, editing, ctrl.hub.current_file(sid, path))
    with pytest.raises(UserError, match="not valid JSON .line 1, column 2"):
        ctrl.send_request(sid, "POST", "/api/me", "(anonymous)", "{not json")
    with pytest.raises(UserError, match="must start with /"):
        ctrl.send_request(sid, "GET", "api/me", "(anonymous)", "")
    with pytest.raises(UserError, match="Header line 2 is not 'Name: value'"):
        ctrl.send_request(sid, "GET", "/api/me", "(anonymous)", "", "X-Ok: 1\nno colon here")
    with pytest.raises(UserError, match="Type something to search"):
        ctrl.search(sid, "   ")
    with pytest.raises(UserError, match="Paste a unified diff"):
        ctrl.apply_diff(sid, "", editing)
    for nothing_open in ({}, "", None, {"path": 7}):
        with pytest.raises(UserError, match="Open a file"):
            ctrl.apply_edit(sid, nothing_open, "x")
    with pytest.raises(UserError, match="not a file of this app"):
        ctrl.apply_edit(sid, {"path": "../../etc/passwd"}, "x")
    assert steps(ctrl, sid) == before


def _files(ctrl, sid) -> list[str]:
    observation = ctrl.hub.step(sid, {"tool": "list_files"})
    return [entry["path"] for entry in observation.result["files"]]


def test_an_oversized_edit_is_refused_by_the_environment_and_changes_nothing(episode):
    ctrl, sid = episode
    path = next(f for f in _files(ctrl, sid) if f.endswith(".py"))
    original = ctrl.hub.current_file(sid, path)
    editing = ctrl.open_file(sid, path)["editing"]
    out = ctrl.apply_edit(sid, editing, original + "# x\n" * 200_000)
    assert "Refused" in out["refused"] and ctrl.hub.current_file(sid, path) == original
    assert ctrl.hub.state(sid).diff == ""


def test_an_edited_file_becomes_one_apply_patch_step(episode):
    ctrl, sid = episode
    path = next(f for f in _files(ctrl, sid) if f.endswith(".py"))
    editing = ctrl.open_file(sid, path)["editing"]
    edited = ctrl.hub.current_file(sid, path).rstrip("\n") + "\n# reviewed"  # editors drop the last newline
    out = ctrl.apply_edit(sid, editing, edited)
    record = ctrl.hub.record(sid)
    assert record.steps[-1].action["tool"] == "apply_patch"
    assert ctrl.hub.current_file(sid, path).endswith("# reviewed\n")
    assert "+# reviewed" in ctrl.view_diff(sid)["diff"]
    assert out["editing"] == {"path": path, "base": ctrl.hub.current_file(sid, path)}
    assert "Patched" in out["notice"]


def test_a_stale_editor_cannot_undo_a_patch(episode):
    """Open a file, apply a pasted diff to it, then press Apply edit on the editor as it was: refused,
    with the patch intact; the editor shown after the diff holds the patched file."""
    from envcore.patching import make_diff

    ctrl, sid = episode
    path = next(f for f in _files(ctrl, sid) if f.endswith(".py"))
    stale = ctrl.open_file(sid, path)["editing"]
    original = ctrl.hub.current_file(sid, path)
    fixed = original + "# fixed by a pasted diff\n"
    out = ctrl.apply_diff(sid, make_diff({path: original}, {path: fixed}), stale)
    assert out["editor"]["value"] == fixed and out["editing"] == {"path": path, "base": fixed}
    before = steps(ctrl, sid)
    with pytest.raises(UserError, match="has changed since it was opened"):
        ctrl.apply_edit(sid, stale, original + "# my other edit\n")
    assert ctrl.hub.current_file(sid, path) == fixed and steps(ctrl, sid) == before
    ctrl.apply_edit(sid, out["editing"], fixed + "# and mine\n")  # from the refreshed editor it applies
    assert ctrl.hub.current_file(sid, path) == fixed + "# and mine\n"


def test_a_response_shows_status_headers_and_body_and_joins_the_history(episode):
    ctrl, sid = episode
    user = ctrl.hub.users(sid)[0]
    out = ctrl.send_request(sid, "GET", "/api/me", user, "")
    fence, *lines, closing = out["response"].splitlines()  # shown as a code block: the app's words as text
    assert fence.startswith("```") and closing == fence
    assert lines[0].startswith("HTTP 200") and "content-type: application/json" in lines
    ctrl.send_request(sid, "GET", "/api/nothing-here", "(anonymous)", "")
    history = ctrl.send_request(sid, "GET", "/api/me", "(anonymous)", "")["history"].replace("\\", "")
    rows = [line for line in history.splitlines() if line.startswith("| ") and "GET" in line]
    assert [row.split(" | ")[1] for row in rows] == ["GET /api/me", "GET /api/nothing-here", "GET /api/me"]
    assert [row.split(" | ")[2] for row in rows] == ["anonymous", "anonymous", user]


def test_visible_tests_show_visible_probes_and_submit_reveals_the_hidden_ones(episode):
    ctrl, sid = episode
    tests = ctrl.run_tests(sid)["tests"]
    assert len(tests) and tests["visible"].all()
    out = ctrl.submit(sid)
    assert "Submitted" in out["verdict"]
    assert (~out["probes"]["visible"].astype(bool)).any()
    assert set(out["breakdown"]["component"]) >= {"security_blocked", "legit_use_broken", "steps_used"}
    again = ctrl.submit(sid)  # the environment refuses: the episode is over
    assert "Refused" in again["refused"] and "over" in again["refused"]


def test_the_watch_tab_clamps_steps_and_refuses_unknown_sets(tabs):
    ctrl = tabs["watch"]["controller"]
    left = next(name for _, name in ctrl.set_choices() if name.endswith("heuristic"))
    scenario = next(iter(ctrl.records(left)))
    total = len(ctrl.records(left)[scenario].steps)
    assert ctrl.show(left, "", scenario, 10_000)["index"]["value"] == total
    assert ctrl.step_back(left, "", scenario, 0)["index"]["value"] == 0
    with pytest.raises(UserError, match="no rollout set"):
        ctrl.pick_sets("../../etc", "")
    for press in (ctrl.live_step, ctrl.live_run):  # Next action before Start
        for sid in (None, "forged-session-id"):
            with pytest.raises(UserError, match="press Start"):
                press(sid)


def test_the_dashboard_compares_only_two_different_sets(tabs):
    ctrl = tabs["dashboard"]["controller"]
    out = ctrl.delta([], "evals/v2/noop", "evals/v2/noop", "Reward")
    assert out["delta_text"] == "Pick two different rollout sets to compare."
    assert not out["delta"].data
    out = ctrl.delta([], "evals/v2/noop", "evals/v2/heuristic", "Reward")
    assert "258 scenarios both played" in out["delta_text"] and out["delta"].data


@pytest.mark.parametrize("sets, expected, description", [
    ([("evals/v2/noop", "baseline"), ("evals/v2/heuristic", "baseline"), ("evals/v2/oracle", "validation")],
     ("evals/v2/noop", "evals/v2/heuristic"), "no trained set: the heuristic against doing nothing"),
    ([("training/tiny", "trained"), ("evals/v2/heuristic", "baseline"), ("evals/v2/noop", "baseline")],
     ("evals/v2/noop", "evals/v2/heuristic"), "training rollouts, not evaluated against a base: heuristic against noop"),
    ([("evals/v2/oracle", "validation")], (None, None), "the oracle is never a competitor"),
])
def test_the_dashboard_first_compares_the_most_telling_pair(sets, expected, description):
    from ui.artifact_sets import RolloutSet

    rollout_sets = [RolloutSet(name, Path(name), kind, name) for name, kind in sets]
    assert dashboard_tab.default_pair(rollout_sets) == expected, description


def test_an_empty_seed_draws_a_scenario_and_a_bad_seed_is_refused(tabs):
    ctrl = tabs["play"]["controller"]
    sid = None
    drawn = set()
    for _ in range(6):
        sid = ctrl.new_episode(sid, "any", "any", "any", "any", "", "", 40, "")["sid"]
        drawn.add(ctrl.hub.state(sid).scenario_id)
    assert len(drawn) > 1  # an empty seed is not seed 0 every time
    ctrl.new_episode(sid, "test", "any", "any", "any", "", "7", 40, "")
    first = ctrl.hub.state(sid).scenario_id
    ctrl.new_episode(sid, "test", "any", "any", "any", "", 7, 40, "")
    assert ctrl.hub.state(sid).scenario_id == first
    for bad in ("-1", "1.5", "seven", "9" * 30):
        with pytest.raises(UserError, match="non-negative integer"):
            ctrl.new_episode(sid, "any", "any", "any", "any", "", bad, 40, "")
    ctrl.hub.close(sid)


# ----- the failure-analysis panel ----------------------------------------------------------------------
def test_the_failure_panel_draws_the_shipped_analysis_and_links_examples_to_watch(tabs):
    dash, watch = tabs["dashboard"]["controller"], tabs["watch"]["controller"]
    out = dash.failures.draw("baselines", "Tier")
    names = {trace.name for trace in out["fail_chart"].data}
    assert {"no patch", "over-restriction", "format errors", "solved"} <= names
    assert list(out["fail_chart"].data[0].y) == ["1", "2", "3"]
    examples = out["fail_examples"]
    assert len(examples) >= 5 and set(examples["rollout set"]) <= {s for s in watch.rollout_sets()}
    row = examples.iloc[0].tolist()
    link = dash.failures.example_link(row)
    assert link == (row[-1], row[2])
    shown = watch.open_episode(*link)
    assert shown["scenario"]["value"] == row[2] and shown["left_set"]["value"] == row[-1]
    assert row[1] in shown["left_title"] and row[2] in watch.records(row[-1])  # that agent's episode is on screen
    assert dash.failures.example_link(["too", "short"]) is None
    weights = out["weights"]
    assert "planned: baselines/heuristic" in weights.columns
    assert (weights["serving now (uniform: A01_WEIGHTS unset)"] == 1.0).all()


def test_the_failure_panel_shows_the_weights_the_server_samples_with(tmp_path, shipped):
    from envcore.env.sampler import SamplingWeights
    from ui.failure_panel import NO_ANALYSIS, FailurePanel

    serving = SamplingWeights.from_json({"version": 1, "by_bug_class": {"tenant_leak": 2.5}})
    panel = FailurePanel(tmp_path, lambda: {"by_bug_class": dict(serving.by_bug_class), "by_tier": {}})
    out = panel.refresh()
    assert out["failures"] == NO_ANALYSIS and len(out["fail_chart"].data) == 0
    assert out["weights"].to_dict("records") == [{"slice": "bug class tenant_leak", "serving now": 2.5}]


def test_example_links_hold_from_any_working_directory(tabs, monkeypatch, tmp_path):
    dash = tabs["dashboard"]["controller"]
    monkeypatch.chdir(tmp_path)
    examples = dash.failures.example_table(dash.failures.load("baselines"))
    assert examples["rollout set"].str.startswith("evals/v2/").all()


def test_extra_headers_reach_the_app_as_the_agents_headers_do(episode):
    ctrl, sid = episode
    ctrl.send_request(sid, "GET", "/api/me", "(anonymous)", "", "X-Role: admin\n\n  X-Tenant-Id : t1 ")
    assert ctrl.hub.record(sid).steps[-1].action["headers"] == {"X-Role": "admin", "X-Tenant-Id": "t1"}


def test_the_play_loop_teaches_checklist_hints_and_a_card_after_submit(episode):
    ctrl, sid = episode
    out = ctrl.new_episode(sid, "any", "any", "any", "any", "ab8f867487219d4e", None, 40, "tester")
    assert "○ Reproduce the exploit" in out["checklist"] and "Next hint: Where to look" in out["hints"]
    ctrl.send_request(sid, "GET", "/api/notes/32963", "viktor.kim89", "")
    assert "✓ Reproduce the exploit" in ctrl.settle_checklist(sid)["checklist"]
    before = steps(ctrl, sid)
    hint = ctrl.take_hint(sid)
    assert "Hint 1: Where to look" in hint["hints"] and "0.10" in hint["notice"] and steps(ctrl, sid) == before
    card = ctrl.submit(sid)
    assert "What was wrong" in card["debrief"] and "CWE" in card["debrief"] and "reference fix" in card["debrief"]
    assert "not allowed to view this note" in card["reference_fix"]
    with pytest.raises(UserError, match="episode is over"):
        ctrl.take_hint(sid)


def test_the_episode_log_lists_every_step_when_opened(episode):
    ctrl, sid = episode
    ctrl.search(sid, "user")
    ctrl.send_request(sid, "GET", "/nowhere", "(anonymous)", "")
    log = ctrl.episode_log(sid)["log"]
    assert list(log["tool"]) == ["search_code", "http_request"]
    assert list(ctrl.episode_log(None)["log"].columns) == play_tab.LOG_COLUMNS


# ----- what a newcomer meets in Play ---------------------------------------------------------------------
def test_every_split_of_the_cache_can_be_chosen(tabs, hub):
    """train, val and test were written into the page; test_styles and external (held-out splits of the
    shipped cache) could not be chosen. The dropdown lists the cache's splits, read from its manifest."""
    manifest_splits = {row["split"] for row in hub.runtime.cache.rows}
    choices = [value for _, value in tabs["play"]["split"].choices]
    assert choices == [play_tab.ANY, *hub.runtime.cache.splits()]
    assert set(choices) == {play_tab.ANY} | manifest_splits >= {"test_styles", "external"}
    assert tabs["play"]["split"].value == "test"


def test_a_new_visitors_first_episode_is_a_friendly_tier_1_one_file_scenario(tabs, hub):
    ctrl = tabs["play"]["controller"]
    cache = hub.runtime.cache
    first = play_tab.first_scenario(cache)
    assert first == play_tab.first_scenario(cache)  # the same for every visitor
    row = cache.row(first)
    code = [path for path in cache.load(first).files if path.endswith(".py")]
    assert row["tier"] == 1 and len(code) == 1 and row["split"] == "test"  # held out, as the agents' evaluation

    out = ctrl.new_episode(None, "test", "any", "any", "any", "", "", 40, "")  # everything as the page shows it
    sid = out["sid"]
    try:
        assert ctrl.hub.state(sid).scenario_id == first and out["notice"] == play_tab.FIRST_EPISODE_NOTE
        later = ctrl.new_episode(sid, "test", "any", "any", "any", "", "", 40, "")  # later: the visitor's choices
        assert "notice" not in later
        chosen = ctrl.new_episode(sid, "test_styles", "any", "any", "any", "", "", 40, "")
        assert ctrl.hub.runtime.cache.split_of(ctrl.hub.state(sid).scenario_id) == "test_styles"
        assert "notice" not in chosen
    finally:
        ctrl.hub.close(sid)
    tier_two = ctrl.new_episode(None, "test", "any", "2", "any", "", "", 40, "")  # a choice made: followed at once
    assert cache.row(ctrl.hub.state(tier_two["sid"]).scenario_id)["tier"] == 2 and "notice" not in tier_two
    ctrl.hub.close(tier_two["sid"])


def _open_code_file(ctrl, sid) -> tuple[str, str, dict]:
    """The app's longest Python file, opened: (path, its text, the editor's state)."""
    path = max((f for f in _files(ctrl, sid) if f.endswith(".py")), key=lambda f: len(ctrl.hub.current_file(sid, f)))
    out = ctrl.open_file(sid, path)
    return path, out["editor"]["value"], out["editing"]


def test_a_pasted_diff_keeps_the_players_unapplied_edit_on_top_of_the_patched_file(episode):
    from envcore.patching import make_diff

    ctrl, sid = episode
    path, original, editing = _open_code_file(ctrl, sid)
    typed = original + "# my note, not applied yet\n"  # the player's unapplied edit, at the end
    lines = original.splitlines(keepends=True)
    patched = "".join(["# a pasted fix at the top\n", *lines])
    out = ctrl.apply_diff(sid, make_diff({path: original}, {path: patched}), editing, typed)
    assert ctrl.hub.current_file(sid, path) == patched  # the diff applied
    assert out["editor"]["value"] == patched + "# my note, not applied yet\n"  # and the edit kept on top
    assert out["editing"]["base"] == patched and "kept on top of the patched file" in out["notice"]
    ctrl.apply_edit(sid, out["editing"], out["editor"]["value"])  # it applies from there
    assert ctrl.hub.current_file(sid, path).endswith("# my note, not applied yet\n")


def test_a_pasted_diff_on_the_lines_being_edited_sets_the_edit_aside_never_drops_it(episode):
    from envcore.patching import make_diff

    ctrl, sid = episode
    path, original, editing = _open_code_file(ctrl, sid)
    lines = original.splitlines(keepends=True)
    typed = "".join([*lines[:3], "# mine instead\n", *lines[4:]])
    theirs = "".join([*lines[:3], "# the diff's instead\n", *lines[4:]])
    out = ctrl.apply_diff(sid, make_diff({path: original}, {path: theirs}), editing, typed)
    assert out["editor"]["value"] == theirs == ctrl.hub.current_file(sid, path)  # the file as it is now
    aside = out["set_aside"]
    assert aside["visible"] and typed in aside["value"] and path in aside["label"]  # the player's text, kept
    assert "set aside under the editor" in out["notice"]
    assert out["editing"]["set_aside"] == [[path, typed]]


def test_a_diff_to_another_file_leaves_the_editor_as_the_player_left_it(episode):
    ctrl, sid = episode
    path, original, editing = _open_code_file(ctrl, sid)
    typed = original + "# mine\n"
    new_file = "--- /dev/null\n+++ b/notes_for_review.py\n@@ -0,0 +1 @@\n+# a new file\n"
    out = ctrl.apply_diff(sid, new_file, editing, typed)
    assert "editor" not in out and out["editing"]["base"] == original  # nothing replaced the player's text
    assert "stays in the editor" in out["notice"]


def test_opening_another_file_keeps_the_unapplied_edit_as_a_draft(episode):
    ctrl, sid = episode
    code = [f for f in _files(ctrl, sid) if f.endswith(".py")]
    assert len(code) >= 2, "SCENARIO's app has several files"
    first, second = code[:2]
    opened = ctrl.open_file(sid, first)
    typed = opened["editor"]["value"] + "# draft\n"
    out = ctrl.open_file(sid, second, opened["editing"], typed)
    assert out["editor"]["label"] == second and f"open {first} again" in out["notice"]
    back = ctrl.open_file(sid, first, out["editing"], out["editor"]["value"])
    assert back["editor"]["value"] == typed and "is back" in back["notice"]
    assert "drafts" not in back["editing"]


def test_new_episode_and_submit_ask_first_when_the_editor_holds_unapplied_text(episode):
    ctrl, sid = episode
    path, original, editing = _open_code_file(ctrl, sid)
    typed = original + "# not applied\n"
    before = ctrl.hub.state(sid)
    asked = ctrl.new_episode(sid, "any", "any", "any", "any", SCENARIO, None, 40, "tester", editing, typed)
    assert "not applied yet" in asked["refused"] and "press New episode again" in asked["refused"]
    assert ctrl.hub.state(sid).episode_id == before.episode_id  # nothing started
    asked = ctrl.submit(sid, asked["editing"], typed)  # another question for another action
    assert "would not be graded" in asked["refused"] and not ctrl.hub.state(sid).done
    submitted = ctrl.submit(sid, asked["editing"], typed)  # the second press goes on
    assert "Submitted" in submitted["verdict"] and ctrl.hub.state(sid).done
    again = ctrl.new_episode(sid, "any", "any", "any", "any", SCENARIO, None, 40, "tester", editing, typed)
    assert "refused" not in again  # over: nothing of it can be applied any more, so nothing to ask


def test_messages_use_the_pages_words_not_the_environments(episode):
    """The environment tells an agent to "reset"; the page's button says New episode."""
    import ast
    import inspect

    ctrl, sid = episode
    ctrl.submit(sid)
    refused = ctrl.run_tests(sid)["refused"]
    assert "press New episode to start another" in refused and "reset" not in refused
    ctrl.hub.close(sid)  # the session ends (the page closed, the idle timeout ran out)
    with pytest.raises(UserError, match="press New episode") as caught:
        ctrl.take_hint(sid)
    assert "reset" not in str(caught.value)
    # every message these tabs write, as written in their code (the words the environment uses for
    # its own actions only as what PAGE_WORDS replaces)
    from ui import rollout_view
    allowed = {said for said, _ in play_tab.PAGE_WORDS}
    for module in (play_tab, watch_tab, rollout_view):
        tree = ast.parse(inspect.getsource(module))
        docstrings = {id(node.value) for node in ast.walk(tree)  # a string on its own: documentation
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if "reset" in node.value.lower() and node.value not in allowed:
                    pytest.fail(f"{module.__name__}: {node.value!r}")
