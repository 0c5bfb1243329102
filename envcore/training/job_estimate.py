"""How the GPU job's budget will be spent, estimated from what this machine can measure.

What can be measured on a CPU is measured: how fast demonstrations are encoded (per process), how
long the tokenizer takes to train, how many tokens the demonstrations hold, and how long the
environment takes to play an episode (wall seconds per expert episode, one at a time). What only a
GPU can tell is assumed, and printed as an assumption: the sustained training throughput
(``--tflops``, bf16) and the latency of one decoding step of ``generate`` for a model this size
(``--ms-per-token``: small models are latency bound, so a step costs about the same for one
sequence or a hundred). The estimate then follows the job's own rules (:mod:`envcore.training.job_spec`):
setup, the base model's evaluation (every token of every turn), SFT's share of what setup left but
never the two later evaluations' time, the SFT evaluation, GRPO until the final evaluation's
reserve, the final evaluation.

The defaults are what the job measured on an H200 (docs/training.md): SFT at 285,583 tokens a
second, 61 TFLOP/s by :func:`model_flops_per_token`; decoding with 16-bit weights at 11 ms a step
for a batch of 160 at a 2,000-token prompt and 24 ms at 5,000 (15 is taken between them).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

from envcore.training.job_spec import JobSpec


def model_flops_per_token(spec: JobSpec, mean_length: float) -> float:
    """Training FLOPs per token: 6 x parameters for the matrices, plus attention over ``mean_length``."""
    m = spec.model
    kv = m.hidden_size // m.heads * m.kv_heads
    per_layer = 2 * m.hidden_size ** 2 + 2 * m.hidden_size * kv + 3 * m.hidden_size * m.intermediate_size
    parameters = m.vocab_size * m.hidden_size + m.layers * per_layer
    attention = 6 * m.layers * m.hidden_size * mean_length  # QK^T and AV, forward and backward
    return 6 * parameters + attention


def measure(spec: JobSpec, demos_path: Path, *, sample: int = 200, episodes: int = 6, say: Any = print) -> dict[str, Any]:
    """The CPU measurements of the module docstring."""
    from envcore.cache import ScenarioCache
    from envcore.training.job_files import read_packed_demos
    from envcore.training.scratch_job import build_model
    from envcore.training.sft import sft_rows

    started = time.perf_counter()
    demos = read_packed_demos(demos_path)
    read_s = time.perf_counter() - started
    say(f"read {len(demos)} demonstrations in {read_s:.1f} s")
    import tempfile

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        build_model(spec.model_copy(update={"model": spec.model.model_copy(update={"hidden_size": 8, "layers": 1,
                                                                                    "heads": 1, "kv_heads": 1,
                                                                                    "intermediate_size": 8})}),
                    demos, Path(folder) / "m")
        tokenizer_s = time.perf_counter() - started
        tokenizer = AutoTokenizer.from_pretrained(Path(folder) / "m")
    chosen = random.Random(0).sample(demos, min(sample, len(demos)))
    started = time.perf_counter()
    data = sft_rows(chosen, tokenizer, max_length=spec.sft.max_length)
    encode_s = time.perf_counter() - started
    lengths = [len(r["input_ids"]) for r in data.rows]
    say(f"tokenizer trained in {tokenizer_s:.1f} s; {len(chosen)} demonstrations encoded in {encode_s:.1f} s "
        f"({len(chosen) / encode_s:.1f}/s in one process), {statistics.fmean(lengths):.0f} tokens each on average, "
        f"{data.too_long} over {spec.sft.max_length}")
    cache = ScenarioCache.open(None)
    env_s = episode_seconds(cache, episodes)
    say(f"environment: {env_s:.2f} s per expert episode (wall, one at a time)")
    return {"demonstrations": len(demos), "read_s": read_s, "tokenizer_s": tokenizer_s,
            "encode_per_s": len(chosen) / encode_s, "mean_tokens": statistics.fmean(lengths),
            "kept_share": len(data.rows) / len(chosen), "env_s_per_episode": env_s}


def episode_seconds(cache: Any, episodes: int) -> float:
    """Wall seconds per expert episode on train scenarios, one at a time (reset to submit)."""
    from envcore.agents.expert import ExpertAgent
    from envcore.agents.rollouts import LocalSession
    from envcore.env.environment import Runtime
    from envcore.env.sampler import CurriculumSampler
    from envcore.training.demos import play, scripted_replies

    runtime = Runtime(sampler=CurriculumSampler(cache), sessions=2)
    runtime.get_sandbox()
    session = LocalSession(runtime)
    ids = sorted(cache.ids(split="train"))[: episodes + 1]
    try:
        play(session, scripted_replies(ExpertAgent(cache)), scenario=ids[0], seed=0, max_steps=16, agent_id="warm-up")
        started = time.perf_counter()
        for sid in ids[1:]:
            play(session, scripted_replies(ExpertAgent(cache)), scenario=sid, seed=0, max_steps=16, agent_id="estimate")
        return (time.perf_counter() - started) / max(1, len(ids) - 1)
    finally:
        session.close()


def estimate(spec: JobSpec, measured: dict[str, Any], *, budget_s: float = 540.0, cores: int = 16,
             tflops: float = 61.0, ms_per_token: float = 15.0, install_s: float = 25.0,
             evaluation_episodes: int | None = None) -> dict[str, Any]:
    """The budget split of the module docstring, in seconds, with what each figure rests on."""
    e, g = spec.episodes, spec.grpo
    n = measured["demonstrations"]
    workers = max(1, cores - 1)
    setup = (install_s + measured["read_s"] + measured["tokenizer_s"] + n / (measured["encode_per_s"] * workers)
             + 10.0)  # imports, the sandbox's start and self-check
    tokens = n * measured["kept_share"] * measured["mean_tokens"]
    epoch_s = tokens * model_flops_per_token(spec, measured["mean_tokens"]) / (tflops * 1e12)
    turn_s = e.max_new_tokens * ms_per_token / 1000  # lockstep: a turn lasts as long as its longest reply
    if evaluation_episodes is None:
        evaluation_episodes = sum(s.n or 10 for s in spec.slices)
    env_eval = evaluation_episodes * measured["env_s_per_episode"] / cores
    # the base evaluation decodes every token of every turn; later ones are bounded by it (the job's rule)
    one_eval = math.ceil(evaluation_episodes / e.batch) * e.max_steps * turn_s + env_eval
    sft_s = max(1.0, min((budget_s - setup) * spec.sft.share, budget_s - setup - one_eval - 2 * (one_eval * 1.2 + 10.0)))
    grpo_episodes = g.scenarios_per_step * g.group_size
    grpo_step = e.max_steps * turn_s + grpo_episodes * measured["env_s_per_episode"] / cores + 2.0
    reserve = max(one_eval * 1.2 + 10.0, spec.eval_share_floor * budget_s)
    grpo_s = max(0.0, budget_s - setup - sft_s - 2 * one_eval - reserve)
    return {
        "assumptions": {"budget_s": budget_s, "cores": cores, "sustained_tflops_bf16": tflops,
                        "ms_per_decoding_step": ms_per_token, "wheel_install_s": install_s},
        "setup_s": round(setup, 1), "sft_s": round(sft_s, 1), "sft_tokens_per_epoch": round(tokens),
        "sft_epoch_s": round(epoch_s, 1), "sft_epochs": round(sft_s / epoch_s, 2) if epoch_s else None,
        "evaluation_episodes_per_stage": evaluation_episodes, "one_evaluation_s": round(one_eval, 1),
        "evaluate_base_and_sft_s": round(2 * one_eval, 1), "grpo_s": round(grpo_s, 1),
        "grpo_step_s": round(grpo_step, 1), "grpo_steps": int(grpo_s // grpo_step) if grpo_step else 0,
        "grpo_episodes_per_step": grpo_episodes, "final_evaluation_s": round(one_eval, 1),
        # the three evaluations and the least SFT, within the budget: else the job ends past it or without a stage
        "fits": setup + 1.0 + 3 * one_eval <= budget_s,
    }


def render_estimate(result: dict[str, Any]) -> str:
    a = result["assumptions"]
    return "\n".join([
        f"budget {a['budget_s']:.0f} s on {a['cores']} cores; assumed: {a['sustained_tflops_bf16']:.0f} TFLOP/s sustained "
        f"in training, {a['ms_per_decoding_step']:.0f} ms per decoding step of generate, {a['wheel_install_s']:.0f} s to "
        "install the wheels",
        f"  setup                  {result['setup_s']:7.1f} s",
        f"  SFT                    {result['sft_s']:7.1f} s  ({result['sft_tokens_per_epoch']:,} tokens an epoch, "
        f"{result['sft_epoch_s']:.1f} s each: {result['sft_epochs']} epochs)",
        f"  evaluate base and SFT  {result['evaluate_base_and_sft_s']:7.1f} s  ({result['evaluation_episodes_per_stage']} "
        "episodes a stage; the base's before SFT)",
        f"  GRPO                   {result['grpo_s']:7.1f} s  ({result['grpo_steps']} steps of "
        f"{result['grpo_episodes_per_step']} episodes, {result['grpo_step_s']:.1f} s each)",
        f"  evaluate SFT+GRPO      {result['final_evaluation_s']:7.1f} s",
        *([] if result.get("fits", True) else [
            f"does not fit: three evaluations of {result['one_evaluation_s']:.0f} s each leave no time to train; "
            "shorten the slices' replies or decode faster"]),
    ])
