"""GRPO in plain PyTorch with the environment in the loop: what the from-scratch job practises with.

The rollouts are :class:`~envcore.training.rollout.EpisodeRollout`'s, exactly as under TRL (whole
multi-turn episodes, one batched generation per turn, the environment's steps in parallel, the
env mask over the environment's tokens, infrastructure failures given their group's mean). What
differs from the TRL path is only the update, written out here because the machine the job runs on
has no TRL, and because the job stops at a deadline:

* **one update per round, on-policy**: the rollouts were sampled from the weights being updated,
  so the importance ratio is 1 and clipping never acts; the loss is the policy gradient
  ``-A_i * log p(token)`` over the tokens the model wrote, summed over the round and divided by the
  number of those tokens (token-level normalisation, as TRL's ``dapo`` loss);
* **advantages** are the reward minus its group's mean, over the group's standard deviation (a
  group whose rewards are all equal teaches nothing and is skipped in the forward pass);
* **no reference model** (``beta = 0``), as the shipped configs run.

:class:`ScenarioPool` keeps GRPO on scenarios that teach: a group whose episodes all earned the same
reward (the model always fails there, or always succeeds) has no advantage to learn from, so such a
scenario leaves the pool, and half of each round's groups come from scenarios that showed spread
before. What the pool saw is reported (``pool`` in the job's results).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

SPREAD = 1e-6


def group_advantages(rewards: list[float], group_size: int) -> list[float]:
    """Each reward minus its group's mean, over the group's standard deviation (0 where the group has
    no spread). Groups are consecutive runs of ``group_size`` rewards."""
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = statistics.fmean(group)
        std = statistics.pstdev(group)
        out += [0.0 if std < SPREAD else (r - mean) / (std + 1e-4) for r in group]
    return out


@dataclass
class PoolEntry:
    groups: int = 0
    spread_groups: int = 0
    flat_in_a_row: int = 0
    episodes: int = 0
    full_fixes: int = 0


@dataclass
class ScenarioPool:
    """The scenarios GRPO draws its groups from (see the module docstring)."""

    candidates: list[str]
    rng: random.Random = field(default_factory=random.Random)
    retire_after: int = 2
    """A scenario leaves the pool after this many groups in a row without spread."""
    seen: dict[str, PoolEntry] = field(default_factory=dict)
    _unexplored: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._unexplored = list(self.candidates)
        self.rng.shuffle(self._unexplored)

    def active(self) -> list[str]:
        return [s for s, e in self.seen.items() if e.spread_groups and e.flat_in_a_row < self.retire_after]

    def draw(self, n: int) -> list[str]:
        """``n`` distinct scenarios: about half that showed spread before, the rest not yet played."""
        active = self.active()
        self.rng.shuffle(active)
        chosen = active[: n - min(n // 2, len(self._unexplored))] if self._unexplored else active[:n]
        while len(chosen) < n and self._unexplored:
            chosen.append(self._unexplored.pop())
        if len(chosen) < n:  # everything was played and too little teaches: replay the least-flat ones
            rest = sorted((s for s in self.candidates if s not in chosen),
                          key=lambda s: (self.seen.get(s, PoolEntry()).flat_in_a_row, self.rng.random()))
            chosen += rest[: n - len(chosen)]
        return chosen

    def record(self, scenario: str, rewards: list[float], resolutions: list[str | None]) -> None:
        entry = self.seen.setdefault(scenario, PoolEntry())
        entry.groups += 1
        entry.episodes += len(rewards)
        entry.full_fixes += sum(r == "full" for r in resolutions)
        if max(rewards) - min(rewards) > SPREAD:
            entry.spread_groups += 1
            entry.flat_in_a_row = 0
        else:
            entry.flat_in_a_row += 1

    def report(self) -> dict[str, Any]:
        played = self.seen
        return {"candidates": len(self.candidates), "played": len(played),
                "with_spread": sorted(s for s, e in played.items() if e.spread_groups),
                "always_failed": sorted(s for s, e in played.items() if not e.spread_groups and not e.full_fixes),
                "always_fixed": sorted(s for s, e in played.items()
                                       if not e.spread_groups and e.full_fixes == e.episodes)}


def micro_batches(lengths: list[int], tokens_per_batch: int) -> list[list[int]]:
    """Indices grouped (longest first) so that each group's padded size stays within the budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out: list[list[int]] = []
    batch: list[int] = []
    for index in order:
        width = lengths[batch[0]] if batch else lengths[index]
        if batch and width * (len(batch) + 1) > tokens_per_batch:
            out.append(batch)
            batch = []
        batch.append(index)
    if batch:
        out.append(batch)
    return out


def policy_gradient_step(model: Any, optimizer: Any, sequences: list[tuple[list[int], list[int]]],
                         advantages: list[float], *, pad_id: int, tokens_per_batch: int,
                         autocast_dtype: Any = None) -> dict[str, float]:
    """One update on ``sequences`` (token ids, learn-mask: 1 on tokens the model wrote and is trained
    on) with their ``advantages``; see the module docstring. Returns loss, grad norm and the mean
    entropy of the policy over the learned tokens."""
    import torch
    import torch.nn.functional as F

    device = next(model.parameters()).device
    learned = sum(sum(mask) for _, mask in sequences)
    keep = [i for i, a in enumerate(advantages) if a != 0.0 and sum(sequences[i][1])]
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total_loss = entropy_sum = 0.0
    entropy_tokens = 0
    for batch in micro_batches([len(sequences[i][0]) for i in keep], tokens_per_batch):
        rows = [keep[i] for i in batch]
        width = max(len(sequences[i][0]) for i in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        learn = torch.zeros((len(rows), width), dtype=torch.float32)
        for r, index in enumerate(rows):
            tokens, mask = sequences[index]
            ids[r, :len(tokens)] = torch.tensor(tokens)
            attention[r, :len(tokens)] = 1
            learn[r, :len(mask)] = torch.tensor(mask, dtype=torch.float32)
        ids, attention, learn = ids.to(device), attention.to(device), learn.to(device)
        adv = torch.tensor([advantages[i] for i in rows], dtype=torch.float32, device=device)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        logits = logits.float()
        targets, mask = ids[:, 1:], learn[:, 1:]
        logp = -F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                reduction="none").view(targets.shape)
        loss = -(adv[:, None] * logp * mask).sum() / max(learned, 1)
        loss.backward()
        total_loss += float(loss.detach())
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(-1)
            entropy_sum += float((entropy * mask).sum())
            entropy_tokens += int(mask.sum())
        del logits, logp, loss
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)) if keep else 0.0
    if keep:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    return {"loss": total_loss, "grad_norm": grad_norm, "learned_tokens": float(learned),
            "entropy": entropy_sum / entropy_tokens if entropy_tokens else 0.0,
            "episodes_with_advantage": float(len(keep))}


@dataclass
class GrpoFigures:
    steps: int = 0
    seconds: float = 0.0
    env_seconds: float = 0.0
    generation_seconds: float = 0.0
    rows: list[dict[str, float]] = field(default_factory=list)
    stopped_by: str = ""

    def as_dict(self) -> dict[str, Any]:
        def ends(key: str) -> dict[str, float]:
            values = [r[key] for r in self.rows if key in r]
            return {"first": values[0], "last": values[-1], "mean": statistics.fmean(values)} if values else {}

        return {"steps": self.steps, "wall_seconds": round(self.seconds, 2),
                "seconds_per_step": round(self.seconds / self.steps, 3) if self.steps else None,
                "seconds_per_step_median": (round(statistics.median(r["step_seconds"] for r in self.rows), 3)
                                            if self.rows else None),
                "env_share": round(self.env_seconds / self.seconds, 4) if self.seconds else None,
                "generation_share": round(self.generation_seconds / self.seconds, 4) if self.seconds else None,
                "reward": ends("env/reward"), "full_fix": ends("env/full_fix"),
                "format_error_rate": ends("env/format_error_rate"),
                "zero_spread_share": ends("frac_reward_zero_std"), "stopped_by": self.stopped_by}


def train_grpo(model: Any, rollout: Any, pool: ScenarioPool, *, tiers: dict[str, int | None], group_size: int,
               scenarios_per_step: int, learning_rate: float, deadline: float, max_steps: int | None,
               tokens_per_batch: int, pad_id: int, seed: int = 0, autocast_dtype: Any = None,
               step_estimate: float = 0.0, log: Any = None) -> GrpoFigures:
    """Practise ``model`` (in place) until ``deadline`` (``time.monotonic()``) or ``max_steps``: each
    step draws scenarios from ``pool``, plays ``group_size`` episodes of each through ``rollout`` and
    updates once. A step is not started when the last one's length (before the first: ``step_estimate``,
    what one pass of play is expected to take) would overrun the deadline."""
    import torch

    from envcore.training.episodes import EpisodeKey

    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.99), weight_decay=0.0,
                                  fused=device.type == "cuda")
    figures = GrpoFigures()
    started = time.monotonic()
    last = step_estimate
    while True:
        if max_steps is not None and figures.steps >= max_steps:
            figures.stopped_by = "steps"
            break
        if time.monotonic() + last > deadline:
            figures.stopped_by = "deadline"
            break
        step_started = time.monotonic()
        env_before, gen_before = rollout.env_seconds, rollout.generation_seconds
        scenarios = pool.draw(scenarios_per_step)
        prompts = [EpisodeKey(s, seed * 100_003 + figures.steps, tiers.get(s)).prompt()
                   for s in scenarios for _ in range(group_size)]
        out = rollout(prompts, None)
        rewards = [float(r) for r in out["env_reward"]]
        episodes = rollout.last_episodes
        for g, scenario in enumerate(scenarios):
            block = episodes[g * group_size:(g + 1) * group_size]
            pool.record(scenario, rewards[g * group_size:(g + 1) * group_size],
                        [(e.final.reward_breakdown or {}).get("resolution") for e in block])
        advantages = group_advantages(rewards, group_size)
        sequences = [(p + c, [0] * len(p) + m) for p, c, m in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"])]
        update = policy_gradient_step(model, optimizer, sequences, advantages, pad_id=pad_id,
                                      tokens_per_batch=tokens_per_batch, autocast_dtype=autocast_dtype)
        figures.steps += 1
        last = time.monotonic() - step_started
        figures.env_seconds += rollout.env_seconds - env_before
        figures.generation_seconds += rollout.generation_seconds - gen_before
        groups = [rewards[i:i + group_size] for i in range(0, len(rewards), group_size)]
        row = dict(rollout.last_metrics) | update | {
            "reward": statistics.fmean(rewards), "reward_std": statistics.pstdev(rewards),
            "frac_reward_zero_std": sum(max(g) - min(g) <= SPREAD for g in groups) / len(groups),
            "step_seconds": last, "pool/active": float(len(pool.active()))}
        figures.rows.append(row)
        if log is not None:
            log(figures.steps, row)
    figures.seconds = time.monotonic() - started
    return figures
