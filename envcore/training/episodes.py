"""The training episodes: which scenario each GRPO group plays, in curriculum order.

GRPO compares the ``num_generations`` rollouts of one prompt, so the rollouts of a group must play
the *same* scenario from the same start. A training example is therefore an **episode key**, a
one-line prompt naming the scenario and seed::

    a01-episode scenario=0175faf3999fbb24 seed=17 tier=1

TRL repeats each example ``num_generations`` times and hands the keys to the rollout function,
which resets one environment session per key (:mod:`envcore.training.rollout`). The model never
sees the key: its first prompt is the environment's own reset observation.

:func:`episode_dataset` draws the keys with the curriculum sampler, stage by stage (``tiers`` and
``groups`` per stage, in the order the config lists them), so sampling weights written by the
feedback loop apply to training as they do to the server. The draws are seeded: the same config
gives the same episodes on every machine. TRL must not shuffle them (``shuffle_dataset`` is off),
or the curriculum would be lost.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from envcore.env.sampler import CurriculumSampler, NoScenario

KEY_PREFIX = "a01-episode"
_KEY = re.compile(rf"^{KEY_PREFIX} scenario=(?P<scenario>[0-9a-f]{{8,64}}) seed=(?P<seed>\d+)(?: tier=(?P<tier>[123]))?$")


@dataclass(frozen=True)
class EpisodeKey:
    scenario: str
    seed: int
    tier: int | None = None

    def prompt(self) -> str:
        tier = f" tier={self.tier}" if self.tier is not None else ""
        return f"{KEY_PREFIX} scenario={self.scenario} seed={self.seed}{tier}"

    @classmethod
    def parse(cls, prompt: Any) -> "EpisodeKey":
        """The key in a prompt (a string, or chat messages whose last one holds it)."""
        text = prompt[-1]["content"] if isinstance(prompt, list) and prompt else prompt
        match = _KEY.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"not an episode key: {str(text)[:120]!r}; training examples come from episode_dataset()")
        tier = match["tier"]
        return cls(match["scenario"], int(match["seed"]), int(tier) if tier else None)


def episode_keys(sampler: CurriculumSampler, curriculum: list[Any], *, split: str | None, seed: int = 0,
                 bug_classes: list[str] | None = None, scenarios: list[str] | None = None) -> list[EpisodeKey]:
    """One key per group of every stage of ``curriculum`` (items with ``tiers`` and ``groups``), in order.
    ``scenarios`` (ids or unique prefixes) limits the draws to those, each once per round of
    ``len(scenarios)`` groups (in a seeded order); each must be in ``split``."""
    rng = random.Random(seed)
    keys: list[EpisodeKey] = []
    pool: list[Any] | None = None
    queue: list[Any] = []
    if scenarios is not None:
        pool = []
        for name in scenarios:
            try:
                sid = sampler.cache.resolve(name)
            except KeyError as exc:
                raise ValueError(f"episodes.scenarios: {exc.args[0] if exc.args else exc}") from None
            if split is not None and sampler.cache.split_of(sid) != split:
                raise ValueError(f"episodes.scenarios: {sid} is in the {sampler.cache.split_of(sid)} split, not {split}")
            pool.append(sampler.bundle(sid))
    for number, stage in enumerate(curriculum, 1):
        for _ in range(stage.groups):
            tier = rng.choice(list(stage.tiers))
            bug_class = rng.choice(bug_classes) if bug_classes else None
            draw = rng.randrange(2**31)
            if pool is not None:
                chosen = [b for b in pool if b.tier in stage.tiers and (not bug_classes or b.bug_class in bug_classes)]
                if not chosen:
                    raise ValueError(f"curriculum stage {number} (tiers {list(stage.tiers)}): none of episodes.scenarios "
                                     "is of these tiers")
                # each scenario once per round, in a fresh order each round: consecutive groups cover the
                # pool evenly, so GRPO steps over the same scenarios are comparable
                if not queue or queue[0] not in chosen:
                    queue[:] = rng.sample(chosen, len(chosen))
                bundle = queue.pop(0)
                keys.append(EpisodeKey(bundle.scenario_id, draw, bundle.tier))
                continue
            try:
                bundle, used = sampler.choose(seed=draw, split=split, tier=tier, bug_class=bug_class)
            except NoScenario as exc:
                raise ValueError(f"curriculum stage {number} (tiers {list(stage.tiers)}): {exc}") from None
            keys.append(EpisodeKey(bundle.scenario_id, used, bundle.tier))
    return keys


def episode_dataset(keys: list[EpisodeKey]) -> Any:
    """The keys as a ``datasets.Dataset`` with one ``prompt`` column (what ``GRPOTrainer`` takes)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [k.prompt() for k in keys]})
