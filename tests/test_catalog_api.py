"""The catalog service (what ``python app.py`` serves): browsable, and it never leaks what grades."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from envcore.cache import ScenarioCache, write_cache
from envcore.server.catalog import create_catalog_app
from envcore.version import GENERATOR_VERSION


@pytest.fixture(scope="module")
def client(tmp_path_factory, bundle_for, config):
    root = tmp_path_factory.mktemp("cat") / "v1"
    write_cache(root, [(bundle_for(s), config.split_of(bundle_for(s).domain)) for s in range(6)], generator=GENERATOR_VERSION)
    return TestClient(create_catalog_app(ScenarioCache.open(root))), root


def test_health_reports_the_cache(client):
    c, _ = client
    assert c.get("/health").json() == {"status": "ok", "cache": "v1", "scenarios": 6}


def test_list_filters_by_split(client, config):
    c, _ = client
    body = c.get("/scenarios", params={"split": "train"}).json()
    assert body["total"] == len([r for r in body["scenarios"]]) and all(r["split"] == "train" for r in body["scenarios"])


def test_bad_filter_is_a_422_not_a_crash(client):
    c, _ = client
    assert c.get("/scenarios", params={"tier": "seven"}).status_code == 422


def test_catalog_never_serves_hidden_probes_the_reference_fix_or_tokens(client, bundle_for):
    c, _ = client
    bundle = bundle_for(0)
    body = c.get(f"/scenarios/{bundle.scenario_id[:8]}").json()
    text = json.dumps(body)
    assert bundle.reference_fix not in text and "reference_fix" not in body and "spec" not in body
    hidden = [p for p in bundle.probes if not p.visible]
    assert hidden and all(p.id not in {v["id"] for v in body["visible_probes"]} for p in hidden)
    assert all("token" not in u for u in body["users"])  # (the seed data in the app's files has them, by design)
    assert body["task"] == bundle.task and body["files"] == bundle.files


def test_unknown_scenario_is_404(client):
    c, _ = client
    assert c.get("/scenarios/ffffffffffffffff").status_code == 404


def test_corrupt_entry_is_409_naming_it(client):
    c, root = client
    sid = json.loads((root / "manifest.json").read_text())["scenarios"][0]["scenario_id"]
    (root / "bundles" / f"{sid}.json.gz").write_bytes(b"not gzip")
    response = c.get(f"/scenarios/{sid}")
    assert response.status_code == 409 and sid in response.json()["detail"]


def test_shipped_default_cache_has_at_least_1000_verified_scenarios():
    cache = ScenarioCache.open()
    assert len(cache) >= 1000
    assert len({r["scenario_id"] for r in cache.rows}) == len(cache)
    for split in ("train", "val", "test"):
        assert cache.ids(split=split)
