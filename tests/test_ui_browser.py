"""The Space in a real browser: ``python app.py`` in its own process, Debian's Chromium driven by
Playwright (``executable_path``, no downloaded browser).

A person plays an episode by hand to a reward breakdown (opening a file, editing it in the code
editor, sending a request as a seeded user, running the visible tests, submitting), two browsers
at once get separate episodes, a rollout is opened and stepped through side by side with another
set, an agent is run live, and the dashboard draws its charts. The default run plays the episode by
hand (the browser smoke test); the rest, and the other browser suites, are marked slow (each of their
controllers is tested by default without a browser). Screenshots are saved under
``build/screenshots/`` (``A01_SCREENSHOT_DIR`` to change). Chromium must be installed (``apt-get
install chromium``; ``.ci/run`` does it); set ``A01_BROWSER_TESTS=skip`` to leave these tests out
knowingly on a machine without it.
"""

from __future__ import annotations

import pytest

from envcore.cache import ScenarioCache
from envcore.env.episode_log import read_episodes
from envcore.patching import apply_patch
from tests.browser_kit import (
    ROOT,
    TIMEOUT_MS,
    choose,
    chromium,
    no_error_overlay,
    open_page,
    running_space,
    send_request,
    shot,
    skip_unless_wanted,
    textbox,
    wait_text,
)


def _hand_played_scenario() -> str:
    """A test-split, tier-1 mass-assignment scenario of the newest shipped cache whose reference fix
    edits one file (a person retypes that file in the editor)."""
    cache = ScenarioCache.open(None)
    for scenario_id in cache.ids(split="test", tier=1, bug_class="mass_assignment"):
        bundle = cache.load(scenario_id)
        fixed = apply_patch(bundle.files, bundle.reference_fix)
        if sum(fixed[p] != bundle.files.get(p) for p in fixed) == 1:
            return scenario_id
    raise LookupError("no such scenario in the shipped cache")


SCENARIO = _hand_played_scenario()
skip_unless_wanted()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("space") / "human.jsonl"
    with running_space({"A01_HUMAN_LOG": str(log)}, timeout_s=90) as (url, _port, _process):
        yield {"url": f"{url}/", "log": log}


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser, server):
    context, page, errors = open_page(browser, server["url"], {"width": 1440, "height": 900})
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def new_episode(page, scenario: str) -> None:
    textbox(page, "play-scenario").fill(scenario)
    page.click("#play-new")
    page.wait_for_function(
        "s => document.querySelector('#play-status').innerText.includes(s)", arg=scenario)


def status(page) -> str:
    return page.locator("#play-status").inner_text()


def wait_status(page, text: str) -> None:
    page.wait_for_function("t => document.querySelector('#play-status').innerText.includes(t)", arg=text)


def test_a_person_plays_an_episode_by_hand_to_a_reward_breakdown(page, server):
    bundle = ScenarioCache.open(None).load(SCENARIO)
    fixed = apply_patch(bundle.files, bundle.reference_fix)
    [path] = [p for p in fixed if fixed[p] != bundle.files[p]]

    new_episode(page, SCENARIO)
    assert "Access policy" in page.locator("#play-task").inner_text()

    page.get_by_role("tab", name="Code").click()
    page.locator("#play-files").get_by_label(path, exact=True).check()
    wait_status(page, "step 1 of 60")
    editor = page.locator("#play-editor .cm-content")
    editor.wait_for()
    page.wait_for_function("t => document.querySelector('#play-editor .cm-content').innerText.includes(t)",
                           arg=bundle.files[path].splitlines()[0])
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(fixed[path])
    page.click("#play-apply")
    wait_status(page, "phase **patched**".replace("**", ""))

    page.get_by_role("tab", name="HTTP").click()
    user = bundle.users[0].username
    response = send_request(page, "/api/me", user)
    assert "HTTP 200" in response and user in response, response

    page.get_by_role("tab", name="Tests").click()
    page.click("#play-tests")
    wait_status(page, "step 4 of 60")

    page.get_by_role("tab", name="Submit").click()
    page.click("#play-submit")
    page.wait_for_function("() => document.querySelector('#play-verdict').innerText.includes('Submitted')")
    verdict = page.locator("#play-verdict").inner_text()
    assert "FULL" in verdict, verdict
    breakdown = page.locator("#play-breakdown").inner_text()
    assert "security_blocked" in breakdown and "legit_use_broken" in breakdown
    shot(page, "play-submitted")

    records = [r for r in read_episodes(server["log"]) if r.scenario_id == SCENARIO and r.outcome == "submitted"]
    assert records and records[-1].source == "human" and records[-1].agent_id.startswith("human:")
    assert records[-1].reward_breakdown["resolution"] == "full"
    assert [s.action["tool"] for s in records[-1].steps] == ["read_file", "apply_patch", "http_request",
                                                             "run_tests", "submit"]


def message(page, elem_id: str, text: str) -> str:
    """Wait until the message beside a control says ``text``; what it says."""
    wait_text(page, elem_id, text)
    return page.locator(f"#{elem_id}").inner_text()


@pytest.mark.slow  # the controllers' messages are tested by default in test_ui_controllers
def test_every_mistake_is_a_message_beside_its_control_and_the_episode_survives(page):
    from envcore.patching import make_diff

    bundle = ScenarioCache.open(None).load(SCENARIO)
    path = next(p for p in bundle.files if p.endswith(".py") and "/routers/" in p) if any(
        "/routers/" in p for p in bundle.files) else next(p for p in bundle.files if p.endswith(".py"))

    # A tool before New episode: each says so beside its own button.
    page.get_by_role("tab", name="HTTP").click()
    page.click("#play-send")
    assert "New episode" in message(page, "play-http-msg", "New episode")
    page.get_by_role("tab", name="Tests").click()
    page.click("#play-tests")
    message(page, "play-tests-msg", "New episode")
    page.get_by_role("tab", name="Submit").click()
    page.click("#play-submit")
    message(page, "play-submit-msg", "New episode")
    no_error_overlay(page)

    new_episode(page, SCENARIO)
    before = status(page)
    assert "step 0 of 60" in before

    # A seed that is not a number: the running episode stays.
    textbox(page, "play-seed").fill("seven")
    page.click("#play-new")
    message(page, "play-new-msg", "non-negative integer")
    assert status(page) == before
    textbox(page, "play-seed").fill("")

    # Invalid JSON in a body: nothing is sent, the text stays in the box.
    page.get_by_role("tab", name="HTTP").click()
    textbox(page, "play-path").fill("/api/me")
    body = page.locator("#play-body .cm-content")
    body.click()
    page.keyboard.insert_text('{"role": admin}')
    page.click("#play-send")
    assert "line 1, column 10" in message(page, "play-http-msg", "not valid JSON")
    assert status(page) == before and '{"role": admin}' in body.inner_text()
    # A path without its slash.
    textbox(page, "play-path").fill("api/me")
    page.click("#play-send")
    message(page, "play-http-msg", "must start with /")
    assert status(page) == before

    # An empty search.
    page.get_by_role("tab", name="Code").click()
    page.click("#play-search")
    message(page, "play-search-msg", "Type something")
    # Apply edit with no file open.
    page.click("#play-apply")
    message(page, "play-code-msg", "Open a file")
    assert status(page) == before
    no_error_overlay(page)

    # A pasted diff refreshes the open editor; the editor then cannot undo it.
    page.locator("#play-files").get_by_label(path, exact=True).check()
    wait_status(page, "step 1 of 60")
    page.get_by_text("Paste a unified diff instead").click()
    marker = "# fixed from a pasted diff"
    textbox(page, "play-patch").fill(make_diff({path: bundle.files[path]}, {path: bundle.files[path] + marker + "\n"}))
    page.click("#play-apply-diff")
    message(page, "play-patch-msg", "Patched")
    page.locator("#play-editor .cm-content").click()
    page.keyboard.press("Control+End")  # the editor draws only the lines in view; the marker is the last
    page.wait_for_function("t => document.querySelector('#play-editor .cm-content').innerText.includes(t)", arg=marker)
    assert "fixed from a pasted diff" in page.locator("#play-diff").inner_text()
    page.click("#play-apply")
    message(page, "play-code-msg", "nothing to apply")
    assert "step 2 of 60" in status(page) and "patched" in status(page)

    # Watch: Next action before Start.
    page.get_by_role("tab", name="Watch").click()
    page.get_by_text("Run an agent live on this scenario").click()
    page.click("#watch-live-step")
    message(page, "watch-live-msg", "press Start")
    no_error_overlay(page)
    shot(page, "mistakes-are-messages")


@pytest.mark.slow  # separate sessions are tested by default in test_sessions
def test_two_browser_sessions_play_separate_episodes(browser, server):
    pages = []
    for _ in range(2):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(server["url"])
        page.wait_for_selector("#play-new")
        pages.append(page)
    ids = ScenarioCache.open(None).ids(split="test")
    first, second = ids[0], ids[1]
    new_episode(pages[0], first)
    new_episode(pages[1], second)
    pages[0].get_by_role("tab", name="Tests").click()
    pages[0].click("#play-tests")
    wait_status(pages[0], "step 1 of 60")
    pages[1].reload()
    pages[1].wait_for_selector("#play-new")
    new_episode(pages[1], second)
    assert first in status(pages[0]) and "step 1 of 60" in status(pages[0])
    assert second in status(pages[1]) and "step 0 of 60" in status(pages[1])
    for index, page in enumerate(pages):
        shot(page, f"two-sessions-{index + 1}")
        page.context.close()


@pytest.mark.slow  # Watch's controller runs by default in test_ui_watch
def test_a_rollout_is_opened_and_stepped_through_side_by_side(page):
    page.get_by_role("tab", name="Watch").click()
    choose(page, "watch-left-set", "Heuristic baseline (scripted) · evals/v2")
    choose(page, "watch-right-set", "No-op (submits the app unchanged) · evals/v2")
    page.wait_for_function("() => document.querySelector('#watch-left-title').innerText.includes('heuristic')")
    # one click at a time: a button's event ignores clicks while its last one is still being answered
    # (Gradio's trigger mode "once"), which a loaded machine makes long enough for a second click to land in
    page.click("#watch-forward")
    page.wait_for_function("() => document.querySelector('#watch-left-title').innerText.includes('Step 1')")
    page.click("#watch-forward")
    page.wait_for_function("() => document.querySelector('#watch-left-title').innerText.includes('Step 2')")
    assert "heuristic" in page.locator("#watch-left-title").inner_text()
    assert "noop" in page.locator("#watch-right-title").inner_text()
    assert "tool" in page.locator("#watch-left-action").inner_text()
    page.click("#watch-back")
    page.wait_for_function("() => document.querySelector('#watch-left-title').innerText.includes('Step 1')")
    shot(page, "watch-side-by-side")

    # a live run plays a scenario of the cache the Space serves: one of the run made on it
    choose(page, "watch-left-set", "Heuristic baseline (scripted) · evals/v5")
    page.wait_for_function("() => document.querySelector('#watch-left-title').innerText.includes('heuristic')")
    page.get_by_text("Run an agent live on this scenario").click()
    choose(page, "watch-live-agent", "heuristic")
    page.click("#watch-live-start")
    page.wait_for_function("() => document.querySelector('#watch-live-title').innerText.includes('heuristic')")
    page.click("#watch-live-step")
    page.wait_for_function("() => document.querySelector('#watch-live-title').innerText.includes('Step 1')")
    page.click("#watch-live-run")
    page.wait_for_function("() => /reward/i.test(document.querySelector('#watch-live-outcome').innerText)")
    shot(page, "watch-live")


@pytest.mark.slow  # the charts' figures are tested by default in test_ui_dashboard
def test_the_dashboard_draws_its_charts(page):
    page.get_by_role("tab", name="Dashboard").click()
    page.locator("#dash-compare-section > button").first.click()  # a closed section: one click away
    for elem_id in ("dash-rates", "dash-components", "dash-delta"):
        page.wait_for_selector(f"#{elem_id} .js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
    assert page.locator("#dash-rates .js-plotly-plot .xtick").count() >= 5  # a column per rollout set
    leaderboard = page.locator("#dash-leaderboard").inner_text()
    assert "Heuristic baseline (scripted)" in leaderboard and "Oracle: the reference fix" in leaderboard  # in words
    page.locator("#dash-training-section > button").first.click()
    page.wait_for_selector("#dash-training-curves .js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
    assert "tiny-grpo" in page.locator("#dash-training").inner_text()  # the shipped pipeline demonstration
    page.locator("#dash-dimension").get_by_label("Tier").check()
    page.wait_for_function("() => /by tier/i.test(document.querySelector('#dash-rates').textContent)")
    shot(page, "dashboard")


@pytest.fixture(scope="module")
def trained_space(training_run):
    """The Space serving the artifacts of a training run made by this test session."""
    env = {"A01_ARTIFACTS": str(training_run["root"]), "A01_HUMAN_LOG": str(training_run["root"] / "human.jsonl")}
    with running_space(env, timeout_s=90) as (url, _port, _process):
        yield f"{url}/"


@pytest.mark.slow  # a second Space, on a training run
def test_the_training_panel_draws_the_curves_of_a_fresh_run(browser, trained_space, training_run):
    context, page, errors = open_page(browser, trained_space, {"width": 1440, "height": 1200})
    page.get_by_role("tab", name="Dashboard").click()
    for section in ("dash-training-section", "dash-compare-section"):  # closed sections: one click away
        page.locator(f"#{section} > button").first.click()
    page.wait_for_selector("#dash-training-curves .js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
    page.locator("#dash-training-curves").scroll_into_view_if_needed()
    lines = page.locator("#dash-training-curves .js-plotly-plot .trace.scatter")
    assert lines.count() == 4  # reward, full fix, partial and format errors for the one run
    text = page.locator("#dash-training").inner_text()
    assert training_run["name"] in text and "per GRPO step" in text
    legend = page.locator("#dash-training-curves .legend").text_content() or ""
    assert training_run["name"] in legend
    # with no heuristic run here, the adapter's evaluation is compared with the base model's first
    page.wait_for_function("() => /test-grpo after training.* against test-grpo's base model.* on 2 scenarios/"
                           ".test(document.querySelector('#dash-delta-text').innerText)")  # the sets in words
    shot(page, "dashboard-training")
    # the Watch tab offers the adapter's evaluation rollouts
    page.get_by_role("tab", name="Watch").click()
    choose(page, "watch-left-set", "test-grpo after training · held-out eval · pipeline check, not a skilled agent")
    page.wait_for_function("() => document.querySelector('#watch-left-title').innerText.includes('test-grpo')")
    page.click("#watch-forward")
    page.wait_for_function("() => document.querySelector('#watch-left-title').innerText.includes('Step 1')")
    assert "reply" in page.locator("#watch-left-title").inner_text()  # the model's raw reply, shown as text
    shot(page, "watch-trained")
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.mark.slow  # the dashboard's panels are tested by default in test_ui_dashboard
def test_the_failure_panel_draws_the_shipped_analysis_and_opens_an_example_in_watch(page):
    page.get_by_role("tab", name="Dashboard").click()
    page.locator("#dash-failures-section > button").first.click()  # a closed section: one click away
    page.wait_for_selector("#dash-fail-chart .js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
    page.locator("#dash-fail-chart").scroll_into_view_if_needed()
    assert page.locator("#dash-fail-chart .js-plotly-plot .trace.bars").count() >= 5  # one trace per category
    assert "baselines" in page.locator("#dash-failures").inner_text()
    weights = page.locator("#dash-weights").inner_text()
    assert "planned: baselines/heuristic" in weights and "tenant_leak" in weights
    page.locator("#dash-fail-dimension").get_by_label("Agent").check()
    page.wait_for_function("() => /by agent/i.test(document.querySelector('#dash-fail-chart').textContent)")
    shot(page, "dashboard-failures")
    import json

    analysis = json.loads((ROOT / "artifacts/feedback/baselines/analysis.json").read_text())
    example = analysis["examples"]["wrong_site"][0]
    page.locator("#dash-fail-examples").get_by_text(example["detail"], exact=True).first.click()
    page.wait_for_function("s => document.querySelector('#watch-scenario') && "
                           "document.querySelector('#watch-scenario').offsetParent !== null && "
                           "document.querySelector('#watch-scenario input').value.includes(s)",
                           arg=example["scenario_id"][:8])
    assert example["agent"] in page.locator("#watch-left-title").inner_text()
    shot(page, "watch-from-failure-example")
