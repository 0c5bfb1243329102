"""What every evaluation run does with its output folder: the agent and the folder it plays into, the
episode log it resumes from, and ``summary.json`` with ``report.md`` at the end; :class:`EvaluationRun`
is what a run returns.

Shared by the run over a split of a cache (:mod:`envcore.agents.eval_run`), the run over the private
split (:mod:`envcore.agents.private_eval`) and the batched evaluation of a trained model
(:mod:`envcore.training.batch_eval`), so that every evaluation writes the same folder. A module of its
own below them: the cache's run hands the private split to :mod:`~envcore.agents.private_eval`, which
needs these pieces, so they cannot live in :mod:`~envcore.agents.eval_run` without the two modules
needing each other.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envcore.agents.catalog import agent_factory
from envcore.agents.evaluate import render_report, scenario_domains, summarize
from envcore.agents.rollouts import RolloutResult
from envcore.agents.served import EvaluationError


@dataclass
class EvaluationRun:
    summary: dict[str, Any]
    result: RolloutResult
    agent_id: str
    folder: Path
    failed: list[str] = field(default_factory=list)


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
