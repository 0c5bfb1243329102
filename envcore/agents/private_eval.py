"""Evaluation on the private split: scenarios generated from the evaluator's secret, results kept by
content hash alone.

``python -m envcore eval --split private`` (or :func:`~envcore.agents.eval_run.evaluate_into` with
``split="private"``) generates and verifies the scenarios with
:func:`~envcore.factory.private.private_cache`, plays the agent on every one of them, and deletes them
when the run ends, however it ends (an error, Ctrl-C). What the output folder keeps is what a result
needs and nothing a model could be tuned on:

* **the episode log** (:func:`private_record`): each scenario named only by its content hash (the id a
  cache would give it is that hash's first 16 digits, and no public cache holds it), its bug class and
  tier, the reward, the resolution and the name and value of every reward term, the tools the agent
  called in order and how long each step took. No file, diff, observation, verification report,
  probe, failure text or term detail (an app's load error quotes its code);
* **summary.json and report.md**, as every run writes them (by bug class, tier and domain), with
  ``"split": "private"`` and a ``private`` block: the number of scenarios, ``scenario_hashes_sha256``
  (the SHA-256 of the sorted content hashes joined by newlines: two evaluators with the same secret
  confirm they played the same set without showing it), the generator version the hashes hold for,
  and the seconds the set took to generate and verify. Episodes that could not be played are named by
  their hash, without the error, which may quote the scenario.

The full records are written inside the private folder while episodes play, and only their scrubbed
copies reach the output folder, so an interrupted run keeps the episodes it finished and resumes from
them (the same secret gives the same scenarios). The secret is never written: not in the records, the
summary, the report, the folder names or the messages.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from envcore.agents.catalog import LLMOptions
from envcore.agents.eval_folder import EvaluationRun, prepare_run, write_summary
from envcore.agents.evaluate import evaluation_episodes
from envcore.agents.rollouts import EpisodeSpec, RolloutResult, run_rollouts
from envcore.agents.served import EvaluationError
from envcore.env.episode_log import EpisodeLogger, EpisodeRecord, StepEntry, read_episodes
from envcore.factory.private import SPLIT, PrivateSplitError, private_cache
from envcore.version import GENERATOR_VERSION

PRIVATE_SPLIT = SPLIT
DEFAULT_COUNT = 100
"""Scenarios in a private run unless told otherwise."""
INNER_LOG = "episodes.jsonl"
"""The full records, inside the private folder (deleted with it)."""


def seed_from_file(path: str | Path) -> str:
    """The secret kept in ``path`` (surrounding whitespace dropped): how the command line takes it,
    since an argument would land in the shell's history and in ``ps``."""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise EvaluationError(f"cannot read the private seed file {path}: {exc}") from None


def set_digest(hashes: list[str]) -> str:
    """The SHA-256 of the sorted content hashes joined by newlines (the summary's
    ``scenario_hashes_sha256``)."""
    return hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()


def private_record(record: EpisodeRecord) -> EpisodeRecord:
    """``record`` as a private run keeps it (see the module docstring)."""
    from envcore.env.tools import TOOLS

    def tool(action: dict[str, Any]) -> str:
        name = action.get("tool") if isinstance(action, dict) else None
        return name if isinstance(name, str) and name in TOOLS else "invalid"  # an agent's text is not a name

    steps = [StepEntry.model_construct(step=s.step, action={"tool": tool(s.action)}, observation={},
                                       elapsed_ms=s.elapsed_ms) for s in record.steps]
    breakdown = None
    if record.reward_breakdown is not None:
        b = record.reward_breakdown
        breakdown = {"reward": b.get("reward"), "resolution": b.get("resolution"), "gates": b.get("gates", {}),
                     "components": [{"name": c.get("name"), "value": c.get("value"), "measured": c.get("measured"),
                                     "detail": ""} for c in b.get("components", [])]}
    return record.model_copy(update={
        "scenario_id": record.scenario_hash, "cache_version": PRIVATE_SPLIT, "steps": steps, "diff": "",
        "verification": None, "reward_breakdown": breakdown, "hints": []})


class PrivateEpisodeLog(EpisodeLogger):
    """An episode log that keeps of each record only what a private run may keep (:func:`private_record`)."""

    def write(self, record: EpisodeRecord) -> None:
        super().write(private_record(record))


def _copy_scrubbed(inner: Path, out_log: Path) -> int:
    """Append the scrubbed copy of every record in ``inner`` to ``out_log``; how many."""
    if not inner.exists():
        return 0
    with PrivateEpisodeLog(out_log) as logger:
        for record in read_episodes(inner):
            logger.write(record)
        return logger.written


def evaluate_private(out: str | Path, agent: str, *, seed: str | None, n: int | None = None,
                     llm: LLMOptions = LLMOptions(), name: str | None = None, parallel: int = 1,
                     max_steps: int | None = None, compress: bool = False,
                     progress: Callable[[int], None] | None = None,
                     say: Callable[[str], None] = print) -> EvaluationRun:
    """Evaluate ``agent`` on ``n`` private scenarios from ``seed`` (``None``: ``A01_PRIVATE_SEED``)
    into ``out``; see the module docstring."""
    from envcore.env.environment import Runtime
    from envcore.env.sampler import CurriculumSampler

    count = DEFAULT_COUNT if n is None else n
    started = time.perf_counter()
    try:
        cache = private_cache(seed, count=count, say=say)
    except PrivateSplitError as exc:
        raise EvaluationError(str(exc)) from None
    generated_s = time.perf_counter() - started
    try:
        hashes = {row["scenario_id"]: row["sha256"] for row in cache.rows}
        domains = {row["sha256"]: row.get("domain", "unknown") for row in cache.rows}
        factory, agent_id, out, log = prepare_run(agent, cache=cache, llm=llm, name=name, out=out)
        earlier = [r for r in read_episodes(log)] if log.exists() else []
        strangers = [r for r in earlier if r.scenario_hash not in domains]
        if strangers:
            raise EvaluationError(f"{out} holds episodes of {len({r.scenario_hash for r in strangers})} scenarios that are "
                                  "not in this private set (another secret, another split or another generator): "
                                  "evaluate into a fresh --out folder")
        done = {(r.scenario_hash, r.seed) for r in earlier if r.agent_id == agent_id and r.outcome != "abandoned"}
        # a reset checks its split against the cache's splits, and this cache has only one
        episodes = [EpisodeSpec.of(e.seed, scenario=e.scenario, split=PRIVATE_SPLIT, max_steps=max_steps)
                    for e in evaluation_episodes(cache, split=PRIVATE_SPLIT, n=None)]
        todo = [e for e in episodes if (hashes[e.scenario], e.seed) not in done]
        resumed = len(episodes) - len(todo)
        if progress:
            progress(resumed)
        runtime = Runtime.from_environ(sampler=CurriculumSampler(cache), logger=None)
        inner = cache.root / INNER_LOG
        result = RolloutResult()
        try:
            result = run_rollouts(factory, todo, log=inner, parallel=parallel, runtime=runtime, agent_id=agent_id,
                                  source="evaluation",
                                  progress=(lambda done: progress(resumed + done)) if progress else None)
        finally:
            _copy_scrubbed(inner, log)  # what finished is kept, even when the run was interrupted
        played = {(r.scenario_hash, r.seed) for r in read_episodes(log) if r.agent_id == agent_id}
        failed = sorted({hashes[e.scenario] for e in todo if (hashes[e.scenario], e.seed) not in played})
        result.skipped, result.failed = resumed, [f"scenario {h}: not played" for h in failed]
        records = [r for r in read_episodes(log) if r.agent_id == agent_id]
        run = {"agent": agent_id, "kind": agent, "model": llm.model, "adapter": llm.adapter,
               "tool_format": llm.tool_format, "split": PRIVATE_SPLIT,
               "n": len(episodes), "cache": PRIVATE_SPLIT, "max_steps": max_steps, "played": result.played,
               "resumed": resumed, "failed": failed}
        private = {"count": len(hashes), "scenario_hashes_sha256": set_digest(list(hashes.values())),
                   "generator": GENERATOR_VERSION, "generated_and_verified_seconds": round(generated_s, 1)}
        summary = write_summary(out, records, cache=cache, domains=domains, run=run,
                                extra={"split": PRIVATE_SPLIT, "private": private},
                                title=f"{agent_id} on the private split ({len(hashes)} scenarios from a secret seed)")
    finally:
        shutil.rmtree(cache.root, ignore_errors=True)
    if compress:
        import gzip

        with open(log, "rb") as source, gzip.open(out / "episodes.jsonl.gz", "wb", compresslevel=9) as target:
            shutil.copyfileobj(source, target)
        log.unlink()
    return EvaluationRun(summary, result, agent_id, out, result.failed)

