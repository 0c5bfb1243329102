"""``--runner inprocess`` and the sandbox load apps the same way, so they give the same verdicts.

Both runners load an app with one loader (:mod:`envcore.runner.loader`): its files on disk, the
working directory and ``sys.path`` that ``uvicorn main:app`` run from its folder gives, the same
module finding, and the app's modules kept while it is served. A scenario that passes its check with
one runner and fails with the other tells its author nothing true about the app; here every probe of
every scenario folder the tests import must pass or fail alike in process and in the sandbox, on the
app as shipped and with its reference fix (the fix served from a template of the shipped app where
it swaps in, as grading serves a patch). The default run takes the hand-written example and one port
of each upstream project; the slow run takes every folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envcore.factory.byo import load_bundle_dir
from envcore.patching import apply_patch
from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource, RunReport
from envcore.runner.inprocess import InProcessRunner
from envcore.sandbox import Sandbox, SandboxLimits
from envcore.sandbox.runner import run_sandboxed
from tests.test_app_on_disk import INTACT, ORIGINAL, as_probes, get

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (REPO / "examples" / "byo").iterdir() if (p / "scenario.yaml").is_file())
EXTERNAL = sorted(p for p in (REPO / "scenarios" / "external").iterdir() if (p / "scenario.yaml").is_file())
PROJECTS = sorted({folder.name.split("-")[0] for folder in EXTERNAL})
FIRST_OF_EACH_PROJECT = [next(f for f in EXTERNAL if f.name.startswith(project + "-")) for project in PROJECTS]
DEFAULT = [*EXAMPLES, *FIRST_OF_EACH_PROJECT]


@pytest.fixture(scope="module")
def box():
    limits = SandboxLimits(request_timeout_s=5.0, load_timeout_s=10.0, verify_timeout_s=60.0, cpu_s=20, memory_mb=256)
    sandbox = Sandbox(limits=limits, spares=1, templates=2, template_spares=1).start()
    yield sandbox
    sandbox.close()


def verdicts(report: RunReport) -> dict[str, object]:
    """Whether the app loaded, and which probes passed (the runners' own words may differ)."""
    return {"loaded": report.load_error is None, **{o.probe_id: o.passed for o in report.outcomes}}


def assert_same_verdicts(folder: Path, box: Sandbox) -> None:
    bundle = load_bundle_dir(folder)
    actors = actors_of(bundle.users)
    shipped = AppSource(bundle.files, bundle.entrypoint)
    fixed = AppSource(apply_patch(bundle.files, bundle.reference_fix), bundle.entrypoint)
    with InProcessRunner() as runner:
        in_process = {"shipped": runner.run(shipped, bundle.probes, actors), "fixed": runner.run(fixed, bundle.probes, actors)}
    sandboxed = {"shipped": run_sandboxed(box, shipped, bundle.probes, actors),
                 "fixed": run_sandboxed(box, fixed, bundle.probes, actors, base=shipped, base_again=False)}
    for version in ("shipped", "fixed"):
        assert in_process[version].load_error is None, (version, in_process[version].load_error)
        assert verdicts(sandboxed[version]) == verdicts(in_process[version]), (
            version, sandboxed[version].load_error,
            [(o.probe_id, o.failures) for o in sandboxed[version].outcomes if not o.passed],
            [(o.probe_id, o.failures) for o in in_process[version].outcomes if not o.passed])
    # and the scenario holds: the bug is there as shipped and gone with the fix
    assert not all(verdicts(in_process["shipped"]).values()) and all(verdicts(in_process["fixed"]).values())


@pytest.mark.parametrize("folder", DEFAULT, ids=[f.name for f in DEFAULT])
def test_both_runners_give_the_same_verdicts_on_the_shipped_app_and_its_fix(folder, box):
    assert_same_verdicts(folder, box)


@pytest.mark.slow
@pytest.mark.parametrize("folder", [f for f in EXTERNAL if f not in DEFAULT],
                         ids=[f.name for f in EXTERNAL if f not in DEFAULT])
def test_every_scenario_folder_gets_the_same_verdicts_from_both_runners(folder, box):
    assert_same_verdicts(folder, box)


def test_an_app_that_imports_inside_its_handlers_and_finds_its_parts_on_disk_gets_the_same_verdicts(box):
    probes = as_probes([*INTACT, get("/where"), get("/env"), get("/resources"), get("/items")])
    with InProcessRunner() as runner:
        in_process = runner.run(ORIGINAL, probes, {})
    sandboxed = run_sandboxed(box, ORIGINAL, probes, {})
    assert verdicts(in_process) == verdicts(sandboxed) == {"loaded": True, **{p.id: True for p in probes}}, (
        [(o.probe_id, o.failures) for o in in_process.outcomes if not o.passed],
        [(o.probe_id, o.failures) for o in sandboxed.outcomes if not o.passed])
