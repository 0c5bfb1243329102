"""The scenario check refuses broken scenarios, each for the right reason."""

from __future__ import annotations

import pytest

from envcore.factory.bugs.base import NarrowFix
from envcore.factory.build import BUILD_SKIPS
from envcore.factory.check import check_scenario
from envcore.factory.codegen import render_app
from envcore.factory.compiler import compile_spec
from envcore.factory.draft import SpecDraft, expand
from envcore.factory.lazy_fixes import narrow_fixes
from envcore.scenario.probes import ProbeKind


@pytest.mark.slow  # eight whole checks; test_bug_classes checks one variant of each bug class by default
def test_generated_scenarios_pass(bundle_for, runner):
    for seed in range(8):
        report = check_scenario(bundle_for(seed), runner, fail_fast=False)
        assert report.ok, report.summary()


def test_a_scenario_without_the_bug_is_refused_as_not_exploitable(bundle_for, runner):
    bundle = bundle_for(2)
    secure = render_app(bundle.spec, {})
    report = check_scenario(bundle.model_copy(update={"files": secure.files}).with_id(), runner, fail_fast=False)
    assert any("[vulnerable]" in p and "not exploitable" in p for p in report.problems)


def test_a_reference_fix_that_fixes_nothing_is_refused(bundle_for, runner):
    bundle = bundle_for(2)
    path = next(iter(bundle.files))
    noop = f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,2 @@\n {bundle.files[path].splitlines()[0]}\n+# fixed, honest\n"
    report = check_scenario(bundle.model_copy(update={"reference_fix": noop}).with_id(), runner, fail_fast=False)
    assert any(p.startswith("[reference]") for p in report.problems)


def test_a_scenario_that_deny_all_would_solve_is_refused(bundle_for, runner):
    bundle = bundle_for(2)
    only_security = tuple(p for p in bundle.probes if p.kind == ProbeKind.SECURITY)
    visible = only_security[0].model_copy(update={"visible": False})
    report = check_scenario(bundle.model_copy(update={"probes": (visible,) + only_security[1:]}).with_id(), runner, fail_fast=False)
    assert any("deny_all" in p for p in report.problems)
    assert any("delete_sites" in p for p in report.problems)


def test_a_visible_security_probe_is_refused(bundle_for, runner):
    bundle = bundle_for(2)
    probes = tuple(p.model_copy(update={"visible": True}) if p.kind == ProbeKind.SECURITY else p for p in bundle.probes)
    report = check_scenario(bundle.model_copy(update={"probes": probes}), runner)
    assert any("[structure]" in p and "visible" in p for p in report.problems)


def test_a_trap_without_a_trap_probe_is_refused(bundle_for, runner):
    bundle = next(b for b in map(bundle_for, range(20)) if any(t.kind == "public_route" for t in b.traps))
    probes = tuple(p for p in bundle.probes if p.trap != "public_route")
    report = check_scenario(bundle.model_copy(update={"probes": probes}), runner)
    assert any("public_route has no trap probe" in p for p in report.problems)


def test_a_stale_bundle_is_refused_by_the_determinism_check(bundle_for, runner):
    bundle = bundle_for(5)
    stale = bundle.model_copy(update={"task": bundle.task + " (edited)"}).with_id()
    report = check_scenario(stale, runner, fail_fast=False)
    assert any(p.startswith("[determinism]") for p in report.problems)


def test_partial_fix_check_runs_for_two_site_scenarios(bundle_for, runner):
    bundle = next(b for b in map(bundle_for, range(40)) if len(b.sites) == 2 and b.spec is not None)
    report = check_scenario(bundle, runner, fail_fast=False)
    assert report.ok and "partial_fixes" in report.timings


def test_a_probe_acting_as_an_unknown_user_is_refused_without_running_anything(bundle_for, runner):
    bundle = bundle_for(3)
    step = bundle.probes[0].steps[0].model_copy(update={"actor": "nobody.at.all"})
    probe = bundle.probes[0].model_copy(update={"steps": (step,)})
    report = check_scenario(bundle.model_copy(update={"probes": (probe,) + bundle.probes[1:]}), runner, fail_fast=False)
    assert any("unknown user 'nobody.at.all'" in p for p in report.problems)
    assert set(report.timings) == {"actors"}



def _bundle_with_narrow_fixes(bundle_for, at_least: int):
    return next(b for b in map(bundle_for, range(60)) if len(narrow_fixes(b)) >= at_least)


def test_a_scenario_whose_probes_miss_a_forbidden_path_is_refused(runner):
    """Drop the step that tries to set one's own API key: the narrow fix that refuses every reserved
    profile field but ``api_key`` now passes every probe, and the check names what nobody tries."""
    draft = SpecDraft(domain="invoices", bug_class="mass_assignment", variant="profile_raw_dict",
                      traps=("admin_access",))
    bundle = compile_spec(expand(draft, seed=7))
    untried = tuple(
        p.model_copy(update={"steps": tuple(s for s in p.steps if "api_key" not in (s.json_body or {}))})
        for p in bundle.probes
    )
    assert untried != bundle.probes
    report = check_scenario(bundle.model_copy(update={"probes": untried}).with_id(), runner, fail_fast=False,
                            skip=("determinism",))
    assert [p for p in report.problems if p.startswith("[narrow_fixes]")] == [
        "[narrow_fixes] the narrow fix 'accepts_api_key' passes every probe: no probe tries setting one's own api key"
    ]
    assert check_scenario(bundle, runner, fail_fast=False).ok


def test_the_build_check_runs_one_narrow_fix_and_the_whole_check_every_one(bundle_for, runner):
    """Without security probes every narrow fix passes: the whole check reports each, the build check
    (which leaves variant-wide properties to the whole check) the one it picked, the same every time."""
    bundle = _bundle_with_narrow_fixes(bundle_for, 3)
    blind = bundle.model_copy(update={"probes": tuple(p for p in bundle.probes if p.kind != ProbeKind.SECURITY)})

    def missed(skip):
        report = check_scenario(blind, runner, fail_fast=False, skip=skip)
        return [p for p in report.problems if p.startswith("[narrow_fixes]")]

    assert len(missed(())) == len(narrow_fixes(bundle))
    picked = missed(BUILD_SKIPS)
    assert len(picked) == 1 and picked == missed(BUILD_SKIPS)


def test_a_narrow_fix_that_does_not_load_is_reported(bundle_for, runner, monkeypatch):
    broken = NarrowFix("broken", "nothing", {"detail.check": lambda names, secure: ["this is not python ("]})
    monkeypatch.setattr("envcore.factory.check.narrow_fixes", lambda bundle: (broken,))
    report = check_scenario(bundle_for(3), runner, fail_fast=False, skip=("determinism",))
    assert any(p.startswith("[narrow_fixes] the narrow fix 'broken' does not load") for p in report.problems)


def test_data_the_shadow_cannot_rewrite_is_refused(bundle_for, runner):
    """A data file that hides a declared identity (here: every token, written with JSON escapes) would
    be graded on data the shadow left stale: the scenario check refuses it."""
    bundle = bundle_for(4)
    seed = bundle.files["data/seed.json"]
    for user in bundle.users:
        seed = seed.replace(f'"{user.token}"', '"' + "".join(f"\\u{ord(c):04x}" for c in user.token) + '"')
    assert seed != bundle.files["data/seed.json"]
    hidden = bundle.model_copy(update={"files": {**bundle.files, "data/seed.json": seed}}).with_id()
    report = check_scenario(hidden, runner, fail_fast=False, skip=("determinism",))
    assert any(p.startswith("[shadow]") for p in report.problems), report.problems
    assert check_scenario(bundle, runner, skip=("determinism",)).ok
