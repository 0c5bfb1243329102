"""The external split: scenarios ported from public, deliberately vulnerable FastAPI projects.

Every folder under ``scenarios/external/`` with a ``scenario.yaml`` is a scenario folder
(docs/bundle-format.md) with a ``PROVENANCE.md`` that names its upstream project, the commit read and
the licence. Each upstream app is kept once, as ported, under ``_upstream/<project>/`` (the scenarios'
``base``), with a ``PROVENANCE.md`` that lists every change the port made; a scenario's own says what
it changes beyond that. Each imports through the same path as any brought-in app; one scenario of the
first project goes through the whole scenario check in the sandbox in the default run, one of each
project and all of them in the slow run (a DVRA port's check alone takes over 10 s).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from envcore.factory.byo import load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.sandbox.runner import SandboxRunner

EXTERNAL = Path(__file__).resolve().parent.parent / "scenarios" / "external"
FOLDERS = sorted(p for p in EXTERNAL.iterdir() if (p / "scenario.yaml").is_file())
PROJECTS = sorted({folder.name.split("-")[0] for folder in FOLDERS})
BASES = sorted(p for p in (EXTERNAL / "_upstream").iterdir() if p.is_dir())


def test_at_least_six_scenarios_from_at_least_two_projects():
    assert len(FOLDERS) >= 6 and len(PROJECTS) >= 2, (FOLDERS, PROJECTS)


def _says_where_it_comes_from(provenance: str, folder: Path) -> None:
    assert re.search(r"https://github\.com/[\w.-]+/[\w.-]+", provenance)
    assert re.search(r"\b[0-9a-f]{40}\b", provenance), "the upstream commit read"
    assert re.search(r"GPL-3\.0|MIT|Apache-2\.0|BSD", provenance), "the licence by name"
    copies = re.findall(r"`((?:\.\./)+licenses/[^`]+)`", provenance)
    assert copies and all((folder / copy).resolve().is_file() for copy in copies), copies


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_each_port_says_where_it_comes_from_its_licence_and_what_changed(folder):
    provenance = (folder / "PROVENANCE.md").read_text()
    _says_where_it_comes_from(provenance, folder)
    assert "changed" in provenance.lower()
    base = yaml.safe_load((folder / "scenario.yaml").read_text()).get("base")
    if base is not None:  # the port's changes are listed once, beside the app they were made to
        assert f"`{base}/PROVENANCE.md`" in provenance and (folder / base / "PROVENANCE.md").is_file()
        assert ("no `app/` of its own" in provenance) == (not (folder / "app").exists()), (
            "a scenario's PROVENANCE.md says whether it changes the base's app")
    bundle = load_bundle_dir(folder)
    assert bundle.generator == "import" and bundle.reference_fix
    assert bundle.probes_of() and any(p.kind.value == "security" for p in bundle.probes)


@pytest.mark.parametrize("base", BASES, ids=[b.name for b in BASES])
def test_each_upstream_app_lists_every_change_the_port_made_and_its_licence(base):
    provenance = (base / "PROVENANCE.md").read_text()
    _says_where_it_comes_from(provenance, base)
    changes = provenance[provenance.index("## What changed in the port"):]
    assert re.search(r"^1\. ", changes, re.MULTILINE), "the changes, numbered"
    assert (base / "app").is_dir()
    named = f"../_upstream/{base.name}"
    assert any(yaml.safe_load((f / "scenario.yaml").read_text()).get("base") == named for f in FOLDERS), (
        f"no scenario is built on {base.name}")


def _one_of_each_project() -> list[Path]:
    return [next(f for f in FOLDERS if f.name.startswith(project + "-")) for project in PROJECTS]


def _check(folder: Path) -> None:
    report = check_scenario(load_bundle_dir(folder), SandboxRunner(), fail_fast=False)
    assert report.ok, report.summary()


@pytest.mark.parametrize("folder", [pytest.param(f, id=f.name, marks=() if i == 0 else pytest.mark.slow)
                                    for i, f in enumerate(_one_of_each_project())])
def test_one_port_of_each_project_passes_the_scenario_check_in_the_sandbox(folder):
    _check(folder)


@pytest.mark.slow
@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_every_port_passes_the_scenario_check_in_the_sandbox(folder):
    _check(folder)
