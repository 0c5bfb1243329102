"""Sample apps the zygote warms up on before it forks any worker.

Forking a process that has already built and exercised a similar app makes every worker several
times faster (the first-use work of Pydantic, FastAPI and the route regexes is inherited instead of
repeated). The samples are generated apps from seeds far outside any shipped range, one per code
layout, auth style and store, with the requests of their probes as traffic. They ship as data
(:data:`SAMPLES`, written by ``python -m envcore factory warmup-apps``), so the sandbox never needs
the factory: grading runs where only the bundle and the patch are at hand. They are only ever sent
as app files and plain requests: the zygote receives no probe, expectation or fix. A missing or
unreadable samples file only costs speed (no warm-up).
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).with_name("warmup_apps.json.gz")


@lru_cache(maxsize=1)
def warmup_apps() -> tuple[dict[str, Any], ...]:
    try:
        with gzip.open(SAMPLES, "rt", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return ()
    return tuple(item for item in data.get("apps", []) if isinstance(item, dict))
