"""The samples of a split: one per scenario, the first ``n`` in the order of their ids.

The order is the one ``python -m envcore eval`` plays (:func:`~envcore.agents.evaluate.evaluation_episodes`),
so two models evaluated with the same arguments play the same scenarios and compare pair by pair, and
episode ``i`` is reset with seed ``seed + i``. A sample's input is what the environment tells an agent
when its episode starts (the reset observation's text: task, access policy, seeded users, files,
budget); its metadata is the scenario's public facts (id, content hash, bug class, tier, domain).
Nothing that grades it (hidden probes, the reference fix) is in a sample.

Scenarios come from a cache folder (in process) or from a running server's catalog (``GET /scenarios``;
each input then is the scenario's task and policy as the catalog shows them, and the solver starts the
conversation with the server's own reset text). A split generated from a secret (``private``) shows no
scenario ids at all: samples are numbered, and their metadata names the scenarios by content hash.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.dataset import Sample

from a01_repair_gym._session import Planned
from envcore.cache import ScenarioCache
from envcore.env import render

CATALOG_PAGE = 2000
"""Rows the catalog returns per request (its most)."""

PlannedSamples = list[tuple[Sample, Planned]]


def _chosen(ids: list[str], n: int | None, where: str, split: str) -> list[str]:
    if n is not None and n < 1:
        raise ValueError(f"n must be at least 1, not {n}")
    if not ids:
        raise ValueError(f"{where} has no {split!r} scenarios")
    ids = sorted(ids)
    return ids if n is None else ids[:n]


def _facts(row: dict[str, Any], *, with_id: bool) -> dict[str, Any]:
    facts = {"scenario_id": row["scenario_id"]} if with_id else {}
    facts.update({"scenario_hash": row.get("sha256") or row.get("content_hash"), "bug_class": row.get("bug_class"),
                  "tier": row.get("tier"), "domain": row.get("domain"), "split": row.get("split")})
    return facts


def cache_samples(cache: ScenarioCache, split: str, *, n: int | None, max_steps: int, seed: int,
                  show_ids: bool = True) -> PlannedSamples:
    """The split's samples from ``cache``; each input is the reset text of a ``max_steps`` episode."""
    where = f"the scenario cache {cache.root}"
    if split not in cache.splits():
        raise ValueError(f"{where} has no {split!r} split (it has {', '.join(cache.splits()) or 'none'})")
    out = []
    for index, scenario_id in enumerate(_chosen(cache.ids(split=split), n, where, split)):
        bundle = cache.load(scenario_id)
        sample_id = scenario_id if show_ids else f"{split}-{index + 1:03d}"
        out.append((Sample(id=sample_id, input=render.intro(bundle, max_steps),
                           metadata=_facts(cache.row(scenario_id), with_id=show_ids)),
                    Planned(scenario=scenario_id, seed=seed + index)))
    return out


def server_samples(url: str, split: str, *, n: int | None, seed: int, timeout_s: float = 60.0) -> PlannedSamples:
    """The split's samples from the catalog of the server at ``url``."""
    import httpx

    base = url.rstrip("/")
    with httpx.Client(base_url=base, timeout=timeout_s) as http:
        rows: list[dict[str, Any]] = []
        while True:
            reply = http.get("/scenarios", params={"split": split, "limit": CATALOG_PAGE, "offset": len(rows)})
            reply.raise_for_status()
            page = reply.json()
            rows.extend(page["scenarios"])
            if not page["scenarios"] or len(rows) >= page["total"]:
                break
        by_id = {row["scenario_id"]: row for row in rows}
        out = []
        for index, scenario_id in enumerate(_chosen(list(by_id), n, f"the server at {base}", split)):
            reply = http.get(f"/scenarios/{scenario_id}")
            reply.raise_for_status()
            view = reply.json()
            out.append((Sample(id=scenario_id, input=f"{view['task']}\n\n{view['policy']}",
                               metadata=_facts(by_id[scenario_id], with_id=True)),
                        Planned(scenario=scenario_id, seed=seed + index)))
    return out
