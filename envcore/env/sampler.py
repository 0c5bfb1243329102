"""The curriculum sampler: which scenario an episode plays.

``choose(seed=..., split=..., tier=..., bug_class=..., domain=..., scenario=...)`` filters the cache's manifest,
weights the candidates and draws one with a generator seeded by ``seed``, so the same seed and
filters give the same scenario on every machine (candidates are taken in id order). Without a seed
a fresh one is drawn and returned, so every episode can be replayed.

Only validated entries are played: the cache holds only bundles that passed the scenario check,
and every load verifies the entry's content hash; an entry that fails to load is dropped from the
draw (deterministically: the same seed then picks the same replacement) and reported in
``problems``.

Sampling weights come from a JSON file the feedback loop writes (``--weights`` / ``A01_WEIGHTS``)::

    {"version": 1,
     "by_bug_class": {"tenant_leak": 2.0},
     "by_tier": {"1": 0.5},
     "by_scenario": {"0175faf3999fbb24": 3.0}}

A scenario's weight is the product of the weights that apply to it (1 where none does); weight 0
removes it from the draw. The split defaults to ``train``, so training never samples the held-out
``test`` scenarios unless asked to.
"""

from __future__ import annotations

import json
import random
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from envcore.cache import CorruptEntryError, ScenarioCache
from envcore.scenario.bundle import Bundle

WEIGHTS_VERSION = 1
DEFAULT_SPLIT = "train"
BUNDLE_CACHE_SIZE = 64
"""Bundles kept in memory, most recently used first (about 275 KB each on cache v5). A reset of one of
them takes about 0.3 ms, a load from the cache under 2 ms: enough for a training batch's groups, a
curriculum's repeats and the Space's visitors to hit them, and a server's memory stops growing after
the first few dozen scenarios instead of after hundreds."""


class NoScenario(ValueError):
    """No validated scenario matches the filters (the message says which)."""


@dataclass(frozen=True)
class SamplingWeights:
    by_bug_class: Mapping[str, float] = field(default_factory=dict)
    by_tier: Mapping[str, float] = field(default_factory=dict)
    by_scenario: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SamplingWeights":
        if data.get("version") != WEIGHTS_VERSION:
            raise ValueError(f"sampling weights version {data.get('version')!r}; this code reads {WEIGHTS_VERSION}")
        unknown = set(data) - {"version", "by_bug_class", "by_tier", "by_scenario", "generated_by", "note"}
        if unknown:
            raise ValueError(f"unknown keys in sampling weights: {sorted(unknown)}")
        parts = {}
        for key in ("by_bug_class", "by_tier", "by_scenario"):
            table = {str(k): float(v) for k, v in (data.get(key) or {}).items()}
            bad = [k for k, v in table.items() if not v >= 0 or v == float("inf")]
            if bad:
                raise ValueError(f"{key}: weights must be finite and >= 0 (bad: {bad[:5]})")
            parts[key] = table
        return cls(**parts)

    @classmethod
    def load(cls, path: str | Path) -> "SamplingWeights":
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise ValueError(f"cannot read sampling weights {path}: {exc}") from None

    def weight(self, row: Mapping[str, Any]) -> float:
        return (self.by_bug_class.get(str(row.get("bug_class")), 1.0) * self.by_tier.get(str(row.get("tier")), 1.0)
                * self.by_scenario.get(str(row.get("scenario_id")), 1.0))


class CurriculumSampler:
    """Draws scenarios from one cache; thread-safe. Loaded bundles are kept (LRU) so reset is fast."""

    def __init__(self, cache: ScenarioCache, weights: SamplingWeights | None = None) -> None:
        self.cache = cache
        self._weights = weights or SamplingWeights()
        self.problems: dict[str, str] = {}
        """Entries dropped because they failed to load: id → reason."""
        self._bundles: "OrderedDict[str, Bundle]" = OrderedDict()
        self._lock = threading.Lock()
        self._rows = sorted(cache.rows, key=lambda r: r["scenario_id"])
        self._pools: dict[tuple[str | None, int | None, str | None], tuple[tuple[str, float], ...]] = {}

    @property
    def weights(self) -> SamplingWeights:
        return self._weights

    @weights.setter
    def weights(self, weights: SamplingWeights) -> None:
        """New weights (e.g. from the feedback loop) apply from the next draw."""
        self._weights = weights
        self._pools = {}

    def candidates(self, *, split: str | None = DEFAULT_SPLIT, tier: int | None = None,
                   bug_class: str | None = None, domain: str | None = None) -> list[tuple[str, float]]:
        """(scenario id, weight) of every entry the filters allow, in id order, weight > 0."""
        return [c for c in self._pool(split, tier, bug_class, domain) if c[0] not in self.problems]

    def _pool(self, split: str | None, tier: int | None, bug_class: str | None,
              domain: str | None = None) -> list[tuple[str, float]]:
        """The candidates, entries already known to be corrupt included: the draw must not depend on
        which entries this sampler happened to load before (``choose`` drops them as it meets them).
        Rows and weights never change, so each filter's pool is computed once (a fresh list each call)."""
        key = (split, None if tier is None else int(tier), bug_class, domain)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = self._scan(split, tier, bug_class, domain)
        return list(pool)

    def _scan(self, split: str | None, tier: int | None, bug_class: str | None,
              domain: str | None) -> tuple[tuple[str, float], ...]:
        out = []
        for row in self._rows:
            if split is not None and row.get("split") != split:
                continue
            if tier is not None and int(row.get("tier", 0)) != int(tier):
                continue
            if bug_class is not None and row.get("bug_class") != bug_class:
                continue
            if domain is not None and row.get("domain") != domain:
                continue
            weight = self.weights.weight(row)
            if weight > 0:
                out.append((row["scenario_id"], weight))
        return tuple(out)

    def choose(self, *, seed: int | None = None, split: str | None = DEFAULT_SPLIT, tier: int | None = None,
               bug_class: str | None = None, scenario: str | None = None,
               domain: str | None = None) -> tuple[Bundle, int]:
        """(bundle, seed used). ``scenario`` (an id or a unique prefix) bypasses the draw."""
        if seed is None:
            seed = random.SystemRandom().randrange(2**31)
        if scenario is not None:
            try:
                scenario_id = self.cache.resolve(scenario)
            except KeyError as exc:
                raise NoScenario(exc.args[0] if exc.args else str(exc)) from None
            return self.bundle(scenario_id), seed
        rng = random.Random(seed)
        pool = self._pool(split, tier, bug_class, domain)
        while pool:
            total = sum(w for _, w in pool)
            point = rng.random() * total
            index = 0
            for index, (_, w) in enumerate(pool):
                point -= w
                if point < 0:
                    break
            scenario_id = pool[index][0]
            try:
                return self.bundle(scenario_id), seed
            except NoScenario:
                pool.pop(index)
        filters = {k: v for k, v in (("split", split), ("tier", tier), ("bug_class", bug_class), ("domain", domain))
                   if v is not None}
        raise NoScenario(f"no validated scenario matches {filters or 'the cache'} in {self.cache.root}")

    def bundle(self, scenario_id: str) -> Bundle:
        with self._lock:
            if scenario_id in self._bundles:
                self._bundles.move_to_end(scenario_id)
                return self._bundles[scenario_id]
            if scenario_id in self.problems:
                raise NoScenario(f"scenario {scenario_id} is not playable: {self.problems[scenario_id]}")
        try:
            bundle = self.cache.load(scenario_id)
        except CorruptEntryError as exc:
            with self._lock:
                self.problems[scenario_id] = str(exc)
            raise NoScenario(f"scenario {scenario_id} is not playable: {exc}") from None
        with self._lock:
            self._bundles[scenario_id] = bundle
            while len(self._bundles) > BUNDLE_CACHE_SIZE:
                self._bundles.popitem(last=False)
        return bundle

    def row(self, scenario_id: str) -> dict[str, Any]:
        return self.cache.row(scenario_id)
