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

What both kinds of run do with their folder (the agent, the resumable log, the summary and report) is
in :mod:`envcore.agents.eval_folder`, and reading the servers' catalogue in :mod:`envcore.agents.served`:
the modules below this one, which import nothing back from it.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any, Callable

from envcore.agents.catalog import LLMOptions
from envcore.agents.eval_folder import EvaluationRun, prepare_run, write_summary
from envcore.agents.evaluate import evaluation_episodes
from envcore.agents.rollouts import EpisodeSpec, run_rollouts
from envcore.agents.served import EvaluationError, served_scenarios


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
