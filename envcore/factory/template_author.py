"""The template author: a deterministic draft from (config, seed).

Sampling order is fixed (domain, bug class, traps, variant, style, decoys) and every draw comes from
one ``random.Random(seed)``, so a seed names a scenario for as long as the generator version stays.
"""

from __future__ import annotations

import random

from envcore.factory.bugs import get_bug_class
from envcore.factory.codegen import FEATURES
from envcore.factory.config import FactoryConfig
from envcore.factory.domains import DOMAINS
from envcore.factory.draft import SpecDraft, expand
from envcore.scenario.spec import CodeStyle, ScenarioSpec


def _weighted(rng: random.Random, weights: dict[str, float]) -> str:
    items = [(k, w) for k, w in sorted(weights.items()) if w > 0]
    total = sum(w for _, w in items)
    x = rng.random() * total
    for key, weight in items:
        x -= weight
        if x < 0:
            return key
    return items[-1][0]


def draft_for(config: FactoryConfig, seed: int) -> SpecDraft:
    rng = random.Random(f"draft:{seed}")
    domain = DOMAINS[rng.choice(sorted(config.domains))]
    tenanted = domain.resource.tenant_field is not None
    weights = {b: w for b, w in config.bug_classes.items() if get_bug_class(b).applicable(tenanted)}
    bug = get_bug_class(_weighted(rng, weights))
    variants = bug.applicable(tenanted)
    multi = [v for v in variants if v.multi_site]
    single = [v for v in variants if not v.multi_site]
    second_site = bool(multi) and (not single or rng.random() < config.traps.second_site)
    variant = rng.choice(multi if second_site else single)
    traps = []
    if second_site:
        traps.append("second_site")
    if rng.random() < config.traps.admin_access:
        traps.append("admin_access")
    if rng.random() < config.traps.public_route:
        traps.append("public_route")
    if rng.random() < config.traps.legacy_alias or "legacy_alias" in variant.features:
        traps.append("legacy_alias")
    w = config.code_styles
    style = CodeStyle(
        layout=_weighted(rng, w.layout),
        auth=_weighted(rng, w.auth),
        store=_weighted(rng, w.store),
        id_type=_weighted(rng, w.id_type),
    )
    decoys = tuple(f for f in FEATURES if f not in variant.features and rng.random() < config.decoy_rate)
    return SpecDraft(
        domain=domain.name, bug_class=bug.name, variant=variant.name, style=style, traps=tuple(traps), decoys=decoys
    )


def author_spec(config: FactoryConfig, seed: int) -> ScenarioSpec:
    """The template author's scenario for ``seed``."""
    return expand(draft_for(config, seed), seed, author="template")
