"""Every bug class and every variant: exploitable as shipped, secure with the reference fix, and its
traps bite the lazy fixes they are aimed at. The whole scenario check runs by default on each bug
class's first variant and on every variant in the slow run."""

from __future__ import annotations

import itertools

import pytest

from envcore.factory.bugs import BUG_CLASSES
from envcore.factory.check import check_scenario
from envcore.factory.codegen import render_app
from envcore.factory.compiler import compile_spec
from envcore.factory.draft import SpecDraft, expand
from envcore.patching import apply_patch
from envcore.runner.base import AppSource, Batch, Gate
from envcore.scenario.probes import ProbeKind
from envcore.scenario.spec import CodeStyle

STYLES = [
    CodeStyle(layout=layout, auth=auth, store=store, id_type=id_type)
    for layout, auth, store, id_type in itertools.product(
        ("single_file", "package"), ("depends", "inline", "decorator"), ("dict", "sqlite"), ("int", "str")
    )
]
VARIANTS = [(bug.name, v.name) for bug in BUG_CLASSES.values() for v in bug.variants]
FIRST_VARIANTS = [(bug.name, bug.variants[0].name) for bug in BUG_CLASSES.values()]
"""The variants whose whole scenario check runs by default (about a second each); the others' in the slow run."""


def draft_for_variant(index: int, bug_name: str, variant_name: str) -> SpecDraft:
    bug = BUG_CLASSES[bug_name]
    variant = bug.variant(variant_name)
    tenanted = bug.requires_tenant or variant.requires_tenant
    domain = ("clinic", "invoices", "projects", "hr")[index % 4] if tenanted or index % 2 else ("notes", "orders")[index % 2]
    traps = ["admin_access", "public_route", "legacy_alias"]
    if variant.multi_site:
        traps.append("second_site")
    return SpecDraft(
        domain=domain,
        bug_class=bug_name,
        variant=variant_name,
        style=STYLES[index * 7 % len(STYLES)],
        traps=tuple(traps),
        decoys=("search", "profile", "files"),
    )


@pytest.fixture(scope="module")
def variant_bundles():
    return {
        key: compile_spec(expand(draft_for_variant(i, *key), seed=500 + i)) for i, key in enumerate(VARIANTS)
    }


def test_registry_has_at_least_ten_bug_classes_with_cwe_ids():
    assert len(BUG_CLASSES) >= 10
    for bug in BUG_CLASSES.values():
        assert bug.cwe and all(c.startswith("CWE-") for c in bug.cwe), bug.name
        assert len(bug.variants) >= 3, f"{bug.name} needs several variants"


@pytest.mark.parametrize("key", [pytest.param(key, marks=() if key in FIRST_VARIANTS else pytest.mark.slow)
                                 for key in VARIANTS], ids=[f"{b}-{v}" for b, v in VARIANTS])
def test_variant_passes_the_full_scenario_check(key, variant_bundles, runner):
    bundle = variant_bundles[key]
    report = check_scenario(bundle, runner, fail_fast=False)
    assert report.ok, report.summary()


@pytest.mark.parametrize("key", VARIANTS, ids=[f"{b}-{v}" for b, v in VARIANTS])
def test_vulnerable_app_is_exploitable_and_reference_fix_closes_every_hole(key, variant_bundles, runner):
    bundle = variant_bundles[key]
    tokens = {u.username: u.token for u in bundle.users}
    security = bundle.probes_of(ProbeKind.SECURITY)
    before = runner.run(AppSource(bundle.files, bundle.entrypoint), security, tokens)
    assert before.loaded and not any(o.passed for o in before.outcomes)
    fixed = apply_patch(bundle.files, bundle.reference_fix)
    after = runner.run(AppSource(fixed, bundle.entrypoint), bundle.probes, tokens)
    assert after.loaded and all(o.passed for o in after.outcomes), [o.failures for o in after.outcomes if not o.passed]


def _trap_report(bundle, runner, gate: Gate | None = None, files=None):
    """Run the trap probes against the fixed app (or ``files``), optionally behind ``gate``."""
    tokens = {u.username: u.token for u in bundle.users}
    source = AppSource(files or apply_patch(bundle.files, bundle.reference_fix), bundle.entrypoint)
    (report,) = runner.run_batches(source, [Batch(tuple(bundle.probes_of(ProbeKind.TRAP)), gate)], tokens)
    return report


def _bundle_with_trap(variant_bundles, trap: str):
    return next(b for b in variant_bundles.values() if any(t.kind == trap for t in b.traps))


@pytest.mark.parametrize(
    "trap, gate",
    [
        ("public_route", Gate(401, (r"^/api/shared/[^/]+/?$",), "login required everywhere")),
        ("legacy_alias", Gate(404, (r"^/api/v1/.*$",), "alias deleted")),
    ],
)
def test_route_traps_bite_the_lazy_fix_they_aim_at(trap, gate, variant_bundles, runner):
    bundle = _bundle_with_trap(variant_bundles, trap)
    report = _trap_report(bundle, runner, gate)
    failed = {o.probe_id for o in report.outcomes if not o.passed}
    assert any(p.trap == trap and p.id in failed for p in bundle.probes)


def test_admin_access_trap_bites_an_owner_only_fix(variant_bundles, runner):
    bundle = _bundle_with_trap(variant_bundles, "admin_access")

    def owner_only(names, secure):
        return [f'return record["{names.owner}"] == user["id"]']

    app = render_app(bundle.spec, {"policy.can_read": owner_only, "policy.can_modify": owner_only})
    report = _trap_report(bundle, runner, files=app.files)
    failed = {o.probe_id for o in report.outcomes if not o.passed}
    assert any(p.trap == "admin_access" and p.id in failed for p in bundle.probes)


def test_second_site_trap_fixing_one_site_leaves_the_other_open(variant_bundles, runner):
    multi = [b for b in variant_bundles.values() if any(t.kind == "second_site" for t in b.traps)]
    assert multi
    for bundle in multi:
        sites = {s for p in bundle.probes_of(ProbeKind.SECURITY) for s in p.sites}
        assert len(sites) >= 2, bundle.variant


def test_every_code_style_axis_value_is_generated(variant_bundles):
    styles = {b.code_style for b in variant_bundles.values()}
    for axis_value in ("single_file", "package", "depends", "inline", "decorator", "dict", "sqlite", "int", "str"):
        assert any(axis_value in s.split("/") for s in styles), axis_value


def test_at_least_six_domains_are_covered_by_the_default_config(config):
    assert len(config.domains) >= 6
