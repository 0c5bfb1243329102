"""The cache shipped in artifacts/ is current: a sample passes the full check (determinism included),
and the whole cache does too when the slow suite is run."""

from __future__ import annotations

import pytest

from envcore.cache import ScenarioCache
from envcore.factory.check import check_scenario
from envcore.version import GENERATOR_VERSION


@pytest.fixture(scope="module")
def shipped():
    return ScenarioCache.open()


def test_shipped_cache_is_from_the_current_generator(shipped):
    assert shipped.manifest["generator"] == GENERATOR_VERSION


@pytest.mark.slow  # the whole check on a sample of the cache; each bug class's runs by default in test_bug_classes
def test_a_sample_of_the_shipped_cache_passes_the_full_check(shipped, runner):
    ids = shipped.ids()
    for scenario_id in ids[:: max(1, len(ids) // 25)]:
        report = check_scenario(shipped.load(scenario_id), runner, fail_fast=False)
        assert report.ok, report.summary()


@pytest.mark.slow
def test_every_shipped_scenario_passes_the_full_check(shipped, runner):
    bad = [r.summary() for r in (check_scenario(b, runner, fail_fast=False) for b in shipped) if not r.ok]
    assert not bad and not shipped.problems, (bad[:3], shipped.problems[:3])
