"""The sandbox's warm-up samples, written by the factory (``python -m envcore factory warmup-apps``).

The sandbox reads them as data (:mod:`envcore.sandbox.warmup`); this module is the one place that
makes them: generated apps from seeds far outside any shipped range, one per code layout, auth style
and store, each with the requests of its probes as traffic (the zygote never sees a probe itself).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from envcore.factory.compiler import compile_spec
from envcore.factory.config import FactoryConfig
from envcore.factory.template_author import author_spec
from envcore.runner.actors import ActorSession, actors_of
from envcore.runner.execute import step_request
from envcore.sandbox.worker import request_to_json

WARMUP_SEED_BASE = 7_000_000_000
MAX_SAMPLES = 6


REALISTIC_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "realistic.yaml"
REALISTIC_SAMPLES = 2
"""Samples of the realistic family too (an ORM on a SQLite file, router modules, an API key or a
cookie), so SQLAlchemy's and SQLModel's first-use work is inherited by every worker as well."""


def warmup_samples() -> list[dict[str, Any]]:
    samples = _samples(FactoryConfig.load(None), MAX_SAMPLES, WARMUP_SEED_BASE)
    if REALISTIC_CONFIG.is_file():
        realistic = FactoryConfig.load(REALISTIC_CONFIG)
        samples += _samples(realistic, REALISTIC_SAMPLES, WARMUP_SEED_BASE + 1_000, distinct=(0, 2))
    return samples


def _samples(config: FactoryConfig, limit: int, first_seed: int,
             distinct: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """One app per (layout, auth, store) from seeds after ``first_seed``, up to ``limit``, each also
    differing from the others on the axes ``distinct`` names. Apps with a user who signs in with a
    login request are left out, whatever the style calls it: a sample's requests are written down
    ahead, and a login actor's depend on the login's reply."""
    samples: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for seed in range(first_seed, first_seed + 200):
        spec = author_spec(config, seed)
        style = (spec.style.layout, spec.style.auth, spec.style.store)
        if style in seen or any(style[i] == s[i] for s in seen for i in distinct):
            continue
        bundle = compile_spec(spec)
        actors = actors_of(bundle.users)
        if any(ActorSession(actors).needs_login(user.username) for user in bundle.users):
            continue
        seen.add(style)
        requests = [request_to_json(step_request(step, actors)) for probe in bundle.probes for step in probe.steps]
        samples.append({"files": dict(bundle.files), "entrypoint": bundle.entrypoint, "requests": requests})
        if len(samples) >= limit:
            break
    return samples


def write_warmup_apps(path: Path) -> int:
    """Write the samples (deterministic bytes: no timestamp in the gzip header); return how many."""
    samples = warmup_samples()
    data = json.dumps({"apps": samples}, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as handle:
        handle.write(data)
    return len(samples)
