"""Failure analysis over any set of episode logs: training, evaluation, human play.

:func:`find_logs` collects the episode logs under a folder. :func:`analyze` gives every finished
episode its category (:mod:`envcore.feedback.categories`, with the scenario's bundle from the
cache when it has it) and adds up, overall and by bug class, tier, domain and agent:

- the count and rate of every category (infrastructure failures are counted, but left out of the
  rates);
- the solve statistics the plan weighs: graded episodes, full fixes, partial fixes, and the
  **solve score** ``(full + 0.5 x partial) / graded``;
- per agent, the same solve statistics by code-style value (``solve_by_style``) and how often it
  sprang each trap kind (``trap_springs``), which the factory job uses;
- up to ``examples`` example episodes per failure category, spread over agents and bug classes.
  Each one names its log, scenario and seed, so the Space can open it in the rollout viewer.

The oracle applies the reference fix; its runs validate scenarios and are left out unless
``include_validation``. Abandoned episodes (left unfinished) are not counted.
:func:`render_report` writes the analysis as Markdown.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envcore.env.episode_log import find_episode_logs, is_episode_log, log_set_name, read_episodes
from envcore.feedback.categories import BY_NAME, CATEGORIES, FAILURES, categorize, episode_facts

ANALYSIS_VERSION = 1
DIMENSIONS = ("bug_class", "tier", "domain", "agent")
STYLE_AXES = ("layout", "auth", "store", "id_type")
"""The parts of a manifest's ``code_style`` (``package/inline/sqlite/str``), in order."""
VALIDATION_AGENTS = frozenset({"oracle"})
SKIPPED_DIRS = frozenset({"scenarios", "models", "adapters", "trackio", "feedback"})


def find_logs(root: str | Path) -> list[tuple[str, Path]]:
    """``(name, path)`` of every episode log under ``root`` (or ``root`` itself when it is a log), named
    as the Space names them (:func:`~envcore.env.episode_log.log_set_name`)."""
    root = Path(root)
    if root.is_file():
        return [(log_set_name(Path(root.name)), root)] if is_episode_log(root) else []
    return sorted(find_episode_logs(root, skip_dirs=SKIPPED_DIRS).items())


def _stats(names: Iterable[str]) -> dict[str, Any]:
    counts = Counter(names)
    graded = sum(n for name, n in counts.items() if not BY_NAME[name].excluded)
    return {
        "episodes": sum(counts.values()), "graded": graded,
        "counts": {c.name: counts.get(c.name, 0) for c in CATEGORIES},
        "rates": {c.name: (counts.get(c.name, 0) / graded if graded else 0.0) for c in CATEGORIES if not c.excluded},
    }


def _solve(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Graded episodes, full and partial fixes, and the solve score of ``rows``."""
    names = [r["category"] for r in rows]
    graded = sum(1 for name in names if not BY_NAME[name].excluded)
    full, partial = names.count("solved"), names.count("partial_fix")
    return {"graded": graded, "full": full, "partial": partial,
            "score": (full + 0.5 * partial) / graded if graded else None}


SLICES = {
    "bug_class": lambda row: row["record"].bug_class,
    "tier": lambda row: str(row["record"].tier),
    "domain": lambda row: row["domain"],
    "agent": lambda row: row["record"].agent_id,
    **{axis: (lambda row, i=i: row["style"][i] if row["style"] else None) for i, axis in enumerate(STYLE_AXES)},
}
"""How a row is sliced: by :data:`DIMENSIONS` and by each code-style axis (``None``: unknown style)."""


def _grouped(rows: list[dict[str, Any]], slice_: str) -> dict[str, list[dict[str, Any]]]:
    """``rows`` by their value of ``slice_``, sorted by that value (rows without one left out)."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        value = SLICES[slice_](row)
        if value is not None:
            groups[value].append(row)
    return dict(sorted(groups.items()))


class _Bundles:
    """Bundles by scenario id, loaded once each (``None`` when the cache does not hold it)."""

    def __init__(self, cache: Any) -> None:
        self.cache, self.loaded = cache, {}

    def get(self, scenario_id: str) -> Any:
        if scenario_id not in self.loaded:
            try:
                self.loaded[scenario_id] = self.cache.load(scenario_id) if self.cache is not None else None
            except Exception:  # noqa: BLE001 - a scenario of another cache version, or a corrupt entry
                self.loaded[scenario_id] = None
        return self.loaded[scenario_id]


def analyze(logs: list[tuple[str, Path]], cache: Any = None, *, examples: int = 3,
            include_validation: bool = False) -> dict[str, Any]:
    """The analysis of every finished episode in ``logs``; see the module docstring."""
    bundles = _Bundles(cache)
    manifest = {row["scenario_id"]: row for row in (cache.rows if cache is not None else [])}
    rows: list[dict[str, Any]] = []
    sets: dict[str, dict[str, Any]] = {}
    for name, path in logs:
        kept = 0
        for record in read_episodes(path):
            if record.outcome == "abandoned" or (record.agent_id in VALIDATION_AGENTS and not include_validation):
                continue
            facts = episode_facts(record, bundles.get(record.scenario_id))
            category, detail = categorize(facts)
            entry = manifest.get(record.scenario_id, {})
            style = entry.get("code_style")
            rows.append({"record": record, "category": category.name, "detail": detail, "set": name, "log": str(path),
                         "domain": entry.get("domain", "unknown"), "facts": facts,
                         "style": tuple(str(style).split("/")) if style else ()})
            kept += 1
        sets[name] = {"log": str(path), "episodes": kept}

    by = {dim: {k: _stats(r["category"] for r in v) for k, v in _grouped(rows, dim).items()} for dim in DIMENSIONS}
    solve = {dim: {k: _solve(v) for k, v in _grouped(rows, dim).items()} for dim in DIMENSIONS}
    # per agent: what a plan for one agent weighs (its slices, its code styles, the traps it sprang)
    per_agent: dict[str, dict[str, Any]] = {}
    by_style: dict[str, dict[str, dict[str, Any]]] = {}
    springs: dict[str, dict[str, int]] = {}
    for agent, mine in _grouped(rows, "agent").items():
        per_agent[agent] = {dim: {k: _solve(v) for k, v in _grouped(mine, dim).items()}
                            for dim in ("bug_class", "tier", "domain")} | {"overall": _solve(mine)}
        by_style[agent] = {axis: {k: _solve(v) for k, v in groups.items()}
                           for axis in STYLE_AXES if (groups := _grouped(mine, axis))}
        sprung = Counter(t for r in mine if r["category"] == "over_restriction" for t in r["facts"].sprung_traps)
        springs[agent] = dict(sprung.most_common())
    return {
        "version": ANALYSIS_VERSION,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cache": cache.root.name if cache is not None else None,
        "sets": sets,
        "categories": [{"name": c.name, "title": c.title, "description": c.description, "excluded": c.excluded,
                        "failure": c.failure} for c in CATEGORIES],
        "overall": _stats(r["category"] for r in rows),
        "by": by,
        "solve": solve,
        "solve_by_agent": per_agent,
        "solve_by_style": by_style,
        "trap_springs": springs,
        "examples": _examples(rows, examples),
    }


def _examples(rows: list[dict[str, Any]], limit: int) -> dict[str, list[dict[str, Any]]]:
    """Up to ``limit`` episodes per failure category: a new agent first, then a new bug class, then any."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in FAILURES:
        candidates = [r for r in rows if r["category"] == name]
        chosen: list[dict[str, Any]] = []
        marks = (lambda r: r["record"].agent_id, lambda r: (r["record"].agent_id, r["record"].bug_class),
                 lambda r: r["record"].episode_id)
        taken: set[str] = set()
        for mark in marks:
            seen = {mark(c) for c in chosen}
            for row in candidates:
                if len(chosen) >= limit:
                    break
                if row["record"].episode_id in taken or mark(row) in seen:
                    continue
                seen.add(mark(row))
                taken.add(row["record"].episode_id)
                chosen.append(row)
        if chosen:
            out[name] = [{"set": r["set"], "log": r["log"], "agent": r["record"].agent_id,
                          "scenario_id": r["record"].scenario_id, "seed": r["record"].seed,
                          "episode_id": r["record"].episode_id, "bug_class": r["record"].bug_class,
                          "tier": r["record"].tier, "detail": r["detail"], "reward": r["record"].reward} for r in chosen]
    return out


def render_report(analysis: dict[str, Any], *, title: str = "Failure analysis") -> str:
    """The analysis as Markdown: categories overall, by agent, bug class, tier and domain; examples."""
    titles = {c["name"]: c["title"] for c in analysis["categories"]}
    shown = [c["name"] for c in analysis["categories"] if not c["excluded"]]
    overall = analysis["overall"]
    lines = [f"# {title}", "",
             f"{overall['episodes']} episodes from {len(analysis['sets'])} log(s) (cache {analysis['cache']}); "
             f"{overall['graded']} graded, {overall['counts'].get('infrastructure', 0)} infrastructure failures "
             "(not counted). Each cell: share of graded episodes.", "",
             "| category | what | episodes | share |", "| --- | --- | ---: | ---: |"]
    for c in analysis["categories"]:
        if c["excluded"]:
            continue
        lines.append(f"| {c['title']} | {c['description']} | {overall['counts'][c['name']]} | "
                     f"{overall['rates'][c['name']]:.0%} |")

    def table(dimension: str, label: str) -> list[str]:
        head = f"| {label} | graded | " + " | ".join(titles[n] for n in shown) + " |"
        rule = "| --- | ---: | " + " | ".join("---:" for _ in shown) + " |"
        body = [f"| {key} | {stat['graded']} | " + " | ".join(f"{stat['rates'][n]:.0%}" for n in shown) + " |"
                for key, stat in analysis["by"][dimension].items()]
        return ["", f"## By {label}", "", head, rule, *body]

    for dimension, label in (("agent", "agent"), ("bug_class", "bug class"), ("tier", "tier"), ("domain", "domain")):
        lines += table(dimension, label)
    lines += ["", "## Examples", ""]
    for name, items in analysis["examples"].items():
        lines.append(f"**{titles[name]}**")
        lines.append("")
        for item in items:
            lines.append(f"- `{item['scenario_id']}` (seed {item['seed']}, {item['bug_class']}, tier {item['tier']}) by "
                         f"{item['agent']} in {item['set']}: {item['detail'] or '-'}")
        lines.append("")
    return "\n".join(lines) + "\n"
