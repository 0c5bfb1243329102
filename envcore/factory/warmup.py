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
from envcore.runner.execute import step_request
from envcore.sandbox.worker import request_to_json

WARMUP_SEED_BASE = 7_000_000_000
MAX_SAMPLES = 6


def warmup_samples() -> list[dict[str, Any]]:
    config = FactoryConfig.load(None)
    samples: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for seed in range(WARMUP_SEED_BASE, WARMUP_SEED_BASE + 200):
        spec = author_spec(config, seed)
        style = (spec.style.layout, spec.style.auth, spec.style.store)
        if style in seen:
            continue
        seen.add(style)
        bundle = compile_spec(spec)
        tokens = {u.username: u.token for u in bundle.users}
        requests = [request_to_json(step_request(step, tokens)) for probe in bundle.probes for step in probe.steps]
        samples.append({"files": dict(bundle.files), "entrypoint": bundle.entrypoint, "requests": requests})
        if len(samples) >= MAX_SAMPLES:
            break
    return samples


def write_warmup_apps(path: Path) -> int:
    """Write the samples (deterministic bytes: no timestamp in the gzip header); return how many."""
    samples = warmup_samples()
    data = json.dumps({"apps": samples}, sort_keys=True, separators=(",", ":")).encode()
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as handle:
        handle.write(data)
    return len(samples)
