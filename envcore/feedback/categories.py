"""Why an episode failed: one category per episode, from a declarative table.

:func:`episode_facts` reads what the episode log says about an episode. It uses the reward
breakdown, which every producer writes, and the verification report, which in-process runs write.
With the scenario's bundle it also knows which sites stayed open, which traps were sprung and
which files the reference fix touches. :data:`CATEGORIES` is the table: an ordered list of named
rules over those facts, where the first rule that matches is the category. The order is the
diagnosis's priority. A patch that broke the app is "app broken" even if it also ran out of steps.
A patch that locked out an admin is "over-restriction" even though it closed the hole, and one that
opened a new hole (a guard probe fails) is "guard broken" whatever else it did.

| category | rule (first match wins) |
| --- | --- |
| ``infrastructure`` | no reward: the sandbox failed, not the agent (excluded from every rate) |
| ``solved`` | full fix (not a failure; kept so rates have their denominator) |
| ``app_broken`` | the patched app does not load |
| ``guard_broken`` | a guard probe fails: security the shipped app had is gone (detail: which guards) |
| ``over_restriction`` | a regression or trap probe fails (legitimate use broken; detail: which traps, how many regressions) |
| ``partial_fix`` | some exploits refused, not all, legitimate use intact (detail: which sites stayed open) |
| ``format_errors`` | at least half the steps were replies with no readable action |
| ``budget_exhausted`` | the step budget (or the harness's token budget) ran out with no exploit closed |
| ``no_patch`` | submitted without changing the app |
| ``wrong_site`` | a patch that closes no exploit (detail: the files changed against the files the fix needs) |
| ``other`` | anything else (should stay empty; a test checks the shipped runs) |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envcore.env.episode_log import EpisodeRecord
from envcore.env.reply import is_format_error
from envcore.patching import parse_patch


@dataclass(frozen=True)
class EpisodeFacts:
    """What the categories look at, read once from a record (and its bundle when known)."""

    reward: float | None
    outcome: str
    resolution: str | None
    app_loads: bool
    legit_broken: float
    """Share of regression and trap probes that fail."""
    exploits_refused: float
    """Share of security probes whose exploit is refused."""
    steps: int
    format_errors: int
    budget_exhausted: bool
    changed_files: tuple[str, ...]
    fix_files: tuple[str, ...] = ()
    """Files the reference fix changes (empty when the bundle is unknown)."""
    open_sites: tuple[str, ...] = ()
    closed_sites: tuple[str, ...] = ()
    sprung_traps: tuple[str, ...] = ()
    """Traps whose probes fail, by name (a generated trap's name is its kind)."""
    guards_broken: float = 0.0
    """Share of guard probes that fail (0 for a scenario without guards)."""
    broken_guards: tuple[str, ...] = ()
    """Ids of the guard probes that fail (when the record carries a verification report)."""
    failed_regressions: int | None = None
    """Regression probes that fail (``None`` when the record carries no verification report)."""
    load_error: str = ""
    """Why the patched app did not load (from the verification report, when the record has it)."""

    @property
    def format_error_share(self) -> float:
        return self.format_errors / self.steps if self.steps else 0.0


def _components(record: EpisodeRecord) -> dict[str, dict[str, Any]]:
    return {c.get("name"): c for c in (record.reward_breakdown or {}).get("components", [])}


def _format_errors(record: EpisodeRecord) -> int:
    return sum(is_format_error((step.observation or {}).get("error")) for step in record.steps)


def _changed_files(diff: str) -> tuple[str, ...]:
    if not diff.strip():
        return ()
    try:
        return tuple(sorted({patch.path for patch in parse_patch(diff)}))
    except ValueError:  # a diff the log holds but this parser refuses: count it as a change somewhere
        return ("(unparsed diff)",)


def episode_facts(record: EpisodeRecord, bundle: Any = None) -> EpisodeFacts:
    """The facts of one record; ``bundle`` (the scenario's, when the cache has it) adds sites and traps."""
    parts = _components(record)
    measured = {name: float(c.get("measured") or 0.0) for name, c in parts.items()}
    resolution = (record.reward_breakdown or {}).get("resolution")
    open_sites: set[str] = set()
    closed_sites: set[str] = set()
    sprung: set[str] = set()
    broken_guards: set[str] = set()
    failed_regressions = None
    fix_files: tuple[str, ...] = ()
    report = record.verification or {}
    if bundle is not None:
        fix_files = _changed_files(bundle.reference_fix or "")
        if report.get("probes"):
            by_id = {p.id: p for p in bundle.probes}
            failed_regressions = 0
            for result in report["probes"]:
                probe = by_id.get(result.get("probe_id"))
                if probe is None:
                    continue
                kind = getattr(probe.kind, "value", probe.kind)
                if kind == "security":
                    (closed_sites if result.get("passed") else open_sites).update(probe.sites)
                elif kind == "trap" and not result.get("passed") and probe.trap:
                    sprung.add(str(probe.trap))
                elif kind == "regression" and not result.get("passed"):
                    failed_regressions += 1
                elif kind == "guard" and not result.get("passed"):
                    broken_guards.add(probe.id)
    return EpisodeFacts(
        reward=record.reward, outcome=record.outcome, resolution=resolution,
        app_loads=measured.get("app_loads", 1.0) >= 1.0,
        legit_broken=measured.get("legit_use_broken", 0.0),
        guards_broken=measured.get("guards_broken", 0.0), broken_guards=tuple(sorted(broken_guards)),
        exploits_refused=measured.get("security_blocked", 0.0),
        steps=len(record.steps), format_errors=_format_errors(record),
        budget_exhausted=record.outcome == "budget_exhausted" or measured.get("budget_exhausted", 0.0) >= 1.0,
        changed_files=_changed_files(record.diff or ""), fix_files=fix_files,
        open_sites=tuple(sorted(open_sites)),  # a site is open while any of its exploits works
        closed_sites=tuple(sorted(closed_sites - open_sites)), sprung_traps=tuple(sorted(sprung)),
        failed_regressions=failed_regressions, load_error=str(report.get("load_error") or "").strip(),
    )


@dataclass(frozen=True)
class Category:
    name: str
    title: str
    description: str
    rule: Callable[[EpisodeFacts], bool]
    detail: Callable[[EpisodeFacts], str] = field(default=lambda f: "")
    excluded: bool = False
    """Left out of every rate (infrastructure failures are nobody's result)."""
    failure: bool = True
    """Whether it is a failure (``solved`` is not)."""


def _over_detail(f: EpisodeFacts) -> str:
    parts = []
    if f.sprung_traps:
        parts.append("trap sprung: " + ", ".join(f.sprung_traps))
    if f.failed_regressions:
        parts.append(f"{f.failed_regressions} regression probe(s) fail")
    return "; ".join(parts) or f"{f.legit_broken:.0%} of regression and trap probes fail"


def _guard_detail(f: EpisodeFacts) -> str:
    if f.broken_guards:
        return "guard broken: " + ", ".join(f.broken_guards)
    return f"{f.guards_broken:.0%} of guard probes fail"


def _partial_detail(f: EpisodeFacts) -> str:
    if f.open_sites:
        closed = f" (closed: {', '.join(f.closed_sites)})" if f.closed_sites else ""
        return f"still open: {', '.join(f.open_sites)}{closed}"
    return f"{f.exploits_refused:.0%} of exploits refused"


def _wrong_site_detail(f: EpisodeFacts) -> str:
    changed = ", ".join(f.changed_files)
    if f.fix_files and not set(f.changed_files) & set(f.fix_files):
        return f"changed {changed}; the fix is in {', '.join(f.fix_files)}"
    return f"changed {changed}; no exploit is refused"


CATEGORIES: tuple[Category, ...] = (
    Category("infrastructure", "infrastructure failure", "the sandbox failed, not the agent; excluded from rates",
             lambda f: f.reward is None or f.outcome == "infrastructure_error", excluded=True, failure=False),
    Category("solved", "solved", "a full fix", lambda f: f.resolution == "full", failure=False),
    Category("app_broken", "app broken", "the patched app does not load", lambda f: not f.app_loads,
             lambda f: f.load_error.splitlines()[-1][:160] if f.load_error else ""),
    Category("guard_broken", "guard broken", "a new hole: a guard probe (security the shipped app had) fails",
             lambda f: f.guards_broken > 0 or bool(f.broken_guards), _guard_detail),
    Category("over_restriction", "over-restriction", "legitimate use broken: a regression or trap probe fails",
             lambda f: f.legit_broken > 0, _over_detail),
    Category("partial_fix", "partial fix", "some exploits refused, not all; legitimate use intact",
             lambda f: f.resolution == "partial", _partial_detail),
    Category("format_errors", "format errors", "at least half the steps were replies with no readable action",
             lambda f: f.steps > 0 and f.format_error_share >= 0.5,
             lambda f: f"{f.format_errors}/{f.steps} steps unreadable"),
    Category("budget_exhausted", "step budget exhausted", "the budget ran out with no exploit closed",
             lambda f: f.budget_exhausted, lambda f: f"{f.steps} steps, {len(f.changed_files)} file(s) changed"),
    Category("no_patch", "no patch", "submitted without changing the app", lambda f: not f.changed_files,
             lambda f: f"{f.steps} steps, nothing changed"),
    Category("wrong_site", "wrong site patched", "a patch that closes no exploit", lambda f: bool(f.changed_files),
             _wrong_site_detail),
    Category("other", "other", "none of the above", lambda f: True),
)
BY_NAME = {c.name: c for c in CATEGORIES}
FAILURES = tuple(c.name for c in CATEGORIES if c.failure)


def categorize(facts: EpisodeFacts) -> tuple[Category, str]:
    """The first category whose rule matches, and its detail."""
    for category in CATEGORIES:
        if category.rule(facts):
            return category, category.detail(facts)
    raise AssertionError("the last category matches everything")
