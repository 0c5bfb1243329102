"""Generation backends for training rollouts: one batched call per turn of every live episode.

The rollout function asks for one reply per live episode at each turn, all at once, so the model
generates a batch the size of the generation batch (minus finished episodes), not one sequence at
a time. Two backends:

* :class:`TransformersGeneration`: the policy being trained, through ``generate`` (left-padded
  batch, sampling with the trainer's temperature / top-p / top-k). Works on a CPU; what tests use.
* :class:`VLLMServerGeneration`: a ``trl vllm-serve`` server through the trainer's own client
  (``trainer.vllm_generation.vllm_client``); TRL pushes the new LoRA weights to it before each
  rollout. It also returns the sampled tokens' log-probabilities, which TRL uses for its
  importance-sampling correction.
* :class:`ModelGeneration`: a plain model, outside any trainer (the from-scratch job's GRPO and its
  batched evaluation, which runs greedily): the same left-padded batch, no TRL needed. With a 16-bit
  ``autocast_dtype`` it decodes on a 16-bit copy of the weights, refreshed from the model at every
  call: autocast over float32 weights casts each weight at every decoding step, which made decoding
  8.5x slower on the GPU job's model (95 against 11 ms a step, docs/training.md).

Each returns, per prompt, the generated ids cut at the first end-of-turn token (kept) or at that
prompt's own token budget, and their log-probabilities where the backend has them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from envcore.training.turns import eos_ids


@dataclass
class Generated:
    ids: list[int]
    logprobs: list[float] | None = None


def _cut(ids: list[int], budget: int, eos: set[int]) -> list[int]:
    ids = ids[:budget]
    for index, token in enumerate(ids):
        if token in eos:
            return ids[: index + 1]
    return ids


def left_padded(prompts: list[list[int]], pad: int) -> tuple[Any, Any]:
    """``input_ids`` and ``attention_mask`` of ``prompts``, left-padded to the longest (generation
    continues every row from its last column)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids, mask


class ModelGeneration:
    """Generate with ``model`` itself: sampling at ``temperature`` / ``top_p`` (no top-k, as the GRPO
    loss scores), or greedily with ``temperature=None``; in batches of at most ``max_batch`` rows."""

    def __init__(self, model: Any, tokenizer: Any, *, temperature: float | None, top_p: float = 1.0,
                 max_batch: int = 256, autocast_dtype: Any = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.max_batch = temperature, top_p, max_batch
        self.autocast_dtype = autocast_dtype
        self.eos = eos_ids(tokenizer)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos)
        self._copy: Any = None

    def inference_model(self) -> Any:
        """What generates: the model itself, or with a 16-bit ``autocast_dtype`` a copy in that dtype
        holding the model's weights as they are now (the model being trained stays as it is)."""
        import torch

        if self.autocast_dtype is None:
            return self.model
        if self._copy is None:
            self._copy = copy.deepcopy(self.model).eval().requires_grad_(False)
            # the weights only: buffers such as the rotary frequencies keep their precision
            for parameter in self._copy.parameters():
                parameter.data = parameter.data.to(self.autocast_dtype)
        else:
            with torch.no_grad():
                for mine, theirs in zip(self._copy.parameters(), self.model.parameters(), strict=True):
                    mine.copy_(theirs)
        return self._copy

    def generate(self, prompts: list[list[int]], budgets: list[int]) -> list[Generated]:
        out: list[Generated] = []
        for start in range(0, len(prompts), self.max_batch):
            out += self._generate(prompts[start:start + self.max_batch], budgets[start:start + self.max_batch])
        return out

    def _generate(self, prompts: list[list[int]], budgets: list[int]) -> list[Generated]:
        import torch
        from transformers import GenerationConfig

        ids, mask = left_padded(prompts, self.pad)
        sample = self.temperature is not None
        config = GenerationConfig(
            max_new_tokens=max(budgets), do_sample=sample, temperature=self.temperature if sample else None,
            top_p=self.top_p if sample else None, top_k=0 if sample else None, pad_token_id=self.pad,
            eos_token_id=sorted(self.eos), bos_token_id=self.tokenizer.bos_token_id,
        )
        model = self.inference_model()
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                output = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                        generation_config=config)
        finally:
            model.train(was_training)
        new = output[:, ids.shape[1]:].tolist()
        return [Generated(_cut(row, budget, self.eos)) for row, budget in zip(new, budgets)]


class TransformersGeneration:
    """Generate with the trainer's (PEFT-wrapped) model."""

    def __init__(self, trainer: Any, tokenizer: Any) -> None:
        self.trainer, self.tokenizer = trainer, tokenizer
        self.eos = eos_ids(tokenizer)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos)

    def generate(self, prompts: list[list[int]], budgets: list[int]) -> list[Generated]:
        import torch
        from transformers import GenerationConfig
        from trl.models import unwrap_model_for_generation

        trainer = self.trainer
        args = trainer.args
        ids, mask = left_padded(prompts, self.pad)
        width = ids.shape[1]
        # top_k 0 is "no top-k", as in the loss; None would let generate() fall back to its default of 50
        # and sample from another distribution than the one GRPO scores
        config = GenerationConfig(
            max_new_tokens=max(budgets), do_sample=True, temperature=args.temperature, top_p=args.top_p,
            top_k=args.top_k or 0, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
            pad_token_id=self.pad, eos_token_id=sorted(self.eos), bos_token_id=self.tokenizer.bos_token_id,
        )
        device = trainer.accelerator.device
        # as TRL's own generation does: gradient checkpointing is switched off while generating (it would
        # disable the KV cache) and back on afterwards with the run's own settings
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=args.ds3_gather_for_generation,
                                         gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs) as model, \
                torch.no_grad():
            output = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
        new = output[:, width:].tolist()
        return [Generated(_cut(row, budget, self.eos)) for row, budget in zip(new, budgets)]


class VLLMServerGeneration:
    """Generate with a ``trl vllm-serve`` server (``grpo.use_vllm: true``, ``vllm_mode: server``)."""

    def __init__(self, trainer: Any, tokenizer: Any, client: Any = None) -> None:
        self.trainer = trainer
        self.client = client if client is not None else trainer.vllm_generation.vllm_client
        self.eos = eos_ids(tokenizer)

    def generate(self, prompts: list[list[int]], budgets: list[int]) -> list[Generated]:
        args = self.trainer.args
        output = self.client.generate(
            prompts=prompts, n=1, repetition_penalty=args.repetition_penalty, temperature=args.temperature,
            top_p=args.top_p, top_k=args.top_k or 0, min_p=args.min_p or 0.0, max_tokens=max(budgets), logprobs=0,
        )
        out = []
        for row, budget in enumerate(budgets):
            ids = _cut(list(output["completion_ids"][row]), budget, self.eos)
            logprobs = None
            if output.get("logprobs") is not None:
                # one entry per token: the sampled token's log-probability (first of the top-k list)
                raw = output["logprobs"][row][: len(ids)]
                logprobs = [float(lp[0]) if isinstance(lp, (list, tuple)) else float(lp) for lp in raw]
            out.append(Generated(ids, logprobs))
        return out


def generation_backend(trainer: Any, tokenizer: Any) -> TransformersGeneration | VLLMServerGeneration:
    """The backend the trainer's settings ask for."""
    if getattr(trainer.args, "use_vllm", False):
        if trainer.args.vllm_mode != "server":
            raise ValueError("multi-turn rollouts generate turn by turn through a vLLM server: set grpo.vllm_mode: server "
                             "(and start it with `trl vllm-serve --model ...`)")
        return VLLMServerGeneration(trainer, tokenizer)
    return TransformersGeneration(trainer, tokenizer)
