"""The public Space against anonymous visitors: each test is named after the attack it defeats.

* **Markup.** A human play log is written by anonymous visitors and shown to everybody in Watch and on
  the dashboard; agent logs carry whatever a model wrote. A log (and the failure analysis made from it)
  whose nickname, actions, observations, response bodies, load errors and probe failures carry HTML,
  scripts, Markdown images and links, autolinks, entities, LaTeX and table-breaking pipes and newlines
  must show that text literally: through the controllers (the Markdown they return, rendered by a
  CommonMark renderer that passes raw HTML through, holds no element from the payload; figures and
  toasts hold it escaped) and in a real browser (no element from the payload in the DOM, no script
  run, no request to the payload's host).
* **Uploads and bodies.** The page takes no files: Gradio's upload routes are refused and write
  nothing; JSON bodies (``/step``, ``/reset``, ``/mcp``, Gradio's queue) and WebSocket messages
  (``/ws``) over their caps are refused, against a running ``python app.py``.
* **Slots.** One client (one address) cannot hold every ``/ws`` session or every play session; a
  second client still gets one; ``X-Forwarded-For`` counts only from a trusted proxy.
* **Growth.** The human play log stays under its cap on disk; the page keeps a bounded number of
  browser sessions; the dashboard's and Watch's caches do not grow with what a visitor sends.
"""

from __future__ import annotations

import html
import json
import re
import time
import uuid
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import gradio as gr
import httpx
import pytest
from markdown_it import MarkdownIt

from envcore.cache import ScenarioCache
from envcore.env.environment import Runtime
from envcore.env.episode_log import EpisodeLogger, EpisodeRecord, StepEntry, read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.patching import make_diff
from envcore.server.sessions import SessionHub
from tests.browser_kit import SHOTS, TIMEOUT_MS, chromium, running_space, text_of, wait_text
from ui import dashboard_tab, play_tab, rollout_view, watch_tab

ROOT = Path(__file__).resolve().parents[1]
SCENARIO, FORGED_SCENARIO = ScenarioCache.open().ids(split="test")[:2]
"""Scenarios of the cache the Space serves: one a visitor plays, one a forged record names."""

# ----- payloads ------------------------------------------------------------------------------------
IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=2</script>"
SVG = '<svg onload="window.__pwned=3"></svg>'
MD_IMAGE = "![x](http://evil.invalid/pixel.png)"
MD_LINK = "[click](javascript:window.__pwned=4)"
ANCHOR = '<a href="http://evil.invalid/a">link</a>'
AUTOLINK = "http://evil.invalid/auto www.evil.invalid someone@evil.invalid"
ENTITY = "&lt;b&gt;entity&lt;/b&gt; &amp;amp;"
LATEX = "$$\\href{http://evil.invalid/k}{tex}$$"
TABLE = "| a | b |\n| --- | --- |\n| c | d |"
BLOCKS = "# heading\n***\n> quote `tick` ``"
ONE_LINE = (IMG, SCRIPT, SVG, MD_IMAGE, MD_LINK, ANCHOR, AUTOLINK, ENTITY, LATEX)
PAYLOAD = "\n".join((*ONE_LINE, TABLE, BLOCKS))
"""Every payload in one text (lines: a table and block markup need their own)."""
INLINE = " ".join(ONE_LINE)
"""The single-line payloads in one line (a nickname, a tool name, a status)."""


def normalized(text: str) -> str:
    return " ".join(text.split())


# ----- the logs an attacker leaves behind ------------------------------------------------------------
def play_hostile_human_episode(hub: SessionHub, nickname: str) -> None:
    """A visitor's episode, played through the facade exactly as the Play tab plays it: every action
    carries the payloads, the patched app answers with them, and the app it submits fails to load with
    them in its error."""
    sid = hub.open()
    hub.reset(sid, scenario=SCENARIO, agent_id=f"human:{nickname}")
    module, app = hub.runtime.cache.load(SCENARIO).entrypoint.split(":")
    path = module.replace(".", "/") + ".py"
    main = hub.current_file(sid, path)
    assert main is not None
    hub.step(sid, {"tool": INLINE})  # an unknown tool: refused, logged as sent
    hub.step(sid, {"tool": "read_file", "path": f"app/{IMG}.py"})
    hub.step(sid, {"tool": "search_code", "query": MD_LINK})
    echo = (main + "\n\nfrom fastapi.responses import PlainTextResponse as _Plain\n\n\n"
            f"@{app}.get('/echo')\ndef _echo():\n    return _Plain({PAYLOAD!r})\n")
    hub.step(sid, {"tool": "apply_patch", "diff": make_diff({path: main}, {path: echo})})
    hub.step(sid, {"tool": "http_request", "method": "GET", "path": "/echo"})
    hub.step(sid, {"tool": "http_request", "method": "POST", "path": f"/api/{ANCHOR}",
                   "json_body": {"note": PAYLOAD}})
    broken = echo + f"\nraise RuntimeError({INLINE!r})\n"
    hub.step(sid, {"tool": "apply_patch", "diff": make_diff({path: echo}, {path: broken})})
    hub.step(sid, {"tool": "submit"})
    hub.close(sid)


def forged_record(agent_id: str, *, source: str, scenario: str = SCENARIO) -> EpisodeRecord:
    """A record no code of this project writes (a log from elsewhere, an older version, a model that
    wrote markup everywhere it could): the viewer must not trust the writer."""
    status = f"200 {IMG}"
    steps = [
        StepEntry(step=1, action={"tool": "reply", "text": PAYLOAD},
                  observation={"tool": "http_request", "text": PAYLOAD, "error": None,
                               "result": {"status": status, "body": PAYLOAD}}, elapsed_ms=1.0),
        StepEntry(step=2, action={"tool": "http_request", "method": f"GET {SCRIPT}", "path": f"/{MD_IMAGE}",
                                  "as_user": ANCHOR, "json_body": {"x": PAYLOAD}},
                  observation={"tool": "http_request", "text": PAYLOAD, "error": PAYLOAD,
                               "result": {"error": PAYLOAD}}, elapsed_ms=1.0),
        StepEntry(step=3, action={"tool": INLINE}, observation={"tool": INLINE, "text": "", "error": PAYLOAD},
                  elapsed_ms=1.0),
    ]
    probe = {"probe_id": INLINE, "kind": "security", "visible": True, "passed": False,
             "expected": [PAYLOAD], "got": [PAYLOAD], "failures": [PAYLOAD]}
    return EpisodeRecord(
        episode_id=uuid.uuid4().hex, agent_id=agent_id, source=source, scenario_id=scenario,
        scenario_hash="0" * 64, cache_version="v1", bug_class=f"mass_assignment {IMG}", tier=1, split="test", seed=0,
        started_at=time.time(), ended_at=time.time(), outcome="submitted", max_steps=30, steps=steps,
        diff=PAYLOAD,
        verification={"outcome": "load_error", "resolution": INLINE, "load_error": PAYLOAD,
                      "infrastructure_error": PAYLOAD, "security": {"passed": IMG, "total": 1},
                      "regression": {"passed": 0, "total": 1}, "trap": {"passed": 0, "total": 0},
                      "probes": [probe]},
        reward=-0.5,
        reward_breakdown={"reward": -0.5, "resolution": INLINE,
                          "components": [{"name": INLINE, "value": -0.5, "measured": 1.0, "detail": PAYLOAD}]},
    )


@pytest.fixture(scope="module")
def hostile_artifacts(tmp_path_factory, shipped, sandbox) -> Path:
    """An artifacts folder as a public Space accumulates it: a human play log written by a hostile
    visitor (and one record of it not written by this code), an agent's evaluation log full of markup,
    and the failure analysis an operator made from both."""
    from envcore.feedback.analysis import analyze

    root = tmp_path_factory.mktemp("hostile-artifacts")
    human_log = root / "human" / "episodes.jsonl"
    server = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    human = Runtime(sampler=server.sampler, source="human", max_steps=40, parent=server,
                    logger=EpisodeLogger(human_log))
    hub = SessionHub(human, ttl_s=600, max_sessions=2, sweep_every_s=0)
    try:
        play_hostile_human_episode(hub, "visitor")
    finally:
        hub.shutdown()
    with EpisodeLogger(human_log) as log:  # another scenario, so Watch shows both episodes
        log.write(forged_record(f"human:{INLINE}", source="human", scenario=FORGED_SCENARIO))
    agent_log = root / "evals" / "v1" / "hostile-agent" / "episodes.jsonl"
    with EpisodeLogger(agent_log) as log:
        log.write(forged_record(INLINE, source="evaluation"))
    analysis = analyze([("human", human_log), ("hostile-agent", agent_log)], shipped)
    (root / "feedback" / "hostile").mkdir(parents=True)
    (root / "feedback" / "hostile" / "analysis.json").write_text(json.dumps(analysis))
    return root


# ----- what a Markdown renderer makes of a controller's output -----------------------------------------
class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend(attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


MARKDOWN = MarkdownIt("commonmark", {"html": True}).enable("table")
"""CommonMark with raw HTML passed through (as Gradio's renderer does before it sanitizes) and GFM tables."""
TEXT_TAGS = {"p", "strong", "em", "code", "pre", "br", "hr"}
"""What the page's own Markdown uses around a log's text; anything else came from the payload."""
OUR_ATTRIBUTES = {("class", "language-json")}
"""The one attribute the page's Markdown makes: a JSON request body's fence."""


def render(markdown: str) -> _Elements:
    parsed = _Elements()
    parsed.feed(MARKDOWN.render(markdown))
    return parsed


def assert_text_only(markdown: str, where: str) -> str:
    """Render ``markdown``; fail when it makes an element the page did not mean (an image, a link, a
    script, a table, a heading ...) or any attribute; return its visible text."""
    parsed = render(markdown)
    unexpected = sorted(set(parsed.tags) - TEXT_TAGS)
    attributes = [a for a in parsed.attributes if a not in OUR_ATTRIBUTES]
    assert not unexpected and not attributes, f"{where}: {unexpected} {attributes} from {markdown!r}"
    return normalized("".join(parsed.text))


MARKDOWN_OUTPUTS = ("title", "transcript", "outcome")


def watch_texts(ctrl: watch_tab.WatchController, set_name: str) -> str:
    """Every Markdown output of Watch for every scenario and step of ``set_name`` checked for elements;
    their visible text, joined."""
    shown = []
    for scenario in ctrl.records(set_name):
        total = rollout_view.step_count(ctrl.records(set_name)[scenario])
        for index in range(total + 1):
            out = ctrl.show(set_name, "", scenario, index)
            for name in MARKDOWN_OUTPUTS:
                shown.append(assert_text_only(out[f"left_{name}"], f"left_{name} at step {index}"))
            shown.append(assert_one_table_of_text(out["left_breakdown"], f"left_breakdown at step {index}"))
    return " ".join(shown)


TABLE_TAGS = {"table", "thead", "tbody", "tr", "th", "td"}


def assert_one_table_of_text(markdown: str, where: str) -> str:
    """Like :func:`assert_text_only` for the page's own tables: one table of text, nothing else."""
    parsed = render(markdown)
    unexpected = sorted(set(parsed.tags) - TEXT_TAGS - TABLE_TAGS)
    attributes = [a for a in parsed.attributes if a not in OUR_ATTRIBUTES]
    assert not unexpected and not attributes and parsed.tags.count("table") <= 1, f"{where}: {parsed.tags}"
    return normalized("".join(parsed.text))


@pytest.fixture(scope="module")
def hub(shipped, sandbox):
    server = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox)
    human = Runtime(sampler=server.sampler, source="human", max_steps=40, parent=server)
    hub = SessionHub(human, ttl_s=600, max_sessions=4, sweep_every_s=0)
    yield hub
    hub.shutdown()


@pytest.fixture(scope="module")
def tabs(hub, hostile_artifacts):
    with gr.Blocks():
        play = play_tab.build(hub, bug_classes=[], domains=[])
        watch = watch_tab.build(hub, hostile_artifacts)
        dash = dashboard_tab.build(hub, hostile_artifacts)
    return {"play": play["controller"], "watch": watch["controller"], "dashboard": dash["controller"]}


# ----- markup: through the controllers ------------------------------------------------------------------
def test_markup_in_a_human_play_log_is_shown_as_text_in_the_watch_tab(tabs):
    text = watch_texts(tabs["watch"], "human")
    for payload in (INLINE, IMG, ANCHOR, MD_LINK):
        assert normalized(payload) in text, payload  # the refused tool, the paths, the load error: literal


def test_markup_in_an_agent_log_is_shown_as_text_in_the_watch_tab(tabs):
    text = watch_texts(tabs["watch"], "evals/v1/hostile-agent")
    assert normalized(INLINE) in text and normalized(PAYLOAD) in text


def test_markup_in_logs_and_their_analysis_is_shown_as_text_on_the_dashboard(tabs):
    ctrl = tabs["dashboard"]
    sets = ["human", "evals/v1/hostile-agent"]
    out = {**ctrl.draw(sets, "Bug class", "Full fix"), **ctrl.delta(sets, *sets, "Reward"),
           **ctrl.failures.draw("hostile", "Agent")}
    assert_text_only(out["delta_text"], "delta_text")
    failures = assert_text_only(out["failures"], "failures")
    assert "hostile" in failures
    figures = [out["rates"], out["components"], out["delta"], out["fail_chart"]]
    strings = [s for figure in figures for s in _strings(figure.to_plotly_json())]
    raw = [s for s in strings if re.search(r"<(?!br>|b>|/b>|sup>|/sup>|extra>|/extra>)[a-z/]", s, re.IGNORECASE)]
    assert not raw, f"markup reaches a figure: {raw[:3]}"
    shown = " ".join(html.unescape(s) for s in strings)
    assert normalized(INLINE) in normalized(shown)  # the agent's name, as a bar's label
    examples = out["fail_examples"]
    assert examples["agent"].astype(str).str.contains(re.escape(IMG)).any()  # a table cell is plain text


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    return []


def test_markup_in_scenario_text_and_refusals_is_shown_as_text_in_the_play_tab():
    intro = {"task": PAYLOAD, "policy": PAYLOAD,
             "users": [{"username": IMG, "role": TABLE, "tenant": MD_IMAGE}]}
    markdown = play_tab.task_markdown(intro)
    parsed = render(markdown)
    ours = {"h3", "table", "thead", "tbody", "tr", "th", "td"}  # the headings and the users table
    assert set(parsed.tags) <= TEXT_TAGS | ours and not parsed.attributes, (parsed.tags, parsed.attributes)
    assert parsed.tags.count("table") == 1 and parsed.tags.count("tr") == 2  # one user, one row
    text = normalized("".join(parsed.text))
    assert normalized(PAYLOAD.replace("`tick`", "tick")) in text and IMG in text  # `code` is a code span

    class State:
        scenario_id, step_count, max_steps, phase, invalid_actions, done = IMG, 1, 10, SCRIPT, 1, False

    status = play_tab.status_text(State())  # type: ignore[arg-type]
    assert IMG in assert_text_only(status, "status")
    from ui.wiring import message_markdown

    for refused in (True, False):  # a refusal (or a note) quoting the visitor's own markup, beside a control
        assert normalized(PAYLOAD) in assert_text_only(message_markdown(PAYLOAD, refused=refused), "message")


def test_markup_in_a_diff_is_shown_as_text():
    """A diff is drawn as HTML (coloured lines): markup in a patch stays text, in every kind of line."""
    from ui.diff_view import diff_html

    diff = "\n".join([f"--- a/{IMG}", f"+++ b/{IMG}", f"@@ -1 +1 @@ {SCRIPT}", f"-{PAYLOAD}", f"+{SCRIPT}", f" {IMG}"])
    parsed = _Elements()
    parsed.feed(diff_html(diff))
    assert set(parsed.tags) == {"pre", "span"}, parsed.tags
    assert {value for name, value in parsed.attributes} <= {"a01-diff", "file", "hunk", "add", "del", "ctx"}
    assert "".join(parsed.text) == diff.replace("\n", "")
    parsed = _Elements()
    parsed.feed(diff_html("", empty=IMG))
    assert parsed.tags == ["div"] and "".join(parsed.text) == IMG


def test_markup_in_a_toast_is_escaped(tabs, monkeypatch):
    from ui import wiring

    toasts: list[str] = []
    monkeypatch.setattr(wiring.gr, "Warning", lambda message, *a, **k: toasts.append(message))
    handler = wiring.bind(tabs["play"].new_episode, {})
    handler(None, "any", "any", "any", "any", IMG, None, 40, "")  # a scenario "id" that is markup
    handler(None, "any", "any", "any", "any", "", SCRIPT, 40, "")  # a seed that is markup
    assert len(toasts) == 2
    for message, payload in zip(toasts, (IMG, SCRIPT)):
        assert "<" not in message and ">" not in message, message
        assert payload[:20] in html.unescape(message)


def test_a_refused_step_message_is_escaped(tabs):
    from ui.wiring import bind

    ctrl = tabs["play"]
    sid = ctrl.new_episode(None, "any", "any", "any", "any", SCENARIO, None, 40, "")["sid"]
    try:
        out = ctrl.open_file(sid, f"app/{IMG}.py")
        shown = bind(ctrl.open_file, {"code_msg": "message", "status": "status", "checklist": "checklist"},
                     at="code_msg")(
            sid, f"app/{IMG}.py")
    finally:
        ctrl.hub.close(sid)
    assert IMG in out["refused"]
    assert IMG in assert_text_only(shown["message"], "message")


# ----- a running Space with small caps -----------------------------------------------------------------
BODY_CAP = 64 * 1024
WS_CAP = 64 * 1024


@pytest.fixture(scope="module")
def space(tmp_path_factory, hostile_artifacts):
    """``python app.py`` serving the hostile artifacts, with small caps: 64 KiB bodies and WebSocket
    messages; 4 ``/ws`` sessions, 2 per client; 3 play sessions, 1 per client; X-Forwarded-For trusted
    from loopback (the tests play the proxy), so a request that carries it is a remote client."""
    tmp = tmp_path_factory.mktemp("space")
    env = {"A01_ARTIFACTS": str(hostile_artifacts), "A01_HUMAN_LOG": str(tmp / "human" / "episodes.jsonl"),
           "GRADIO_TEMP_DIR": str(tmp / "gradio"), "A01_MAX_BODY_BYTES": str(BODY_CAP),
           "A01_MAX_WS_MESSAGE_BYTES": str(WS_CAP), "A01_MAX_SESSIONS": "4", "A01_MAX_SESSIONS_PER_CLIENT": "2",
           "A01_UI_MAX_SESSIONS": "3", "A01_UI_MAX_SESSIONS_PER_CLIENT": "1", "A01_TRUSTED_PROXIES": "127.0.0.1,::1",
           "A01_UI_NEW_PAGES_PER_CLIENT": "4"}
    with running_space(env) as (url, port, process):
        yield {"url": url, "port": port, "tmp": tmp, "process": process}


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


class Visit:
    """One visitor's page, with every request it made and every script error it met."""

    def __init__(self, browser, url: str, *, forwarded_for: str | None = None) -> None:
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        self.context = browser.new_context(viewport={"width": 1440, "height": 1000}, extra_http_headers=headers)
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.url = url
        self.page = self.open()

    def open(self):
        page = self.context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.goto(self.url + "/")
        page.wait_for_selector("#play-new")
        return page

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def visit(browser, space):
    visits: list[Visit] = []

    def make(**options: Any) -> Visit:
        visits.append(Visit(browser, space["url"], **options))
        return visits[-1]

    yield make
    for v in visits:
        v.close()


HOSTILE_DOM = """() => {
  const found = [];
  for (const el of document.querySelectorAll('*')) {
    for (const attr of el.attributes) {  // what can act: an event handler, an address to fetch or follow
      const value = attr.value || '';
      const acts = attr.name.startsWith('on') || /^(src|srcset|href|xlink:href|action|formaction|poster|data|background)$/i.test(attr.name);
      if (acts && /evil\\.invalid|__pwned|^\\s*javascript:/i.test(value)) found.push(el.outerHTML.slice(0, 160));
    }
    if (el.tagName === 'IMG' && el.getAttribute('src') === 'x') found.push(el.outerHTML.slice(0, 160));
    if (el.tagName === 'SCRIPT' && el.textContent.includes('__pwned')) found.push('script: ' + el.textContent.slice(0, 80));
    if (el.classList && el.classList.contains('katex')) found.push('katex: ' + el.textContent.slice(0, 80));
  }
  for (const el of document.querySelectorAll('[data-testid="markdown"] table, [data-testid="markdown"] h1, '
                                             + '[data-testid="markdown"] blockquote')) {
    // the page's own tables of text (.a01-table: one table, escaped cells) are the only others allowed
    const own = el.tagName === 'TABLE' && el.closest('.a01-table') && !el.parentElement.closest('table')
      && el.closest('.a01-table').querySelectorAll('table').length === 1;
    if (!el.closest('#play-task, #intro') && !own) found.push('markup: ' + el.outerHTML.slice(0, 160));
  }
  return found;
}"""


def assert_untouched(visit: Visit) -> None:
    """No element from a payload in the DOM, no script run, no request to the payload's hosts."""
    page = visit.page
    assert page.evaluate("() => window.__pwned") is None, "a payload's script ran"
    assert page.evaluate(HOSTILE_DOM) == []
    hostile = [u for u in visit.requests if "evil.invalid" in u or re.search(r"^https?://[^/]+/x$", u)]
    assert not hostile, hostile
    assert not visit.errors, visit.errors


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def choose(page, elem_id: str, option: str) -> None:
    box = page.locator(f"#{elem_id}").get_by_role("combobox")
    box.click()
    page.locator(f"#{box.get_attribute('aria-controls')}").get_by_role("option", name=option, exact=True).click()


def step_through(visit: Visit, scenario_label: str, steps: int) -> list[str]:
    """Show ``scenario_label`` of the chosen set and step to its end; the titles seen, each after
    checking the page is untouched."""
    page = visit.page
    choose(page, "watch-scenario", scenario_label)
    wait_text(page, "watch-left-title", "Start")
    titles = [text_of(page, "watch-left-title")]
    for index in range(1, steps + 1):
        page.click("#watch-forward")
        wait_text(page, "watch-left-title", f"Step {index} of {steps}")
        titles.append(text_of(page, "watch-left-title"))
        assert_untouched(visit)
    return titles


def test_script_in_a_human_play_log_does_not_run_in_another_visitors_watch_tab(visit, hostile_artifacts):
    records = {r.scenario_id: r for r in read_episodes(hostile_artifacts / "human" / "episodes.jsonl")}
    viewer = visit()
    page = viewer.page
    page.get_by_role("tab", name="Watch").click()
    choose(page, "watch-left-set", "Human players · this Space")
    page.get_by_text("HTTP transcript so far").first.click()
    page.get_by_text("Outcome, reward breakdown and final diff").first.click()

    played = records[SCENARIO]
    titles = step_through(viewer, rollout_view.scenario_choices([played])[0][0], len(played.steps))
    assert normalized(INLINE) in normalized(titles[1])  # the refused tool's name, literally
    transcript = page.locator("#watch-left-transcript").inner_text()
    assert IMG in transcript and ANCHOR in transcript  # the patched app's answer and the request's path
    outcome = page.locator("#watch-left-outcome").inner_text()
    assert IMG in outcome and SCRIPT in outcome  # the load error the submitted app raised (shortened)
    shot(page, "attack-watch-human")

    forged = records[FORGED_SCENARIO]
    titles = step_through(viewer, rollout_view.scenario_choices([forged])[0][0], len(forged.steps))
    assert f"human:{normalized(INLINE)}" in normalized(titles[0])  # a nickname no sanitizer saw
    assert IMG in page.locator("#watch-scenario input").input_value()  # a bug class, as a dropdown label
    assert normalized(PAYLOAD) in normalized(page.locator("#watch-left-transcript").inner_text())
    shot(page, "attack-watch-forged")
    assert_untouched(viewer)


def test_markup_in_an_agent_log_and_its_failure_analysis_does_not_reach_the_dashboard(visit):
    viewer = visit()
    page = viewer.page
    page.get_by_role("tab", name="Dashboard").click()
    page.locator("#dash-failures-section > button").first.click()  # a closed section: one click away
    for elem_id in ("dash-rates", "dash-components", "dash-fail-chart"):
        page.wait_for_selector(f"#{elem_id} .js-plotly-plot .main-svg")
    page.locator("#dash-fail-dimension").get_by_label("Agent").check()
    page.wait_for_function("() => /by agent/i.test(document.querySelector('#dash-fail-chart').textContent)")
    page.locator("#dash-fail-chart").scroll_into_view_if_needed()
    chart = page.locator("#dash-fail-chart").text_content() or ""
    assert IMG[:20] in chart  # the agent's name as a bar label, literally
    assert IMG in page.locator("#dash-fail-examples").inner_text()
    assert "hostile-agent" in page.locator("#dash-leaderboard").inner_text()
    shot(page, "attack-dashboard")
    assert_untouched(viewer)

    page.get_by_role("tab", name="Watch").click()
    choose(page, "watch-left-set", "hostile-agent · evals/v1")
    page.get_by_text("HTTP transcript so far").first.click()
    page.get_by_text("Outcome, reward breakdown and final diff").first.click()
    wait_text(page, "watch-left-title", normalized(INLINE)[:30])
    for index in range(1, 4):
        page.click("#watch-forward")
        wait_text(page, "watch-left-title", f"Step {index} of 3")
        assert_untouched(viewer)
    outcome = normalized(page.locator("#watch-left-outcome").inner_text())
    assert normalized(PAYLOAD)[:200] in outcome  # the load error, shortened
    shot(page, "attack-watch-agent")


def test_markup_in_a_message_is_shown_as_text(visit):
    viewer = visit()
    page = viewer.page
    page.locator("#play-scenario").get_by_role("textbox").fill(IMG)
    page.click("#play-new")
    wait_text(page, "play-new-msg", IMG[:20])
    assert IMG in text_of(page, "play-new-msg")
    assert page.locator("#play-new-msg img").count() == 0
    shot(page, "attack-message")
    assert_untouched(viewer)


def test_a_refusal_leaves_the_page_as_it_was(visit):
    viewer = visit()
    page = viewer.page
    page.locator("#play-scenario").get_by_role("textbox").fill("not-hexadecimal")
    page.click("#play-new")
    wait_text(page, "play-new-msg", "hexadecimal")
    page.wait_for_timeout(500)
    assert "No episode yet" in text_of(page, "play-status")
    assert page.get_by_text("Error", exact=True).count() == 0  # no output marked as failed
    assert page.locator('[data-testid="toast-body"]').count() == 0


# ----- uploads and bodies, against the running server -----------------------------------------------------
def test_file_uploads_to_the_page_are_refused_and_write_nothing(space):
    url = space["url"]
    for path in ("/gradio_api/upload", "/upload", "/gradio_api/process_recording"):
        for content, refused in ((b"hello", {403}), (b"x" * (BODY_CAP * 4), {403, 413})):
            reply = httpx.post(url + path, files={"files": ("notes.txt", content, "text/plain")}, timeout=30)
            assert reply.status_code in refused, (path, reply.status_code, reply.text[:200])
    reply = httpx.get(url + "/gradio_api/deep_link", params={"session_hash": "anyone"}, timeout=30)
    assert reply.status_code == 403  # it writes the page's state to a file per call
    stored = [p for p in (space["tmp"] / "gradio").rglob("*") if p.is_file()] if (space["tmp"] / "gradio").exists() else []
    assert stored == []


def _chunks(data: bytes, size: int = 8192):
    for start in range(0, len(data), size):
        yield data[start:start + size]


JSON_ROUTES = {
    "/step": ({"action": {"tool": "search_code", "query": "x" * (BODY_CAP * 2)}}, {"action": {"tool": "list_files"}}),
    "/reset": ({"seed": 1, "episode_id": "x" * (BODY_CAP * 2)}, {"seed": 1}),
    "/mcp": ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * (BODY_CAP * 2)}},
             {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    "/gradio_api/queue/join": ({"data": ["x" * (BODY_CAP * 2)], "fn_index": 0, "session_hash": "anyone"}, None),
    # the Play tab's steps skip the queue: the route they are posted to is capped the same way
    "/gradio_api/run/predict": ({"data": ["x" * (BODY_CAP * 2)], "fn_index": 0, "session_hash": "anyone"}, None),
}


@pytest.mark.parametrize("path", list(JSON_ROUTES))
def test_an_oversized_body_is_refused_on_a_json_route(space, path):
    oversized, fitting = JSON_ROUTES[path]
    body = json.dumps(oversized).encode()
    headers = {"content-type": "application/json"}
    declared = httpx.post(space["url"] + path, content=body, headers=headers, timeout=60)
    assert declared.status_code == 413, declared.text[:200]
    streamed = httpx.post(space["url"] + path, content=_chunks(body), headers=headers, timeout=60)  # no length given
    assert streamed.status_code == 413, streamed.text[:200]
    if fitting is not None:
        assert httpx.post(space["url"] + path, json=fitting, timeout=60).status_code == 200


def _ws(url: str, headers: dict[str, str] | None = None):
    from websockets.sync.client import connect

    return connect(url.replace("http://", "ws://") + "/ws", additional_headers=headers or {}, max_size=None,
                   open_timeout=30)


def _first_reply(conn) -> dict[str, Any]:
    from websockets.exceptions import ConnectionClosed

    try:  # a refused session is told at once and closed: the reset may not go out
        conn.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
    except ConnectionClosed:
        pass
    try:
        return json.loads(conn.recv(timeout=60))
    except ConnectionClosed as exc:
        return {"type": "closed", "data": {"code": exc.rcvd.code if exc.rcvd else None}}


def test_an_oversized_websocket_message_closes_only_that_connection(space):
    from websockets.exceptions import ConnectionClosed

    with _ws(space["url"]) as conn:
        assert _first_reply(conn)["type"] == "observation"
        conn.send(json.dumps({"type": "step", "data": {"tool": "search_code", "query": "x" * (WS_CAP * 2)}}))
        with pytest.raises(ConnectionClosed) as closed:
            conn.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    with _ws(space["url"]) as conn:  # the server, and the next session, are fine
        assert _first_reply(conn)["type"] == "observation"


# ----- slots ----------------------------------------------------------------------------------------------
def test_one_client_cannot_hold_every_websocket_session(space):
    url = space["url"]
    first, second = {"X-Forwarded-For": "203.0.113.1"}, {"X-Forwarded-For": "198.51.100.2"}
    with _ws(url, first) as a, _ws(url, first) as b:
        assert _first_reply(a)["type"] == "observation" and _first_reply(b)["type"] == "observation"
        with _ws(url, first) as c:  # its third of the server's four
            refused = _first_reply(c)
        assert refused["type"] == "error" and refused["data"]["code"] == "CAPACITY_REACHED", refused
        assert "A01_MAX_SESSIONS_PER_CLIENT" in refused["data"]["message"]
        created = httpx.post(url + "/mcp", headers=first, timeout=30,
                             json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}).json()
        assert "A01_MAX_SESSIONS_PER_CLIENT" in created["error"]["message"]  # nor over HTTP MCP
        with _ws(url, second) as other:  # another client still gets one
            assert _first_reply(other)["type"] == "observation"
    deadline = time.monotonic() + 10  # closed sessions give the client its share back
    while True:
        with _ws(url, first) as again:
            reply = _first_reply(again)
        if reply["type"] == "observation" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert reply["type"] == "observation", reply


def test_made_up_page_ids_from_one_address_are_refused_past_its_allowance(space):
    """Gradio makes a page's state for any session hash a request names; one address may start four
    pages here (``A01_UI_NEW_PAGES_PER_CLIENT``), and the next made-up id is refused before any state is
    made, so a script cannot push other visitors' pages out (``tests/test_page_state.py``)."""
    url = space["url"] + "/gradio_api/queue/join"
    script, other = {"X-Forwarded-For": "203.0.113.50"}, {"X-Forwarded-For": "198.51.100.60"}

    def join(headers: dict[str, str], page: str) -> httpx.Response:
        return httpx.post(url, headers=headers, timeout=30,
                          json={"data": [], "fn_index": 0, "session_hash": page, "event_data": None, "trigger_id": None})

    answers = [join(script, f"made-up-{uuid.uuid4().hex[:10]}").status_code for _ in range(12)]
    assert all(code != 429 for code in answers[:4]) and answers[4:] == [429] * 8, answers
    assert join(other, "another-visitors-page").status_code != 429  # another address is unaffected


def test_forwarded_for_is_believed_only_from_a_trusted_proxy(shipped):
    from fastapi.testclient import TestClient

    from envcore.env.server import create_env_app
    from envcore.server.guard import ClientPolicy

    runtime = Runtime(sampler=CurriculumSampler(shipped))
    app = create_env_app(runtime, max_sessions=4, max_sessions_per_client=1, policy=ClientPolicy())  # trusts nobody
    client = TestClient(app)
    with client.websocket_connect("/ws", headers={"X-Forwarded-For": "203.0.113.1"}) as one:
        one.send_json({"type": "reset", "data": {"seed": 1}})
        assert one.receive_json()["type"] == "observation"
        with client.websocket_connect("/ws", headers={"X-Forwarded-For": "203.0.113.99"}) as forged:
            reply = forged.receive_json()  # the same peer, whatever it claims
        assert reply["type"] == "error" and reply["data"]["code"] == "CAPACITY_REACHED"

    policy = ClientPolicy.from_environ({"A01_TRUSTED_PROXIES": "10.0.0.0/8"})
    assert policy.client("10.1.2.3", ["198.51.100.7, 203.0.113.5"]) == "203.0.113.5"  # what the proxy saw
    assert policy.client("10.1.2.3", ["203.0.113.5, 10.9.9.9"]) == "203.0.113.5"  # a chain of trusted proxies
    assert policy.client("192.0.2.1", ["203.0.113.5"]) == "192.0.2.1"  # not a proxy: its header means nothing
    assert policy.client("10.1.2.3", ["not-an-address"]) == "10.1.2.3"
    anywhere = ClientPolicy.from_environ({"SPACE_ID": "someone/space"})  # behind a hosting network's proxies
    assert anywhere.client("10.1.2.3", ["127.0.0.1, 203.0.113.5"]) == "203.0.113.5"  # a forged first entry is not read
    assert anywhere.client("10.1.2.3", ["198.51.100.66, 203.0.113.5, 10.9.9.9"]) == "203.0.113.5"  # nor an inner hop
    assert anywhere.is_capped("203.0.113.5") and not anywhere.is_capped("127.0.0.1")
    assert ClientPolicy.from_environ({"A01_UNCAPPED_CLIENTS": ""}).is_capped("127.0.0.1")


def _visitor(client: str, page: str = "page") -> Any:
    from envcore.server.sessions import Visitor

    return Visitor(client=client, page=page)


def test_one_visitor_cannot_hold_every_play_session(shipped, sandbox):
    from envcore.server.guard import ClientPolicy
    from envcore.server.sessions import ClientLimit

    hub = SessionHub(Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox), max_sessions=4, max_per_client=2,
                     policy=ClientPolicy(), sweep_every_s=0)
    try:
        hub.open(visitor=_visitor("203.0.113.1", "tab-1"))
        hub.open(kind="live", visitor=_visitor("203.0.113.1", "tab-2"))
        with pytest.raises(ClientLimit, match="the most one visitor may hold"):
            hub.open(visitor=_visitor("203.0.113.1", "tab-3"))
        hub.open(visitor=_visitor("198.51.100.2"))  # another visitor still gets a slot
        assert len(hub) == 3
        assert hub.close_page("tab-1") == 1  # the page closed: its session ends, its share comes back
        hub.open(visitor=_visitor("203.0.113.1", "tab-3"))
    finally:
        hub.shutdown()


def test_a_new_episode_that_cannot_start_gives_its_slot_back(tabs):
    ctrl = tabs["play"]
    before = len(ctrl.hub)
    for scenario in ("not-hexadecimal", "ffffffffffffffff"):
        with pytest.raises(Exception, match="scenario|hexadecimal"):
            ctrl.new_episode(None, "any", "any", "any", "any", scenario, None, 40, "",
                             visitor=_visitor("203.0.113.1"))
    assert len(ctrl.hub) == before


def test_one_browser_cannot_hold_every_play_session_of_the_space(visit, space):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    first = visit(forwarded_for="203.0.113.10")
    page = first.page
    page.locator("#play-scenario").get_by_role("textbox").fill(SCENARIO)
    page.click("#play-new")
    wait_text(page, "play-status", SCENARIO)
    assert "Access policy" in text_of(page, "play-task")
    shot(page, "attack-slots-first-visitor")
    second_tab = first.open()  # the same visitor, another tab: its one share is taken
    second_tab.locator("#play-scenario").get_by_role("textbox").fill(SCENARIO)
    second_tab.click("#play-new")
    wait_text(second_tab, "play-new-msg", "the most one visitor may hold")
    shot(second_tab, "attack-slots-refused")

    other = visit(forwarded_for="198.51.100.20")  # someone else still plays
    other.page.locator("#play-scenario").get_by_role("textbox").fill(SCENARIO)
    other.page.click("#play-new")
    wait_text(other.page, "play-status", SCENARIO)

    page.close()  # the first tab goes: its session ends with it, and the visitor may start again
    deadline = time.monotonic() + 30
    while True:
        second_tab.click("#play-new")
        try:
            wait_text(second_tab, "play-status", SCENARIO, timeout_ms=3000)
            break
        except PlaywrightTimeout:
            assert time.monotonic() < deadline, "the closed tab's session kept its slot"


# ----- growth ---------------------------------------------------------------------------------------------
def test_the_human_play_log_stays_under_its_cap_on_disk(tmp_path, shipped, sandbox, monkeypatch):
    from envcore.server.capped_log import CappedEpisodeLog

    record = forged_record("human:visitor", source="human")
    size = len(record.model_dump_json()) + 1
    log = CappedEpisodeLog(tmp_path / "human" / "episodes.jsonl", max_bytes=3 * size, generations=2)
    for _ in range(10):
        log.write(record)
    log.close()
    assert all(p.stat().st_size <= 3 * size for p in log.path.parent.iterdir())
    assert log.rotations == 3 and len(list(read_episodes(log.path))) == 1  # 3 + 3 + 3 moved aside, the tenth here
    assert sorted(p.name for p in log.path.parent.iterdir()) == ["episodes.jsonl", "episodes.jsonl.1", "episodes.jsonl.2"]

    # the Space's hub writes human play through it, capped by A01_HUMAN_LOG_MAX_BYTES (here under one
    # record: each file then holds exactly one) and A01_HUMAN_LOG_GENERATIONS
    monkeypatch.setenv("A01_HUMAN_LOG_MAX_BYTES", "100")
    monkeypatch.setenv("A01_HUMAN_LOG_GENERATIONS", "2")
    path = tmp_path / "space" / "episodes.jsonl"
    hub = SessionHub.for_server(Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox), human_log=path,
                                sweep_every_s=0)
    try:
        assert isinstance(hub.runtime.logger, CappedEpisodeLog) and hub.runtime.logger.max_bytes == 100
        for seed in range(4):  # each left unfinished: an abandoned episode, logged
            sid = hub.open()
            hub.reset(sid, seed=seed, split="test")
            hub.close(sid)
    finally:
        hub.shutdown()
    assert hub.runtime.logger.rotations == 3
    assert [len(list(read_episodes(p))) for p in (path, path.with_name("episodes.jsonl.1"),
                                                  path.with_name("episodes.jsonl.2"))] == [1, 1, 1]


def test_one_visitor_cannot_push_another_players_records_out_of_the_play_log(tmp_path, shipped, sandbox):
    """The capped log once rotated whole and the page read only the current file: one visitor playing
    fast set everyone's growth rate, and the other players vanished from the leaderboard. Now each
    visitor has a quota, old files are kept, and the page reads them all."""
    from envcore.server.capped_log import CappedEpisodeLog
    from envcore.server.guard import ClientPolicy
    from envcore.server.sessions import Visitor
    from ui import artifact_sets

    folder = tmp_path / "artifacts"
    record = forged_record("human:someone", source="human")
    size = len(record.model_dump_json()) + 1
    log = CappedEpisodeLog(folder / "human" / "episodes.jsonl", max_bytes=40 * size, generations=2,
                           visitor_bytes=int(4.5 * size))
    runtime = Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox, logger=log, source="human", max_steps=40)  # type: ignore[arg-type]
    hub = SessionHub(runtime, ttl_s=600, max_sessions=4, sweep_every_s=0, policy=ClientPolicy())
    try:
        player = hub.open(visitor=Visitor(client="198.51.100.20", page="player"))
        hub.reset(player, seed=0, split="test", agent_id="human:patient")
        hub.step(player, {"tool": "submit"})
        assert hub.debrief(player)["recorded"] is True
        hub.close(player)
        recorded = []
        for i in range(12):  # a script plays and submits as fast as it can from one address (quota: about 4)
            sid = hub.open(visitor=Visitor(client="203.0.113.30", page=f"script-{i}"))
            hub.reset(sid, seed=i, split="test", agent_id=f"human:flood-{i}")
            hub.step(sid, {"tool": "submit"})
            recorded.append(hub.debrief(sid)["recorded"])
            hub.close(sid)
    finally:
        hub.shutdown()
    # its quota's worth (a smaller record may still fit after a larger one was refused), then scored but not recorded
    assert recorded[0] and 1 <= recorded.count(True) <= 6 and recorded.count(False) >= 6, recorded
    assert 0 <= log.quota_left("203.0.113.30") < log.visitor_bytes
    human = next(s for s in artifact_sets.discover(folder) if s.kind == "human")
    players = [r.agent_id for r in artifact_sets.load_records(human)]
    assert "human:patient" in players and len(players) == 1 + recorded.count(True)
    note = __import__("ui.teaching_view", fromlist=["x"]).debrief_markdown({"recorded": False, "category": {}})
    assert "not recorded" in note


def test_the_page_reads_every_kept_file_of_the_play_log(tmp_path):
    from envcore.server.capped_log import CappedEpisodeLog
    from ui import artifact_sets

    folder = tmp_path / "artifacts"
    first = forged_record("human:first", source="human")
    size = len(first.model_dump_json()) + 1
    log = CappedEpisodeLog(folder / "human" / "episodes.jsonl", max_bytes=int(2.5 * size), generations=3)
    names = [f"human:player-{i}" for i in range(7)]
    for name in names:
        log.write(forged_record(name, source="human"))
    log.close()
    human = next(s for s in artifact_sets.discover(folder) if s.kind == "human")
    assert [r.agent_id for r in artifact_sets.load_records(human)] == names  # oldest first, none lost


def test_the_page_keeps_a_bounded_number_of_browser_sessions(shipped, hostile_artifacts, monkeypatch):
    """Any request can name a new Gradio session; each costs a copy of the page's configuration."""
    from fastapi.testclient import TestClient
    from starlette.routing import Mount

    from envcore.env.server import create_env_app
    from ui.app import mount_ui

    monkeypatch.setenv("A01_UI_PAGE_SESSIONS", "5")
    monkeypatch.setenv("A01_UI_QUEUE_SIZE", "7")
    runtime = Runtime(sampler=CurriculumSampler(shipped))
    hub = SessionHub(runtime, sweep_every_s=0)
    app = mount_ui(create_env_app(runtime), hub, hostile_artifacts)
    [gradio_app] = [r.app for r in app.routes if isinstance(r, Mount) and hasattr(r.app, "get_blocks")]
    blocks = gradio_app.get_blocks()
    assert blocks._queue.max_size == 7
    [fn_index] = [i for i, fn in blocks.fns.items() if fn.name == "scenarios"][:1]
    with TestClient(app) as client:
        for number in range(12):
            session = f"visitor-{number}"
            joined = client.post("/gradio_api/queue/join", json={
                "data": ["any", "any", "any", "any", ""], "fn_index": fn_index, "session_hash": session,
                "event_data": None, "trigger_id": None})
            assert joined.status_code == 200, joined.text
            with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as events:
                for line in events.iter_lines():
                    if "process_completed" in line:
                        assert '"success":true' in line.replace(" ", ""), line[:300]
                        break
            assert len(gradio_app.state_holder.session_data) <= 5
    hub.shutdown()


def test_the_dashboard_and_watch_caches_do_not_grow_with_what_a_visitor_sends(tabs):
    dashboard, watch = tabs["dashboard"], tabs["watch"]
    names = list(dashboard.rollout_sets())
    for number in range(40):  # every selection a visitor can send, unknown names and repeats included
        chosen = [names[i % len(names)] for i in range(number % 7)] + [f"no-such-set-{number}"] * (number % 3)
        dashboard.frame(chosen * 50)
    assert len(dashboard._frames) <= 17
    assert all(len(key) <= len(names) for key in dashboard._frames)

    for name in ("../../../../etc", "/etc", "hostile/../../feedback/hostile", "no-such-analysis"):
        assert dashboard.failures.load(name) is None
    assert set(dashboard.failures._cache) <= set(dashboard.failures.analyses())

    for number in range(20):
        with pytest.raises(Exception, match="no rollout set"):
            watch.records(f"no-such-set-{number}")
    assert {key[0] for key in watch._by_scenario} <= set(watch.rollout_sets())


def test_a_public_servers_episode_log_can_be_capped_too(tmp_path, shipped, monkeypatch):
    """``A01_EPISODE_LOG`` records every ``/ws`` episode, played by anyone the server is open to."""
    from fastapi.testclient import TestClient

    from envcore.env.server import create_env_app
    from envcore.server.capped_log import CappedEpisodeLog

    monkeypatch.setenv("A01_EPISODE_LOG_MAX_BYTES", "100")  # under one record: each file holds one
    path = tmp_path / "episodes.jsonl"
    runtime = Runtime(sampler=CurriculumSampler(shipped), logger=EpisodeLogger(path))
    app = create_env_app(runtime, max_sessions=2)
    assert isinstance(runtime.logger, CappedEpisodeLog)
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        for seed in range(4):  # each reset leaves the episode before it unfinished: logged as abandoned
            ws.send_json({"type": "reset", "data": {"seed": seed}})
            assert ws.receive_json()["type"] == "observation"
        assert runtime.logger.rotations == 2  # three records, one file each; the first two moved aside in turn
        assert [len(list(read_episodes(p))) for p in (path, runtime.logger.previous)] == [1, 1]


def test_a_step_budget_a_request_makes_up_is_brought_into_the_sliders_range_or_refused(tabs):
    """The slider stops at 10 and 200, a request does not: a number outside is brought into range (the
    environment refuses a budget over 200 anyway), and anything else is a message, not an exception."""
    from ui.wiring import UserError

    ctrl = tabs["play"]
    for sent, kept in ((10**9, 200), (-5, 10), ("150", 150)):
        sid = ctrl.new_episode(None, "any", "any", "any", "any", SCENARIO, None, sent, "")["sid"]
        try:
            assert ctrl.hub.state(sid).max_steps == kept
        finally:
            ctrl.hub.close(sid)
    with pytest.raises(UserError, match="step budget"):
        ctrl.new_episode(None, "any", "any", "any", "any", SCENARIO, None, "many", "")


def test_markup_an_app_answers_is_shown_as_text_in_the_play_tab(tabs):
    """The player's own patched app answers with markup (and a header carrying it): the response, the
    request history and the checklist show it as text."""
    ctrl = tabs["play"]
    sid = ctrl.new_episode(None, "any", "any", "any", "any", SCENARIO, None, 40, "")["sid"]
    try:
        module, app = ctrl.hub.runtime.cache.load(SCENARIO).entrypoint.split(":")
        path = module.replace(".", "/") + ".py"
        main = ctrl.hub.current_file(sid, path)
        echo = (main + "\n\nfrom fastapi.responses import PlainTextResponse as _Plain\n\n\n"
                f"@{app}.get('/echo')\ndef _echo():\n    return _Plain({PAYLOAD!r}, headers={{'x-note': {IMG!r}}})\n")
        ctrl.apply_diff(sid, make_diff({path: main}, {path: echo}), {})
        out = ctrl.send_request(sid, "GET", f"/echo?{MD_LINK}", "(anonymous)", "")
        settled = ctrl.settle_checklist(sid)
    finally:
        ctrl.hub.close(sid)
    assert PAYLOAD[:20] in assert_text_only(out["response"], "response")
    assert IMG in assert_text_only(out["response"], "response")
    assert MD_LINK.split("(")[0].strip("[]")[:10] in assert_one_table_of_text(out["history"], "history")
    assert_text_only(settled["checklist"], "checklist")
