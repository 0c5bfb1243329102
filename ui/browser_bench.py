"""``python -m envcore bench ui --browser``: what a visitor waits for, measured in a real browser.

:mod:`ui.bench` times the server's share of a click; this module times what a person sees: it starts
``python app.py`` on a free port (a throwaway human log), opens the page in Debian's Chromium driven
by Playwright (``executable_path``, never a downloaded browser), clicks like a visitor, and measures
**click → the updated content visible** in the page itself:

* the start of an action is the ``timeStamp`` of the click's first ``pointerdown`` (the browser's
  own clock, the time base of ``performance.now()``), so Playwright's scrolling and actionability
  checks before the click are not counted;
* its end is the first paint after the specific content the action changes has changed: a
  ``MutationObserver`` checks, after every batch of DOM changes, that each expected element (the
  status line, the response box, the editor, the Watch title, the chart's title or legend ...)
  holds new, non-empty text, and then waits for the next animation frame and a task after it (the
  frame that paints it). Only content elements are watched, never a component's wrapper, whose
  "processing | 0.1s" tracker changes as soon as the request leaves. Plotly draws a chart's title
  after its traces, so a new title is a chart drawn.
* the first page is the time from navigation start (``performance.now()``'s origin) to the first
  paint with the intro, the Play tab's New episode button and status line visible, in a fresh browser
  context (nothing cached) each round, after the server already answers ``/``.

Actions, each ``rounds`` times: Play: New episode (a different seed each round), open a router file,
search the code, send ``GET /api/me`` as the first seeded user, run the visible tests, view the diff;
Watch (the heuristic baseline's set when there is one): pick another scenario, step forward, step
back; Dashboard: switch the rates chart's dimension, its measure, and the rollout sets shown (one set
unticked, then ticked again). Between actions the page is left to settle (every Gradio progress
tracker hidden), so an action never waits on the one before.

Targets (the issue "The Space tells its story"): the first page within 3 s, every Play action and
Watch step within 300 ms at p50 (picking a Watch scenario is held to the same 300 ms), a Dashboard
toggle within 1 s. A p50 over its target is reported as ``over``, not as a failure: the command
measures. It fails (exit status 2) only when the measurement itself does: the server does not start,
Chromium does not launch, or an expected element never appears or never changes.

Selectors are the components' ``elem_id`` s; the Play tab's inner tabs are found by the start of their
names, or failing that by trying each until the element shows. The Dashboard's measure radio is
``#dash-metric``, or where it has no ``elem_id`` (older pages) the radio group offering "Partial fix".
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import sync_playwright

FIRST_PAGE_TARGET_MS = 3000.0
STEP_TARGET_MS = 300.0
TOGGLE_TARGET_MS = 1000.0
ACTIONS: dict[str, float] = {
    "first page": FIRST_PAGE_TARGET_MS,
    "play: new episode": STEP_TARGET_MS,
    "play: open a file": STEP_TARGET_MS,
    "play: search": STEP_TARGET_MS,
    "play: send a request": STEP_TARGET_MS,
    "play: run tests": STEP_TARGET_MS,
    "play: view diff": STEP_TARGET_MS,
    "watch: pick a scenario": STEP_TARGET_MS,
    "watch: step forward": STEP_TARGET_MS,
    "watch: step back": STEP_TARGET_MS,
    "dashboard: break down by": TOGGLE_TARGET_MS,
    "dashboard: measure": TOGGLE_TARGET_MS,
    "dashboard: rollout sets": TOGGLE_TARGET_MS,
    "dashboard: show every run": TOGGLE_TARGET_MS,
}
"""Every action measured, in the order printed, with its target for the p50 (ms)."""

CHROMIUM = os.environ.get("A01_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""The flags a closed network needs (the same as the browser tests', ``tests/browser_kit.py``)."""
VIEWPORT = {"width": 1440, "height": 900}
WAIT_MS = 30_000
"""How long an expected change may take before the measurement is declared failed."""
SETTLE_MS = 10_000
POLL_MS = 50
"""How often this side asks whether a change has happened: on a timer, not every frame (polling on
animation frames would make the page draw frames it would not otherwise draw). The page itself
times the change, so this does not limit the resolution."""
TOP_TABS = ("Play", "Watch", "Dashboard")
PHASES = ("send", "server", "draw")
SEED = 1000
REQUEST_PATH = "/api/me"
QUERIES = ("def ", "user", "owner", "role")
MARKDOWN = ' [data-testid="markdown"]'
CODE = " .cm-content"
STATUS = "#play-status" + MARKDOWN
FIRST_PAGE_READY = ("#intro", "#play-new", "#play-status" + MARKDOWN)
"""What the first page must show: the intro, the New episode button, the status line (text, visible)."""

ERROR = '[data-testid="status-tracker"] .error'
"""The badge Gradio shows on a component whose event failed on the server."""
PROBE_JS = """
(() => {
  if (window.__a01bench) return;
  const read = (selector) => {
    const element = document.querySelector(selector);
    return element ? element.textContent : null;
  };
  const errors = () => document.querySelectorAll(__ERROR__).length;
  let stop = () => {};
  window.__a01bench = {
    state: null,
    // groups: every group must hold; a group holds when any of its changes has happened.
    arm(groups) {
      stop();
      const before = groups.map((group) => group.map((change) => read(change.selector)));
      const state = {clicked: null, changed: null, shown: null, done: false, error: false, sent: null,
                     answered: null};
      const errorsBefore = errors();
      performance.clearResourceTimings();  // the buffer holds 250 entries; the page's own loads fill it
      const holds = () => groups.every((group, i) => group.some((change, j) => {
        const now = read(change.selector);
        return now !== null && now.trim() !== "" && now !== before[i][j]
          && (!change.includes || now.includes(change.includes));
      }));
      const finish = () => {
        if (state.done) return;
        state.shown = performance.now();
        // Where the time went: the event sent, and its answer complete.
        const since = performance.getEntriesByType("resource").filter((e) => e.startTime >= state.clicked);
        // An action that skips the queue is one POST to /run/predict: sent at its start, answered at its end.
        const direct = since.find((e) => e.name.includes("/run/predict"));
        const join = direct || since.find((e) => e.name.includes("/queue/join"));
        const data = direct || since.filter((e) => e.name.includes("/queue/data") && e.responseEnd > 0).pop();
        state.sent = join ? join.startTime : null;
        state.answered = data && data.responseEnd > 0 && data.responseEnd <= state.changed ? data.responseEnd : null;
        state.done = true;
      };
      const observer = new MutationObserver(() => {
        if (state.clicked === null || state.changed !== null) return;
        if (errors() > errorsBefore) {  // Gradio shows "Error" where the change should have been
          state.error = true;
          state.done = true;
          stop();
          return;
        }
        if (!holds()) return;
        state.changed = performance.now();
        stop();
        requestAnimationFrame(() => setTimeout(finish, 0));  // after the frame that paints it
        setTimeout(() => { if (!state.done) { state.done = true; } }, 2000);  // no frame: the change it is
      });
      const clicked = (event) => { if (state.clicked === null) state.clicked = event.timeStamp; };
      const kinds = ["pointerdown", "mousedown", "click"];
      kinds.forEach((kind) => window.addEventListener(kind, clicked, true));
      observer.observe(document, {subtree: true, childList: true, characterData: true});
      stop = () => {
        observer.disconnect();
        kinds.forEach((kind) => window.removeEventListener(kind, clicked, true));
      };
      this.state = state;
    },
  };
})();
""".replace("__ERROR__", json.dumps(ERROR))
"""Installed in every page: ``arm(groups)`` before a click, then ``state`` says when it changed."""

FIRST_PAGE_JS = """
(() => {
  const ready = __READY__;
  const state = {ready: null, shown: null, done: false};
  window.__a01first = state;
  const shows = (selector) => {
    const element = document.querySelector(selector);
    return !!element && element.getClientRects().length > 0 && element.textContent.trim() !== "";
  };
  const observer = new MutationObserver(() => {
    if (state.ready !== null || !ready.every(shows)) return;
    state.ready = performance.now();
    observer.disconnect();
    requestAnimationFrame(() => setTimeout(() => { state.shown = performance.now(); state.done = true; }, 0));
    setTimeout(() => { state.done = true; }, 2000);
  });
  observer.observe(document, {subtree: true, childList: true, characterData: true});
})();
""".replace("__READY__", json.dumps(list(FIRST_PAGE_READY)))
"""Installed before the page's own scripts: when the first page first showed what it must."""

SETTLED_JS = """() => [...document.querySelectorAll('[data-testid="status-tracker"]:not(.hide)')]
  .every((tracker) => tracker.querySelector('.error'))"""
"""No Gradio event pending (a tracker that shows an error is not pending)."""


class MeasurementError(RuntimeError):
    """The measurement failed (an element never appeared or never changed, the server or the browser
    did not start): no figure can be given, which is not the same as a slow Space."""


@dataclass(frozen=True)
class Change:
    """An element whose text an action must change: ``selector`` must match, its text must differ
    from before the click, be non-empty, and hold ``includes`` when given."""

    selector: str
    includes: str | None = None


def changed(*alternatives: Change | str) -> list[dict[str, Any]]:
    """A group of changes of which any one will do (a selector alone means "its text changed")."""
    return [asdict(a if isinstance(a, Change) else Change(a)) for a in alternatives]


@dataclass
class Report:
    """What one run measured, with the conditions it was measured in."""

    rounds: int
    chromium: str = ""
    chromium_path: str = ""
    python: str = platform.python_version()
    cpus: int | None = os.cpu_count()
    measured_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in ACTIONS})
    """Milliseconds from the click (navigation start for the first page) to the updated content painted."""
    phases: dict[str, list[dict[str, float]]] = field(default_factory=lambda: {name: [] for name in ACTIONS})
    """Where each sample's time went (when the page's resource timings show it): ``send`` from the
    click to the event posted (to Gradio's queue, or straight to its handler for an action that skips
    the queue), ``server`` from there to its answer complete (the result stream closed, or the POST's
    response; the network, the queue and the handler), ``draw`` from there to the change painted."""
    javascript_errors: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for name, target in ACTIONS.items():
            values = self.samples.get(name, [])
            p50 = statistics.median(values) if values else None
            phases = self.phases.get(name, [])
            split = {f"{part}_p50_ms": statistics.median(p[part] for p in phases) if phases else None
                     for part in PHASES}
            rows.append({"action": name, "n": len(values), "p50_ms": p50, "p95_ms": quantile(values, 0.95),
                         "target_ms": target, "ok": p50 is not None and p50 <= target, **split,
                         "samples_ms": values, "phases_ms": phases})
        return rows

    def to_json(self) -> dict[str, Any]:
        return {"command": "python -m envcore bench ui --browser", "measured_at": self.measured_at,
                "rounds": self.rounds, "chromium": self.chromium, "chromium_path": self.chromium_path,
                "python": self.python, "cpus": self.cpus, "load_before": self.load_before,
                "load_after": self.load_after, "javascript_errors": self.javascript_errors, "actions": self.rows()}


def quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank quantile (p95 of 10 values is the largest)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(max(math.ceil(q * len(ordered)) - 1, 0), len(ordered) - 1)]


def table(report: Report) -> str:
    """The printed figures: conditions first, then one row per action, with where its p50 went."""
    def load(values: list[float]) -> str:
        return " ".join(f"{v:.2f}" for v in values)

    def ms(value: float | None, width: int = 8) -> str:
        return f"{value:{width}.0f}" if value is not None else f"{'-':>{width}}"

    lines = [f"Chromium {report.chromium} ({report.chromium_path}), python {report.python}, {report.cpus} CPUs",
             f"load average (1/5/15 min): before {load(report.load_before)}, after {load(report.load_after)}",
             (f"click -> updated content painted, in the browser, {report.rounds} round(s); first page: navigation "
              "start -> intro and Play controls painted, fresh context"),
             (f"  {'action':<26} {'n':>3} {'p50 ms':>8} {'p95 ms':>8} {'target':>9}  {'ok/over':<7}"
              "  p50 of send / server / draw")]
    rows = report.rows()
    for row in rows:
        verdict = "-" if row["p50_ms"] is None else ("ok" if row["ok"] else "over")
        split = " / ".join(ms(row[f"{part}_p50_ms"], 0) for part in PHASES)
        lines.append(f"  {row['action']:<26} {row['n']:>3} {ms(row['p50_ms'])} {ms(row['p95_ms'])} "
                     f"{'<= ' + format(row['target_ms'], '.0f'):>9}  {verdict:<7}  {split}")
    over = [row["action"] for row in rows if row["p50_ms"] is not None and not row["ok"]]
    lines.append(f"p50 over target: {', '.join(over) if over else 'none'}")
    lines.append("send: click -> event posted (to Gradio's queue, or straight to its handler); server: -> its "
                 "answer complete; draw: -> change painted")
    if report.javascript_errors:
        lines.append(f"JavaScript errors on the page ({len(report.javascript_errors)}): "
                     f"{report.javascript_errors[0][:200]}")
    return "\n".join(lines)


def server_error(log_path: str | None) -> str:
    """The last exception the server logged (``""`` when none), to say why a page showed no change."""
    if not log_path or not Path(log_path).exists():
        return ""
    lines = Path(log_path).read_text(errors="replace").splitlines()
    last = next((line.strip() for line in reversed(lines) if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line)), "")
    return f"; the server's last exception: {last} (log: {log_path})" if last else ""


class _Visitor:
    """One browser page on the Space: clicks, and the time each click took to show its change."""

    def __init__(self, page: Any, report: Report, server_log: str | None = None) -> None:
        self.page = page
        self.report = report
        self.server_log = server_log

    def failed(self, what: str) -> MeasurementError:
        """The error for a measurement that failed, with the Space's error if it showed one."""
        try:
            shown = self.page.locator(ERROR).count()
        except PlaywrightError:  # the page itself is gone
            shown = 0
        return MeasurementError(what + (f"; the page shows {shown} Gradio error badge(s)" if shown else "")
                                + server_error(self.server_log))

    def measure(self, action: str | None, click: Callable[[], None], *groups: list[dict[str, Any]]) -> float:
        """Arm the probe for ``groups``, ``click``, wait for the change painted; record it under
        ``action`` (``None``: a step of the set-up, waited for and not recorded)."""
        what = " and ".join(" or ".join(c["selector"] + (f" (holding {c['includes']!r})" if c["includes"] else "")
                                        for c in group) for group in groups)
        self.page.evaluate("groups => window.__a01bench.arm(groups)", list(groups))
        try:
            click()
            self.page.wait_for_function("() => window.__a01bench.state.done", timeout=WAIT_MS, polling=POLL_MS)
        except PlaywrightError as exc:
            state = self._state()
            cause = ("the click never reached the page" if state and state.get("clicked") is None
                     else f"the page never showed the change of {what}")
            raise self.failed(f"{action or 'set-up'}: {cause} within {WAIT_MS / 1000:.0f} s "
                              f"({str(exc).splitlines()[0]})") from None
        state = self._state() or {}
        if state.get("error"):
            raise self.failed(f"{action or 'set-up'}: the Space answered with an error instead of changing {what}")
        end = state["shown"] if state.get("shown") is not None else state["changed"]
        elapsed = float(end - state["clicked"])
        if action is not None:
            self.report.samples[action].append(elapsed)
            if state.get("sent") is not None and state.get("answered") is not None:
                self.report.phases[action].append({"send": state["sent"] - state["clicked"],
                                                   "server": state["answered"] - state["sent"],
                                                   "draw": end - state["answered"]})
        self.settle()
        return elapsed

    def _state(self) -> dict[str, Any] | None:
        try:
            return self.page.evaluate("() => window.__a01bench && window.__a01bench.state")
        except PlaywrightError:  # the page itself is gone: the caller's error says so
            return None

    def settle(self) -> None:
        """Wait (at most ``SETTLE_MS``) until no Gradio event is pending, so the next click starts clean."""
        try:
            self.page.wait_for_function(SETTLED_JS, timeout=SETTLE_MS, polling=POLL_MS)
        except PlaywrightTimeout:
            pass  # a tracker left showing is not worth failing for; the next measurement still waits for its change

    def tab(self, name: str) -> None:
        """Open a top-level tab: its button ``#tab-<name>-button`` (from the tab's ``elem_id``), or by name."""
        button = self.page.locator(f"#tab-{name.lower()}-button")
        (button if button.count() else self.page.get_by_role("tab", name=name, exact=True)).first.click()

    def reveal(self, selector: str, tab: str) -> None:
        """Make ``selector`` visible: click the inner tab whose name starts with ``tab``, or failing
        that each inner tab in turn (a tab renamed costs a little time, not the measurement)."""
        target = self.page.locator(selector).first
        if target.is_visible():
            return
        named = self.page.get_by_role("tab", name=re.compile("^" + re.escape(tab)))
        if named.count():
            named.first.click()
            if self.shows(target):
                return
        for candidate in self.page.get_by_role("tab").all():
            if (candidate.is_visible() and candidate.get_attribute("aria-selected") != "true"
                    and candidate.inner_text().strip() not in TOP_TABS):
                candidate.click()
                if self.shows(target, timeout_ms=1_000):
                    return
        raise self.failed(f"{selector} is on no tab of the page (looked for the tab {tab!r} first)")

    @staticmethod
    def shows(locator: Any, timeout_ms: float = 5_000) -> bool:
        try:
            locator.wait_for(state="visible", timeout=timeout_ms)
        except PlaywrightTimeout:
            return False
        return True

    def fill(self, selector: str, text: str) -> None:
        box = self.page.locator(selector).first.get_by_role("textbox").first
        try:
            box.fill(text, timeout=WAIT_MS)
        except PlaywrightError as exc:
            raise self.failed(f"no text box in {selector}: {str(exc).splitlines()[0]}") from None

    def require(self, selector: str) -> Any:
        locator = self.page.locator(selector).first
        try:
            locator.wait_for(state="visible", timeout=WAIT_MS)
        except PlaywrightError:
            raise self.failed(f"{selector} never appeared on the page within {WAIT_MS / 1000:.0f} s") from None
        return locator

    def options(self, dropdown: str) -> tuple[Any, list[tuple[str, bool]]]:
        """Open the Gradio dropdown ``dropdown``: its option locator and each option's (label, selected)."""
        box = self.require(dropdown).get_by_role("combobox")
        box.click()
        listbox = self.page.locator(f"#{box.get_attribute('aria-controls')}")
        try:
            listbox.get_by_role("option").first.wait_for(state="visible", timeout=WAIT_MS)
        except PlaywrightError:
            raise self.failed(f"the dropdown {dropdown} offers no option") from None
        options = listbox.get_by_role("option")
        return options, [(options.nth(i).get_attribute("aria-label") or "", options.nth(i).get_attribute(
            "aria-selected") == "true") for i in range(options.count())]


def first_page(browser: Any, url: str, report: Report, server_log: str | None = None) -> None:
    """Navigation start to the first page painted with the intro and the Play controls, in a fresh
    context (no cache, no cookies), as a first visitor sees it."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        context.add_init_script(FIRST_PAGE_JS)
        page = context.new_page()
        page.goto(url, wait_until="commit", timeout=WAIT_MS)
        try:
            page.wait_for_function("() => window.__a01first && window.__a01first.done", timeout=WAIT_MS,
                                   polling=POLL_MS)
        except PlaywrightError:
            raise MeasurementError(f"first page: {', '.join(FIRST_PAGE_READY)} never all showed within "
                                   f"{WAIT_MS / 1000:.0f} s" + server_error(server_log)) from None
        state = page.evaluate("() => window.__a01first")
        report.samples["first page"].append(float(state["shown"] if state.get("shown") is not None else state["ready"]))
    finally:
        context.close()


def play(visitor: _Visitor, round_: int) -> None:
    """One episode by hand: New episode, open a file, search, send a request, run tests, view the diff."""
    page = visitor.page
    visitor.tab("Play")
    visitor.require("#play-new")
    if page.locator("#play-seed").count():  # a seed of its own each round; without the box, the Space draws one
        visitor.fill("#play-seed", str(SEED + round_))
    visitor.measure("play: new episode", lambda: page.click("#play-new"), changed(STATUS))

    visitor.reveal("#play-files", "Code")
    files = page.locator("#play-files input[type=radio]")
    visitor.require("#play-files input[type=radio]")
    paths = [files.nth(i).get_attribute("value") or "" for i in range(files.count())]
    path = next((p for p in paths if "/routers/" in p and p.endswith(".py") and not p.endswith("__init__.py")),
                next((p for p in paths if p.endswith(".py")), paths[0]))
    visitor.measure("play: open a file", lambda: files.nth(paths.index(path)).click(),
                    changed(STATUS), changed("#play-editor" + CODE))

    visitor.fill("#play-query", QUERIES[round_ % len(QUERIES)])
    visitor.measure("play: search", lambda: page.click("#play-search"),
                    changed(STATUS), changed("#play-search-results" + CODE, "#play-search-msg" + MARKDOWN))

    visitor.reveal("#play-send", "HTTP")
    visitor.fill("#play-path", REQUEST_PATH)
    visitor.measure("play: send a request", lambda: page.click("#play-send"),
                    changed(STATUS), changed(Change("#play-response" + MARKDOWN, includes="HTTP")))

    visitor.reveal("#play-tests", "Tests")
    visitor.measure("play: run tests", lambda: page.click("#play-tests"),
                    changed(STATUS), changed("#play-tests-table [role=grid]", "#play-tests-msg" + MARKDOWN))
    visitor.measure("play: view diff", lambda: page.click("#play-view-diff"), changed(STATUS))


SLIDER_JS = """() => {
  const slider = document.querySelector('#watch-index input[type=range]');
  return slider ? [Number(slider.value), Number(slider.max)] : null;
}"""
"""The Watch step slider: (step shown, last step), so a step is never asked for past either end."""
WATCH_VIEW = ("#watch-left-title" + MARKDOWN, "#watch-left-action" + CODE, "#watch-left-observation" + CODE)


def watch_setup(visitor: _Visitor) -> None:
    """The Watch tab with the heuristic baseline's set on the left (any set if there is none)."""
    visitor.tab("Watch")
    options, offered = visitor.options("#watch-left-set")
    index = next((i for i, (label, _) in enumerate(offered) if "heuristic" in label.lower()), 0)
    if offered[index][1]:  # already shown
        visitor.page.keyboard.press("Escape")
        return
    visitor.measure(None, lambda: options.nth(index).click(), changed(*WATCH_VIEW))


def watch(visitor: _Visitor, round_: int) -> None:
    """Pick another scenario, then step forward twice and back once (back instead at the last step)."""
    page = visitor.page
    options, offered = visitor.options("#watch-scenario")
    others = [i for i, (_, selected) in enumerate(offered) if not selected]
    if not others:
        raise visitor.failed("#watch-scenario offers no other scenario to pick")
    pick = others[round_ % len(others)]
    visitor.measure("watch: pick a scenario", lambda: options.nth(pick).click(), changed(*WATCH_VIEW))
    for move in ("forward", "forward", "back"):
        at, end = page.evaluate(SLIDER_JS) or (0, math.inf)
        if move == "forward" and at >= end:
            move = "back"
        if move == "back" and at <= 0:
            continue
        button = f"#watch-{move}"
        visitor.measure(f"watch: step {move}", lambda button=button: page.click(button), changed(*WATCH_VIEW))


RATES = "#dash-rates .js-plotly-plot"


def dashboard(visitor: _Visitor, round_: int) -> None:
    """Switch the rates chart's dimension, then its measure, show every run and hide them again, then
    untick (or tick again) one set."""
    page = visitor.page
    visitor.tab("Dashboard")
    visitor.require(RATES + " .main-svg")
    drawn = changed(RATES + " .gtitle", RATES + " .g-xtitle")

    dimension = visitor.require("#dash-dimension")
    labels = dimension.locator("label")
    unchecked = [i for i in range(labels.count()) if not labels.nth(i).locator("input").is_checked()]
    if not unchecked:
        raise visitor.failed("#dash-dimension offers no other choice")
    target = labels.nth(unchecked[round_ % len(unchecked)])
    visitor.measure("dashboard: break down by", target.click, drawn)

    metric = page.locator("#dash-metric")
    if not metric.count():  # a page from before it had an elem_id: the radio group offering "Partial fix"
        metric = page.locator("fieldset").filter(has=page.get_by_label("Partial fix", exact=True))
    metric = metric.first
    labels = metric.locator("label")
    unchecked = [i for i in range(labels.count()) if not labels.nth(i).locator("input").is_checked()]
    if not unchecked:
        raise visitor.failed("the Dashboard's measure radio (#dash-metric, or the group offering 'Partial fix') "
                               "was not found")
    target = labels.nth(unchecked[round_ % len(unchecked)])
    visitor.measure("dashboard: measure", target.click, drawn)

    toggle = page.locator("#dash-show-all input[type=checkbox]")  # the runs hidden at first, and back
    if toggle.count():
        rows = changed("#dash-leaderboard .table-wrap")  # the table's rows, not the tracker drawn over them
        visitor.measure("dashboard: show every run", toggle.first.click, rows)
        visitor.measure(None, toggle.first.click, rows)

    section = page.locator("#dash-sets-section > button")  # the sets sit in a closed section, a click away
    if section.count() and not page.locator("#dash-sets").first.is_visible():
        section.first.click()
    sets = visitor.require("#dash-sets").locator("label")
    names = [(sets.nth(i).locator("input").get_attribute("name") or "") + " " + sets.nth(i).inner_text()
             for i in range(sets.count())]
    index = next((i for i, n in enumerate(names) if "heuristic" in n.lower()), 0)
    # the heatmap's columns name the sets (a bar chart's legend did, on older pages)
    visitor.measure("dashboard: rollout sets", sets.nth(index).click,
                    changed(RATES + " .xaxislayer-above", RATES + " .legend", RATES + " .gtitle"))


def run(*, rounds: int, chromium: str = CHROMIUM, port: int | None = None) -> Report:
    """Start the Space and Chromium, measure every action ``rounds`` times; raises
    :class:`MeasurementError` if the measurement fails."""
    from envcore.env.bench import free_port, start_server, stop_server

    if not Path(chromium).exists():
        raise MeasurementError(f"Chromium is not installed at {chromium}: apt-get install chromium, or give "
                               "--chromium PATH (or A01_CHROMIUM)")

    report = Report(rounds=rounds, chromium_path=chromium, load_before=list(os.getloadavg()))
    scratch = Path(tempfile.mkdtemp(prefix="a01-bench-ui-"))
    port = port or free_port()
    try:
        process = start_server(None, port, ready="/", timeout_s=120,
                               env={"A01_HUMAN_LOG": str(scratch / "human.jsonl")})
    except RuntimeError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise MeasurementError(f"the Space did not start on port {port}: {exc}") from None
    server_log = process.log_path
    measured = False
    try:
        with sync_playwright() as playwright:
            try:
                browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            except PlaywrightError as exc:
                raise MeasurementError(f"Chromium did not start ({chromium}): {str(exc).splitlines()[0]}") from None
            try:
                report.chromium = browser.version
                _visit(browser, f"http://127.0.0.1:{port}/", report, server_log)
                measured = True
            except PlaywrightError as exc:
                raise MeasurementError(f"the browser failed: {str(exc).splitlines()[0]}"
                                       + server_error(server_log)) from None
            finally:
                browser.close()
    finally:
        stop_server(process, keep_log=not measured)  # kept when the measurement failed: the error names it
        shutil.rmtree(scratch, ignore_errors=True)
    report.load_after = list(os.getloadavg())
    return report


def _visit(browser: Any, url: str, report: Report, server_log: str) -> None:
    """Every measurement, in order: first pages (fresh contexts), then one visitor's page through
    Play, Watch and Dashboard."""
    for _ in range(report.rounds):
        first_page(browser, url, report, server_log)
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(PROBE_JS)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.on("pageerror", lambda exc: report.javascript_errors.append(str(exc)))
    page.goto(url, timeout=WAIT_MS)
    visitor = _Visitor(page, report, server_log)
    visitor.require("#play-new")
    visitor.tab("Dashboard")  # the page's start-up loads (rollout sets, every chart) finish before any click
    visitor.require(RATES + " .main-svg")
    visitor.settle()
    for round_ in range(report.rounds):
        play(visitor, round_)
    watch_setup(visitor)
    for round_ in range(report.rounds):
        watch(visitor, round_)
    for round_ in range(report.rounds):
        dashboard(visitor, round_)
    context.close()


def _rounded(value: Any) -> Any:
    """Milliseconds to 0.1 ms (the clock's resolution in a page is coarser anyway)."""
    if isinstance(value, float):
        return round(value, 1)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def main(*, rounds: int, chromium: str = CHROMIUM, port: int | None = None, json_path: str | None = None) -> int:
    """Print the figures (and save them to ``json_path``); 0 whatever they are, 2 if the measurement failed."""
    try:
        report = run(rounds=rounds, chromium=chromium, port=port)
    except MeasurementError as exc:
        print(f"bench ui --browser: the measurement failed: {exc}", file=sys.stderr)
        return 2
    print(table(report))
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        figures = report.to_json()
        figures["actions"] = _rounded(figures["actions"])
        Path(json_path).write_text(json.dumps(figures, indent=2) + "\n")
        print(f"saved to {json_path}")
    return 0
