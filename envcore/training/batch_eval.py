"""Evaluate a model on many scenarios at once: greedy episodes in lockstep, one batched generation per turn.

``python -m envcore eval --agent transformers`` plays one episode per thread, each asking the model
for one reply at a time: right for a CPU or a remote endpoint, wasteful on a GPU, where a batch of a
hundred replies costs about what one does. This module plays the same episodes (the same scenarios
and seeds, :func:`envcore.agents.evaluate.evaluation_episodes`, so runs pair up with every other
evaluation) through :class:`~envcore.training.rollout.EpisodeRollout` with a greedy
:class:`~envcore.training.generation.ModelGeneration`, and writes the folder every evaluation writes
(``episodes.jsonl``, ``summary.json`` with its ``run`` block, ``report.md``;
:func:`envcore.agents.eval_run.write_summary`).

One difference from the per-thread agent, the same for every stage evaluated this way: an episode's
replies and observations share a token budget (``completion_budget``), and an episode that would
overflow it ends as running out of steps does (the app is submitted, with the budget's cost).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from envcore.agents.rollouts import EpisodeSpec


def evaluate_model(model: Any, tokenizer: Any, *, runtime: Any, cache: Any, episodes: list[EpisodeSpec], out: Path,
                   agent_id: str, max_steps: int, max_new_tokens: int, completion_budget: int, batch: int,
                   run: dict[str, Any], title: str, autocast_dtype: Any = None) -> dict[str, Any]:
    """Play ``episodes`` greedily with ``model`` into ``out`` (replaced); return the run's summary."""
    from envcore.agents.eval_run import write_summary
    from envcore.agents.rollouts import local_sessions
    from envcore.env.episode_log import EpisodeLogger, read_episodes
    from envcore.training.episodes import EpisodeKey
    from envcore.training.generation import ModelGeneration
    from envcore.training.rollout import EpisodeRollout

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    log = out / "episodes.jsonl"
    rows = {row["scenario_id"]: row for row in cache.rows}
    rollout = EpisodeRollout(
        session_factory=local_sessions(runtime, EpisodeLogger(log), "evaluation"), tokenizer=tokenizer,
        max_steps=max_steps, max_new_tokens=max_new_tokens, completion_budget=completion_budget, agent_id=agent_id,
        generator=lambda _: ModelGeneration(model, tokenizer, temperature=None, max_batch=batch,
                                            autocast_dtype=autocast_dtype))
    try:
        for start in range(0, len(episodes), batch):
            chunk = episodes[start:start + batch]
            rollout([EpisodeKey(e.scenario, e.seed, (rows.get(e.scenario) or {}).get("tier")).prompt() for e in chunk],
                    None)
    finally:
        rollout.close()
    records = [r for r in read_episodes(log) if r.agent_id == agent_id]
    return write_summary(out, records, cache=cache, title=title, run=run | {
        "agent": agent_id, "kind": "transformers", "n": len(episodes), "cache": cache.root.name,
        "max_steps": max_steps, "played": len(records), "resumed": 0,
        "failed": sorted({e.scenario for e in episodes} - {r.scenario_id for r in records})})


def slice_episodes(cache: Any, split: str, n: int | None, *, trained: list[str] | None = None) -> list[EpisodeSpec]:
    """The episodes of one slice: the first ``n`` scenarios of ``split`` by id, one episode each (as the
    ``eval`` command picks them), or of ``trained`` when the slice is ``trained``."""
    from envcore.agents.evaluate import evaluation_episodes

    if split == "trained":
        chosen = sorted(trained or [])[:n] if n else sorted(trained or [])
        return [EpisodeSpec.of(index, scenario=sid) for index, sid in enumerate(chosen)]
    return evaluation_episodes(cache, split=split, n=n)
