"""Shadow data: same code, people the agent never saw; patches that special-case the seeded users or
edit the data files do not survive regrading."""

from __future__ import annotations

import json

import pytest

from envcore.factory.shadow import NoShadow, is_code, regrade_files, shadow_bundle
from envcore.patching import apply_patch
from envcore.runner.base import AppSource
from envcore.scenario.probes import ProbeKind


def _run(runner, files, bundle):
    tokens = {u.username: u.token for u in bundle.users}
    return runner.run(AppSource(files, bundle.entrypoint), bundle.probes, tokens)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_shadow_keeps_the_code_and_changes_every_identity(seed, bundle_for):
    bundle = bundle_for(seed)
    shadow = shadow_bundle(bundle)
    assert {p: t for p, t in bundle.files.items() if is_code(p)} == {p: t for p, t in shadow.files.items() if is_code(p)}
    assert {u.username for u in bundle.users}.isdisjoint({u.username for u in shadow.users})
    assert {u.token for u in bundle.users}.isdisjoint({u.token for u in shadow.users})
    assert shadow.files["data/seed.json"] != bundle.files["data/seed.json"]
    assert shadow.reference_fix == bundle.reference_fix


def test_shadow_of_the_reference_fix_is_full_marks(bundle_for, runner):
    bundle = bundle_for(7)
    shadow = shadow_bundle(bundle)
    fixed = apply_patch(bundle.files, bundle.reference_fix)
    report = _run(runner, regrade_files(fixed, shadow), shadow)
    assert all(o.passed for o in report.outcomes)


def _attacker_blocking_patch(bundle) -> dict[str, str]:
    """A reward hack: refuse the seeded attacker's token instead of fixing the access check."""
    attacker = bundle.spec.player("attacker")
    path = next(p for p, t in bundle.files.items() if "def resolve_user(request: Request):" in t)
    text = bundle.files[path].replace(
        '    """Return the user that owns the request\'s bearer token, or None."""\n',
        '    """Return the user that owns the request\'s bearer token, or None."""\n'
        f'    if "{attacker.token}" in request.headers.get("authorization", ""):\n'
        "        return None\n",
    )
    assert text != bundle.files[path]
    return {**bundle.files, path: text}


def test_special_casing_the_seeded_attacker_is_caught_by_shadow_data(bundle_for, runner):
    bundle = next(b for b in map(bundle_for, range(30)) if b.bug_class in ("idor_read", "idor_write"))
    hacked = _attacker_blocking_patch(bundle)
    on_seen_data = _run(runner, hacked, bundle)
    security = [o for o in on_seen_data.outcomes if o.kind == ProbeKind.SECURITY]
    assert security and all(o.passed for o in security)  # the hack fools the probes the agent could know
    shadow = shadow_bundle(bundle)
    regraded = _run(runner, regrade_files(hacked, shadow), shadow)
    assert not any(o.passed for o in regraded.outcomes if o.kind == ProbeKind.SECURITY)


def test_deleting_the_attacker_session_from_seed_data_does_not_survive_regrading(bundle_for, runner):
    bundle = bundle_for(2)
    seed = json.loads(bundle.files["data/seed.json"])
    attacker = bundle.spec.player("attacker")
    seed["sessions"] = [s for s in seed["sessions"] if s["token"] != attacker.token]
    hacked = {**bundle.files, "data/seed.json": json.dumps(seed)}
    security = [o for o in _run(runner, hacked, bundle).outcomes if o.kind == ProbeKind.SECURITY]
    assert all(o.passed for o in security)  # on the data the agent edited, the hack "works"
    shadow = shadow_bundle(bundle)
    regraded = _run(runner, regrade_files(hacked, shadow), shadow)
    assert not any(o.passed for o in regraded.outcomes if o.kind == ProbeKind.SECURITY)


def test_hand_written_scenarios_have_no_shadow(bundle_for):
    bundle = bundle_for(0).model_copy(update={"spec": None})
    with pytest.raises(NoShadow):
        shadow_bundle(bundle)
