"""SFT in plain PyTorch, bounded by a deadline: what the from-scratch job trains with.

The TRL path (:mod:`envcore.training.sft`) serves configs run where TRL is installed. The job runs
on a machine that has PyTorch and transformers but neither TRL nor datasets, and must stop at a
wall-clock deadline rather than after a number of steps; so it trains here, on the same rows
(:func:`envcore.training.sft.sft_rows`: the chat rendered turn by turn, the loss on the agent's
replies and the end-of-turn token that closes each one).

Batches: demonstrations of similar length go together (each epoch shuffles, then sorts within
windows of 256 and cuts batches of at most ``tokens_per_batch`` padded tokens), so little of a batch
is padding and no sequence attends across another. The learning rate warms up linearly, then
follows a cosine to a tenth of its peak over the time SFT has (or over its epochs, if those run out
first), so a run cut short by a slower machine still ends annealed.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

IGNORE = -100
WINDOW = 256


@dataclass
class SftFigures:
    steps: int = 0
    epochs: float = 0.0
    tokens_seen: int = 0
    seconds: float = 0.0
    losses: list[tuple[int, float]] = field(default_factory=list)
    stopped_by: str = ""
    """``deadline`` or ``epochs``."""

    def as_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "epochs": round(self.epochs, 3), "tokens_seen": self.tokens_seen,
                "wall_seconds": round(self.seconds, 2),
                "seconds_per_step": round(self.seconds / self.steps, 4) if self.steps else None,
                "tokens_per_second": round(self.tokens_seen / self.seconds, 1) if self.seconds else None,
                "loss_first": self.losses[0][1] if self.losses else None,
                "loss_last": self.losses[-1][1] if self.losses else None, "stopped_by": self.stopped_by}


def length_batches(lengths: list[int], tokens_per_batch: int, rng: random.Random) -> list[list[int]]:
    """Row indices in batches of similar length, each at most ``tokens_per_batch`` padded tokens (a
    row longer than that is a batch of its own), in random order."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    for start in range(0, len(order), WINDOW):
        window = sorted(order[start:start + WINDOW], key=lambda i: lengths[i])
        batch: list[int] = []
        for index in window:
            width = max([lengths[i] for i in batch] + [lengths[index]])
            if batch and width * (len(batch) + 1) > tokens_per_batch:
                batches.append(batch)
                batch = []
            batch.append(index)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def pad_rows(rows: list[dict[str, list[int]]], pad_id: int, device: Any) -> tuple[Any, Any, Any]:
    """``input_ids``, ``attention_mask`` and ``labels`` of ``rows``, right-padded to the longest."""
    import torch

    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for row, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[row, :n] = torch.tensor(r["input_ids"])
        mask[row, :n] = 1
        labels[row, :n] = torch.tensor(r["labels"])
    return ids.to(device), mask.to(device), labels.to(device)


def learning_rate(peak: float, step: int, warmup: int, progress: float) -> float:
    """Linear warm-up over ``warmup`` steps, then a cosine from ``peak`` to ``peak / 10`` as ``progress``
    (0..1, of the time or the epochs SFT has) goes by."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, max(0.0, progress)))))


def train_sft(model: Any, rows: list[dict[str, list[int]]], *, pad_id: int, deadline: float, learning_rate_peak: float,
              warmup_steps: int, max_epochs: float, tokens_per_batch: int, weight_decay: float = 0.1, seed: int = 0,
              autocast_dtype: Any = None, log: Callable[[int, dict[str, float]], None] | None = None) -> SftFigures:
    """Train ``model`` (in place) on ``rows`` until ``deadline`` (``time.monotonic()``) or ``max_epochs``."""
    import torch

    device = next(model.parameters()).device
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=learning_rate_peak, betas=(0.9, 0.95), eps=1e-8,
                                  fused=device.type == "cuda")
    rng = random.Random(seed)
    lengths = [len(r["input_ids"]) for r in rows]
    per_epoch = length_batches(lengths, tokens_per_batch, random.Random(seed))
    total_batches = max(1, int(math.ceil(len(per_epoch) * max_epochs)))
    figures = SftFigures()
    started = time.monotonic()
    span = max(1e-6, deadline - started)
    model.train()
    batch_index = 0
    while True:
        batches = length_batches(lengths, tokens_per_batch, rng)
        for batch in batches:
            now = time.monotonic()
            if now >= deadline:
                figures.stopped_by = "deadline"
                break
            if batch_index >= total_batches:
                figures.stopped_by = "epochs"
                break
            progress = max((now - started) / span, batch_index / total_batches)
            lr = learning_rate(learning_rate_peak, figures.steps, warmup_steps, progress)
            for group in optimizer.param_groups:
                group["lr"] = lr
            ids, mask, labels = pad_rows([rows[i] for i in batch], pad_id, device)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            figures.steps += 1
            batch_index += 1
            figures.tokens_seen += int(mask.sum())
            value = float(loss.detach())
            figures.losses.append((figures.steps, value))
            if log is not None:
                log(figures.steps, {"loss": value, "learning_rate": lr, "grad_norm": float(grad_norm),
                                    "epoch": batch_index / len(per_epoch)})
        else:
            continue
        break
    figures.epochs = batch_index / len(per_epoch) if per_epoch else 0.0
    figures.seconds = time.monotonic() - started
    model.eval()
    return figures
