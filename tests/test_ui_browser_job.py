"""A from-scratch job's results, imported, in the Space: a real browser on ``python app.py`` serving an
artifacts folder that holds only the smoke job's run (``job run --preset smoke``, then ``job import``).

What a visitor meets: the training panel draws both stages' curves (SFT's loss, GRPO's reward) and the
run's base → SFT → SFT+GRPO table; Watch opens on the job's final model against its untrained base,
each side saying what it is, with the tiny model's caveat. Screenshots in ``build/screenshots/``.
"""

from __future__ import annotations

import pytest

from tests.browser_kit import (TIMEOUT_MS, chromium, no_error_overlay, open_page, running_space, shot,
                               skip_unless_wanted, text_of, wait_text)

skip_unless_wanted()

pytestmark = pytest.mark.slow  # a second Space on the smoke job; the job itself runs by default in test_scratch_job


@pytest.fixture(scope="module")
def job_space(smoke_job):
    _, artifacts, _ = smoke_job
    env = {"A01_ARTIFACTS": str(artifacts), "A01_HUMAN_LOG": str(artifacts.parent / "human.jsonl")}
    with running_space(env, timeout_s=120) as (url, _port, _process):
        yield f"{url}/"


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.mark.parametrize("viewport, name", [({"width": 1400, "height": 1000}, "job-dashboard"),
                                            ({"width": 390, "height": 844}, "job-dashboard-phone")],
                         ids=["desktop", "phone"])
def test_the_training_panel_shows_an_imported_jobs_curves_and_stage_table(browser, job_space, viewport, name):
    context, page, errors = open_page(browser, job_space, viewport)
    page.get_by_role("tab", name="Dashboard").click()
    page.locator("#dash-training-section > button").first.click()  # a closed section: one click away
    page.wait_for_selector("#dash-training-curves .js-plotly-plot .main-svg", timeout=TIMEOUT_MS)
    page.locator("#dash-training-curves").scroll_into_view_if_needed()
    runs = page.locator("#dash-train-runs").inner_text()
    assert "smoke-sft" in runs and "smoke" in runs.replace("smoke-sft", "")  # both stages' curves, drawn
    assert page.locator("#dash-training-curves .js-plotly-plot .trace.scatter").count() >= 4
    text = page.locator("#dash-training").inner_text()
    assert "smoke: base → SFT → SFT+GRPO" in text and "test_styles" in text and "external" in text
    assert "SFT stage" in text and "per GRPO step" in text
    no_error_overlay(page)
    shot(page, name)
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_watch_opens_on_the_jobs_final_model_against_its_untrained_base(browser, job_space):
    context, page, errors = open_page(browser, job_space, {"width": 1400, "height": 900})
    page.get_by_role("tab", name="Watch").click()
    wait_text(page, "watch-left-title", "smoke-base")
    wait_text(page, "watch-right-title", "llm:smoke")
    assert "smoke base model (untrained)" in text_of(page, "watch-left-about")
    right = text_of(page, "watch-right-about")
    assert "smoke after SFT+GRPO" in right and "A tiny model" in right  # the toy model says what it is
    page.click("#watch-forward")
    wait_text(page, "watch-left-title", "Step 1")
    no_error_overlay(page)
    shot(page, "job-watch")
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
