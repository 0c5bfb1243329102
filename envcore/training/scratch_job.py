"""The from-scratch training job: a model that learns the skill, in one command, inside a time budget.

``python -m envcore job run --out DIR --budget 540`` does, in order, writing results as it goes:

1. **Where it runs**: the machine (Python, PyTorch, the GPU if any, CPU count) and what the sandbox
   can do there: the containment layers a worker actually got (Landlock ABI, seccomp, rlimits,
   capabilities dropped), and a self-check through the environment itself: the expert's repair of
   a train scenario must grade FULL and submitting the app untouched must not. Grading always runs
   in the strongest mode the kernel allows (the sandbox applies every layer it can); the report says
   which layers were in force, and a failed self-check stops the job before anything is trained.
2. **The demonstrations**: verified full-fix episodes of train scenarios (``python -m envcore demos``),
   from a folder or a packed ``demos.jsonl.xz``. Every one is checked again here: train split, full
   fix, and its scenario neither in a held-out split of the cache the job evaluates on nor among
   that cache's test scenarios by id (the attack this refuses: a demonstration whose app is an
   evaluation app, which would turn the held-out table into a memory test).
3. **The model**: a byte-level BPE tokenizer trained on the demonstrations and a Llama-style model
   with random weights (:func:`envcore.agents.tiny_model.build_tiny_model`).
4. **Evaluation of the base model** on every slice (:mod:`envcore.training.batch_eval`), before SFT:
   an untrained model writes every token of every turn, so this measures the longest an evaluation
   can decode, and what follows is planned on it.
5. **SFT** (:mod:`envcore.training.sft_loop`) until its deadline: its share of what setup left, but
   never the time the two later evaluations need (the base's, plus a fifth and 10 s, each); the SFT
   weights are exported.
6. **Evaluation of the SFT model**, and the stage table written with the two stages: a job cut off
   here still leaves the SFT table and weights.
7. **GRPO** (:mod:`envcore.training.grpo_loop`) on train scenarios of the cache, keeping those where
   the model sometimes fails and sometimes succeeds, until the time left is what evaluating the SFT
   model took plus a margin.
8. **Evaluation of SFT+GRPO**, the three-stage table, and the final weights exported.

Results (:mod:`envcore.training.job_files`): ``DIR/job.log``, ``DIR/results.tar.gz`` (the run
folder in the layout of ``artifacts/``: ``training/<name>/`` with ``training.json``, ``job.json``,
``stages.json``/``.md``, ``metrics.jsonl``, every evaluation's episodes, and ``models/<name>/``
without its weights) and the weights in 16-bit, in shards of at most 15 MiB. The run is built in a
working folder outside ``DIR`` (``--work``, kept; by default a folder of its own in the temporary
folder, removed at the end), so nothing else lands there. ``python -m envcore job import DIR`` puts them into ``artifacts/`` for the Space.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envcore.training.job_spec import JobSpec

Say = Callable[[str], None]
HELD_OUT = ("test", "val", "test_styles", "external")
STAGE_IDS = {"base": "{name}-base", "sft": "{name}-sft", "sft+grpo": "{name}"}


class JobError(RuntimeError):
    """The job cannot run (bad demonstrations, a sandbox that fails its self-check); the message says why."""


@dataclass
class Clock:
    """The job's wall-clock budget: one deadline, and what each stage was given and used."""

    budget_s: float
    started: float = field(default_factory=time.monotonic)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    _open: dict[str, float] = field(default_factory=dict)

    @property
    def deadline(self) -> float:
        return self.started + self.budget_s

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def begin(self, stage: str, *, given: float | None = None) -> None:
        self._open[stage] = time.monotonic()
        if given is not None:
            self.stages.setdefault(stage, {})["given_s"] = round(given, 2)

    def end(self, stage: str) -> float:
        used = time.monotonic() - self._open.pop(stage)
        self.stages.setdefault(stage, {})["used_s"] = round(used, 2)
        return used

    def as_dict(self) -> dict[str, Any]:
        return {"budget_s": self.budget_s, "elapsed_s": round(time.monotonic() - self.started, 2), "stages": self.stages}


# ----- 1. where it runs ------------------------------------------------------------------------------
def machine_report() -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": _version("transformers"), "platform": platform.platform(), "kernel": platform.release(),
            "cpus": os.cpu_count(), "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "gpu_memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None}


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def sandbox_report(runtime: Any, cache: Any, *, seed: int = 0) -> dict[str, Any]:
    """The containment layers a worker gets here, and the self-check of the module docstring (raises
    :class:`JobError` when grading cannot be trusted)."""
    from envcore.agents.expert import ExpertAgent
    from envcore.runner.base import AppSource
    from envcore.training.demos import play, recorded_replies, scripted_replies, tool_call_text

    sandbox = runtime.get_sandbox()
    train = sorted(cache.ids(split="train"))
    if not train:
        raise JobError(f"the cache {cache.root} has no train scenario to check the sandbox with")
    scenario = random.Random(seed).choice(train)
    bundle = cache.load(cache.resolve(scenario))
    with sandbox.load(AppSource(dict(bundle.files), bundle.entrypoint)) as worker:
        layers = dict(worker.containment)
    from envcore.agents.rollouts import LocalSession

    session = LocalSession(runtime)
    try:
        expert = play(session, scripted_replies(ExpertAgent(cache)), scenario=scenario, seed=seed, max_steps=16,
                      agent_id="expert@self-check")
        untouched = play(session, recorded_replies([tool_call_text({"tool": "submit"})]), scenario=scenario, seed=seed,
                         max_steps=16, agent_id="untouched@self-check")
    finally:
        session.close()
    check = {"scenario": scenario, "expert": expert.resolution, "untouched": untouched.resolution,
             "expert_reward": expert.final.reward, "untouched_reward": untouched.final.reward}
    if expert.resolution != "full" or untouched.resolution == "full" or untouched.final.reward is None:
        raise JobError(f"the sandbox's self-check failed on {scenario}: the expert's repair graded "
                       f"{expert.resolution!r} (must be 'full') and the untouched app {untouched.resolution!r} "
                       f"(must not be); containment layers here: {layers}")
    mode = ("every layer" if layers.get("landlock_abi") and layers.get("seccomp") and layers.get("rlimits")
            else "reduced: " + ", ".join(k for k in ("landlock_abi", "seccomp", "rlimits", "capabilities_dropped")
                                         if not layers.get(k)) + " not available")
    return {"layers": layers, "mode": mode, "self_check": check}


# ----- 2. demonstrations -----------------------------------------------------------------------------
def load_demonstrations(path: Path, cache: Any, *, limit: int | None = None) -> tuple[list[Any], dict[str, Any]]:
    """The demonstrations at ``path`` (a demos folder, a ``demos.jsonl`` or a packed ``.jsonl.xz``), each
    checked by the rules of the module docstring; a single violation stops the job (a set that
    holds one is not the set it claims to be)."""
    from envcore.training.job_files import read_packed_demos

    demos = read_packed_demos(path)
    held_out = {sid for split in HELD_OUT for sid in cache.ids(split=split)}
    held_out_hashes = {row.get("sha256") for row in cache.rows if row.get("split") in HELD_OUT}
    for demo in demos:
        problem = None
        if demo.split != "train":
            problem = f"is from the {demo.split!r} split"
        elif demo.resolution != "full":
            problem = f"is not a full fix ({demo.resolution!r})"
        elif demo.scenario_id in held_out or demo.scenario_hash in held_out_hashes:
            problem = f"plays scenario {demo.scenario_id}, which {cache.root.name} holds out for evaluation"
        if problem:
            raise JobError(f"demonstration {demo.demo_id} of {path} {problem}: demonstrations must be verified full "
                           "fixes of train scenarios (python -m envcore demos writes only those)")
    if limit is not None:
        demos = demos[:limit]
    if not demos:
        raise JobError(f"no demonstrations in {path}")
    counts: dict[str, Any] = {"demonstrations": len(demos), "scenarios": len({d.scenario_id for d in demos})}
    for key in ("bug_class", "tier"):
        values: dict[str, int] = {}
        for demo in demos:
            values[str(getattr(demo, key))] = values.get(str(getattr(demo, key)), 0) + 1
        counts[f"by_{key}"] = dict(sorted(values.items()))
    return demos, counts


def encode_demonstrations(demos: list[Any], tokenizer: Any, *, max_length: int, workers: int) -> Any:
    """:func:`envcore.training.sft.sft_rows` over ``demos``, spread over ``workers`` processes."""
    from envcore.training.sft import SftData, sft_rows

    if workers <= 1 or len(demos) < 64:
        return sft_rows(demos, tokenizer, max_length=max_length)
    import multiprocessing

    chunks = [demos[i::workers] for i in range(workers)]
    # spawned, not forked: the job's process already runs the sandbox's threads
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        parts = pool.map(_EncodeChunk(tokenizer, max_length), chunks)
    data = SftData([])
    scenarios: set[str] = set()
    for part in parts:
        data.rows += part.rows
        data.too_long += part.too_long
        data.tokens += part.tokens
        data.learned_tokens += part.learned_tokens
        scenarios |= set(part.scenarios)
    data.scenarios = sorted(scenarios)
    return data


@dataclass(frozen=True)
class _EncodeChunk:
    tokenizer: Any
    max_length: int

    def __call__(self, chunk: list[Any]) -> Any:
        from envcore.training.sft import sft_rows

        return sft_rows(chunk, self.tokenizer, max_length=self.max_length)


# ----- 3. the model ----------------------------------------------------------------------------------
def build_model(spec: JobSpec, demos: list[Any], folder: Path) -> Path:
    """Tokenizer (trained on ``model.tokenizer_demos`` demonstrations, evenly spread) and random weights."""
    from envcore.agents.tiny_model import build_tiny_model

    shape = spec.model
    step = max(1, len(demos) // shape.tokenizer_demos)
    corpus = [m["content"] for demo in demos[::step][:shape.tokenizer_demos] for m in demo.messages]
    if folder.exists():
        shutil.rmtree(folder)
    return build_tiny_model(folder, seed=shape.seed, vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                            layers=shape.layers, heads=shape.heads, kv_heads=shape.kv_heads,
                            intermediate_size=shape.intermediate_size, context_tokens=shape.context_tokens,
                            corpus=corpus, readme=(
                                f"# {folder.name}\n\nThe `{spec.name}` job's model before training: a {shape.layers}-layer "
                                f"Llama with random weights (seed {shape.seed}) and a byte-level BPE tokenizer of "
                                f"{shape.vocab_size} tokens trained on its demonstrations.\n"))


def parameter_count(model: Any) -> int:
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


# ----- the run ---------------------------------------------------------------------------------------
@dataclass
class JobRun:
    """Everything one job writes, in the layout of ``artifacts/`` under ``work``."""

    spec: JobSpec
    work: Path
    out: Path
    say: Say
    clock: Clock
    summary: dict[str, Any] = field(default_factory=dict)
    table: dict[str, Any] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.work / "training" / self.spec.name

    @property
    def model_dir(self) -> Path:
        return self.work / "models" / self.spec.name

    def agent_id(self, stage: str) -> str:
        return "llm:" + STAGE_IDS[stage].format(name=self.spec.name)

    def log_metrics(self, run: str, step: int, values: dict[str, float]) -> None:
        with (self.run_dir / "metrics.jsonl").open("a") as handle:
            handle.write(json.dumps({"run": run, "step": step, "metrics": values}) + "\n")

    def write(self, model: Any = None, tokenizer: Any = None, *, stage: str) -> None:
        """Write the summary and export everything to ``out`` (the weights too, when given)."""
        from envcore.training.job_files import export_results

        self.summary["job"] = self.summary.get("job", {}) | {"clock": self.clock.as_dict(), "exported_after": stage}
        (self.run_dir / "training.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        if model is not None:
            self.model_dir.mkdir(parents=True, exist_ok=True)
            for old in self.model_dir.glob("model*.safetensors*"):
                old.unlink()
            import torch

            half = torch.bfloat16 if next(model.parameters()).device.type == "cuda" else torch.float16
            # a 16-bit copy is saved; the weights being trained stay in full precision
            state = {k: v.detach().to(half) for k, v in model.state_dict().items()}
            model.save_pretrained(self.model_dir, state_dict=state, max_shard_size="15MB")
            tokenizer.save_pretrained(self.model_dir)
            (self.model_dir / "README.md").write_text(MODEL_CARD.format(name=self.spec.name, stage=stage,
                                                                         description=self.spec.description))
            # the model's lineage, as an SFT stage records it: what the Space pairs its evaluation with
            (self.model_dir / "sft.json").write_text(json.dumps(
                {"base": "artifacts/models/" + STAGE_IDS["base"].format(name=self.spec.name), "stage": stage,
                 "method": "full fine-tuning, from random weights"} | self.summary["stages"].get("sft", {}),
                indent=2) + "\n")
        files = export_results(self.work, self.spec.name, self.out)
        self.say(f"results after {stage}: {', '.join(f.name for f in files)} in {self.out}")


MODEL_CARD = """---
library_name: transformers
tags: [a01-repair-gym, sft, grpo, from-scratch]
---
# {name}

{description}

These weights are the job's model after its `{stage}` stage (16-bit). `training.json` and
`stages.md` in `artifacts/training/{name}/` say how it was trained and how it does on apps it never saw.
"""


def run_job(spec: JobSpec, *, demos: Path, out: Path, budget_s: float, work: Path | None = None,
            cache_path: str | None = None, say: Say = print) -> dict[str, Any]:
    """Run the whole job (the module docstring); return its summary (``training.json``)."""
    import torch

    from envcore.cache import ScenarioCache
    from envcore.env.environment import Runtime
    from envcore.env.reward import reward_configuration, reward_configuration_hash
    from envcore.env.sampler import CurriculumSampler

    # not inside ``out``: only the exported files come back from a GPU machine (8 at most, 2 folders deep);
    # a folder of its own unless one is given (two jobs at once never share one), removed at the end
    if work is None:
        temporary = Path(tempfile.mkdtemp(prefix=f"a01-job-{spec.name}-"))
        try:
            return run_job(spec, demos=demos, out=out, budget_s=budget_s, work=temporary, cache_path=cache_path, say=say)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)
    clock = Clock(budget_s)
    out.mkdir(parents=True, exist_ok=True)
    if work.exists():
        shutil.rmtree(work)
    job = JobRun(spec, work, out, say, clock)
    job.run_dir.mkdir(parents=True)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    autocast = torch.bfloat16 if (spec.dtype == "bfloat16" or (spec.dtype == "auto" and cuda)) else None
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(spec.model.seed)

    clock.begin("setup")
    cache = ScenarioCache.open(cache_path)
    batch = max(spec.episodes.batch, spec.grpo.scenarios_per_step * spec.grpo.group_size)
    runtime = Runtime(sampler=CurriculumSampler(cache), sessions=batch)
    runtime.get_sandbox()
    reward = reward_configuration()
    job.summary = {"name": spec.name, "model": f"artifacts/models/{spec.name}", "kind": "scratch-job",
                   "reward_configuration": reward, "reward_configuration_hash": reward_configuration_hash(reward),
                   "trackio": {"project": "a01-repair-gym", "runs": [f"{spec.name}-sft", spec.name]},
                   "config": {"description": spec.description, "spec": spec.model_dump(mode="json"),
                              "cache": cache.root.name, "demos": str(demos)},
                   "stages": {}, "job": {"machine": machine_report()}}
    say(f"job {spec.name}: budget {budget_s:.0f} s on {job.summary['job']['machine']['gpu'] or 'CPU'} "
        f"({os.cpu_count()} CPUs), cache {cache.root.name}")
    job.summary["job"]["sandbox"] = sandbox_report(runtime, cache, seed=spec.grpo.seed)
    say(f"sandbox: {job.summary['job']['sandbox']['mode']} ({job.summary['job']['sandbox']['layers']}); self-check "
        "passed (expert FULL, untouched app not)")
    demo_list, counts = load_demonstrations(demos, cache, limit=spec.sft.max_demos)
    build_model(spec, demo_list, work / "models" / f"{spec.name}-base")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(work / "models" / f"{spec.name}-base")
    model = AutoModelForCausalLM.from_pretrained(work / "models" / f"{spec.name}-base", dtype=torch.float32).to(device)
    workers = max(1, min(16, (os.cpu_count() or 1) - 1))
    data = encode_demonstrations(demo_list, tokenizer, max_length=spec.sft.max_length, workers=workers)
    if not data.rows:
        raise JobError(f"no demonstration fits {spec.sft.max_length} tokens ({data.too_long} are longer)")
    parameters = parameter_count(model)
    job.summary["parameters"] = parameters
    job.summary["stages"]["sft"] = counts | {"too_long": data.too_long, "tokens": data.tokens,
                                             "learned_tokens": data.learned_tokens, "method": "full fine-tuning"}
    say(f"model: {parameters / 1e6:.2f}M parameters; {len(data.rows)} demonstrations of {counts['scenarios']} scenarios "
        f"({data.too_long} over {spec.sft.max_length} tokens left out), {data.tokens:,} tokens")
    clock.end("setup")

    # ----- evaluation of the base model: the untrained weights, before SFT changes them
    if spec.grpo.pool_split == "demos":
        pool_ids = sorted({d.scenario_id for d in demo_list} & set(cache.ids(split="train")))
    else:
        pool_ids = sorted(cache.ids(split=spec.grpo.pool_split))
    if spec.grpo.pool_split in HELD_OUT:
        raise JobError(f"grpo.pool_split {spec.grpo.pool_split!r} is held out for evaluation")
    random.Random(spec.grpo.seed).shuffle(pool_ids)
    pool_ids = pool_ids[:spec.grpo.pool_size]
    job.table = {"run": spec.name, "stages": [], "slices": {}, "agents": {s: job.agent_id(s) for s in STAGE_IDS}}
    left_after_setup = clock.left()
    clock.begin("eval_base")
    evaluate_stage(job, "base", model, tokenizer, runtime, cache, trained=pool_ids, autocast=autocast)
    base_eval = clock.end("eval_base")

    # ----- SFT: its share of what setup left, but never the time the two later evaluations need. An
    # untrained model writes every token of every turn, so no later evaluation decodes longer than the
    # base's did; the margin is for the sandbox grading the submissions a trained model makes.
    one_eval_bound = base_eval * 1.2 + 10.0
    sft_given = max(1.0, min(left_after_setup * spec.sft.share, clock.left() - 2 * one_eval_bound))
    if sft_given < left_after_setup * spec.sft.share:
        say(f"SFT gets {sft_given:.0f} s, less than its share, so that evaluating SFT and SFT+GRPO keeps "
            f"{one_eval_bound:.0f} s each (the base's evaluation took {base_eval:.0f} s)")
    clock.begin("sft", given=sft_given)
    from envcore.training.sft_loop import train_sft

    figures = train_sft(model, data.rows, pad_id=tokenizer.pad_token_id, deadline=time.monotonic() + sft_given,
                        learning_rate_peak=spec.sft.learning_rate, warmup_steps=spec.sft.warmup_steps,
                        max_epochs=spec.sft.max_epochs, tokens_per_batch=spec.sft.tokens_per_batch,
                        weight_decay=spec.sft.weight_decay, seed=spec.sft.seed, autocast_dtype=autocast,
                        log=lambda step, values: job.log_metrics(f"{spec.name}-sft", step, values))
    clock.end("sft")
    job.summary["stages"]["sft"] |= figures.as_dict()
    say(f"SFT: {figures.steps} steps ({figures.epochs:.2f} epochs, stopped by {figures.stopped_by}), loss "
        f"{figures.as_dict()['loss_first']} -> {figures.as_dict()['loss_last']}, {figures.as_dict()['tokens_per_second']} tokens/s")
    job.write(model, tokenizer, stage="sft")

    # ----- evaluation of SFT
    clock.begin("eval_sft")
    evaluate_stage(job, "sft", model, tokenizer, runtime, cache, trained=pool_ids, autocast=autocast)
    one_eval = clock.end("eval_sft")
    job.write(stage="sft evaluation")

    # ----- GRPO
    from envcore.agents.rollouts import local_sessions
    from envcore.env.episode_log import EpisodeLogger
    from envcore.training.generation import ModelGeneration
    from envcore.training.grpo_loop import ScenarioPool, train_grpo
    from envcore.training.rollout import EpisodeRollout

    reserve = max(one_eval * 1.2 + 10.0, spec.eval_share_floor * budget_s)
    grpo_given = max(0.0, clock.left() - reserve)
    clock.begin("grpo", given=grpo_given)
    g = spec.grpo
    rollout = EpisodeRollout(
        session_factory=local_sessions(runtime, EpisodeLogger(job.run_dir / "episodes.jsonl"), "training"),
        tokenizer=tokenizer, max_steps=spec.episodes.max_steps, max_new_tokens=spec.episodes.max_new_tokens,
        completion_budget=spec.episodes.completion_budget, agent_id=f"{job.agent_id('sft+grpo')}@train",
        generator=lambda _: ModelGeneration(model, tokenizer, temperature=g.temperature, top_p=g.top_p,
                                            autocast_dtype=autocast),
        num_generations=g.group_size)
    pool = ScenarioPool(pool_ids, random.Random(g.seed))
    torch.manual_seed(1_000_003 + g.seed)  # the rollouts' sampling: one stream per GRPO seed, the SFT model the same
    tiers = {row["scenario_id"]: int(row["tier"]) for row in cache.rows if row["scenario_id"] in set(pool_ids)}
    try:
        grpo = train_grpo(model, rollout, pool, tiers=tiers, group_size=g.group_size,
                          scenarios_per_step=g.scenarios_per_step, learning_rate=g.learning_rate,
                          deadline=time.monotonic() + grpo_given, max_steps=g.max_steps,
                          tokens_per_batch=g.tokens_per_batch, pad_id=tokenizer.pad_token_id, seed=g.seed,
                          autocast_dtype=autocast, step_estimate=one_eval,
                          log=lambda step, values: job.log_metrics(spec.name, step, values))
    finally:
        rollout.close()
    clock.end("grpo")
    grpo_dict = grpo.as_dict()
    job.summary["stages"]["grpo"] = {"timing": {"steps": grpo.steps, "seconds_per_step_median": grpo_dict["seconds_per_step_median"],
                                                "seconds_per_step_mean": grpo_dict["seconds_per_step"],
                                                "env_share": grpo_dict["env_share"],
                                                "generation_share": grpo_dict["generation_share"]},
                                     "pool": pool.report(), **grpo_dict}
    job.summary["timing"] = job.summary["stages"]["grpo"]["timing"]
    say(f"GRPO: {grpo.steps} steps (stopped by {grpo.stopped_by}); reward {grpo_dict['reward']}; pool: "
        f"{len(pool.report()['with_spread'])} of {pool.report()['played']} scenarios played showed spread")

    # ----- evaluation of SFT+GRPO
    clock.begin("eval_final")
    evaluate_stage(job, "sft+grpo", model, tokenizer, runtime, cache, trained=pool_ids, autocast=autocast)
    clock.end("eval_final")
    job.write(model, tokenizer, stage="sft+grpo")
    say(f"done in {time.monotonic() - clock.started:.0f} s of {budget_s:.0f}")
    return job.summary


def evaluate_stage(job: JobRun, stage: str, model: Any, tokenizer: Any, runtime: Any, cache: Any, *,
                   trained: list[str], autocast: Any) -> None:
    """Evaluate one stage on every slice, add it to the stage table and rewrite the table."""
    from envcore.env.episode_log import read_episodes
    from envcore.training.batch_eval import evaluate_model, slice_episodes
    from envcore.training.stages import STAGE_TITLES, stage_comparisons, stage_entry, stage_line, write_stages

    spec, e = job.spec, job.spec.episodes
    slices = {}
    for piece in spec.slices:
        episodes = slice_episodes(cache, piece.split, piece.n, trained=trained)
        if episodes:
            slices[piece.split] = episodes
        else:
            job.say(f"  {piece.split}: no scenarios in {cache.root.name}; slice skipped")
    folders = {name: job.run_dir / "eval" / name / stage.replace("+", "_") for name in slices}
    summaries = evaluate_model(model, tokenizer, runtime=runtime, cache=cache, slices=slices, folders=folders,
                               agent_id=job.agent_id(stage), max_steps=e.max_steps, max_new_tokens=e.max_new_tokens,
                               completion_budget=e.completion_budget, batch=e.batch, autocast_dtype=autocast,
                               run={"model": f"artifacts/models/{STAGE_IDS[stage].format(name=spec.name)}",
                                    "adapter": None},
                               titles={name: f"{STAGE_TITLES[stage]} of {spec.name} on {name}" for name in slices})
    for name, folder in folders.items():
        block = job.table["slices"].setdefault(name, {"split": name, "stages": {}, "comparisons": {}})
        # the folder as it will lie once imported (artifacts/training/<name>/eval/...)
        block["stages"][stage] = stage_entry(Path("artifacts") / folder.relative_to(job.work), summaries[name],
                                             list(read_episodes(folder / "episodes.jsonl")))
        records = {s: list(read_episodes(job.run_dir / "eval" / name / s.replace("+", "_") / "episodes.jsonl"))
                   for s in block["stages"]}
        block["comparisons"] = stage_comparisons(records)
        job.say(stage_line(name, stage, block["stages"][stage]))
    if stage not in job.table["stages"]:
        job.table["stages"].append(stage)
    write_stages(job.run_dir, job.table, note=(
        f"A {job.summary.get('parameters', 0) / 1e6:.1f}M-parameter model trained from nothing by one budgeted job "
        "(`python -m envcore job run`); greedy episodes, played in batches (envcore/training/batch_eval.py)."))
