"""The scenario catalog API: browse a cache over HTTP without ever exposing what grades the agent.

Routes (all read-only, JSON):

* ``GET /health`` - liveness, with the cache version and size;
* ``GET /scenarios`` - manifest rows, filterable by ``split``, ``tier``, ``bug_class``, ``domain``;
* ``GET /scenarios/{id}`` - the public view of one scenario: task, policy, app files, users (without
  tokens) and the *visible* probes. Hidden probes, the reference fix and the spec never leave the
  server, which is what keeps the benchmark honest when this service is public.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Query

from envcore.cache import CorruptEntryError, ScenarioCache
from envcore.scenario.bundle import Bundle


def public_view(bundle: Bundle) -> dict[str, Any]:
    """What anyone may see of a scenario: enough to play it, nothing that grades it."""
    return {
        **bundle.summary(),
        "content_hash": bundle.content_hash(),
        "task": bundle.task,
        "policy": bundle.policy_text,
        "entrypoint": bundle.entrypoint,
        "files": bundle.files,
        "users": [{"username": u.username, "role": u.role, "tenant": u.tenant} for u in bundle.users],
        "visible_probes": [p.model_dump(mode="json") for p in bundle.visible_probes],
    }


def catalog_router(cache: ScenarioCache, *, health: bool = True) -> APIRouter:
    """The catalog's routes; ``health=False`` leaves ``/health`` to the app it joins (OpenEnv's)."""
    router = APIRouter(tags=["catalog"])

    if health:
        @router.get("/health")
        def health_check() -> dict[str, Any]:
            return {"status": "ok", "cache": cache.root.name, "scenarios": len(cache)}

    @router.get("/scenarios")
    def list_scenarios(
        split: str | None = None,
        tier: int | None = Query(default=None, ge=1, le=3),
        bug_class: str | None = None,
        domain: str | None = None,
        limit: int = Query(default=100, ge=1, le=2000),
        offset: int = Query(default=0, ge=0),
    ) -> dict[str, Any]:
        ids = set(cache.ids(split=split, tier=tier, bug_class=bug_class, domain=domain))
        rows = [r for r in cache.rows if r["scenario_id"] in ids]
        return {"total": len(rows), "scenarios": rows[offset : offset + limit]}

    @router.get("/scenarios/{scenario_id}")
    def get_scenario(scenario_id: str) -> dict[str, Any]:
        try:
            bundle = cache.load(cache.resolve(scenario_id))
        except KeyError:
            raise HTTPException(status_code=404, detail=f"no scenario {scenario_id!r}") from None
        except CorruptEntryError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from None
        return public_view(bundle)

    return router


def create_catalog_app(cache: ScenarioCache) -> FastAPI:
    app = FastAPI(title="A01 repair gym", description="Scenario catalog of the A01 repair gym.")
    app.include_router(catalog_router(cache))
    return app
