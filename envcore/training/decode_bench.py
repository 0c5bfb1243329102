"""How fast the job's model decodes, through the job's own generation path, float32 against 16 bits.

``python -m envcore job bench-decoding`` builds a model of the GPU preset's shape with random
weights and times :class:`~envcore.training.generation.ModelGeneration` greedily on random prompts,
in one run and on one machine, two ways:

* ``float32 weights under autocast``: what the job did before generating on a 16-bit copy, where
  every decoding step casts every weight again;
* ``16-bit copy``: what it does now (``autocast_dtype`` set: a copy in that dtype, refreshed from
  the model at each call).

A decoding step's cost is the difference between a generation of ``new_tokens`` tokens and one of a
single token, over ``new_tokens - 1``, so the prompt's prefill is not counted in it; the prefill is
reported beside it. With no GPU it runs on the CPU in float32 against bfloat16, which says nothing
about a GPU; the figures quoted in docs/training.md come from an H200.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from envcore.training.job_spec import JobSpec


@dataclass
class _Tokenizer:
    """What :class:`ModelGeneration` reads from a tokenizer: the end, padding and start ids."""

    eos_token_id: int = 1
    pad_token_id: int = 0
    bos_token_id: int = 2


def random_model(spec: JobSpec, *, seed: int = 0) -> Any:
    """A Llama-style model of ``spec.model``'s shape with random weights (float32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    m = spec.model
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size, num_hidden_layers=m.layers,
                         num_attention_heads=m.heads, num_key_value_heads=m.kv_heads,
                         intermediate_size=m.intermediate_size, max_position_embeddings=m.context_tokens,
                         tie_word_embeddings=True, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    return LlamaForCausalLM(config)


def _seconds(generation: Any, prompts: list[list[int]], new_tokens: int, sync: Any) -> float:
    sync()
    started = time.perf_counter()
    generation.generate(prompts, [new_tokens] * len(prompts))
    sync()
    return time.perf_counter() - started


def bench_decoding(spec: JobSpec, *, batch: int, prompt_tokens: int, new_tokens: int = 33, repeats: int = 2,
                   say: Any = print) -> dict[str, Any]:
    """Milliseconds per decoding step and the prefill, each way (module docstring); the best of ``repeats``."""
    import random

    import torch

    from envcore.training.generation import ModelGeneration

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model = random_model(spec).to(device)
    tokenizer = _Tokenizer()
    rng = random.Random(0)
    # left padding as in an evaluation's batch: half the prompts are half as long
    prompts = [[rng.randrange(3, spec.model.vocab_size) for _ in range(prompt_tokens if row % 2 else prompt_tokens // 2)]
               for row in range(batch)]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    ways = {"float32 weights under autocast": None, "16-bit copy": torch.bfloat16}
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if cuda else "CPU", "batch": batch,
                               "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "ways": {}}
    for name, dtype in ways.items():
        if dtype is None:
            # the old path: the float32 model itself, under bfloat16 autocast where there is a GPU
            generation = ModelGeneration(model, tokenizer, temperature=None, max_batch=batch)
            autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda)
        else:
            generation = ModelGeneration(model, tokenizer, temperature=None, max_batch=batch, autocast_dtype=dtype)
            autocast = torch.autocast(device.type, enabled=False)
        with autocast:
            _seconds(generation, prompts[:2], 2, sync)  # warm-up: kernels, the copy
            prefill = min(_seconds(generation, prompts, 1, sync) for _ in range(repeats))
            whole = min(_seconds(generation, prompts, new_tokens, sync) for _ in range(repeats))
        step_ms = max(0.0, whole - prefill) / (new_tokens - 1) * 1000
        results["ways"][name] = {"ms_per_step": round(step_ms, 2), "prefill_ms": round(prefill * 1000, 1)}
        say(f"{name:32s} batch {batch} prompt {prompt_tokens}: {step_ms:7.2f} ms a decoding step, "
            f"prefill {prefill * 1000:7.1f} ms")
    old, new = (results["ways"][name]["ms_per_step"] for name in ways)
    results["speedup"] = round(old / new, 2) if new else None
    say(f"on {results['device']}: the 16-bit copy decodes {results['speedup']}x as fast as float32 under autocast")
    return results
