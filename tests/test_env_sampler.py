"""The curriculum sampler: reproducible draws, honoured filters and weights, corrupt entries skipped."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from envcore.cache import BUNDLES, MANIFEST, ScenarioCache, latest_version
from envcore.env.sampler import DEFAULT_SPLIT, CurriculumSampler, NoScenario, SamplingWeights

SHIPPED = latest_version()  # the newest shipped cache, as the `shipped` fixture
SEEDS = range(200)


@pytest.fixture(scope="module")
def sampler(shipped) -> CurriculumSampler:
    return CurriculumSampler(shipped)


def drawn_rows(sampler: CurriculumSampler, seeds=SEEDS, **filters) -> list[dict]:
    return [sampler.row(sampler.choose(seed=seed, **filters)[0].scenario_id) for seed in seeds]


# --- reproducibility --------------------------------------------------------------------------


def test_same_seed_and_filters_give_the_same_scenario(shipped, sampler):
    fresh = CurriculumSampler(ScenarioCache.open(SHIPPED))  # another sampler, nothing cached
    for seed in range(40):
        for filters in ({}, {"tier": 2}, {"split": "val", "bug_class": "idor_read"}, {"split": None}):
            bundle, used = sampler.choose(seed=seed, **filters)
            assert used == seed
            assert sampler.choose(seed=seed, **filters)[0].scenario_id == bundle.scenario_id
            assert fresh.choose(seed=seed, **filters)[0].scenario_id == bundle.scenario_id


def test_different_seeds_spread_over_many_scenarios(sampler):
    ids = [sampler.choose(seed=seed)[0].scenario_id for seed in range(100)]
    assert len(set(ids)) > 60  # 610 train scenarios: 100 uniform draws hit ~92 distinct ones
    assert Counter(ids).most_common(1)[0][1] <= 4


def test_same_seed_gives_the_same_scenario_in_another_process(sampler):
    """'On every machine': nothing in the draw may depend on hash randomisation or process state."""
    seeds = list(range(0, 200, 7))
    mine = [sampler.choose(seed=s, tier=3)[0].scenario_id for s in seeds]
    code = ("import json, sys\nfrom envcore.cache import ScenarioCache\nfrom envcore.env.sampler import CurriculumSampler\n"
            f"s = CurriculumSampler(ScenarioCache.open({str(SHIPPED)!r}))\n"
            f"print(json.dumps([s.choose(seed=x, tier=3)[0].scenario_id for x in {seeds!r}]))\n")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert json.loads(out.stdout) == mine


def test_without_a_seed_one_is_drawn_and_returned_for_replay(sampler):
    seen = set()
    for _ in range(5):
        bundle, seed = sampler.choose(tier=1)
        assert isinstance(seed, int)
        assert sampler.choose(seed=seed, tier=1)[0].scenario_id == bundle.scenario_id
        seen.add(seed)
    assert len(seen) > 1


# --- filters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_split_filter_is_honoured(sampler, split):
    rows = drawn_rows(sampler, range(150), split=split)
    assert {r["split"] for r in rows} == {split}


@pytest.mark.parametrize("tier", [1, 2, 3])
def test_tier_filter_is_honoured(sampler, tier):
    rows = drawn_rows(sampler, range(150), tier=tier)
    assert {r["tier"] for r in rows} == {tier}
    assert {r["split"] for r in rows} == {"train"}


def test_bug_class_filter_is_honoured(shipped, sampler):
    classes = sorted({r["bug_class"] for r in shipped.rows})
    assert len(classes) == 12
    for bug_class in classes:
        rows = drawn_rows(sampler, range(40), bug_class=bug_class)
        assert {r["bug_class"] for r in rows} == {bug_class}
        assert {r["split"] for r in rows} == {"train"}


def test_filters_combine(sampler):
    rows = drawn_rows(sampler, range(60), split="test", tier=3, bug_class="tenant_leak")
    assert {(r["split"], r["tier"], r["bug_class"]) for r in rows} == {("test", 3, "tenant_leak")}


def test_candidates_are_exactly_the_matching_manifest_rows_in_id_order(shipped, sampler):
    expected = sorted(r["scenario_id"] for r in shipped.rows
                      if r["split"] == "val" and r["tier"] == 2 and r["bug_class"] == "list_leak")
    assert expected
    assert [sid for sid, _ in sampler.candidates(split="val", tier=2, bug_class="list_leak")] == expected
    assert len(sampler.candidates()) == sum(r["split"] == "train" for r in shipped.rows)
    assert len(sampler.candidates(split=None)) == len(shipped.rows)


def test_default_split_is_train_so_test_scenarios_are_never_drawn_unasked(shipped, sampler):
    assert DEFAULT_SPLIT == "train"
    rows = drawn_rows(sampler, range(300))
    assert {r["split"] for r in rows} == {"train"}
    rows = drawn_rows(sampler, range(150), tier=3)
    assert {r["split"] for r in rows} == {"train"}
    # asking for any split does reach the held-out ones (so the default really is what filters them)
    assert "test" in {r["split"] for r in drawn_rows(sampler, range(100), split=None)}


# --- scenario= --------------------------------------------------------------------------------


def shortest_unique_prefix(ids: list[str], target: str) -> str:
    for n in range(1, len(target) + 1):
        if sum(i.startswith(target[:n]) for i in ids) == 1:
            return target[:n]
    raise AssertionError(target)


def test_scenario_accepts_a_full_id_or_a_unique_prefix(shipped, sampler):
    ids = [r["scenario_id"] for r in shipped.rows]
    test_row = next(r for r in shipped.rows if r["split"] == "test")
    target = test_row["scenario_id"]
    bundle, seed = sampler.choose(seed=5, scenario=target)
    assert bundle.scenario_id == target and seed == 5  # a named scenario is played whatever its split
    prefix = shortest_unique_prefix(ids, target)
    assert len(prefix) < len(target)
    assert sampler.choose(scenario=prefix)[0].scenario_id == target
    assert bundle.bug_class == test_row["bug_class"] and bundle.tier == test_row["tier"]


def test_scenario_unknown_or_ambiguous_raises_no_scenario(shipped, sampler):
    with pytest.raises(NoScenario, match="^'zzzz' matches 0 scenarios in "):
        sampler.choose(seed=1, scenario="zzzz")
    ambiguous = shipped.rows[0]["scenario_id"][:1]
    with pytest.raises(NoScenario, match="matches [0-9]+ scenarios"):
        sampler.choose(seed=1, scenario=ambiguous)
    assert issubclass(NoScenario, ValueError)


# --- weights ----------------------------------------------------------------------------------


def test_a_bug_class_with_weight_zero_is_never_drawn(shipped, sampler):
    assert "tenant_leak" in {r["bug_class"] for r in drawn_rows(sampler)}  # it is drawn when not weighted out
    weighted = CurriculumSampler(shipped, SamplingWeights(by_bug_class={"tenant_leak": 0.0}))
    assert "tenant_leak" not in {r["bug_class"] for r in drawn_rows(weighted)}
    assert "tenant_leak" not in {r["bug_class"] for r in drawn_rows(weighted, range(80), split=None)}
    with pytest.raises(NoScenario, match="tenant_leak"):
        weighted.choose(seed=0, bug_class="tenant_leak")
    assert not any(sid in dict(weighted.candidates(split=None)) for sid in shipped.ids(bug_class="tenant_leak"))


def test_a_tier_with_weight_zero_is_never_drawn(shipped):
    weighted = CurriculumSampler(shipped, SamplingWeights(by_tier={"1": 0.0, "2": 0.0}))
    assert {r["tier"] for r in drawn_rows(weighted, range(100))} == {3}


def test_a_heavily_weighted_scenario_dominates_the_draws(shipped, sampler):
    favourite = sorted(shipped.ids(split="train"))[123]
    assert sum(sampler.choose(seed=s)[0].scenario_id == favourite for s in SEEDS) <= 5  # ~1/610 unweighted
    weighted = CurriculumSampler(shipped, SamplingWeights(by_scenario={favourite: 5000.0}))
    hits = sum(weighted.choose(seed=s)[0].scenario_id == favourite for s in SEEDS)
    assert hits >= 0.8 * len(SEEDS)  # 5000 / (5000 + 609) ~ 0.89
    assert hits < len(SEEDS)  # the others are still drawn


def test_weights_multiply(shipped):
    weights = SamplingWeights(by_bug_class={"idor_read": 2.0}, by_tier={"3": 0.5}, by_scenario={"x": 3.0})
    assert weights.weight({"bug_class": "idor_read", "tier": 3, "scenario_id": "x"}) == 3.0
    assert weights.weight({"bug_class": "idor_read", "tier": 1, "scenario_id": "y"}) == 2.0
    assert weights.weight({"bug_class": "list_leak", "tier": 2, "scenario_id": "y"}) == 1.0
    sampler = CurriculumSampler(shipped, weights)
    by_id = dict(sampler.candidates())
    for row in shipped.rows:
        if row["split"] == "train":
            expected = (2.0 if row["bug_class"] == "idor_read" else 1.0) * (0.5 if row["tier"] == 3 else 1.0)
            assert by_id[row["scenario_id"]] == expected


def test_weights_file_round_trip(tmp_path):
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({
        "version": 1,
        "generated_by": "feedback-loop",
        "note": "more tenant leaks",
        "by_bug_class": {"tenant_leak": 2.0, "open_redirect": 0},
        "by_tier": {"1": 0.5, "3": 4},
        "by_scenario": {"0175faf3999fbb24": 3.0},
    }))
    weights = SamplingWeights.load(path)
    assert weights == SamplingWeights(by_bug_class={"tenant_leak": 2.0, "open_redirect": 0.0},
                                      by_tier={"1": 0.5, "3": 4.0}, by_scenario={"0175faf3999fbb24": 3.0})
    assert weights.weight({"bug_class": "tenant_leak", "tier": 3, "scenario_id": "0175faf3999fbb24"}) == 24.0
    assert weights.weight({"bug_class": "open_redirect", "tier": 2, "scenario_id": "a"}) == 0.0
    path.write_text(json.dumps({"version": 1}))
    assert SamplingWeights.load(path) == SamplingWeights()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"version": 2, "by_tier": {"1": 1.0}}, "version 2"),
        ({"by_tier": {"1": 1.0}}, "version None"),
        ({"version": 1, "by_bug_class": {"tenant_leak": -1.0}}, "by_bug_class: weights must be finite and >= 0"),
        ({"version": 1, "by_tier": {"2": float("inf")}}, "by_tier: weights must be finite"),
        ({"version": 1, "by_scenario": {"abc": float("nan")}}, "by_scenario: weights must be finite"),
        ({"version": 1, "by_domain": {"hr": 2.0}}, "unknown keys in sampling weights: \\['by_domain'\\]"),
        ({"version": 1, "by_tier": {"1": "heavy"}}, "heavy"),
        ({"version": 1, "by_tier": {"1": None}}, "by_tier|None"),
        ({"version": 1, "by_tier": [1, 2]}, "weights"),
        ([1, 2, 3], "weights"),
    ],
)
def test_bad_weights_files_are_refused_with_a_clear_value_error(tmp_path, content, message):
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(content))
    with pytest.raises(ValueError, match=message) as caught:
        SamplingWeights.load(path)
    assert str(path) in str(caught.value)


def test_unreadable_weights_files_are_refused_with_a_clear_value_error(tmp_path):
    path = tmp_path / "weights.json"
    with pytest.raises(ValueError, match="cannot read sampling weights"):
        SamplingWeights.load(path)  # missing
    path.write_text("{version: 1")
    with pytest.raises(ValueError, match="cannot read sampling weights"):
        SamplingWeights.load(path)


# --- damaged cache ----------------------------------------------------------------------------


@pytest.fixture
def small_cache(tmp_path, shipped) -> Path:
    """A copy of a few train scenarios of the shipped cache (manifest restricted to them)."""
    ids = sorted(shipped.ids(split="train"))[::61][:10]
    root = tmp_path / "v1"
    (root / BUNDLES).mkdir(parents=True)
    manifest = json.loads((SHIPPED / MANIFEST).read_text())
    manifest["scenarios"] = [r for r in manifest["scenarios"] if r["scenario_id"] in ids]
    (root / MANIFEST).write_text(json.dumps(manifest))
    for sid in ids:
        shutil.copyfile(SHIPPED / BUNDLES / f"{sid}.json.gz", root / BUNDLES / f"{sid}.json.gz")
    return root


def corrupt(root: Path, scenario_id: str) -> None:
    """Flip the bytes of the gzip trailer's CRC: the body decompresses, the check fails."""
    path = root / BUNDLES / f"{scenario_id}.json.gz"
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 8, len(data) - 4):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_small_cache_copy_is_playable(small_cache):
    sampler = CurriculumSampler(ScenarioCache.open(small_cache))
    assert len(sampler.candidates()) == 10
    assert len({sampler.choose(seed=s)[0].scenario_id for s in range(100)}) == 10
    assert sampler.problems == {}


def test_a_corrupt_entry_is_skipped_deterministically_and_reported(small_cache):
    intact = CurriculumSampler(ScenarioCache.open(small_cache))
    before = {seed: intact.choose(seed=seed)[0].scenario_id for seed in range(200)}
    victim = Counter(before.values()).most_common(1)[0][0]
    victim_seeds = [seed for seed, sid in before.items() if sid == victim]
    other_seeds = [seed for seed, sid in before.items() if sid != victim]
    assert len(victim_seeds) >= 10
    corrupt(small_cache, victim)

    first = CurriculumSampler(ScenarioCache.open(small_cache))
    replacement = {seed: first.choose(seed=seed)[0].scenario_id for seed in victim_seeds}
    assert victim not in replacement.values()
    assert set(first.problems) == {victim}
    assert victim in first.problems[victim] and "not valid gzip" in first.problems[victim]
    # the same seed picks the same replacement every time, on this sampler (which now knows the
    # entry is bad) and on fresh ones, whatever they drew before
    assert {seed: first.choose(seed=seed)[0].scenario_id for seed in victim_seeds} == replacement
    fresh = CurriculumSampler(ScenarioCache.open(small_cache))
    assert {seed: fresh.choose(seed=seed)[0].scenario_id for seed in victim_seeds} == replacement
    primed = CurriculumSampler(ScenarioCache.open(small_cache))
    primed.choose(seed=victim_seeds[-1])  # learns about the corrupt entry first
    assert set(primed.problems) == {victim}
    assert {seed: primed.choose(seed=seed)[0].scenario_id for seed in reversed(victim_seeds)} == replacement
    # and a seed that never picked the corrupt entry is not affected by it
    for sampler in (first, fresh, primed):
        assert {seed: sampler.choose(seed=seed)[0].scenario_id for seed in other_seeds} == {
            seed: before[seed] for seed in other_seeds}
    # asking for it by name says why it cannot be played
    with pytest.raises(NoScenario, match="not playable"):
        fresh.choose(seed=0, scenario=victim)


def test_a_tampered_entry_is_skipped_and_reported(small_cache):
    ids = [r["scenario_id"] for r in ScenarioCache.open(small_cache).rows]
    victim = ids[3]
    path = small_cache / BUNDLES / f"{victim}.json.gz"
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["title"] = data["title"] + " (edited)"  # valid gzip, valid bundle, wrong content hash
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    sampler = CurriculumSampler(ScenarioCache.open(small_cache))
    drawn = {sampler.choose(seed=seed)[0].scenario_id for seed in range(200)}
    assert victim not in drawn and len(drawn) == len(ids) - 1
    assert "content hash mismatch" in sampler.problems[victim]


def test_a_truncated_entry_is_skipped_and_reported(small_cache):
    ids = [r["scenario_id"] for r in ScenarioCache.open(small_cache).rows]
    victim = ids[7]
    path = small_cache / BUNDLES / f"{victim}.json.gz"
    path.write_bytes(path.read_bytes()[:-100])  # the copy stopped part way
    sampler = CurriculumSampler(ScenarioCache.open(small_cache))
    drawn = {sampler.choose(seed=seed)[0].scenario_id for seed in range(200)}
    assert victim not in drawn and len(drawn) == len(ids) - 1
    assert set(sampler.problems) == {victim}


def test_an_entry_with_a_damaged_body_is_skipped_and_reported(small_cache):
    ids = [r["scenario_id"] for r in ScenarioCache.open(small_cache).rows]
    victim = ids[5]
    path = small_cache / BUNDLES / f"{victim}.json.gz"
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 16):  # bytes flipped in the middle of the stream
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    sampler = CurriculumSampler(ScenarioCache.open(small_cache))
    drawn = {sampler.choose(seed=seed)[0].scenario_id for seed in range(200)}
    assert victim not in drawn and len(drawn) == len(ids) - 1
    assert set(sampler.problems) == {victim}


def test_no_playable_scenario_raises_no_scenario(small_cache):
    for sid in [r["scenario_id"] for r in ScenarioCache.open(small_cache).rows]:
        corrupt(small_cache, sid)
    sampler = CurriculumSampler(ScenarioCache.open(small_cache))
    with pytest.raises(NoScenario, match="no validated scenario matches"):
        sampler.choose(seed=3)
    assert len(sampler.problems) == 10


def test_filters_that_match_nothing_raise_no_scenario_naming_them(sampler):
    with pytest.raises(NoScenario) as caught:
        sampler.choose(seed=0, bug_class="sql_injection")
    assert "bug_class" in str(caught.value) and "sql_injection" in str(caught.value)
    assert "'split': 'train'" in str(caught.value)
    with pytest.raises(NoScenario, match="'tier': 7"):
        sampler.choose(seed=0, tier=7, split="val")
    with pytest.raises(NoScenario, match="'split': 'holdout'"):
        sampler.choose(seed=0, split="holdout")
    assert sampler.problems == {}


def test_new_weights_apply_from_the_next_draw(shipped):
    """Candidate pools are computed once per filter; replacing the weights must not leave a stale one."""
    sampler = CurriculumSampler(shipped)
    before = {sampler.choose(seed=s)[0].bug_class for s in range(60)}
    assert "tenant_leak" in before
    sampler.weights = SamplingWeights(by_bug_class={"tenant_leak": 0.0})
    after = {sampler.choose(seed=s)[0].bug_class for s in range(60)}
    assert "tenant_leak" not in after and after


# --- every split of the cache ------------------------------------------------------------------


def test_a_reset_takes_every_split_the_cache_holds_and_names_them_when_refused(shipped, sandbox):
    from envcore.env.environment import A01Environment, ResetError, Runtime

    assert shipped.splits() == ["train", "val", "test", "external", "test_styles"]
    env = A01Environment(Runtime(sampler=CurriculumSampler(shipped), sandbox=sandbox))
    try:
        for split in shipped.splits():
            observation = env.reset(seed=3, split=split)
            assert observation.error is None and shipped.split_of(env.state.scenario_id) == split, split
        with pytest.raises(ResetError, match="test_styles, external|external, test_styles"):
            env.reset(seed=3, split="nope")
    finally:
        env.close()
