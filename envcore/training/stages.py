"""The three-stage table: the base model, after SFT, and after SFT+GRPO, on the same scenarios.

For every configured slice (``evaluation.stages``: a split of the cache, or ``trained``, the train
scenarios the run learned from) every stage plays the same scenarios, greedily, one episode each
(:func:`envcore.agents.eval_run.evaluate_into`, into ``<run_dir>/eval/<slice>/<stage>``). The table
gives, per stage and slice, the full-fix, security and regression rates with 95% bootstrap intervals,
the mean reward, and the **format-error rate** (share of steps whose reply held no readable action);
then paired comparisons on the scenarios both played (SFT against base, SFT+GRPO against SFT, and
SFT+GRPO against base: reward difference with its interval, scenarios fixed only by one side); then
the same rates by bug class and by tier.

Written to ``<run_dir>/stages.json`` (what the Space's dashboard reads) and ``stages.md``. Each stage's
model is named in the episode logs by :func:`stage_agent_id`, which the training pipeline
(:mod:`envcore.training.pipeline`, the layer above this one) uses for its own evaluation too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from envcore.numbers import signed
from envcore.training.config import EvaluationSlice, TrainConfig

STAGES = ("base", "sft", "sft+grpo")
STAGE_TITLES = {"base": "base", "sft": "SFT", "sft+grpo": "SFT+GRPO"}
PAIRS = (("base", "sft"), ("sft", "sft+grpo"), ("base", "sft+grpo"))
TRAINED = "trained"


def stage_agent_id(config: TrainConfig, stage: str) -> str:
    """The agent id of one stage's model: ``base`` (``llm:<model>``), ``sft`` (``llm:<sft folder>``) or
    ``grpo`` (the GRPO adapter on the SFT model, or on the base model without SFT)."""
    base = f"llm:{Path(config.model.name_or_path).name}"
    sft = f"llm:{config.sft_dir.name}"
    if stage == "base":
        return base
    if stage == "sft":
        return sft
    return f"{sft if config.sft is not None else base}+{config.name}"


def trained_scenarios(config: TrainConfig, keys: list[Any]) -> list[str]:
    """The train scenarios the run learned from: its demonstrations' and its GRPO episodes'."""
    from envcore.training.demos import read_demos

    ids = {k.scenario for k in keys}
    if config.sft is not None:
        ids |= {d.scenario_id for d in read_demos(config.sft.demos)}
    return sorted(ids)


def format_error_rate(records: list[Any]) -> float:
    """Share of all steps whose reply held no readable action."""
    from envcore.env.reply import is_format_error

    steps = [s for r in records for s in r.steps]
    if not steps:
        return 0.0
    return sum(is_format_error(s.observation.get("error")) for s in steps) / len(steps)


def stage_models(config: TrainConfig) -> dict[str, Any]:
    from envcore.agents.catalog import LLMOptions

    e = config.evaluation
    models = {"base": LLMOptions(model=config.model.name_or_path, max_new_tokens=e.max_new_tokens)}
    if config.sft is not None:
        models["sft"] = LLMOptions(model=str(config.sft_dir), max_new_tokens=e.max_new_tokens)
    if config.grpo.max_steps:
        base = str(config.sft_dir) if config.sft is not None else config.model.name_or_path
        models["sft+grpo"] = LLMOptions(model=base, adapter=str(config.adapter_dir), max_new_tokens=e.max_new_tokens)
    return models


def evaluate_stages(config: TrainConfig, cache: Any, trained: list[str], *,
                    say: Callable[[str], None] = print) -> dict[str, Any]:
    """Evaluate every stage on every slice and write the table (see the module docstring)."""
    from envcore.agents.eval_run import evaluate_into
    from envcore.env.episode_log import read_episodes

    e, run_dir = config.evaluation, config.run_dir
    slices = e.stages or [EvaluationSlice(split=e.split, n=e.n)]
    agent_ids = {"base": stage_agent_id(config, "base"), "sft": stage_agent_id(config, "sft"),
                 "sft+grpo": stage_agent_id(config, "grpo")}
    table: dict[str, Any] = {"run": config.name, "stages": {}, "slices": {}, "agents": agent_ids}
    for piece in slices:
        name = piece.split
        scenarios = (trained[:piece.n] if piece.n else trained) if name == TRAINED else None
        records: dict[str, list[Any]] = {}
        block: dict[str, Any] = {"split": name, "stages": {}, "comparisons": {}}
        for stage, llm in stage_models(config).items():
            run = evaluate_into(run_dir / "eval" / name / stage.replace("+", "_"), "transformers", cache=cache,
                                split="any" if name == TRAINED else name, n=piece.n, llm=llm, name=agent_ids[stage],
                                parallel=e.parallel, urls=config.environment.server_urls or None, max_steps=e.max_steps,
                                scenarios=scenarios, title=f"{STAGE_TITLES[stage]} of {config.name} on {name}")
            records[stage] = [r for r in read_episodes(run.folder / "episodes.jsonl") if r.agent_id == agent_ids[stage]]
            block["stages"][stage] = stage_entry(run.folder, run.summary, records[stage])
            say(stage_line(name, stage, block["stages"][stage]))
        block["comparisons"] = stage_comparisons(records)
        table["slices"][name] = block
    table["stages"] = list(stage_models(config))
    write_stages(run_dir, table)
    return table


def stage_entry(folder: Path, summary: dict[str, Any], records: list[Any]) -> dict[str, Any]:
    """One stage's cell block of a slice: where its run is, its overall rates, by bug class and tier,
    and its format-error rate."""
    return {"folder": str(folder), "episodes": summary["episodes"], "overall": summary["overall"],
            "by": {k: summary["by"][k] for k in ("bug_class", "tier")}, "format_error_rate": format_error_rate(records)}


def stage_line(name: str, stage: str, entry: dict[str, Any]) -> str:
    """One printed line per stage and slice."""
    o = entry["overall"]
    return (f"  {name:>11} {STAGE_TITLES[stage]:>8}: full fix {o['full_fix']['mean']:.0%} "
            f"[{o['full_fix']['ci95'][0]:.0%}, {o['full_fix']['ci95'][1]:.0%}], security "
            f"{o['security_pass']['mean']:.0%}, regression {o['regression_pass']['mean']:.0%}, format errors "
            f"{entry['format_error_rate']:.0%} ({entry['episodes']} scenarios)")


def stage_comparisons(records: dict[str, list[Any]]) -> dict[str, Any]:
    """The paired comparisons of :data:`PAIRS` between the stages that have records."""
    from envcore.agents.evaluate import compare

    return {f"{b} vs {a}": compare(records[a], records[b]) for a, b in PAIRS if a in records and b in records}


def write_stages(run_dir: Path, table: dict[str, Any], *, note: str = "") -> None:
    """``stages.json`` and ``stages.md`` of ``table`` in ``run_dir``."""
    (run_dir / "stages.json").write_text(json.dumps(table, indent=2) + "\n")
    (run_dir / "stages.md").write_text(render_stages(table, note=note))


def _pct(stat: dict[str, Any]) -> str:
    mean, (low, high) = stat["mean"], stat["ci95"]
    return f"{mean:.0%} [{low:.0%}, {high:.0%}]"


def render_stages(table: dict[str, Any], *, note: str = "") -> str:
    """The table as Markdown (see the module docstring)."""
    reached = [stage for stage in STAGE_TITLES if stage in (table.get("stages") or STAGE_TITLES)]
    lines = [f"# {table['run']}: {' → '.join(STAGE_TITLES[stage] for stage in reached)}", ""]
    if note:
        lines += [note, ""]
    lines += ["Each cell: mean [95% bootstrap interval] over the slice's scenarios, one greedy episode each.", "",
              "| slice | stage | scenarios | full fix | security | regression | mean reward | format errors |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, block in table["slices"].items():
        for stage, s in block["stages"].items():
            o = s["overall"]
            lines.append(f"| {name} | {STAGE_TITLES[stage]} | {s['episodes']} | {_pct(o['full_fix'])} | "
                         f"{_pct(o['security_pass'])} | {_pct(o['regression_pass'])} | {signed(o['reward']['mean'])} | "
                         f"{s['format_error_rate']:.0%} |")
    lines += ["", "## Paired comparisons", "",
              "| slice | comparison | scenarios | reward difference | fixed only by the later stage / only by the earlier |",
              "| --- | --- | ---: | ---: | ---: |"]
    for name, block in table["slices"].items():
        for label, c in block["comparisons"].items():
            d = c["reward_difference"]
            later, earlier = label.split(" vs ")
            lines.append(f"| {name} | {STAGE_TITLES[later]} vs {STAGE_TITLES[earlier]} | {c['scenarios']} | "
                         f"{signed(d['mean'])} [{signed(d['ci95'][0])}, {signed(d['ci95'][1])}] | "
                         f"{c['full_fix']['only_other']} / {c['full_fix']['only_base']} |")
    for group, title in (("bug_class", "By bug class"), ("tier", "By tier")):
        lines += ["", f"## {title} (full fix)", ""]
        for name, block in table["slices"].items():
            stages = list(block["stages"])
            keys = sorted({k for s in block["stages"].values() for k in s["by"][group]})
            lines += [f"**{name}**", "", f"| {group.replace('_', ' ')} | " + " | ".join(STAGE_TITLES[s] for s in stages) + " |",
                      "| --- |" + " ---: |" * len(stages)]
            for key in keys:
                cells = []
                for stage in stages:
                    stat = block["stages"][stage]["by"][group].get(key)
                    cells.append(_pct(stat["full_fix"]) + f" (n={stat['episodes']})" if stat else "–")
                lines.append(f"| {key} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def read_stages(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "stages.json"
    return json.loads(path.read_text()) if path.is_file() else None
