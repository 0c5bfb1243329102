"""The verifier through the sandbox: every bug class's fix grades FULL and its vulnerable app NO (in
the slow run; by default a partial fix and deny-all are graded here, and test_exploit_coverage grades
reference and narrow fixes through verify()), load errors are the app's fault, infrastructure errors
are nobody's (reward None), and the SWE-bench-style resolution table."""

from __future__ import annotations

import pytest

from envcore.factory.bugs import get_bug_class
from envcore.factory.codegen import render_app
from envcore.factory.lazy_fixes import lazy_fix_files
from envcore.patching import apply_patch
from envcore.sandbox import Sandbox
from envcore.scenario.probes import exploit_of
from envcore.verifier import Resolution, Tally, resolve, verify
from envcore.verifier.report import score
from tests.test_credentials import fixed_files, notes_bundle
from tests.test_sandbox import entry_path, with_entry_code


def one_per_class(shipped):
    chosen = {}
    for scenario_id in shipped.ids():
        row = shipped.row(scenario_id)
        chosen.setdefault(row["bug_class"], scenario_id)
    return chosen


@pytest.mark.slow  # 24 verifications; sandbox-vs-in-process parity runs by default in test_sandbox
def test_every_bug_class_fix_is_full_and_vulnerable_app_is_no(sandbox, shipped):
    chosen = one_per_class(shipped)
    assert len(chosen) == 12
    for bug_class, scenario_id in chosen.items():
        bundle = shipped.load(scenario_id)
        fixed = verify(bundle, apply_patch(bundle.files, bundle.reference_fix), sandbox=sandbox)
        assert fixed.resolution is Resolution.FULL, (bug_class, fixed.summary(), [p for p in fixed.probes if not p.passed])
        assert fixed.reward == 1.0 and fixed.outcome == "graded" and fixed.shadow
        vulnerable = verify(bundle, bundle.files, sandbox=sandbox)
        assert vulnerable.resolution is Resolution.NO, (bug_class, vulnerable.summary())
        assert vulnerable.reward == 0.0
        assert vulnerable.security.passed == 0 and vulnerable.pass_to_pass.passed == vulnerable.pass_to_pass.total


def test_report_names_expected_and_got_for_each_probe(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[0])
    report = verify(bundle, bundle.files, sandbox=sandbox)
    failed = [p for p in report.probes if not p.passed]
    assert failed and all(p.kind.value == "security" and not p.visible for p in failed)
    assert all(p.expected and p.got and p.failures for p in failed)
    assert {p.probe_id for p in report.probes} == {p.id for p in bundle.probes}
    assert report.requests == sum(len(p.steps) for p in bundle.probes)
    assert report.containment.get("seccomp") is True and report.containment.get("audit_hook") is True


def test_fixing_one_of_two_sites_is_partial(sandbox, shipped):
    for scenario_id in shipped.ids():
        bundle = shipped.load(scenario_id)
        variant = get_bug_class(bundle.bug_class).variant(bundle.variant)
        if bundle.spec is not None and len(bundle.sites) >= 2 and variant.site_keys:
            break
    else:  # pragma: no cover - the shipped cache has multi-site variants
        pytest.skip("no multi-site scenario")
    half = render_app(bundle.spec, variant.mutations_for(tuple(variant.sites[1:])))
    report = verify(bundle, half.files, sandbox=sandbox)
    assert report.resolution is Resolution.PARTIAL, report.summary()
    assert 0.0 < report.reward < 1.0


def test_deny_all_is_not_a_fix(sandbox, shipped):
    # a scenario whose users sign every request themselves (where they log in first, deny-all refuses
    # the login too, and an intruder who cannot sign in tries no exploit at all)
    bundle = next(b for b in map(shipped.load, shipped.ids()[:40])
                  if not any(u.credentials is not None and u.credentials.kind == "login" for u in b.users))
    files = lazy_fix_files(bundle.files, bundle.entrypoint, "deny_all", [s.path for s in bundle.sites])
    report = verify(bundle, files, sandbox=sandbox)
    assert report.resolution is Resolution.NO
    assert report.security.passed == report.security.total  # every exploit is refused...
    assert report.pass_to_pass.passed < report.pass_to_pass.total  # ...and so is legitimate use


@pytest.mark.parametrize(
    "mutation, needle",
    [
        (lambda src: src + "\ndef broken(:\n", "SyntaxError"),
        (lambda src: "import no_such_module_here\n" + src, "ModuleNotFoundError"),
        (lambda src: src + "\nraise RuntimeError('boom at import')\n", "boom at import"),
    ],
    ids=["syntax_error", "import_error", "crash_at_import"],
)
def test_app_that_does_not_load_is_graded_no_with_its_error(sandbox, shipped, mutation, needle):
    bundle = shipped.load(shipped.ids()[2])
    path = entry_path(bundle)
    files = dict(apply_patch(bundle.files, bundle.reference_fix))
    files[path] = mutation(files[path])
    report = verify(bundle, files, sandbox=sandbox)
    assert report.outcome == "load_error" and needle in report.load_error
    assert report.resolution is Resolution.NO and report.reward == 0.0
    # every exploit counted failed, once however many intruders try it
    exploits = {exploit_of(p) for p in bundle.probes if p.kind.value == "security"}
    assert report.security.passed == 0 and report.security.total == len(exploits)


def test_startup_failure_is_a_load_error(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[3])
    files = with_entry_code(bundle, "\n\n@app.on_event('startup')\nasync def _down():\n    raise RuntimeError('database down')\n")
    report = verify(bundle, files, sandbox=sandbox)
    assert report.outcome == "load_error" and "database down" in report.load_error


def test_emptying_the_seed_data_refuses_every_exploit_and_earns_nothing(sandbox, shipped):
    """A patch may change data files (envcore/scenario/patch_scope.py), and an emptied seed.json
    leaves no user for an exploit to act as: every exploit is refused, and so is every legitimate
    use. The app no longer starts, which is the patch's fault: graded NO, never a fix."""
    bundle = shipped.load(shipped.ids()[4])
    files = dict(bundle.files)
    files["data/seed.json"] = "{}"
    report = verify(bundle, files, sandbox=sandbox)
    assert report.outcome == "load_error" and report.resolution is Resolution.NO and report.reward <= 0
    assert report.load_error.startswith("KeyError at ") and "/dev/shm" not in report.load_error


def test_visible_probe_set_has_no_resolution(sandbox, shipped):
    bundle = shipped.load(shipped.ids()[5])
    report = verify(bundle, bundle.files, sandbox=sandbox, probe_set="visible")
    assert report.resolution is None and report.reward is None and not report.shadow
    assert all(p.visible and p.passed for p in report.probes)
    assert len(report.probes) == len(bundle.visible_probes)


def test_closed_sandbox_is_an_infrastructure_error_with_no_reward(shipped):
    bundle = shipped.load(shipped.ids()[0])
    box = Sandbox(warm_up=False, spares=0)
    box.close()
    report = verify(bundle, bundle.files, sandbox=box)
    assert report.outcome == "infrastructure_error" and report.reward is None and report.resolution is None
    assert "closed" in report.infrastructure_error


def test_exhausted_pool_is_an_infrastructure_error(shipped):
    from envcore.runner.base import AppSource
    from envcore.runner.http import HttpRequest
    from envcore.sandbox import LiveApp

    bundle = shipped.load(shipped.ids()[0])
    with Sandbox(warm_up=False, spares=0, max_workers=1, pool_wait_s=0.2) as box:
        with LiveApp(box, AppSource(bundle.files, bundle.entrypoint)) as live:
            assert live.request(HttpRequest("GET", "/")).status is not None  # holds the only worker
            report = verify(bundle, bundle.files, sandbox=box)
        assert report.outcome == "infrastructure_error" and "exhausted" in report.infrastructure_error
        assert verify(bundle, bundle.files, sandbox=box).outcome == "graded"  # the slot came back


T = Tally


@pytest.mark.parametrize(
    "security, regression, trap, expected",
    [
        (T(passed=3, total=3), T(passed=5, total=5), T(passed=2, total=2), Resolution.FULL),
        (T(passed=1, total=3), T(passed=5, total=5), T(passed=2, total=2), Resolution.PARTIAL),
        (T(passed=0, total=3), T(passed=5, total=5), T(passed=2, total=2), Resolution.NO),
        (T(passed=3, total=3), T(passed=4, total=5), T(passed=2, total=2), Resolution.NO),
        (T(passed=3, total=3), T(passed=5, total=5), T(passed=1, total=2), Resolution.NO),
        (T(passed=2, total=3), T(passed=5, total=5), T(passed=0, total=1), Resolution.NO),
        (T(passed=0, total=0), T(passed=5, total=5), T(), Resolution.NO),
    ],
    ids=["all-pass", "some-security", "no-security", "regression-broken", "trap-sprung",
         "partial-with-trap-sprung", "no-security-probes"],
)
def test_resolution_table(security, regression, trap, expected):
    assert resolve(security, regression, trap) is expected


def test_score_follows_resolution():
    assert score(Resolution.FULL, T(passed=2, total=2)) == 1.0
    assert score(Resolution.PARTIAL, T(passed=1, total=4)) == 0.25
    assert score(Resolution.NO, T(passed=3, total=4)) == 0.0
    assert score(None, T()) is None


@pytest.mark.slow  # 24 verifications; probe order is attacked by default in test_sandbox_isolation
def test_random_probe_order_never_changes_a_verdict(sandbox, shipped):
    """Probes are sent in a fresh random order each time, each on a freshly loaded app, so the
    verdict never depends on the order (tests/test_sandbox_isolation.py attacks this directly)."""
    for scenario_id in shipped.ids()[30:42]:
        bundle = shipped.load(scenario_id)
        fixed = apply_patch(bundle.files, bundle.reference_fix)
        assert verify(bundle, fixed, sandbox=sandbox).resolution is Resolution.FULL, scenario_id
        assert verify(bundle, bundle.files, sandbox=sandbox).resolution is Resolution.NO, scenario_id


def test_the_fork_bound_runs_every_probe_in_a_fork_of_its_own(shipped):
    """bench verify's bound on any process-per-probe design: its forks really serve the probes (a
    fork that got no response fails the measurement), and serving costs more than a bare fork."""
    from envcore.verifier.bench import measure_fork_bound

    bundle = shipped.load(shipped.ids()[0])
    bound = measure_fork_bound(bundle, n=9)
    assert [len(d.samples_ms) for d in (bound.bare, bound.pristine, bound.served)] == [9, 9, 9]
    assert bound.requests >= 1
    assert bound.pristine.p50 > bound.bare.p50


def test_the_fork_bound_signs_login_actors_in_within_each_fork():
    """A login actor's requests depend on what the app granted it: each fork walks its probe on its
    own copy of the app, signing in there first (a login that failed, or a request not answered,
    fails the measurement)."""
    from envcore.verifier.bench import measure_fork_bound

    bundle = notes_bundle("login_json")
    bound = measure_fork_bound(bundle, n=4)
    assert [len(d.samples_ms) for d in (bound.bare, bound.pristine, bound.served)] == [4, 4, 4]
    assert bound.requests == 2.0  # 5 steps and 3 logins (alice once, bob in each of his two probes) over 4 probes


@pytest.mark.parametrize("kind", ["login_json", "login_cookie"])
def test_the_live_bench_replays_login_actors_probes_on_the_app_it_measures(sandbox, kind):
    """bench verify's live figures replay each bundle's probes on its live app, every actor that
    signs in with a login doing so there first: each probe of the first round grades as the
    verifier would grade it (bob is bob, his own login counted once), logins sent as requests."""
    from envcore.runner.base import AppSource
    from envcore.sandbox import LiveApp
    from envcore.verifier.bench import measure_live, replay_probes

    bundle = notes_bundle(kind)
    fixed = fixed_files(bundle)
    live_ms, memory = measure_live(sandbox, [(bundle, fixed)], 20)
    assert len(live_ms.samples_ms) == 20 and len(memory) == 1
    sent = []
    with LiveApp(sandbox, AppSource(fixed, bundle.entrypoint)) as live:
        outcomes = replay_probes(bundle, lambda request: sent.append(request) or live.request(request), 8)
    assert [o.probe_id for o in outcomes] == [p.id for p in bundle.probes]
    assert all(o.passed for o in outcomes), [o for o in outcomes if not o.passed]
    assert len(sent) == 8 and sum(len(p.steps) for p in bundle.probes) == 5  # and alice's and bob's logins
