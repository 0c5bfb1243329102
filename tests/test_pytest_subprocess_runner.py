"""The naive pytest-in-a-subprocess baseline gives the same verdicts as the in-process runner on
shipped bundles (vulnerable and reference-fixed), reports an app that does not load as a load error,
and leaves no temporary folder behind.

Every run starts a fresh interpreter and pytest (about 2 s), so the runs are made once, two at a time,
in a module-scoped fixture."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from envcore.cache import ScenarioCache
from envcore.patching import apply_patch
from envcore.runner.base import AppSource, Batch, Gate
from envcore.runner.pytest_subprocess import PytestSubprocessRunner
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep, StatusIn

BUG_CLASSES = ("open_redirect", "idor_write", "path_traversal")
"""One bundle each: redirect facts (no redirect following), state carried across probes, data files."""

SYNTAX_ERROR = "syntax-error"

pytestmark = pytest.mark.slow  # a baseline runner users compare against, not one the environment grades with


def _probe() -> Probe:
    step = ProbeStep(method="GET", path="/x", expect=(StatusIn(codes=(200,)),))
    return Probe(id="p", kind=ProbeKind.REGRESSION, title="t", steps=(step,))


@pytest.fixture(scope="module")
def jobs():
    cache = ScenarioCache.open("artifacts/scenarios/v2")
    found = {}
    for bug_class in BUG_CLASSES:
        bundle = cache.load(cache.ids(bug_class=bug_class)[0])
        tokens = {u.username: u.token for u in bundle.users}
        found[(bug_class, "vulnerable")] = (AppSource(bundle.files, bundle.entrypoint), bundle.probes, tokens)
        fixed = apply_patch(bundle.files, bundle.reference_fix)
        found[(bug_class, "fixed")] = (AppSource(fixed, bundle.entrypoint), bundle.probes, tokens)
    found[SYNTAX_ERROR] = (AppSource({"app.py": "def broken(:\n"}, "app:app"), [_probe()], {})
    return found


@pytest.fixture(scope="module")
def temp_root(tmp_path_factory):
    return tmp_path_factory.mktemp("pytest-subprocess-temp")


@pytest.fixture(scope="module")
def reports(jobs, temp_root):
    import tempfile

    runner = PytestSubprocessRunner()
    saved, tempfile.tempdir = tempfile.tempdir, str(temp_root)  # to see that the runner cleans up
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {key: pool.submit(runner.run, *job) for key, job in jobs.items()}
            return {key: future.result() for key, future in futures.items()}
    finally:
        tempfile.tempdir = saved


def _verdicts(report):
    return [(o.probe_id, o.passed) for o in report.outcomes]


@pytest.mark.parametrize("bug_class", BUG_CLASSES)
@pytest.mark.parametrize("variant", ["vulnerable", "fixed"])
def test_verdicts_match_the_inprocess_runner(bug_class, variant, jobs, reports, runner):
    source, probes, tokens = jobs[(bug_class, variant)]
    expected = runner.run(source, probes, tokens)
    got = reports[(bug_class, variant)]
    assert got.loaded, got.load_error
    assert _verdicts(got) == _verdicts(expected)
    assert got.requests == sum(len(p.steps) for p in probes)
    if variant == "fixed":
        assert all(o.passed for o in got.outcomes)
    else:
        assert not all(o.passed for o in got.outcomes)
        failed = [o for o in got.outcomes if not o.passed]
        assert all(o.steps and o.steps[0].failures for o in failed)  # the assertion message comes back


def test_a_syntax_error_is_a_load_error(reports):
    report = reports[SYNTAX_ERROR]
    assert not report.loaded and "SyntaxError" in report.load_error and "app.py" in report.load_error
    assert report.outcomes == ()


def test_the_temporary_folders_are_removed(reports, temp_root):
    assert reports and list(temp_root.iterdir()) == []


def test_gated_batches_are_refused():
    with pytest.raises(NotImplementedError):
        PytestSubprocessRunner().run_batches(AppSource({}, "app:app"), [Batch((_probe(),), Gate(403))], {})
