"""The shipped evaluation runs (``artifacts/evals/<cache>``): current, honest, and a valid benchmark.

Each run must cover the whole test split of the cache it was played on (the one its folder and its
summary name) with the scenarios as they are there (content hashes match), its ``summary.json`` must
be what its episode log adds up to, and together
they must show the benchmark discriminates: the oracle fixes everything, no-op and deny-all fix
nothing and earn at most 0, the heuristic lands strictly between and does worse as the tier rises.
The newest cache's runs are checked by default, the older caches' in the slow run.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest

from envcore.agents.evaluate import scenario_domains, summarize
from envcore.env.episode_log import read_episodes

ROOT = Path(__file__).resolve().parents[1]
EVALS = ROOT / "artifacts" / "evals"
CACHES = ("v2", "v5")
"""The caches the baselines were played on: the first the benchmark shipped with, and the newest."""
BASELINE_RUNS = ("oracle", "noop", "deny_all", "random", "heuristic")
LLM_RUNS = ("tiny-random-llm",)
RUNS = [f"{cache}/{agent}" for cache in CACHES for agent in BASELINE_RUNS] + [f"v2/{agent}" for agent in LLM_RUNS]
"""Every baseline on each cache; the random-weight model on v2's test split (and on the external
split below): a format error at every step wherever it plays, so one full run of it says it all."""
NEWEST = "v5"


def newest_by_default(values, cache_of=lambda value: value.split("/")[0]):
    """``values`` as parameters, those of caches older than :data:`NEWEST` marked slow."""
    return [pytest.param(*(value if isinstance(value, tuple) else (value,)),
                         marks=() if cache_of(value) == NEWEST else pytest.mark.slow) for value in values]


@functools.cache
def load(name):
    folder = EVALS / name
    return json.loads((folder / "summary.json").read_text()), list(read_episodes(folder / "episodes.jsonl.gz"))


def _close(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, abs_tol=1e-9)
    return a == b


@pytest.mark.parametrize("name", newest_by_default(RUNS), ids=RUNS)
def test_a_shipped_run_covers_the_test_split_as_it_is_and_its_summary_is_its_log(name):
    from envcore.cache import ScenarioCache

    summary, records = load(name)
    shipped = ScenarioCache.open(ROOT / "artifacts" / "scenarios" / summary["run"]["cache"])
    assert (EVALS / name).resolve().parent.name == summary["run"]["cache"]  # filed under the cache it was played on
    test_ids = set(shipped.ids(split="test"))
    assert {r.scenario_id for r in records} == test_ids and len(records) == len(test_ids)
    hashes = {scenario_id: shipped.load(scenario_id).content_hash() for scenario_id in test_ids}
    stale = [r.scenario_id for r in records if r.scenario_hash != hashes[r.scenario_id]]
    assert not stale, f"{name} was played on older versions of {len(stale)} scenarios: re-run it"
    assert summary["infrastructure_errors"] == 0 and summary["run"]["failed"] == []
    again = summarize(records, domains=scenario_domains(shipped))
    assert _close({k: v for k, v in summary.items() if k != "run"}, again)


@pytest.mark.parametrize("cache", newest_by_default(CACHES), ids=CACHES)
def test_the_shipped_runs_show_the_benchmark_discriminates(cache):
    full = {name: load(f"{cache}/{name}")[0]["overall"]["full_fix"]["mean"] for name in BASELINE_RUNS}
    reward = {name: load(f"{cache}/{name}")[0]["overall"]["reward"]["mean"] for name in BASELINE_RUNS}
    assert full["oracle"] == 1.0
    assert full["noop"] == 0.0 and reward["noop"] <= 0
    assert full["deny_all"] == 0.0 and reward["deny_all"] <= 0
    assert 0.0 < full["heuristic"] < 1.0 and full["random"] < full["heuristic"]
    by_tier = load(f"{cache}/heuristic")[0]["by"]["tier"]
    rates = [by_tier[t]["full_fix"]["mean"] for t in ("1", "2", "3")]
    assert rates[0] > rates[1] > rates[2], f"heuristic full-fix rate by tier: {rates}"


# -- the style-held-out split and the external split (caches v3 and v5) ----------------------------
HELDOUT_CACHES = ("v3", "v5")
HELDOUT_RUNS = [(cache, split, agent) for cache in HELDOUT_CACHES for split in ("test_styles", "external")
                for agent in BASELINE_RUNS] + [(cache, "external", "tiny-random-llm") for cache in HELDOUT_CACHES]


@functools.cache
def load_heldout(cache, split, agent):
    folder = ROOT / "artifacts" / "heldout" / cache / split / agent
    return json.loads((folder / "summary.json").read_text()), list(read_episodes(folder / "episodes.jsonl.gz"))


@pytest.mark.parametrize("version,split,agent", newest_by_default(HELDOUT_RUNS, lambda run: run[0]),
                         ids=[f"{c}/{s}/{a}" for c, s, a in HELDOUT_RUNS])
def test_a_held_out_run_covers_its_split_as_it_is_and_its_summary_is_its_log(version, split, agent):
    from envcore.cache import ScenarioCache

    cache = ScenarioCache.open(ROOT / "artifacts" / "scenarios" / version)
    summary, records = load_heldout(version, split, agent)
    ids = set(cache.ids(split=split))
    assert ids and {r.scenario_id for r in records} == ids and len(records) == len(ids)
    stale = [r.scenario_id for r in records if r.scenario_hash != cache.load(r.scenario_id).content_hash()]
    assert not stale, f"{split}/{agent} was played on older versions of {len(stale)} scenarios: re-run it"
    assert summary["infrastructure_errors"] == 0 and summary["run"]["failed"] == []
    again = summarize(records, domains=scenario_domains(cache))
    assert _close({k: v for k, v in summary.items() if k != "run"}, again)


@pytest.mark.parametrize("version", newest_by_default(HELDOUT_CACHES), ids=HELDOUT_CACHES)
def test_the_style_held_out_split_discriminates_and_is_harder_for_the_heuristic(version):
    full = {agent: load_heldout(version, "test_styles", agent)[0]["overall"]["full_fix"]["mean"] for agent in BASELINE_RUNS}
    reward = {agent: load_heldout(version, "test_styles", agent)[0]["overall"]["reward"]["mean"]
              for agent in BASELINE_RUNS}
    assert full["oracle"] == 1.0 and load_heldout(version, "external", "oracle")[0]["overall"]["full_fix"]["mean"] == 1.0
    assert full["noop"] == 0.0 and reward["noop"] <= 0 and full["deny_all"] == 0.0 and reward["deny_all"] < 0
    tested_on = {"v3": "v2", "v5": "v5"}[version]  # the test split the held-out one is compared with
    assert 0 < full["heuristic"] < load(f"{tested_on}/heuristic")[0]["overall"]["full_fix"]["mean"]


def test_deny_all_broke_all_legitimate_use_wherever_it_played():
    """Deny-all's patch lands in every app layout: on the newest cache's test split, its held-out
    styles and the external apps alike it broke (nearly) every legitimate use and earned far below
    leaving the app alone. (Before it found the app wherever it is made, it changed nothing in the
    external apps and scored like no-op there.)"""
    runs = {"test": load(f"{NEWEST}/deny_all")[0]}
    runs.update({split: load_heldout(NEWEST, split, "deny_all")[0] for split in ("test_styles", "external")})
    for split, summary in runs.items():
        overall = summary["overall"]
        assert overall["regression_pass"]["mean"] < 0.05 and overall["reward"]["mean"] < -0.25, (split, overall)
