"""Same seed, same bytes: within a process, across processes with different hash seeds, and against a
golden hash that only a generator version bump may change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from envcore.cache import CacheEntry
from envcore.factory.compiler import compile_spec
from envcore.factory.template_author import author_spec
from envcore.version import GENERATOR_VERSION

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "scenario_hashes.json"


def _hashes(config, seeds):
    return {str(s): compile_spec(author_spec(config, s)).content_hash() for s in seeds}


def test_same_seed_gives_the_same_bytes_twice_in_one_process(config):
    for seed in (0, 7, 42):
        a = compile_spec(author_spec(config, seed))
        b = compile_spec(author_spec(config, seed))
        assert CacheEntry.of(a, "train").data == CacheEntry.of(b, "train").data


def test_same_seed_gives_the_same_hash_in_processes_with_different_hash_seeds(config):
    code = (
        "import json; from envcore.factory.config import FactoryConfig;"
        "from envcore.factory.template_author import author_spec;"
        "from envcore.factory.compiler import compile_spec;"
        "print(json.dumps({s: compile_spec(author_spec(FactoryConfig(), s)).content_hash() for s in (1, 2, 3)}))"
    )
    outs = []
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
        outs.append(json.loads(proc.stdout))
    assert outs[0] == outs[1]
    assert outs[0] == {str(k): v for k, v in _hashes(config, (1, 2, 3)).items()}


def test_different_seeds_give_different_scenarios(config):
    hashes = _hashes(config, range(60))
    assert len(set(hashes.values())) == 60


def test_identities_change_with_the_seed(config):
    a, b = author_spec(config, 100), author_spec(config, 101)
    assert {u.username for u in a.users}.isdisjoint({u.username for u in b.users})
    assert {u.token for u in a.users}.isdisjoint({u.token for u in b.users})


def test_golden_hashes_are_stable_for_this_generator_version(config):
    """If this fails, the generator's output changed: bump GENERATOR_VERSION and regenerate the golden
    file and the shipped cache (see README), rather than editing the expected hashes."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["generator"] == GENERATOR_VERSION, "generator version changed: regenerate tests/golden"
    assert _hashes(config, [int(s) for s in golden["hashes"]]) == golden["hashes"]
