"""What the environment's servers serve: their scenario catalogue (``GET /scenarios``), and whether a
local scenario cache holds the same scenarios with the same content.

An evaluation run against servers plays the servers' own scenarios (:mod:`envcore.agents.eval_run`),
and the replicas a run starts are checked to serve the local cache before it uses them
(:func:`envcore.agents.providers.check_same_cache`). Both read the catalogue here, in a module of its
own below both: the providers sit under the rollout runner, which the evaluation run plays through,
so the providers' check cannot import the evaluation run without the two needing each other.
:class:`EvaluationError`, what every part of an evaluation raises when it cannot run as asked, is
defined here for the same reason.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class EvaluationError(ValueError):
    """The evaluation cannot run as asked (no scenarios, an agent that cannot be built, ...)."""


def catalogue(url: str, *, split: str | None, timeout: float = 30.0) -> dict[str, str]:
    """The scenarios a server offers in ``split`` (``None``: all), as id: content hash."""
    query = urllib.parse.urlencode({"limit": 2000, **({"split": split} if split else {})})
    out: dict[str, str] = {}
    offset = 0
    while True:
        address = f"{url.rstrip('/')}/scenarios?{query}&offset={offset}"
        try:
            with urllib.request.urlopen(address, timeout=timeout) as response:
                page = json.load(response)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EvaluationError(f"cannot read the scenario catalogue of {url}: {exc}") from None
        rows = page.get("scenarios", [])
        out.update({row["scenario_id"]: row.get("sha256", "") for row in rows})
        offset += len(rows)
        if not rows or offset >= int(page.get("total", 0)):
            return out


def served_scenarios(urls: list[str], *, split: str | None, cache: Any) -> list[str]:
    """The ids of ``split`` the servers at ``urls`` serve, sorted; every server must serve the same
    ones, and ``cache`` must hold each with the same content (the agent and the summary read it)."""
    offers = {url: catalogue(url, split=split) for url in dict.fromkeys(urls)}
    first_url, first = next(iter(offers.items()))
    for url, offer in offers.items():
        if offer != first:
            raise EvaluationError(f"{url} and {first_url} serve different scenarios in split {split or 'any'!r}: "
                                  "point every --url at servers of one cache")
    if not first:
        raise EvaluationError(f"{first_url} serves no scenario in split {split or 'any'!r}")
    missing = not_held(cache, first)
    if missing:
        raise EvaluationError(
            f"{first_url} serves {len(missing)} of its {len(first)} scenarios in split {split or 'any'!r} that the "
            f"local cache {cache.root} does not hold as served (e.g. {missing[0]}): pass --cache with a copy of the "
            "cache the server serves")
    return sorted(first)


def not_held(cache: Any, served: dict[str, str]) -> list[str]:
    """The ids of ``served`` (scenario id -> content hash, as a server's catalogue lists them) that
    ``cache`` does not hold with the same content, sorted."""
    local = {row["scenario_id"]: row.get("sha256", "") for row in cache.rows}
    return sorted(sid for sid, digest in served.items() if local.get(sid) != digest)
