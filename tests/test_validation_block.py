"""openenv.yaml's validation block: what it declares (the oracle, the canary trajectories, the task API,
the tools and the task counts) is true of the environment, and OpenEnv's own parser reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envcore.cache import ScenarioCache
from envcore.env.tools import TOOLS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def manifest():
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser

    return OpenEnvYamlParser().parse(ROOT)


def test_openenvs_parser_reads_the_oracle_the_canaries_and_the_task_api(manifest) -> None:
    capabilities = manifest.capabilities
    assert capabilities.oracle.form == "script" and (ROOT / capabilities.oracle.location).is_file()
    assert (ROOT / capabilities.canaries).is_file() and capabilities.task_api
    assert capabilities.declared_tools == list(TOOLS)


def test_the_declared_task_counts_are_the_shipped_caches(manifest) -> None:
    from envcore.env.environment import A01Environment

    env = A01Environment()
    try:
        served = {split["name"]: split["num_tasks"] for split in env.list_splits()}
    finally:
        env.close()
    assert manifest.capabilities.declared_task_count == served
    cache = ScenarioCache.open()
    assert served == {split: len(cache.ids(split=split)) for split in cache.splits()}


def test_the_shipped_canary_trajectories_are_the_ones_the_script_writes() -> None:
    """canaries.jsonl is not stale: rewriting it from the cache gives the same trajectories."""
    from validation.canaries import TRAJECTORIES, trajectories

    shipped = [json.loads(line) for line in TRAJECTORIES.read_text().splitlines()]
    assert shipped == [json.loads(json.dumps(item, sort_keys=True)) for item in trajectories()]
    assert {item["canary"] for item in shipped} >= {"deny_all", "deny_sites", "delete_sites"}
    assert all(item["split"] == "train" for item in shipped)  # no test scenario's routes written down


@pytest.mark.slow  # the canaries' verdicts are tested by default in test_canaries
def test_no_canary_trajectory_earns_more_than_the_untouched_app(sandbox) -> None:
    from validation.canaries import replay

    rows = replay()
    assert rows and all(row["holds"] for row in rows), [r for r in rows if not r["holds"]]


def test_the_oracle_reaches_the_declared_maximum(sandbox) -> None:
    from validation.oracle import declared, oracle_rewards

    top, tolerance = declared()
    reward = yaml.safe_load((ROOT / "openenv.yaml").read_text())["validation"]["reward"]
    assert top == reward["range"][1]
    rewards = oracle_rewards("test", 2)
    assert len(rewards) == 2 and all(r is not None and r >= top - tolerance for r in rewards.values()), rewards


def test_the_oracle_script_fails_when_the_top_is_out_of_reach(monkeypatch, capsys) -> None:
    import validation.oracle as oracle

    monkeypatch.setattr(oracle, "oracle_rewards", lambda *a, **k: {"abc": 0.2, "def": None})
    assert oracle.main(["--n", "2"]) == 1
    out = capsys.readouterr().out
    assert "SHORT" in out and "0 of 2" in out
