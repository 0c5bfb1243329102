"""The expansion of a SpecDraft (an author's choices) into a full ScenarioSpec.

An author (the seeded template author or an LLM) decides *what* the scenario is: the domain (a
built-in name or a whole new domain), the bug class and variant, the code style, the traps and the
decoy routes. :func:`expand` then draws everything that must vary per seed (people, ids, tokens,
records, files) and derives the policy, so every author's output goes through one path and one set
of checks. A draft that cannot be expanded raises :class:`DraftError` with a reason fit for a log.
"""

from __future__ import annotations

import random
import re

from envcore.factory.bugs import get_bug_class
from envcore.factory.bugs.base import MIRRORED, site_refs
from envcore.factory.codegen import FEATURES
from envcore.factory.codegen.names import ORM_STORES, Names
from envcore.factory.domains import DOMAINS
from envcore.factory.identities import Draw
from envcore.factory.policy import build_policy
from envcore.scenario.spec import (
    DifficultyFeatures,
    DomainSpec,
    FileSpec,
    RecordSpec,
    Role,
    ScenarioSpec,
    SpecDraft,
    Trap,
)

ORM_RESERVED = frozenset({"metadata", "registry"})
"""Attribute names a mapped class keeps for itself (pydantic's ``model_*`` and SQLAlchemy's ``_sa_*`` too)."""


class DraftError(ValueError):
    """The draft is well-formed but describes a scenario that cannot be built."""


TRAP_TEXT = {
    "public_route": "The share-link route is public on purpose; requiring a login there breaks it.",
    "admin_access": "Administrators must keep access to every record.",
    "second_site": "The bug is reachable through more than one route.",
    "legacy_alias": "The v1 alias route is still in use and must keep working for legitimate callers.",
}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def resolve_domain(domain: str | DomainSpec) -> DomainSpec:
    if isinstance(domain, DomainSpec):
        return domain
    if domain not in DOMAINS:
        raise DraftError(f"unknown domain {domain!r}; known: {sorted(DOMAINS)}")
    return DOMAINS[domain]


def expand(draft: SpecDraft, seed: int, *, author: str = "template") -> ScenarioSpec:
    """Draw people, records and files for ``draft`` from ``seed`` and assemble the spec."""
    domain = resolve_domain(draft.domain)
    try:
        bug = get_bug_class(draft.bug_class)
        variant = bug.variant(draft.variant)
    except KeyError as exc:
        raise DraftError(str(exc.args[0])) from None
    tenanted = domain.resource.tenant_field is not None
    if (bug.requires_tenant or variant.requires_tenant) and not tenanted:
        raise DraftError(f"{bug.name}/{variant.name} needs a multi-tenant domain; {domain.name} has no tenant field")
    traps = tuple(dict.fromkeys(draft.traps))
    if ("second_site" in traps) != variant.multi_site:
        raise DraftError(
            "the second_site trap must be set exactly when the variant has two sites "
            f"({variant.name} has {len(variant.sites)})"
        )
    if draft.style.store in ORM_STORES:
        r = domain.resource
        columns = [f.name for f in r.fields] + [r.owner_field, r.tenant_field or ""]
        taken = [c for c in columns if c in ORM_RESERVED or c.startswith(("model_", "_sa_"))]
        if taken:
            raise DraftError(f"fields {taken} cannot be columns of an ORM model (the {draft.style.store} store "
                             "reserves those names)")
    unknown = [d for d in draft.decoys if d not in FEATURES]
    if unknown:
        raise DraftError(f"unknown decoy routes {unknown}; known: {list(FEATURES)}")
    features = set(variant.features) | set(draft.decoys)
    if "public_route" in traps:
        features.add("shared")
    if "legacy_alias" in traps:
        features.add("legacy_alias")
    ordered = tuple(f for f in FEATURES if f in features)
    decoys = len([f for f in ordered if f not in variant.features])

    rng = random.Random(seed)
    draw = Draw(rng, draft.style.id_type)
    tenants: list[str | None] = [None, None]
    if tenanted:
        names = rng.sample(list(domain.tenant_names), 2)
        tenants = [f"{_slug(n)}-{draw.hex(4)}" for n in names]
    t1, t2 = tenants
    cast = {
        "victim": draw.user(Role.USER, t1),
        "attacker": draw.user(Role.USER, t1),
        "admin": draw.user(Role.ADMIN, t1),
        "climber": draw.user(Role.USER, t1),
        "bystander": draw.user(Role.USER, t2 if tenanted else None),
    }
    if tenanted:
        cast["manager"] = draw.user(Role.MANAGER, t1)
        cast["rival_manager"] = draw.user(Role.MANAGER, t2)
    users = list(cast.values())
    rng.shuffle(users)

    fields = domain.resource.fields
    owned = [
        ("victim", "read"), ("victim", "target_update"), ("victim", "target_delete"), ("victim", "own_edit"),
        ("victim", "own_remove"), ("attacker", "attacker_own"), ("climber", "climber_own"),
        ("bystander", "bystander_own"), ("admin", "admin_own"),
        # the victim's targets mirrored on the attacker's side, for the exploits tried the other way
        # round (envcore.factory.probe_plan.victim_intruder_probes)
        *(("attacker", f"attacker_{purpose}") for purpose in MIRRORED),
    ]
    records = []
    for part, purpose in owned:
        prefix = domain.resource.singular[:3]
        records.append(
            RecordSpec(
                record_id=draw.object_id(prefix),
                owner=cast[part].username,
                values={f.name: draw.value(f) for f in fields},
                share_code=f"shr_{draw.hex(12)}" if purpose in ("read", "attacker_read") else None,
                purpose=purpose,
            )
        )
    rng.shuffle(records)

    files: list[FileSpec] = []
    if "files" in ordered:
        for part in ("victim", "attacker"):
            who = cast[part]
            files.append(
                FileSpec(
                    owner=who.username,
                    name=f"{rng.choice(('report', 'notes', 'invoice', 'scan'))}-{draw.hex(4)}.txt",
                    content=f"Private file of {who.display_name} {draw.marker()}\n",
                )
            )

    style = draft.style
    partial = ScenarioSpec.model_construct(domain=domain, style=style)
    sites = site_refs(variant, Names.of(partial))
    return ScenarioSpec(
        seed=seed,
        domain=domain,
        style=style,
        features=ordered,
        users=tuple(users),
        records=tuple(records),
        files=tuple(files),
        roles={part: user.username for part, user in cast.items()},
        policy=build_policy(domain, ordered, draft.style.auth),
        bug={"bug_class": bug.name, "cwe": bug.cwe, "variant": variant.name, "sites": sites},
        traps=tuple(Trap(kind=t, description=TRAP_TEXT[t]) for t in traps),
        difficulty=DifficultyFeatures(
            sites=len(variant.sites), traps=len(traps), subtle_variant=variant.subtle, decoy_routes=decoys
        ),
        app_secret=f"sk_{draw.hex(24)}",
        author=author,
        draft=draft,
    )
