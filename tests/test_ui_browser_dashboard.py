"""The Dashboard in a real browser: ``python app.py`` in its own process (``A01_HUMAN_LOG`` pointed at
a temporary file), Debian's Chromium driven by Playwright (``executable_path``, no downloaded browser).

The headline card names the best agent with its intervals, the leaderboard's first row is that
agent and its last the oracle's validation run, toggling a dimension or a measure redraws the rates
chart (click to new chart, printed: ``pytest -s`` shows it), an episode written to the human log is
on the leaderboard the next time the tab is opened, and the charts fit a phone's width. No error
overlay, no toast, no JavaScript error. Screenshots (``build/screenshots/``) at 1400x900 and on a
phone (390x844).
"""

from __future__ import annotations

import re
import statistics

import pytest

from envcore.env.episode_log import EpisodeLogger
from tests.browser_kit import chromium, no_error_overlay, open_page, running_space, shot, skip_unless_wanted
from tests.test_ui_data import make_record

skip_unless_wanted()

CHARTS = ("dash-outcomes", "dash-rates", "dash-components", "dash-delta")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("space") / "human.jsonl"
    with running_space({"A01_HUMAN_LOG": str(log), "GRADIO_ANALYTICS_ENABLED": "False"}, timeout_s=90) as (url, _, _p):
        yield {"url": f"{url}/", "log": log}


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def open_dashboard(browser, server, viewport: dict[str, int]):
    context, page, errors = open_page(browser, server["url"], viewport)
    page.get_by_role("tab", name="Dashboard").click()
    for elem_id in CHARTS:
        page.wait_for_selector(f"#{elem_id} .js-plotly-plot .main-svg")
    page.wait_for_function("() => document.querySelector('#dash-headline').innerText.includes('Best agent')")
    return context, page, errors


@pytest.fixture
def page(browser, server):
    context, page, errors = open_dashboard(browser, server, {"width": 1400, "height": 900})
    yield page
    no_error_overlay(page)
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


LEADERBOARD_ROWS = "#dash-leaderboard [role=row]:has([role=gridcell])"
"""The leaderboard's body rows (Gradio's table is a grid of rows and cells, virtualized: only the rows
in view are in the page, and the eight here all are)."""


def leaderboard_rows(page) -> list[str]:
    rows = page.locator(LEADERBOARD_ROWS)
    return [" ".join(rows.nth(i).inner_text().split()) for i in range(rows.count())]


def chart_title(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} .gtitle").first.text_content() or ""


def click_and_time(page, label, elem_id: str, expected: str) -> float:
    """Click ``label`` and wait until the chart ``elem_id``'s title reads ``expected``: milliseconds
    from the click's pointerdown to the new title, in the page's own clock."""
    page.evaluate("() => { window.__a01_click = null; document.addEventListener('pointerdown', "
                  "() => { window.__a01_click = performance.now(); }, {once: true, capture: true}); }")
    label.click()
    page.wait_for_function("([id, text]) => (document.querySelector(`#${id} .gtitle`) || {}).textContent"
                           "?.includes(text)", arg=[elem_id, expected], polling="raf")
    return page.evaluate("() => performance.now() - window.__a01_click")


def test_the_headline_card_names_the_best_agent_with_its_intervals(page):
    headline = " ".join(page.locator("#dash-headline").inner_text().split())
    assert "Broken Access Control" in headline and "held-out scenarios" in headline
    best = re.search(r"Best agent: Heuristic baseline \(scripted\) \(evals/v2\): full fixes (\d+)% \[(\d+)%, (\d+)%\], "
                     r"mean reward \+0\.\d{3} \[\+0\.\d{3}, \+0\.\d{3}\], n = 258\.", headline)
    assert best, headline
    low, mean, high = int(best[2]), int(best[1]), int(best[3])
    assert low <= mean <= high and low < high  # an interval, not a point
    assert "only a scripted baseline" in headline
    assert "Validation: Oracle" in headline and "not ranked" in headline
    assert "Human players:" in headline
    shot(page, "dashboard-headline", full_page=False)


def test_the_leaderboards_first_row_is_the_best_agent_and_the_oracle_is_apart(page):
    page.wait_for_selector(f"{LEADERBOARD_ROWS} >> nth=3")
    rows = leaderboard_rows(page)
    assert re.match(r"1 Heuristic baseline \(scripted\) \+0\.\d{3} \d+% \[\+0\.\d{3}, \+0\.\d{3}\] \[\d+%, \d+%\]",
                    rows[0]), rows[0]
    assert rows[-1].startswith("– Oracle: the reference fix") and "validation: plays the reference fix" in rows[-1]
    assert any("pipeline check, not a skilled agent" in row for row in rows)
    assert not any("evals/v2/" in row for row in rows)  # friendly names, not folders


def test_toggling_a_dimension_or_a_measure_redraws_the_rates_chart(page):
    before = {elem_id: page.locator(f"#{elem_id} .main-svg").first.inner_html() for elem_id in ("dash-outcomes",
                                                                                                "dash-components")}
    dimension, metric = page.locator("#dash-dimension"), page.locator("#dash-metric")
    times = []
    for _ in range(2):
        for label, title in (("Tier", "Full-fix rate by tier"), ("Domain", "Full-fix rate by domain"),
                             ("Bug class", "Full-fix rate by bug class")):
            times.append(click_and_time(page, dimension.get_by_label(label, exact=True), "dash-rates", title))
    for label, title in (("Mean reward", "Mean reward by bug class"), ("Partial fix", "Partial-fix rate by bug class"),
                         ("Full fix", "Full-fix rate by bug class")):
        times.append(click_and_time(page, metric.get_by_label(label, exact=True), "dash-rates", title))
    print(f"\ndashboard toggle, click -> new rates chart (ms): p50 {statistics.median(times):.0f}, "
          f"max {max(times):.0f}, each {[round(t) for t in times]}")
    page.locator("#dash-dimension").get_by_label("Tier", exact=True).click()
    page.wait_for_function("() => document.querySelector('#dash-rates .gtitle').textContent.includes('by tier')")
    bars = page.locator("#dash-rates .js-plotly-plot .trace.bars")
    assert bars.count() >= 5  # one trace per set shown
    after = {elem_id: page.locator(f"#{elem_id} .main-svg").first.inner_html() for elem_id in before}
    assert after == before  # a toggle redraws the rates chart only
    shot(page, "dashboard")


def test_the_charts_fit_a_phone(browser, server):
    context, page, errors = open_dashboard(browser, server, {"width": 390, "height": 844})
    try:
        for elem_id in CHARTS:
            box = page.locator(f"#{elem_id} .main-svg").first.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (elem_id, box)
        ticks = page.locator("#dash-outcomes .ytick")
        assert any("Heuristic baseline" in (ticks.nth(i).text_content() or "") for i in range(ticks.count()))
        shot(page, "dashboard-phone-top", full_page=False)
        shot(page, "dashboard-phone")
        no_error_overlay(page)
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def test_an_episode_a_visitor_plays_is_on_the_dashboard_when_the_tab_is_opened_again(page, server):
    assert not any("zoe" in row for row in leaderboard_rows(page))
    record = make_record("0082e5962f12344f", agent="human:zoe", reward=0.98, tier=3, bug_class="broken_authz_logic")
    EpisodeLogger(server["log"]).write(record.model_copy(update={"source": "human"}))  # as the Play tab logs it
    page.get_by_role("tab", name="Watch").click()
    page.get_by_role("tab", name="Dashboard").click()
    page.wait_for_function("() => document.querySelector('#dash-leaderboard').innerText.includes('zoe')")
    assert leaderboard_rows(page)[0].startswith("1 zoe (human player) +0.980 100%")
    headline = " ".join(page.locator("#dash-headline").inner_text().split())
    assert "Human players (1 player, all together): full fixes 100%" in headline and "best: zoe" in headline
    page.wait_for_function("() => document.querySelector('#dash-outcomes').textContent.includes('zoe')")
    shot(page, "dashboard-after-play")
