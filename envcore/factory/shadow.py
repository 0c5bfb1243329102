"""Shadow data: the same app with people the agent has never seen, for grading a patch.

An agent reads the app and its ``data/seed.json``, so within one episode it knows every username,
id and token the probes will use, and a patch could special-case them ("refuse the attacker's
token") instead of fixing the access check. Identities drawn per seed stop an agent from learning
such shortcuts *across* scenarios; shadow data stops it *within* one.

A generated bundle keeps its draft, and the code of a draft does not depend on the seed: every
identity, id, token and marker lives in the data files. :func:`shadow_bundle` expands the same draft
with a second seed derived from the first, and returns a bundle with byte-identical source files,
fresh data files and probes written for the fresh data. A verifier grades a patched workspace by
keeping its ``.py`` files, replacing every data file with the shadow's (so edits to data never count
either) and running the shadow's probes. :func:`regrade_files` does that file swap.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

from envcore.factory.compiler import compile_spec
from envcore.factory.draft import expand
from envcore.scenario.bundle import Bundle


class NoShadow(ValueError):
    """The bundle cannot have shadow data (no draft, e.g. a hand-written scenario)."""


def is_code(path: str) -> bool:
    """Source files keep the agent's edits at grading; everything else is data and is replaced."""
    return path.endswith(".py")


def shadow_seed(seed: int, salt: int) -> int:
    digest = hashlib.sha256(f"shadow:{seed}:{salt}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def shadow_bundle(bundle: Bundle, salt: int = 1) -> Bundle:
    """The bundle's app with fresh identities and data, and probes for them."""
    spec = bundle.spec
    if spec is None or spec.draft is None:
        raise NoShadow(f"scenario {bundle.scenario_id} has no draft to re-expand")
    shadow = compile_spec(expand(spec.draft, shadow_seed(spec.seed, salt), author=spec.author))
    code = {p: t for p, t in bundle.files.items() if is_code(p)}
    shadow_code = {p: t for p, t in shadow.files.items() if is_code(p)}
    if code != shadow_code:  # the generator broke its own promise; never grade on a different app
        raise NoShadow(f"scenario {bundle.scenario_id}: re-expanding the draft changed the source code")
    return shadow


def regrade_files(workspace: Mapping[str, str], shadow: Bundle) -> dict[str, str]:
    """The patched workspace's code with the shadow's data files (the agent's data edits dropped)."""
    files = {p: t for p, t in workspace.items() if is_code(p)}
    files.update({p: t for p, t in shadow.files.items() if not is_code(p)})
    return files
