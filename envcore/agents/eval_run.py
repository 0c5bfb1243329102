"""One evaluation run into a folder: what ``python -m envcore eval`` does, callable from code.

:func:`evaluate_into` plays an agent on the first ``n`` scenarios of a split (the same ones for every
agent, so runs pair up), resumably, and writes ``episodes.jsonl`` (optionally compressed to
``episodes.jsonl.gz``), ``summary.json`` (with a ``run`` block saying what was played: agent, kind,
model, adapter, split, cache, step budget) and ``report.md``. The training pipeline evaluates its
adapter with it, so a trained model's evaluation has exactly the shape of every shipped one.

Played against servers (``urls``), the scenarios are the servers' own: their catalogue
(``GET /scenarios``) says which ids the split holds, every server must offer the same ones, and the
local cache the agent and the summary read must hold each of them with the same content (else the
run stops before the first episode and says which cache the servers serve).

The ``private`` split is not read from a cache: its scenarios are generated from the evaluator's
secret when the run starts, played in process, recorded by content hash alone and deleted when it
ends (:mod:`envcore.agents.private_eval`).
"""

from __future__ import annotations

import gzip
import json
import shutil
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from envcore.agents.catalog import LLMOptions, agent_factory
from envcore.agents.evaluate import evaluation_episodes, render_report, scenario_domains, summarize
from envcore.agents.rollouts import EpisodeSpec, RolloutResult, run_rollouts


class EvaluationError(ValueError):
    """The evaluation cannot run as asked (no scenarios, an agent that cannot be built, ...)."""


@dataclass
class EvaluationRun:
    summary: dict[str, Any]
    result: RolloutResult
    agent_id: str
    folder: Path
    failed: list[str] = field(default_factory=list)


def catalogue(url: str, *, split: str | None, timeout: float = 30.0) -> dict[str, str]:
    """The scenarios a server offers in ``split`` (``None``: all), as id: content hash."""
    query = urllib.parse.urlencode({"limit": 2000, **({"split": split} if split else {})})
    out: dict[str, str] = {}
    offset = 0
    while True:
        address = f"{url.rstrip('/')}/scenarios?{query}&offset={offset}"
        try:
            with urllib.request.urlopen(address, timeout=timeout) as response:
                page = json.load(response)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EvaluationError(f"cannot read the scenario catalogue of {url}: {exc}") from None
        rows = page.get("scenarios", [])
        out.update({row["scenario_id"]: row.get("sha256", "") for row in rows})
        offset += len(rows)
        if not rows or offset >= int(page.get("total", 0)):
            return out


def served_scenarios(urls: list[str], *, split: str | None, cache: Any) -> list[str]:
    """The ids of ``split`` the servers at ``urls`` serve, sorted; every server must serve the same
    ones, and ``cache`` must hold each with the same content (the agent and the summary read it)."""
    offers = {url: catalogue(url, split=split) for url in dict.fromkeys(urls)}
    first_url, first = next(iter(offers.items()))
    for url, offer in offers.items():
        if offer != first:
            raise EvaluationError(f"{url} and {first_url} serve different scenarios in split {split or 'any'!r}: "
                                  "point every --url at servers of one cache")
    if not first:
        raise EvaluationError(f"{first_url} serves no scenario in split {split or 'any'!r}")
    missing = not_held(cache, first)
    if missing:
        raise EvaluationError(
            f"{first_url} serves {len(missing)} of its {len(first)} scenarios in split {split or 'any'!r} that the "
            f"local cache {cache.root} does not hold as served (e.g. {missing[0]}): pass --cache with a copy of the "
            "cache the server serves")
    return sorted(first)


def not_held(cache: Any, served: dict[str, str]) -> list[str]:
    """The ids of ``served`` (scenario id -> content hash, as a server's catalogue lists them) that
    ``cache`` does not hold with the same content, sorted."""
    local = {row["scenario_id"]: row.get("sha256", "") for row in cache.rows}
    return sorted(sid for sid, digest in served.items() if local.get(sid) != digest)


def prepare_run(agent: str, *, cache: Any, llm: Any, name: str | None, out: str | Path) -> tuple[Any, str, Path, Path]:
    """The agent's factory and id (an :class:`EvaluationError` if it cannot be built), the output
    folder (made) and its episode log (unpacked if it was left compressed)."""
    try:
        factory, agent_id = agent_factory(agent, cache=cache, llm=llm, agent_id=name)
    except (ValueError, OSError) as exc:
        raise EvaluationError(f"cannot build the {agent} agent: {exc}") from None
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return factory, agent_id, folder, unpack_log(folder)


def unpack_log(out: Path) -> Path:
    """``out/episodes.jsonl``, unpacked first from ``episodes.jsonl.gz`` when only that exists (resume)."""
    log, packed = out / "episodes.jsonl", out / "episodes.jsonl.gz"
    if packed.exists():
        if log.exists():
            raise EvaluationError(f"{out} holds both episodes.jsonl and episodes.jsonl.gz; keep one")
        with gzip.open(packed, "rb") as source, open(log, "wb") as target:
            shutil.copyfileobj(source, target)
        packed.unlink()
    return log


def evaluate_into(out: str | Path, agent: str, *, cache: Any, split: str = "test", n: int | None = None,
                  llm: LLMOptions = LLMOptions(), name: str | None = None, parallel: int = 1,
                  urls: list[str] | None = None, max_steps: int | None = None, compress: bool = False,
                  progress: Callable[[int], None] | None = None, title: str | None = None,
                  scenarios: list[str] | None = None, private_seed: str | None = None) -> EvaluationRun:
    """Evaluate ``agent`` into ``out``; see the module docstring. ``scenarios`` (ids) replaces the
    split's first ``n``: exactly those, sorted, one episode each. The split ``private`` is generated
    from ``private_seed`` (``None``: ``A01_PRIVATE_SEED``) instead of read from ``cache``, ``n`` of
    them (default 100), and recorded by content hash alone (:mod:`envcore.agents.private_eval`)."""
    from envcore.env.episode_log import read_episodes

    if split == "private":
        from envcore.agents.private_eval import evaluate_private

        if urls or scenarios is not None:
            raise EvaluationError("the private split is generated here: it cannot be played against servers "
                                  "or on named scenarios")
        return evaluate_private(out, agent, seed=private_seed, n=n, llm=llm, name=name, parallel=parallel,
                                max_steps=max_steps, compress=compress, progress=progress)
    split_filter = None if split == "any" else split
    if scenarios is None and urls:
        scenarios = served_scenarios(urls, split=split_filter, cache=cache)
        scenarios = scenarios if n is None else scenarios[:n]
    if scenarios is not None:
        episodes = [EpisodeSpec.of(index, scenario=sid) for index, sid in enumerate(sorted(set(scenarios)))]
    else:
        episodes = evaluation_episodes(cache, split=split_filter, n=n)
    if not episodes:
        raise EvaluationError(f"no scenarios in split {split!r} of {cache.root}")
    if max_steps is not None:
        episodes = [EpisodeSpec.of(e.seed, scenario=e.scenario, max_steps=max_steps) for e in episodes]
    factory, agent_id, out, log = prepare_run(agent, cache=cache, llm=llm, name=name, out=out)
    runtime = None
    if not urls:
        from envcore.env.environment import Runtime
        from envcore.env.sampler import CurriculumSampler

        runtime = Runtime.from_environ(sampler=CurriculumSampler(cache))
    result = run_rollouts(factory, episodes, log=log, parallel=parallel, urls=urls or None, runtime=runtime,
                          agent_id=agent_id, source="evaluation", progress=progress)
    records = [r for r in read_episodes(log) if r.agent_id == agent_id]
    summary = write_summary(out, records, cache=cache, title=title or f"{agent_id} on {split} ({cache.root.name})", run={
        "agent": agent_id, "kind": agent, "model": llm.model, "adapter": llm.adapter, "tool_format": llm.tool_format,
        "split": split,
        "n": len(episodes), "cache": cache.root.name, "max_steps": max_steps, "played": result.played,
        "resumed": result.skipped, "failed": result.failed})
    if compress:
        with open(log, "rb") as source, gzip.open(out / "episodes.jsonl.gz", "wb", compresslevel=9) as target:
            shutil.copyfileobj(source, target)
        log.unlink()
    return EvaluationRun(summary, result, agent_id, out, result.failed)


def write_summary(out: Path, records: list[Any], *, cache: Any, run: dict[str, Any], title: str,
                  domains: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``summary.json`` (the summary of ``records`` with the ``run`` block, and ``extra`` keys) and
    ``report.md`` in ``out``, as every evaluation run writes them; returns the summary. ``domains``
    (scenario id of the records -> domain) replaces the cache manifest's."""
    summary = summarize(records, domains=scenario_domains(cache) if domains is None else domains)
    summary.update(extra or {})
    summary["run"] = run
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "report.md").write_text(render_report(summary, title=title))
    return summary
