"""Sample apps the zygote warms up on before it forks any worker.

Forking a process that has already built and exercised a similar app makes every worker several
times faster (the first-use work of Pydantic, FastAPI and the route regexes is inherited instead of
repeated). The samples are generated apps from seeds far outside any shipped range, one per code
layout and auth style, with the requests of their probes as traffic. They are only ever sent as
app files and plain requests: the zygote receives no probe, expectation or fix.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

WARMUP_SEED_BASE = 7_000_000_000
MAX_SAMPLES = 6


@lru_cache(maxsize=1)
def warmup_apps() -> tuple[dict[str, Any], ...]:
    from envcore.factory.compiler import compile_spec
    from envcore.factory.config import FactoryConfig
    from envcore.factory.template_author import author_spec
    from envcore.runner.execute import step_request
    from envcore.sandbox.worker import request_to_json

    config = FactoryConfig.load(None)
    samples: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
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
    return tuple(samples)
