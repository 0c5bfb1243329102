"""The versioned cache: round trip, splits held out by domain, and corrupt or tampered entries
detected, named and skipped (never silently used).

The format tests write the default config's first 40 seeds, authored and compiled (a second or two);
whether every one of those seeds also passes the scenario check is the slow run's (about 40 s)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from envcore.cache import (
    BUNDLES,
    MANIFEST,
    CacheEntry,
    CacheError,
    CorruptEntryError,
    ScenarioCache,
    latest_version,
    write_cache,
)
from envcore.factory.build import build
from envcore.factory.compiler import compile_spec
from envcore.factory.template_author import author_spec
from envcore.version import GENERATOR_VERSION


@pytest.fixture(scope="module")
def compiled(config) -> list[CacheEntry]:
    """The default config's first 40 seeds as the cache stores them, each in the split of its domain."""
    bundles = [compile_spec(author_spec(config, seed)) for seed in range(40)]
    return [CacheEntry.of(bundle, config.split_for(bundle)) for bundle in bundles]


@pytest.fixture()
def cache_dir(tmp_path, compiled, config):
    root = tmp_path / "v1"
    write_cache(root, compiled, generator=GENERATOR_VERSION, config=config.model_dump(mode="json"))
    return root


@pytest.mark.slow  # a checked build of 40 seeds (about 40 s); test_cli builds a small checked cache by default
def test_build_accepts_every_seed_of_the_default_config(config, compiled):
    built = build(config, range(40), workers=1)
    assert not built.rejects and built.accepted == compiled


def test_round_trip_returns_identical_bundles(cache_dir, compiled):
    cache = ScenarioCache.open(cache_dir)
    assert len(cache) == 40
    originals = {e.scenario_id: e.bundle() for e in compiled}
    for bundle in cache:
        assert bundle == originals[bundle.scenario_id]
    assert cache.problems == []


def test_file_names_are_content_hashes(cache_dir):
    cache = ScenarioCache.open(cache_dir)
    for row in cache.rows:
        assert row["sha256"].startswith(row["scenario_id"])
        assert (cache_dir / BUNDLES / f"{row['scenario_id']}.json.gz").exists()


def test_manifest_counts_by_split_bug_class_tier_and_domain(cache_dir):
    counts = ScenarioCache.open(cache_dir).manifest["counts"]
    for key in ("split", "bug_class", "tier", "domain"):
        assert sum(counts[key].values()) == 40


def test_splits_are_held_out_by_domain(cache_dir, config):
    cache = ScenarioCache.open(cache_dir)
    domains_by_split: dict[str, set[str]] = {}
    for row in cache.rows:
        domains_by_split.setdefault(row["split"], set()).add(row["domain"])
        assert row["split"] == config.split_of(row["domain"])
    splits = list(domains_by_split.values())
    for i, a in enumerate(splits):
        for b in splits[i + 1 :]:
            assert a.isdisjoint(b)


def test_config_rejects_a_domain_in_two_splits():
    from envcore.factory.config import FactoryConfig

    with pytest.raises(ValueError, match="splits must be disjoint"):
        FactoryConfig(splits={"train": ["notes"], "test": ["notes"]})


def _first(cache_dir):
    cache = ScenarioCache.open(cache_dir)
    sid = cache.ids()[0]
    return cache, sid, cache_dir / BUNDLES / f"{sid}.json.gz"


def test_tampered_bundle_is_detected_and_named(cache_dir):
    cache, sid, path = _first(cache_dir)
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["reference_fix"] = ""  # an attacker empties the fix
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    with pytest.raises(CorruptEntryError, match=sid) as err:
        cache.load(sid)
    assert "hash mismatch" in err.value.reason


def test_tampered_bundle_written_canonically_is_detected(cache_dir):
    """A load checks the file's bytes against the manifest's hash when they are the canonical JSON the
    cache writes: an attacker who rewrites the file in that very form is caught by it."""
    cache, sid, path = _first(cache_dir)
    data = json.loads(gzip.decompress(path.read_bytes()))
    data["reference_fix"] = ""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    path.write_bytes(gzip.compress(canonical))
    with pytest.raises(CorruptEntryError, match="hash mismatch"):
        cache.load(sid)


def test_an_unchanged_bundle_written_in_another_json_layout_still_loads(cache_dir):
    """The bytes check is a shortcut: a bundle whose content is unchanged loads however it is laid out."""
    cache, sid, path = _first(cache_dir)
    before = cache.load(sid)
    data = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps(data, indent=2).encode()))
    assert cache.load(sid) == before


def test_tampered_probe_expectation_is_detected(cache_dir):
    cache, sid, path = _first(cache_dir)
    data = json.loads(gzip.decompress(path.read_bytes()))
    step = next(st for p in data["probes"] if p["kind"] == "security" for st in p["steps"] if st.get("expect"))
    step["expect"] = []  # make a security probe accept anything
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    with pytest.raises(CorruptEntryError, match="hash mismatch"):
        cache.load(sid)


def test_truncated_gzip_is_detected(cache_dir):
    cache, sid, path = _first(cache_dir)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(CorruptEntryError, match="gzip"):
        cache.load(sid)


def test_missing_bundle_file_is_detected(cache_dir):
    cache, sid, path = _first(cache_dir)
    path.unlink()
    with pytest.raises(CorruptEntryError, match="missing"):
        cache.load(sid)


def test_invalid_bundle_json_is_detected(cache_dir):
    cache, sid, path = _first(cache_dir)
    path.write_bytes(gzip.compress(b'{"title": 1}'))
    with pytest.raises(CorruptEntryError, match="does not validate"):
        cache.load(sid)


def test_iteration_skips_corrupt_entries_and_records_them(cache_dir):
    cache, sid, path = _first(cache_dir)
    path.write_bytes(b"garbage")
    served = [b.scenario_id for b in cache]
    assert sid not in served and len(served) == len(cache) - 1
    assert len(cache.problems) == 1 and sid in cache.problems[0]


def test_manifest_edit_is_detected(cache_dir):
    manifest = json.loads((cache_dir / MANIFEST).read_text())
    manifest["scenarios"][0]["sha256"] = "0" * 64
    (cache_dir / MANIFEST).write_text(json.dumps(manifest))
    cache = ScenarioCache.open(cache_dir)
    with pytest.raises(CorruptEntryError):
        cache.load(manifest["scenarios"][0]["scenario_id"])


def test_wrong_cache_format_is_a_clear_error(cache_dir):
    manifest = json.loads((cache_dir / MANIFEST).read_text())
    manifest["cache_format"] = 999
    (cache_dir / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CacheError, match="cache format"):
        ScenarioCache.open(cache_dir)


def test_not_a_cache_is_a_clear_error(tmp_path):
    with pytest.raises(CacheError, match="not a scenario cache"):
        ScenarioCache.open(tmp_path)


def test_latest_version_picks_the_highest_number(cache_dir, tmp_path):
    shutil.copytree(cache_dir, tmp_path / "v10")
    assert latest_version(tmp_path) == tmp_path / "v10"


def test_short_ids_resolve_like_git_hashes(cache_dir):
    cache = ScenarioCache.open(cache_dir)
    sid = cache.ids()[0]
    assert cache.resolve(sid[:8]) == sid
    with pytest.raises(KeyError):
        cache.resolve("zz")


def test_same_bundle_gives_the_same_file_bytes(tmp_path, compiled):
    a, b = tmp_path / "a", tmp_path / "b"
    write_cache(a, compiled[:5], generator=GENERATOR_VERSION)
    write_cache(b, compiled[:5], generator=GENERATOR_VERSION)
    for f in (a / BUNDLES).iterdir():
        assert f.read_bytes() == (b / BUNDLES / f.name).read_bytes()


def test_adding_to_a_cache_keeps_its_entries_config_and_lineage(cache_dir, bundle_for):
    from envcore.cache import add_to_cache

    before = ScenarioCache.open(cache_dir)
    extra = bundle_for(777)
    manifest = add_to_cache(cache_dir, [(extra, "test")], generator="import")
    after = ScenarioCache.open(cache_dir)
    assert len(after) == len(before) + 1 and after.load(extra.scenario_id) == extra
    assert manifest["config"] == before.manifest["config"] and manifest["generator"] == before.manifest["generator"]
    assert manifest["counts"]["total"]["scenarios"] == len(before) + 1


def test_merge_writes_a_new_version_holding_every_scenario_in_its_split_byte_for_byte(tmp_path, capsys):
    from envcore.cli import main

    shipped = ScenarioCache.open(None)
    first, second = shipped.ids()[:2]
    a = tmp_path / "a"
    write_cache(a, [(shipped.load(first), "train"), (shipped.load(second), "test")], generator="g1")
    example = Path(__file__).resolve().parent.parent / "examples" / "byo" / "clinic-records"
    b = tmp_path / "b"
    assert main(["factory", "import", str(example), str(example), "--out", str(b), "--split", "external",
                 "--runner", "inprocess"]) == 0
    out = tmp_path / "v9"
    assert main(["factory", "merge", str(a), str(b), "--out", str(out)]) == 0
    merged = ScenarioCache.open(out)
    assert len(merged) == 3 and merged.split_of(first) == "train" and merged.split_of(second) == "test"
    assert {merged.split_of(i) for i in merged.ids()} == {"train", "test", "external"}
    assert merged.manifest["version"] == "v9" and merged.manifest["lineage"]["parent"] == "a"
    for scenario_id in (first, second):
        name = f"{scenario_id}.json.gz"
        assert (out / "bundles" / name).read_bytes() == (shipped.root / "bundles" / name).read_bytes()
    with pytest.raises(SystemExit):
        main(["factory", "merge", str(a), "--out", str(out)])  # never over an existing version
