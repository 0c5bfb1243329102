"""The private split: test scenarios generated at evaluation time from a secret seed, so nobody can
have trained on them.

The shipped cache holds every test scenario with its hidden probes and reference fix, as any public
benchmark must. A model can be tuned on them, deliberately or through a crawl, and a score on them
then says what it memorised. :func:`private_cache` answers that: the evaluator keeps a secret string
(``A01_PRIVATE_SEED``), and at evaluation time the factory generates ``count`` fresh scenarios from
it, verifies them, and hands them over as a cache whose only split is ``private``.

Choices:

* **The test split's mix, by the shipped recipe.** The shipped cache was built from 1,000 seeds of the
  default config and 400 of the realistic one (:data:`RECIPE`; ``configs/cache-v3.yaml`` says how), and
  its test split is what that recipe files under ``test`` (two held-out domains, the held-out styles
  left out). Each private candidate draws its family with those weights and its generator seed, and
  is kept when its draft would be filed under ``test``: the same domains, bug classes, variants,
  tiers, traps and code styles, in the same proportions, with people, ids and data of its own.
* **Seeds from a keyed hash.** Every candidate's family and integer seed come from
  HMAC-SHA256(secret, index): the secret itself is never written anywhere, the integer seeds are not
  computable without it, and they lie above 2**40, outside every range the shipped caches and the
  sandbox's warm-up samples were built from. The same secret gives the same scenarios (the same
  content hashes) for as long as the generator version stays.
* **The same checks as the shipped cache.** Each scenario goes through the whole scenario check
  (:func:`~envcore.factory.check.check_scenario`, what ``factory check`` runs on the shipped cache:
  the vulnerable app, the reference fix FULL, shadow data, lazy and narrow fixes, partial fixes,
  pass-to-pass, the canary panel, determinism), on every core (:func:`~envcore.factory.build.build`).
  A candidate that fails is replaced by the next one, up to a bounded number of builds; fewer than
  ``count`` verified scenarios is an error, never a smaller split.
* **A folder of its own.** The cache is written to a fresh folder of mode 0700 under the temporary
  directory (or ``workdir``), never under ``artifacts/``. Its ids are content hashes, which say
  nothing about the secret. The caller deletes it when done (``shutil.rmtree(cache.root)``); it is
  also removed when the process that made it exits normally.
* **A secret worth the name.** The content hashes of the scenarios are published with the results
  (so two evaluators can compare sets), and anyone can run the generator: a short secret could be
  found by trying them. A secret of fewer than :data:`MIN_SEED_CHARS` characters is refused.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

from envcore.cache import DEFAULT_ROOT, CacheEntry, ScenarioCache, write_cache
from envcore.factory.build import build, default_workers
from envcore.factory.config import FactoryConfig
from envcore.factory.template_author import draft_for
from envcore.version import GENERATOR_VERSION

__all__ = ["PRIVATE_SEED_ENV", "PrivateSplitError", "private_cache"]

PRIVATE_SEED_ENV = "A01_PRIVATE_SEED"
"""The environment variable :func:`private_cache` reads the secret from when none is passed."""

SPLIT = "private"
"""The only split of a private cache."""
SOURCE_SPLIT = "test"
"""The split of the shipped recipe whose mix the private split draws."""
MIN_SEED_CHARS = 16
"""The shortest secret accepted (16 random hex digits are 64 bits)."""

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RECIPE = (("compact", CONFIGS / "factory.yaml", 1000), ("realistic", CONFIGS / "cache-v3.yaml", 400))
"""The shipped cache's recipe: (family, factory config, seeds built from it)."""

SEED_FLOOR = 2**40
"""Every private integer seed is at least this (the shipped ranges and the warm-up seeds are below)."""
LABEL = b"a01-private-split/1"
"""Domain separation for the keyed hash: no other use of the same secret gives the same digests."""
SPARE_BUILDS = 10
"""Builds allowed beyond ``count`` (the shipped recipe rejects none), plus a tenth of ``count``."""
DRAFTS_PER_SCENARIO = 200
"""Drafts tried per allowed build before giving up (about 4.5 are needed: the test split is a quarter
of the domains, and the realistic family files some of its styles elsewhere)."""


class PrivateSplitError(ValueError):
    """The private split cannot be generated as asked (no secret, a short one, a folder under
    ``artifacts/``, too few scenarios passing their checks); the message says what to do."""


def _secret(seed: str | None) -> bytes:
    value = seed if seed is not None else os.environ.get(PRIVATE_SEED_ENV)
    value = (value or "").strip()
    if not value:
        raise PrivateSplitError(
            f"no private seed: set {PRIVATE_SEED_ENV} to a secret string (for example the output of "
            "`python -c 'import secrets; print(secrets.token_hex(16))'`), or, on the command line, put it in a "
            "file of mode 600 and pass --private-seed-file PATH; keep it secret, and keep it to compare runs")
    if len(value) < MIN_SEED_CHARS:
        raise PrivateSplitError(
            f"the private seed is too short ({len(value)} characters, {MIN_SEED_CHARS} needed): the scenarios' "
            "hashes are published with the results, so a short seed could be found by trying seeds; use "
            "`python -c 'import secrets; print(secrets.token_hex(16))'`")
    return value.encode("utf-8")


def _families() -> list[tuple[str, FactoryConfig, int]]:
    return [(name, FactoryConfig.load(path), weight) for name, path, weight in RECIPE]


def _candidates(secret: bytes, families: list[tuple[str, FactoryConfig, int]], drafts: int) -> Iterator[tuple[int, int]]:
    """``(family index, integer seed)`` of every candidate whose draft the recipe files under the test
    split, in a fixed order for ``secret``, among the first ``drafts`` drafts."""
    total = sum(weight for _, _, weight in families)
    seen: set[tuple[int, int]] = set()
    for index in range(drafts):
        digest = hmac.new(secret, LABEL + b":" + str(index).encode(), hashlib.sha256).digest()
        point, family = int.from_bytes(digest[:8], "big") * total >> 64, 0  # uniform in [0, total)
        while point >= families[family][2]:
            point -= families[family][2]
            family += 1
        seed = SEED_FLOOR + int.from_bytes(digest[8:16], "big") % (2**63 - SEED_FLOOR)
        config = families[family][1]
        draft = draft_for(config, seed)
        # split_for reads a bundle's domain and spec.style; a draft has the same two
        if config.split_for(SimpleNamespace(domain=draft.domain, spec=draft)) != SOURCE_SPLIT:
            continue
        if (family, seed) not in seen:
            seen.add((family, seed))
            yield family, seed


def _folder(workdir: Path | None) -> Path:
    artifacts = DEFAULT_ROOT.parent.resolve()
    parent = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    resolved = parent.resolve()
    if resolved == artifacts or artifacts in resolved.parents:
        raise PrivateSplitError(f"the private scenarios must not be written under {artifacts} (it is published): "
                                "pass a workdir outside it, or none for the temporary directory")
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="a01-private-", dir=parent))
    os.chmod(root, 0o700)  # mkdtemp's mode already; said again so that no umask or platform can widen it
    owner = os.getpid()
    # a safety net for callers that forget; only the process that made it (never a forked child) removes it
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(root, ignore_errors=True))
    return root


def private_cache(seed: str | None = None, *, count: int = 100, workdir: Path | None = None,
                  say: Callable[[str], None] = print) -> ScenarioCache:
    """Generate and verify ``count`` private scenarios from the secret ``seed`` (default: the
    ``A01_PRIVATE_SEED`` variable) and return them as an opened cache whose only split is ``private``.

    See the module docstring. The cache lives in a fresh folder of mode 0700 under ``workdir`` (default:
    the temporary directory); delete ``cache.root`` when done. ``say`` hears what is happening, in
    counts and seconds only. Raises :class:`PrivateSplitError` when there is no usable secret, when
    ``workdir`` lies under ``artifacts/``, or when fewer than ``count`` scenarios pass the scenario
    check within ``count`` plus a few spare builds."""
    if count < 1:
        raise PrivateSplitError(f"count must be at least 1, not {count}")
    secret = _secret(seed)
    root = _folder(workdir)
    try:
        return _generate(secret, count, root, say)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _generate(secret: bytes, count: int, root: Path, say: Callable[[str], None]) -> ScenarioCache:
    started = time.perf_counter()
    families = _families()
    workers = default_workers()
    limit = count + SPARE_BUILDS + count // 10
    say(f"private split: generating {count} scenarios with the {SOURCE_SPLIT} split's mix and verifying each with "
        f"the whole scenario check ({workers} workers)")
    candidates = _candidates(secret, families, DRAFTS_PER_SCENARIO * limit)
    accepted: dict[int, CacheEntry] = {}  # candidate number -> entry; the first ``count`` in that order are kept
    ids: set[str] = set()
    rejects: list[dict] = []
    built = 0
    while len(accepted) < count and built < limit:
        batch = []
        for _ in range(min(count - len(accepted), limit - built)):
            candidate = next(candidates, None)
            if candidate is None:
                break
            batch.append((built + len(batch), *candidate))
        if not batch:
            break
        built += len(batch)
        for family, (_, config, _) in enumerate(families):
            mine = [(number, seed) for number, f, seed in batch if f == family]
            if not mine:
                continue
            report = build(config, [seed for _, seed in mine], workers=workers, full_check=True)
            rejects += report.rejects
            refused = {row["seed"] for row in report.rejects}
            kept = iter(report.accepted)  # build keeps the order of its seeds
            for number, seed in mine:
                if seed in refused:
                    continue
                entry = next(kept)
                if entry.split != SOURCE_SPLIT or entry.scenario_id in ids:
                    rejects.append({"stage": "split", "reason": f"filed under {entry.split}, or a duplicate"})
                    continue
                ids.add(entry.scenario_id)
                accepted[number] = CacheEntry(row={**entry.row, "split": SPLIT}, data=entry.data)
    if len(accepted) < count:
        first = f"; the first: {rejects[0].get('stage')}: {str(rejects[0].get('reason'))[:300]}" if rejects else ""
        raise PrivateSplitError(f"only {len(accepted)} of {count} private scenarios passed the scenario check after "
                                f"{built} builds ({len(rejects)} rejected{first})")
    entries = [accepted[number] for number in sorted(accepted)]
    write_cache(root, entries, generator=GENERATOR_VERSION,
                config={"split": SPLIT, "count": count, "recipe": {name: weight for name, _, weight in RECIPE},
                        "mix_of": SOURCE_SPLIT},
                lineage={"parent": None, "private": "generated from a secret seed at evaluation time"})
    elapsed = time.perf_counter() - started
    say(f"private split: {count} scenarios verified ({built} built, {len(rejects)} rejected) in {elapsed:.1f} s "
        f"({count / elapsed:.2f} scenarios/s)")
    return ScenarioCache.open(root)
