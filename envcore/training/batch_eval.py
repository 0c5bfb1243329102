"""Evaluate a model on many scenarios at once: greedy episodes in lockstep, one batched generation per turn.

``python -m envcore eval --agent transformers`` plays one episode per thread, each asking the model
for one reply at a time: right for a CPU or a remote endpoint, wasteful on a GPU, where a batch of a
hundred replies costs about what one does. This module plays the same episodes (the same scenarios
and seeds, :func:`envcore.agents.evaluate.evaluation_episodes`, so runs pair up with every other
evaluation), every slice's at once, through :class:`~envcore.training.rollout.EpisodeRollout` with a greedy
:class:`~envcore.training.generation.ModelGeneration`, and writes the folder every evaluation writes
(``episodes.jsonl``, ``summary.json`` with its ``run`` block, ``report.md``;
:func:`envcore.agents.eval_folder.write_summary`).

One difference from the per-thread agent, the same for every stage evaluated this way: an episode's
replies and observations share a token budget (``completion_budget``), and an episode that would
overflow it ends as running out of steps does (the app is submitted, with the budget's cost).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from envcore.agents.rollouts import EpisodeSpec


def evaluate_model(model: Any, tokenizer: Any, *, runtime: Any, cache: Any, slices: dict[str, list[EpisodeSpec]],
                   folders: dict[str, Path], agent_id: str, max_steps: int, max_new_tokens: int, completion_budget: int,
                   batch: int, run: dict[str, Any], titles: dict[str, str],
                   autocast_dtype: Any = None) -> dict[str, dict[str, Any]]:
    """Play every slice's episodes greedily with ``model``, all slices together in batches of ``batch``
    (fewer turns in sequence than slice after slice), and write each slice's run into its folder of
    ``folders`` (replaced); return each slice's summary."""
    from envcore.agents.eval_folder import write_summary
    from envcore.agents.rollouts import local_sessions
    from envcore.env.episode_log import EpisodeLogger, read_episodes
    from envcore.training.episodes import EpisodeKey
    from envcore.training.generation import ModelGeneration
    from envcore.training.rollout import EpisodeRollout

    owner: dict[tuple[str, int], str] = {}
    for name, episodes in slices.items():
        for e in episodes:
            if (e.scenario, e.seed) in owner:
                raise ValueError(f"scenario {e.scenario} (seed {e.seed}) is in two slices: {owner[e.scenario, e.seed]}, {name}")
            owner[e.scenario, e.seed] = name
    for folder in folders.values():
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    combined = next(iter(folders.values())).parent / f".{agent_id.replace(':', '_')}-all.jsonl"
    combined.unlink(missing_ok=True)
    rows = {row["scenario_id"]: row for row in cache.rows}
    rollout = EpisodeRollout(
        session_factory=local_sessions(runtime, EpisodeLogger(combined), "evaluation"), tokenizer=tokenizer,
        max_steps=max_steps, max_new_tokens=max_new_tokens, completion_budget=completion_budget, agent_id=agent_id,
        generator=lambda _: ModelGeneration(model, tokenizer, temperature=None, max_batch=batch,
                                            autocast_dtype=autocast_dtype))
    keys = [EpisodeKey(scenario, seed, (rows.get(scenario) or {}).get("tier")).prompt() for scenario, seed in owner]
    try:
        for start in range(0, len(keys), batch):
            rollout(keys[start:start + batch], None)
    finally:
        rollout.close()
    records: dict[str, list[Any]] = {name: [] for name in slices}
    for record in read_episodes(combined):
        name = owner.get((record.scenario_id, record.seed)) if record.agent_id == agent_id else None
        if name is not None:
            records[name].append(record)
    combined.unlink()
    summaries = {}
    for name, episodes in slices.items():
        log = EpisodeLogger(folders[name] / "episodes.jsonl")
        for record in records[name]:
            log.write(record)
        summaries[name] = write_summary(folders[name], records[name], cache=cache, title=titles[name], run=run | {
            "agent": agent_id, "kind": "transformers", "split": name, "n": len(episodes), "cache": cache.root.name,
            "max_steps": max_steps, "played": len(records[name]), "resumed": 0,
            "failed": sorted({e.scenario for e in episodes} - {r.scenario_id for r in records[name]})})
    return summaries


def slice_episodes(cache: Any, split: str, n: int | None, *, trained: list[str] | None = None) -> list[EpisodeSpec]:
    """The episodes of one slice: the first ``n`` scenarios of ``split`` by id, one episode each (as the
    ``eval`` command picks them), or of ``trained`` when the slice is ``trained``."""
    from envcore.agents.evaluate import evaluation_episodes

    if split == "trained":
        chosen = sorted(trained or [])[:n] if n else sorted(trained or [])
        return [EpisodeSpec.of(index, scenario=sid) for index, sid in enumerate(chosen)]
    return evaluation_episodes(cache, split=split, n=n)
