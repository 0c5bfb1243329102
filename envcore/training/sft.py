"""The SFT stage: demonstrations as token sequences with the loss on the agent's turns, trained with
TRL's ``SFTTrainer`` before GRPO.

Why SFT first: a model that cannot yet write one readable tool call gets the same reward in every
rollout of a GRPO group (every step a format error), so every advantage is zero and GRPO has nothing
to learn from. A few epochs on verified full-fix episodes (:mod:`envcore.training.demos`) teach the
format and the loop, so the first GRPO groups already differ in reward.

**The sequence is the one the agent plays.** :func:`encode_chat` renders a demonstration with the
tokenizer's chat template turn by turn, exactly as the GRPO rollout does
(:mod:`envcore.training.turns`): the prompt up to the first reply, then each reply tokenised on its
own (as a model generates it), then what the template puts between a reply and the next one. The
labels are the reply tokens and the end-of-turn token that closes each reply (so the model learns to
stop); every token the environment or the template wrote is ``-100``. The dataset handed to
``SFTTrainer`` is already tokenised with its ``labels`` column, which TRL then uses as is.

:func:`run_sft` trains (LoRA, merged into the weights afterwards, or full fine-tuning for a model
trained from scratch), reports to Trackio as run ``<name>-sft``, and saves a plain model folder
(weights, tokenizer, chat template, a model card) that GRPO then starts from.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from envcore.agents.prompts import Message
from envcore.training.turns import TemplateError, TurnEncoder

IGNORE = -100


def encode_chat(encoder: TurnEncoder, messages: list[Message]) -> tuple[list[int], list[int]]:
    """``input_ids`` and ``labels`` of one chat (see the module docstring)."""
    replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not replies:
        raise ValueError("a demonstration needs at least one assistant turn")
    ids: list[int] = []
    labels: list[int] = []

    def add(text: str, learn: bool) -> None:
        if text:
            tokens = encoder.encode(text)
            ids.extend(tokens)
            labels.extend(tokens if learn else [IGNORE] * len(tokens))

    add(encoder.render(messages[:replies[0]], generation_prompt=True), learn=False)
    for index in replies:
        reply = messages[index]["content"]
        before = encoder.render(messages[:index], generation_prompt=True)
        last = index + 1 >= len(messages)
        after = encoder.render(messages[:index + 1] if last else messages[:index + 2], generation_prompt=not last)
        if not after.startswith(before) or not after[len(before):].startswith(reply):
            raise TemplateError("the chat template does not render a demonstration turn by turn (it is not "
                                "prefix-preserving or rewrites replies); set model.chat_template in the config")
        tail = after[len(before) + len(reply):]
        add(reply, learn=True)
        if encoder.eos_text and tail.startswith(encoder.eos_text):
            add(encoder.eos_text, learn=True)  # the model closes its own turn
            tail = tail[len(encoder.eos_text):]
        add(tail, learn=False)
    return ids, labels


@dataclass
class SftData:
    rows: list[dict[str, list[int]]]
    too_long: int = 0
    """Demonstrations left out because they exceed ``max_length`` tokens (cut, they would teach an
    episode without its end)."""
    tokens: int = 0
    learned_tokens: int = 0
    scenarios: list[str] = field(default_factory=list)


def sft_rows(demos: Iterable[Any], tokenizer: Any, *, max_length: int, chat_template: str | None = None) -> SftData:
    """The tokenised dataset of ``demos`` (:class:`~envcore.training.demos.Demonstration`)."""
    encoder = TurnEncoder(tokenizer, chat_template)
    data = SftData([])
    scenarios: set[str] = set()
    for demo in demos:
        ids, labels = encode_chat(encoder, demo.messages)
        if len(ids) > max_length:
            data.too_long += 1
            continue
        data.rows.append({"input_ids": ids, "labels": labels})
        data.tokens += len(ids)
        data.learned_tokens += sum(1 for x in labels if x != IGNORE)
        scenarios.add(demo.scenario_id)
    data.scenarios = sorted(scenarios)
    return data


@dataclass
class SftResult:
    model_dir: Path
    figures: dict[str, Any]


MODEL_CARD = """---
library_name: transformers
base_model: {base}
tags: [a01-repair-gym, sft, trl]
---
# {name}-sft

`{base}` after supervised fine-tuning ({method}) on {demos} verified full-fix demonstrations of the A01
repair gym ({scenarios} train scenarios; `{demos_path}`), the first stage of the `{name}` run. The loss
covered the agent's turns only. GRPO starts from these weights.
"""


def run_sft(config: Any, *, say: Callable[[str], None], reward_hash: str = "", started_from: str | None = None) -> SftResult:
    """Train the SFT stage of ``config`` (a :class:`~envcore.training.config.TrainConfig` with an
    ``sft`` section) and save the model into ``config.sft_dir``."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from envcore.training.demos import read_demos

    s = config.sft
    base = started_from or config.model.name_or_path
    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if config.model.chat_template:
        tokenizer.chat_template = config.model.chat_template
    demos = list(read_demos(s.demos))
    data = sft_rows(demos, tokenizer, max_length=s.max_length)
    if not data.rows:
        raise ValueError(f"no demonstration of {s.demos} fits sft.max_length ({s.max_length} tokens); "
                         f"{data.too_long} are longer")
    say(f"SFT: {len(data.rows)} demonstrations of {len(data.scenarios)} scenarios ({data.too_long} longer than "
        f"{s.max_length} tokens left out), {data.tokens:,} tokens, {data.learned_tokens:,} of them the agent's")
    cuda = torch.cuda.is_available()
    dtype = (torch.bfloat16 if cuda else torch.float32) if config.model.dtype == "auto" else getattr(torch, config.model.dtype)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
    model.config.a01_reward_configuration = reward_hash  # in the Trackio run's config, with the trainer's
    peft_config = None
    if s.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=config.lora.r, lora_alpha=config.lora.alpha, lora_dropout=config.lora.dropout,
                                 target_modules=config.lora.target_modules, task_type="CAUSAL_LM")
    values: dict[str, Any] = {
        "output_dir": str(config.run_dir / "sft-checkpoints"),
        "num_train_epochs": s.epochs,
        "max_steps": s.max_steps or -1,
        "per_device_train_batch_size": s.per_device_train_batch_size,
        "gradient_accumulation_steps": s.gradient_accumulation_steps,
        "learning_rate": s.learning_rate,
        "lr_scheduler_type": s.lr_scheduler_type,
        "warmup_steps": s.warmup_steps,
        "max_length": None,  # long demonstrations were left out above, never cut
        "logging_steps": 1,
        "save_strategy": "no",
        "seed": s.seed,
        "bf16": cuda and dtype == torch.bfloat16,
        "use_cpu": not cuda,
        "gradient_checkpointing": config.grpo.gradient_checkpointing,
        "report_to": "trackio",
        "project": config.tracking.project,
        "run_name": f"{config.name}-sft",
        "trackio_space_id": config.tracking.space_id,
        "trackio_static_space_id": False if config.tracking.space_id is None else None,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "dataset_kwargs": {"skip_prepare_dataset": True},
    }
    values.update(s.extra)
    trainer = SFTTrainer(model=model, args=SFTConfig(**values), train_dataset=Dataset.from_list(data.rows),
                         processing_class=tokenizer, peft_config=peft_config)
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    trained = trainer.model
    if peft_config is not None:
        trained = trained.merge_and_unload()
    out = config.sft_dir
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    trained.save_pretrained(out)
    tokenizer.save_pretrained(out)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    steps = trainer.state.global_step
    figures = {
        "base": base, "demos": s.demos,
        "demonstrations": len(data.rows), "scenarios": data.scenarios, "too_long": data.too_long,
        "tokens": data.tokens, "learned_tokens": data.learned_tokens, "steps": steps,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        "seconds_per_step": wall / steps if steps else None, "wall_seconds": wall,
        "method": "LoRA, merged" if peft_config is not None else "full fine-tuning",
    }
    (out / "README.md").write_text(MODEL_CARD.format(base=base, name=config.name, method=figures["method"],
                                                     demos=len(data.rows), scenarios=len(data.scenarios),
                                                     demos_path=s.demos))
    (out / "sft.json").write_text(json.dumps(figures, indent=2) + "\n")
    say(f"SFT: {steps} steps, loss {figures['loss_first']:.3f} -> {figures['loss_last']:.3f}, "
        f"{figures['seconds_per_step']:.2f} s per step; model: {out}")
    return SftResult(out, figures)
