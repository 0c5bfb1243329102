"""``train(config)``: optionally SFT on verified demonstrations, then GRPO + LoRA against the
environment, then the held-out evaluation of every stage.

The steps, in order (each fails early with a clear message):

1. **Tracking**: ``TRACKIO_DIR`` is set to ``tracking.dir`` before Trackio is imported (it reads the
   variable once); metrics stay in that folder unless ``tracking.space_id`` is set.
2. **Environment**: in process, one runtime whose sandbox is started and sized for the generation
   batch before training starts; or servers: those in ``environment.urls``, or the replicas
   ``environment.provider`` starts for the run (:mod:`envcore.agents.providers`; stopped when the run
   ends, however it ends), each asked (``/capacity``)
   whether it can hold its share of the batch's sessions, and whether it serves the same cache,
   before anything is written (a run that cannot start leaves nothing behind).
3. **Episodes**: the curriculum's episode keys (:mod:`envcore.training.episodes`).
4. **Model**: the base model and tokenizer; with ``model.scratch``, first built from nothing
   (:func:`envcore.agents.tiny_model.build_tiny_model`, its tokenizer trained on the demonstrations).
5. **SFT** (``sft`` section): :func:`envcore.training.sft.run_sft` on the demonstrations, Trackio run
   ``<name>-sft``; the result is a plain model folder (``output.sft_dir``) that GRPO starts from.
6. **GRPO** (``grpo.max_steps`` > 0): ``GRPOTrainer`` with
   :class:`~envcore.training.rollout.EpisodeRollout` as its ``rollout_func`` and
   :func:`~envcore.training.rollout.environment_reward` as its reward, LoRA on the SFT weights (or
   on the base model), reporting to Trackio as run ``<name>``; :class:`~envcore.training.metrics.StepTimer`
   times every step.
7. **Adapter**: saved in PEFT's format (``adapter_config.json`` + ``adapter_model.safetensors``) with
   the tokenizer, the resolved config (``train_config.yaml``) and a model card, in ``output.adapter_dir``.
8. **Summary**: ``<run_dir>/training.json``: both stages' figures (SFT loss and seconds per step;
   GRPO seconds per step, the environment's share, the reward and zero-spread share at the first and
   last steps), the reward configuration and its hash (:func:`envcore.env.reward.reward_configuration`;
   the hash is also in both Trackio runs' config), and the same figures printed.
9. **Evaluation** (``evaluation.enabled``): with an ``sft`` section, the three-stage table
   (:mod:`envcore.training.stages`: base, SFT and SFT+GRPO on every configured slice, ``stages.md``
   and ``stages.json``); otherwise the adapter and the base model on the same held-out scenarios
   (``<run_dir>/eval/trained`` and ``eval/base``), then paired comparisons with the base model and
   with every configured baseline run (``<run_dir>/comparison.md`` and ``.json``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from envcore.numbers import signed
from envcore.training.config import TrainConfig
from envcore.training.stages import evaluate_stages, stage_agent_id, trained_scenarios

Say = Callable[[str], None]


def _print(message: str) -> None:
    print(message, flush=True)


@dataclass
class TrainingResult:
    adapter_dir: Path
    run_dir: Path
    timing: dict[str, Any]
    last_metrics: dict[str, float]
    evaluation: dict[str, Any] = field(default_factory=dict)


class TrainingError(RuntimeError):
    """The run cannot start or finish as configured; the message says what to change."""


def use_tracking_dir(folder: str | Path) -> Path:
    """Point Trackio at ``folder``. It reads ``TRACKIO_DIR`` when first imported, so this must run
    before anything imports it (transformers does when the trainer starts)."""
    folder = Path(folder).resolve()
    if "trackio" in sys.modules:
        current = os.environ.get("TRACKIO_DIR")
        if current is None or Path(current).resolve() != folder:
            raise TrainingError(f"trackio was imported before TRACKIO_DIR was set to {folder}; run training in a fresh "
                                "process (python -m envcore train ...)")
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TRACKIO_DIR"] = str(folder)
    return folder


def forget_run(project: str, run: str) -> None:
    """Delete an earlier run of this name from the Trackio project (an overwritten run starts its curves
    afresh instead of appending a second set of steps to the old ones)."""
    from trackio.sqlite_storage import SQLiteStorage

    if run in (SQLiteStorage.get_runs(project) or []):
        SQLiteStorage.delete_run(project, run)


def model_agent_id(config: TrainConfig, *, adapter: bool) -> str:
    """How the run's model is named in episode logs: ``llm:<model>``, ``+<run name>`` with the adapter
    (the model being the SFT stage's when the run has one)."""
    return stage_agent_id(config, "grpo" if adapter else "base")


def curriculum_sampler(config: TrainConfig, cache: Any) -> Any:
    """The curriculum sampler over ``cache`` with the config's sampling weights (if any)."""
    from envcore.env.sampler import CurriculumSampler, SamplingWeights

    weights = SamplingWeights.load(config.environment.weights) if config.environment.weights else None
    return CurriculumSampler(cache, weights)


def draw_episodes(config: TrainConfig, sampler: Any) -> list[Any]:
    """The curriculum's episode keys, in order (:func:`envcore.training.episodes.episode_keys`)."""
    from envcore.training.episodes import episode_keys

    split = None if config.episodes.split == "any" else config.episodes.split
    scenarios = config.episodes.scenarios
    if scenarios == "demos":
        from envcore.training.demos import read_demos

        if config.sft is None:
            raise ValueError("episodes.scenarios: demos needs an sft section")
        scenarios = sorted({d.scenario_id for d in read_demos(config.sft.demos)})
    return episode_keys(sampler, config.episodes.curriculum, split=split, seed=config.episodes.seed,
                        bug_classes=config.episodes.bug_classes, scenarios=scenarios)


def check_servers(config: TrainConfig, cache: Any) -> None:
    """Before anything is written or loaded: every server is reachable, serves ``cache`` and can take
    its share of the generation batch's sessions."""
    from envcore.training.rollout import check_capacity

    urls = config.environment.server_urls
    if urls:
        _same_cache(urls, cache)
        check_capacity(urls, config.grpo.generation_batch)


def _sessions(config: TrainConfig, sampler: Any, run_dir: Path, say: Say) -> Callable[[int], Any]:
    from envcore.agents.rollouts import local_sessions, remote_sessions
    from envcore.env.episode_log import EpisodeLogger

    logger = EpisodeLogger(run_dir / "episodes.jsonl")
    batch = config.grpo.generation_batch
    urls = config.environment.server_urls
    if urls:
        say(f"environment: {len(urls)} server(s) ({config.environment.kind}), {batch} sessions, each on the least-loaded")
        return remote_sessions(urls, logger, "training")
    from envcore.env.environment import Runtime

    runtime = Runtime.from_environ(sampler=sampler, sessions=batch)
    started = time.perf_counter()
    runtime.get_sandbox()  # started now, sized for the batch, so the first step does not pay for it
    say(f"environment: in process, {batch} sessions, sandbox ready in {time.perf_counter() - started:.1f} s")
    return local_sessions(runtime, logger, "training")


def _dtype(config: TrainConfig) -> Any:
    import torch

    if config.model.dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return getattr(torch, config.model.dtype)


def _grpo_args(config: TrainConfig, run_dir: Path) -> Any:
    import torch
    from trl import GRPOConfig

    g = config.grpo
    cuda = torch.cuda.is_available()
    values: dict[str, Any] = {
        "output_dir": str(run_dir / "checkpoints"),
        "max_steps": g.max_steps,
        "per_device_train_batch_size": g.per_device_train_batch_size,
        "gradient_accumulation_steps": g.gradient_accumulation_steps,
        "num_generations": g.num_generations,
        "learning_rate": g.learning_rate,
        "temperature": g.temperature,
        "top_p": g.top_p,
        "beta": g.beta,
        "loss_type": g.loss_type,
        "max_completion_length": config.episodes.completion_budget,
        "logging_steps": g.logging_steps,
        "save_strategy": "steps" if g.save_steps else "no",
        "save_steps": g.save_steps or 500,
        "seed": g.seed,
        "shuffle_dataset": False,  # the curriculum's order is the point
        "gradient_checkpointing": g.gradient_checkpointing,
        "use_vllm": g.use_vllm,
        "vllm_mode": g.vllm_mode,
        "bf16": cuda and config.model.dtype in ("auto", "bfloat16"),
        "use_cpu": not cuda,
        "report_to": "trackio",
        "project": config.tracking.project,
        "run_name": config.name,
        "trackio_space_id": config.tracking.space_id,
        "trackio_static_space_id": False if config.tracking.space_id is None else None,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
    }
    values.update(g.extra)
    return GRPOConfig(**values)


MODEL_CARD = """---
library_name: peft
base_model: {base}
tags: [a01-repair-gym, grpo, lora, trl]
---
# {name}

A LoRA adapter for `{base}`, trained with GRPO (TRL) on episodes of the A01 repair gym: repairing
Broken Access Control bugs in generated FastAPI apps, with the environment's own reward.

{description}

* Steps: {steps} GRPO steps; generation batch {batch} ({num_generations} rollouts per scenario)
* Episodes: split `{split}`, step budget {max_steps}, {max_new_tokens} tokens per turn, completion budget {budget}
* Curriculum: {curriculum}
* Config: `train_config.yaml` in this folder (`python -m envcore train --config train_config.yaml` repeats the run)

Evaluate it with `python -m envcore eval --agent transformers --adapter <this folder>`.
"""


def save_adapter(trainer: Any, tokenizer: Any, config: TrainConfig, folder: Path, *, base: str | None = None) -> None:
    if folder.exists():
        if not config.output.overwrite:
            raise TrainingError(f"{folder} exists; set output.overwrite: true or choose another name")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    trainer.model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "train_config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    curriculum = "; ".join(f"tiers {list(s.tiers)} x {s.groups} groups" for s in config.episodes.curriculum)
    (folder / "README.md").write_text(MODEL_CARD.format(
        base=base or config.model.name_or_path, name=config.name, description=config.description.strip(),
        steps=config.grpo.max_steps, batch=config.grpo.generation_batch, num_generations=config.grpo.num_generations,
        split=config.episodes.split, max_steps=config.episodes.max_steps, max_new_tokens=config.episodes.max_new_tokens,
        budget=config.episodes.completion_budget, curriculum=curriculum))


def last_metrics(log_history: list[dict[str, Any]]) -> dict[str, float]:
    """The last logged value of every metric (the Trainer's own log history)."""
    out: dict[str, float] = {}
    for entry in log_history:
        for key, value in entry.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = float(value)
    return out


def train(config: TrainConfig, *, say: Say = _print) -> TrainingResult:
    """Run the whole pipeline of the module docstring; return where things went and the figures. The
    replicas ``environment.provider`` starts (docker, swarm, uv, process) serve the whole run, the
    evaluation included, and are stopped at its end, however it ends."""
    from envcore.agents.providers import ProviderError, ProviderSpec, Replicas

    env = config.environment
    spec = ProviderSpec.of(env.kind, replicas=env.replicas, image=env.image, urls=env.urls, cache_dir=env.cache,
                           sessions=max(config.grpo.generation_batch, config.evaluation.parallel))
    if not spec.starts:
        return _train(config, say=say)
    try:
        with Replicas(spec, say=say) as servers:  # check_servers then checks their cache and capacity
            return _train(config.model_copy(update={"environment": env.serving(servers.urls)}), say=say)
    except ProviderError as exc:
        raise TrainingError(str(exc)) from None


def _train(config: TrainConfig, *, say: Say) -> TrainingResult:
    """:func:`train` once its servers (if any) run."""
    use_tracking_dir(config.tracking.dir)
    from envcore.cache import ScenarioCache
    from envcore.env.reward import reward_configuration, reward_configuration_hash

    run_dir = config.run_dir
    if config.adapter_dir.exists() and not config.output.overwrite and config.grpo.max_steps:
        raise TrainingError(f"{config.adapter_dir} exists; set output.overwrite: true or choose another name")
    if config.sft is not None and config.sft_dir.exists() and not config.output.overwrite:
        raise TrainingError(f"{config.sft_dir} exists; set output.overwrite: true or choose another name")
    if run_dir.exists() and any(run_dir.iterdir()) and not config.output.overwrite:
        raise TrainingError(f"{run_dir} exists and is not empty; set output.overwrite: true or choose another name")
    if config.sft is not None and not (Path(config.sft.demos) / "demos.jsonl").is_file():
        raise TrainingError(f"sft.demos: no demos.jsonl in {config.sft.demos}; write one with python -m envcore demos")
    cache = ScenarioCache.open(config.environment.cache)
    check_servers(config, cache)  # a run that cannot start writes nothing
    if config.output.overwrite:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        forget_run(config.tracking.project, config.name)
        forget_run(config.tracking.project, f"{config.name}-sft")
    run_dir.mkdir(parents=True, exist_ok=True)
    reward = reward_configuration()
    reward_hash = reward_configuration_hash(reward)
    say(f"reward configuration {reward_hash} (recorded in training.json and the Trackio runs)")
    summary: dict[str, Any] = {"name": config.name, "model": config.model.name_or_path,
                               "reward_configuration": reward, "reward_configuration_hash": reward_hash,
                               "trackio": {"dir": config.tracking.dir, "project": config.tracking.project,
                                           "runs": []},
                               "config": config.model_dump(mode="json"), "stages": {}}

    if config.model.scratch is not None:
        build_scratch_model(config, say=say)
    grpo_base = config.model.name_or_path
    if config.sft is not None:
        from envcore.training.sft import run_sft

        sft = run_sft(config, say=say, reward_hash=reward_hash)
        summary["stages"]["sft"] = sft.figures
        summary["trackio"]["runs"].append(f"{config.name}-sft")
        grpo_base = str(config.sft_dir)

    result = TrainingResult(config.adapter_dir if config.grpo.max_steps else config.sft_dir, run_dir, {}, {})
    keys: list[Any] = []
    if config.grpo.max_steps:
        timing, metrics, keys = _grpo(config, cache, grpo_base, run_dir, reward_hash, say)
        result.timing, result.last_metrics = timing, metrics
        summary["stages"]["grpo"] = {"timing": timing, "last_metrics": metrics, "base": grpo_base,
                                     "adapter": str(config.adapter_dir), **grpo_figures(run_dir)}
        summary["trackio"]["runs"].append(config.name)
        # the keys of the old layout, for readers of earlier runs' training.json
        summary |= {"adapter": str(config.adapter_dir), "timing": timing, "last_metrics": metrics}
    (run_dir / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    if config.evaluation.enabled:
        if config.sft is not None:
            result.evaluation = evaluate_stages(config, cache, trained_scenarios(config, keys), say=say)
        else:
            result.evaluation = evaluate_adapter(config, cache, say=say)
    return result


def build_scratch_model(config: TrainConfig, *, say: Say = _print) -> Path:
    """``model.scratch``: a random-weight model and a tokenizer trained on the SFT demonstrations, built
    into ``model.name_or_path`` (kept when it is there and ``output.overwrite`` is off)."""
    from envcore.agents.tiny_model import build_tiny_model
    from envcore.training.demos import read_demos

    spec, out = config.model.scratch, Path(config.model.name_or_path)
    assert spec is not None and config.sft is not None
    if (out / "config.json").is_file() and not config.output.overwrite:
        say(f"model: {out} (built from scratch earlier)")
        return out
    if out.exists():
        shutil.rmtree(out)
    corpus = [m["content"] for demo in read_demos(config.sft.demos) for m in demo.messages]
    build_tiny_model(out, seed=spec.seed, vocab_size=spec.vocab_size, hidden_size=spec.hidden_size, layers=spec.layers,
                     heads=spec.heads, kv_heads=spec.kv_heads, intermediate_size=spec.intermediate_size,
                     context_tokens=spec.context_tokens, corpus=corpus, readme=(
                         f"# {out.name}\n\nA {spec.layers}-layer Llama chat model with **random weights** (seed "
                         f"{spec.seed}), its byte-level BPE tokenizer ({spec.vocab_size} tokens) trained on the "
                         f"demonstrations in `{config.sft.demos}`: the base of the `{config.name}` run, before SFT.\n"))
    from transformers import AutoConfig

    parameters = _parameters(AutoConfig.from_pretrained(out))
    say(f"model: built from scratch into {out}: {parameters / 1e6:.1f}M parameters, tokenizer of {spec.vocab_size} "
        f"tokens trained on {len(corpus)} turns of demonstrations")
    return out


def _parameters(model_config: Any) -> int:
    h, v, layers = model_config.hidden_size, model_config.vocab_size, model_config.num_hidden_layers
    kv = h // model_config.num_attention_heads * model_config.num_key_value_heads
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * model_config.intermediate_size + 2 * h
    return v * h + layers * per_layer + h


def grpo_figures(run_dir: Path) -> dict[str, Any]:
    """The GRPO curve's ends from the run's logged metrics: reward, full-fix share, format errors and
    the share of zero-spread groups at the first and last steps, and over all steps."""
    path = run_dir / "grpo_log.json"
    if not path.is_file():
        return {}
    rows = [r for r in json.loads(path.read_text()) if "env/reward" in r]
    if not rows:
        return {}

    def ends(key: str) -> dict[str, float]:
        values = [float(r[key]) for r in rows if key in r]
        if not values:
            return {}
        return {"first": values[0], "last": values[-1], "mean": sum(values) / len(values)}

    return {"steps_logged": len(rows), "reward": ends("env/reward"), "full_fix": ends("env/full_fix"),
            "format_error_rate": ends("env/format_error_rate"), "zero_spread_share": ends("frac_reward_zero_std")}


def _grpo(config: TrainConfig, cache: Any, base: str, run_dir: Path, reward_hash: str,
          say: Say) -> tuple[dict[str, Any], dict[str, float], list[Any]]:
    """The GRPO stage (step 6 and 7 of the module docstring); returns its timing, last metrics and the
    episode keys it drew."""
    from envcore.training.episodes import episode_dataset

    sampler = curriculum_sampler(config, cache)
    keys = draw_episodes(config, sampler)
    say(f"episodes: {len(keys)} scenario groups from cache {cache.root.name} ({config.episodes.split} split), "
        f"tiers in curriculum order")

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from envcore.training.generation import generation_backend
    from envcore.training.metrics import StepTimer
    from envcore.training.rollout import EpisodeRollout, environment_reward

    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if config.model.chat_template:
        tokenizer.chat_template = config.model.chat_template
    model = AutoModelForCausalLM.from_pretrained(base, dtype=_dtype(config))
    model.config.a01_reward_configuration = reward_hash  # in the Trackio run's config, with the trainer's
    agent_id = model_agent_id(config, adapter=True)
    session_factory = _sessions(config, sampler, run_dir, say)
    lora = LoraConfig(r=config.lora.r, lora_alpha=config.lora.alpha, lora_dropout=config.lora.dropout,
                      target_modules=config.lora.target_modules, task_type="CAUSAL_LM")
    args = _grpo_args(config, run_dir)
    if config.grpo.path == "environment_factory":
        from envcore.training.tool_env import ToolEnvironments, check_tool_template, tool_dataset

        problem = check_tool_template(tokenizer)
        if problem:
            raise TrainingError(f"grpo.path environment_factory: {problem}")
        rollout = ToolEnvironments(session_factory, max_steps=config.episodes.max_steps, agent_id=f"{agent_id}@train")
        args.max_tool_calling_iterations = config.grpo.max_tool_calls or config.episodes.max_steps
        trainer = GRPOTrainer(model=model, args=args, train_dataset=tool_dataset(keys), processing_class=tokenizer,
                              peft_config=lora, environment_factory=rollout)
        rollout.attach(trainer)
    else:
        rollout = EpisodeRollout(
            session_factory=session_factory, tokenizer=tokenizer, max_steps=config.episodes.max_steps,
            max_new_tokens=config.episodes.max_new_tokens, completion_budget=config.episodes.completion_budget,
            agent_id=f"{agent_id}@train", generator=lambda trainer: generation_backend(trainer, tokenizer),
            num_generations=config.grpo.num_generations,
            learn_after_format_error=config.episodes.learn_after_format_error,
        )
        rollout.open_sessions(config.grpo.generation_batch)
        trainer = GRPOTrainer(model=model, reward_funcs=[environment_reward], args=args,
                              train_dataset=episode_dataset(keys), processing_class=tokenizer, peft_config=lora,
                              rollout_func=rollout)
    timer = StepTimer(rollout)
    trainer.add_callback(timer)
    say(f"training {config.name}: {config.grpo.max_steps} GRPO steps of {config.grpo.generation_batch} episodes "
        f"({config.grpo.num_generations} per scenario) from {base}; metrics: Trackio project "
        f"{config.tracking.project!r} in {config.tracking.dir}")
    started = time.perf_counter()
    try:
        trainer.train()
    finally:
        rollout.close()
    wall = time.perf_counter() - started
    save_adapter(trainer, tokenizer, config, config.adapter_dir, base=base)
    (run_dir / "grpo_log.json").write_text(json.dumps(trainer.state.log_history, indent=1) + "\n")
    timing = timer.summary() | {"train_wall_seconds": wall, "rollout_rounds": rollout.rounds}
    metrics = last_metrics(trainer.state.log_history)
    say(f"adapter: {config.adapter_dir}")
    say(f"seconds per GRPO step: {timing.get('seconds_per_step_median', float('nan')):.2f} (median of "
        f"{timing.get('steps', 0)} steps, mean {timing.get('seconds_per_step_mean', float('nan')):.2f}); environment "
        f"time: {timing.get('env_share', float('nan')):.1%} of step time" + (
            f" (generation {timing.get('generation_share', float('nan')):.1%})" if config.grpo.path == "rollout_func"
            else " (TRL's tool loop: generation is not timed apart)"))
    figures = grpo_figures(run_dir)
    if figures:
        r, z = figures["reward"], figures["zero_spread_share"]
        say(f"GRPO reward: {signed(r['first'])} at the first step, {signed(r['last'])} at the last; zero-spread groups: "
            f"{z.get('mean', float('nan')):.0%} of all")
    return timing, metrics, keys


def _same_cache(urls: list[str], cache: Any) -> None:
    """Episode keys name scenarios of the local cache: every server must serve them as it holds them
    (:func:`envcore.agents.providers.check_same_cache`)."""
    from envcore.agents.providers import ProviderError, check_same_cache

    for url in urls:
        try:
            check_same_cache(url, cache)
        except ProviderError as exc:
            raise TrainingError(str(exc)) from None


def evaluate_adapter(config: TrainConfig, cache: Any, *, say: Say = _print) -> dict[str, Any]:
    """The held-out evaluation of step 8; returns the comparisons (also written to the run folder)."""
    from envcore.agents.catalog import LLMOptions
    from envcore.agents.eval_run import evaluate_into
    from envcore.agents.evaluate import compare, render_comparison
    from envcore.cli.eval_cmd import episode_log_of
    from envcore.env.episode_log import read_episodes

    e, run_dir = config.evaluation, config.run_dir
    common = {"cache": cache, "split": e.split, "n": e.n, "parallel": e.parallel, "max_steps": e.max_steps,
              "urls": config.environment.server_urls or None}
    trained = evaluate_into(run_dir / "eval" / "trained", "transformers", name=model_agent_id(config, adapter=True),
                            llm=LLMOptions(model=config.model.name_or_path, adapter=str(config.adapter_dir),
                                           max_new_tokens=e.max_new_tokens), **common)
    say(f"evaluation of the adapter: {_line(trained.summary)}")
    pairs: list[tuple[str, Path]] = []
    if e.base_model:
        base = evaluate_into(run_dir / "eval" / "base", "transformers", name=model_agent_id(config, adapter=False),
                             llm=LLMOptions(model=config.model.name_or_path, max_new_tokens=e.max_new_tokens), **common)
        say(f"evaluation of the base model: {_line(base.summary)}")
        pairs.append(("base model", base.folder))
    pairs += [(Path(b).name, Path(b)) for b in e.baselines]
    other = list(read_episodes(trained.folder / "episodes.jsonl"))
    sections, results = [f"# {config.name}: the trained adapter against its baselines", "",
                         "Held-out evaluation on the first "
                         f"{e.n} scenarios of the `{e.split}` split (step budget {e.max_steps}); each comparison is "
                         "paired on the scenarios both runs played.", ""], {}
    for label, folder in pairs:
        log = episode_log_of(folder)
        if log is None:
            say(f"  no episode log in {folder}; comparison skipped")
            continue
        result = compare(list(read_episodes(log)), other)
        results[label] = result | {"folder": str(folder)}
        sections.append(render_comparison(result, base=label, other=config.name).replace("# ", "## ", 1))
        say(f"  against {label}: reward difference {signed(result['reward_difference']['mean'])} "
            f"[{signed(result['reward_difference']['ci95'][0])}, {signed(result['reward_difference']['ci95'][1])}] "
            f"on {result['scenarios']} scenarios")
    (run_dir / "comparison.md").write_text("\n".join(sections))
    (run_dir / "comparison.json").write_text(json.dumps(results, indent=2) + "\n")
    return {"trained": trained.summary["overall"], "comparisons": results}


def _line(summary: dict[str, Any]) -> str:
    overall = summary["overall"]
    return (f"{summary['episodes']} episodes, full fix {overall['full_fix']['mean']:.0%}, mean reward "
            f"{signed(overall['reward']['mean'])}, invalid steps {overall['invalid_rate']['mean']:.0%}")
