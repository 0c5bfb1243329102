"""Scenario bases: the scenarios ported from one project share one copy of its app.

A scenario folder's ``scenario.yaml`` may name a ``base`` (``envcore/factory/scenario_base.py``): a
folder whose ``app/`` is the scenario's app, under the scenario's own ``app/`` (which then holds only
what it changes). The import resolves it, so the bundle is what the self-contained folder gave: the
same files and the same content hash, and an export writes a folder that needs no base. A base is
refused when it is missing, leads out of the folder that holds the scenario, or never ends.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from envcore.cache import ScenarioCache
from envcore.cli import main
from envcore.factory.byo import ImportProblem, export_bundle_dir, load_bundle_dir
from envcore.factory.scenario_base import MAX_DEPTH

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = ROOT / "scenarios" / "external"
EXAMPLE = ROOT / "examples" / "byo" / "clinic-records"

HASHES_BEFORE_THE_BASES = {
    "apix-bfla-delete-user": "7f1746799fc21bdfc5b78705696d37303c4ea3bdd09bc1ed93ca76a6cf711168",
    "apix-bola-user-profile": "bca8ef83201c75fb54039c0c221c3a3413e8f7a2b7a0e1a21a5cf818aebf31c4",
    "apix-order-completion": "939aa7f1f5b6ec0ed997296d5775b0eb0042cddbc5b39c41276536a86801e485",
    "dvra-delivery-orders-exposed": "38a445f0d455ceec3e144c5dc3d48c74f3ae127b0ad37e3c35aa93309a5cf20e",
    "dvra-menu-item-deletion": "aeda9f39885404fe2467bcd8ba32d1b60782b0d43b22b8efdd3657714294e274",
    "dvra-order-idor": "8109e67fe9f464f9baff0d21baa4155f615a9e0bfac248eb85d5ef279bce16aa",
    "dvra-profile-mass-assignment": "93a7ca8cd70a92838f1982de75d2bd01b4eb5640cb5ead2b368552605df9ecdf",
    "dvra-profile-update-idor": "f48ba124dd7f5cf5139f8f88c9e21393b5a5acb4c2dc4a8050d0aa412b3cbef9",
    "dvra-role-escalation": "fd76a888221acec0b5187e9de338ec91f9b2a205ac6fbde4f1098394b4b19938",
    "dvra-unverified-jwt": "8b6021bdfc2424888303676b5dbf68c55e71451bf281e8dd427904c1b176dc3c",
}
"""Each external scenario's content hash as imported while every scenario folder held the whole app
(the ids of the shipped cache v5's external split): sharing a base changes no bundle."""


def _problem(folder: Path) -> str:
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(folder)
    return str(caught.value)


def _set_base(folder: Path, base) -> None:
    path = folder / "scenario.yaml"
    meta = yaml.safe_load(path.read_text(encoding="utf-8"))
    meta["base"] = base
    path.write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")


@pytest.fixture
def collection(tmp_path: Path) -> Path:
    """A folder of scenarios: the clinic example's app once under ``_upstream/clinic``, and the
    example's scenario beside it, naming it as its base and holding no app of its own."""
    root = tmp_path / "scenarios"
    shutil.copytree(EXAMPLE / "app", root / "_upstream" / "clinic" / "app", ignore=shutil.ignore_patterns("__pycache__"))
    scenario = root / "clinic-records"
    shutil.copytree(EXAMPLE, scenario, ignore=shutil.ignore_patterns("__pycache__", "app"))
    _set_base(scenario, "../_upstream/clinic")
    return root


# -- the external split: one copy of each app, the same bundles -------------------------------------


@pytest.mark.parametrize("name", sorted(HASHES_BEFORE_THE_BASES))
def test_every_external_scenario_imports_to_the_hash_it_had_before_the_bases(name):
    assert load_bundle_dir(EXTERNAL / name).content_hash() == HASHES_BEFORE_THE_BASES[name]


def test_each_upstream_app_is_held_once_under_scenarios_external():
    """No app file (same path under app/, same bytes) is kept in two folders: a scenario's own app/
    holds only what differs from its base."""
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    for app_dir in sorted(EXTERNAL.glob("**/app")):
        if app_dir.parent.name == "app" or not app_dir.is_dir():
            continue
        for path in app_dir.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                holders[(path.relative_to(app_dir).as_posix(), digest)].append(str(app_dir.relative_to(EXTERNAL)))
    assert holders, "no app found"
    assert not {key: where for key, where in holders.items() if len(where) > 1}


def test_factory_import_of_a_based_external_scenario_files_every_file_under_the_old_id(tmp_path, capsys):
    name = "apix-bola-user-profile"
    cache = tmp_path / "cache"
    assert main(["factory", "import", str(EXTERNAL / name), "--out", str(cache), "--split", "external",
                 "--runner", "inprocess"]) == 0
    scenario_id = HASHES_BEFORE_THE_BASES[name][:16]
    assert f"imported {scenario_id}" in capsys.readouterr().out
    bundle = ScenarioCache.open(cache).load(scenario_id)
    base_app = EXTERNAL / "_upstream" / "apix" / "app"
    assert bundle.files == {p.relative_to(base_app).as_posix(): p.read_text(encoding="utf-8")
                            for p in sorted(base_app.rglob("*.py"))}


def test_an_exported_based_scenario_is_self_contained_and_imports_to_the_same_hash(tmp_path):
    name = "dvra-order-idor"
    bundle = load_bundle_dir(EXTERNAL / name)
    alone = export_bundle_dir(bundle, tmp_path / "elsewhere" / name)  # no _upstream beside it
    assert "base" not in yaml.safe_load((alone / "scenario.yaml").read_text(encoding="utf-8"))
    assert {p.relative_to(alone / "app").as_posix() for p in (alone / "app").rglob("*") if p.is_file()} == set(bundle.files)
    assert load_bundle_dir(alone).content_hash() == HASHES_BEFORE_THE_BASES[name]


# -- composing: the base's app, less what the scenario removes, with its own files over it ----------


def test_a_based_folder_loads_to_the_bundle_of_the_self_contained_one(collection):
    assert load_bundle_dir(collection / "clinic-records").content_hash() == load_bundle_dir(EXAMPLE).content_hash()


def test_factory_import_of_a_based_folder_files_the_same_scenario_as_the_self_contained_one(collection, tmp_path):
    based, whole = tmp_path / "based-cache", tmp_path / "whole-cache"
    for folder, cache in ((collection / "clinic-records", based), (EXAMPLE, whole)):
        assert main(["factory", "import", str(folder), "--out", str(cache), "--runner", "inprocess"]) == 0
    ids = ScenarioCache.open(based).ids()
    assert ids == ScenarioCache.open(whole).ids() and len(ids) == 1
    assert ScenarioCache.open(based).load(ids[0]).canonical_json() == ScenarioCache.open(whole).load(ids[0]).canonical_json()


def test_the_scenarios_own_files_replace_and_add_to_the_base_and_remove_takes_base_files_out(collection):
    scenario = collection / "clinic-records"
    (scenario / "app" / "clinic").mkdir(parents=True)
    (scenario / "app" / "clinic" / "models.py").write_text("# the scenario's own models\n", encoding="utf-8")
    (scenario / "app" / "NOTES.txt").write_text("added by the scenario\n", encoding="utf-8")
    (collection / "_upstream" / "clinic" / "app" / "docs").mkdir()
    (collection / "_upstream" / "clinic" / "app" / "docs" / "a.md").write_text("a\n", encoding="utf-8")
    (collection / "_upstream" / "clinic" / "app" / "docs" / "b.md").write_text("b\n", encoding="utf-8")
    _set_base(scenario, {"folder": "../_upstream/clinic", "remove": ["docs"]})
    files = load_bundle_dir(scenario).files
    assert files["clinic/models.py"] == "# the scenario's own models\n"
    assert files["NOTES.txt"] == "added by the scenario\n"
    assert not any(path.startswith("docs/") for path in files)
    assert files["clinic/routes.py"] == (EXAMPLE / "app" / "clinic" / "routes.py").read_text(encoding="utf-8")


def test_a_base_may_itself_be_a_scenario_with_a_base(collection):
    """Two levels: a variant whose base is the based scenario above, with one file of its own."""
    variant = collection / "clinic-records-variant"
    shutil.copytree(collection / "clinic-records", variant)
    _set_base(variant, "../clinic-records")
    (variant / "app").mkdir()
    (variant / "app" / "README.txt").write_text("variant\n", encoding="utf-8")
    files = load_bundle_dir(variant).files
    assert files["README.txt"] == "variant\n" and "clinic/routes.py" in files


def test_removing_a_path_the_base_does_not_hold_is_named(collection):
    _set_base(collection / "clinic-records", {"folder": "../_upstream/clinic", "remove": ["clinic/gone.py"]})
    assert ("scenario.yaml: base: remove: 'clinic/gone.py' is not a file or folder of the base's app/"
            in _problem(collection / "clinic-records"))


def test_a_problem_in_a_base_file_names_it_by_its_path_from_the_scenario(collection):
    (collection / "_upstream" / "clinic" / "app" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    assert "../_upstream/clinic/app/logo.png: not UTF-8 text" in _problem(collection / "clinic-records")


@pytest.mark.parametrize("base, expected", [
    (7, "scenario.yaml: base: expected a folder relative to this one"),
    ({"folder": "../_upstream/clinic", "drop": ["x"]}, "scenario.yaml: base.drop: Extra inputs are not permitted"),
    ({"remove": ["x"]}, "scenario.yaml: base.folder: Field required"),
], ids=["not-a-path", "unknown-key", "no-folder"])
def test_a_malformed_base_is_named_by_file_and_key(collection, base, expected):
    _set_base(collection / "clinic-records", base)
    assert expected in _problem(collection / "clinic-records")


# -- refused: missing, escaping, circular -----------------------------------------------------------


def test_a_missing_base_is_named(collection):
    _set_base(collection / "clinic-records", "../_upstream/clinc")
    assert ("scenario.yaml: base: '../_upstream/clinc' is not a folder (../_upstream/clinc does not exist)"
            in _problem(collection / "clinic-records"))


def test_a_base_without_an_app_is_named(collection):
    (collection / "_upstream" / "empty").mkdir()
    _set_base(collection / "clinic-records", "../_upstream/empty")
    assert "../_upstream/empty/app/: missing (the app's source folder)" in _problem(collection / "clinic-records")


def test_a_base_that_climbs_out_of_the_scenarios_folder_is_refused(collection):
    """An imported folder must not pull files from elsewhere on the importer's machine (another
    project's source, a home folder) into a bundle that agents read and caches ship."""
    shutil.copytree(collection / "_upstream" / "clinic", collection.parent / "outside")
    _set_base(collection / "clinic-records", "../../outside")
    message = _problem(collection / "clinic-records")
    assert "scenario.yaml: base: '../../outside' leads out of" in message and "the folder that holds the scenario" in message


def test_an_absolute_base_is_refused(collection):
    _set_base(collection / "clinic-records", str(collection / "_upstream" / "clinic"))
    assert "is an absolute path; name the base relative to" in _problem(collection / "clinic-records")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_a_base_folder_linked_out_of_the_scenarios_folder_is_refused(collection):
    shutil.copytree(collection / "_upstream" / "clinic", collection.parent / "outside")
    os.symlink(collection.parent / "outside", collection / "_upstream" / "linked")
    _set_base(collection / "clinic-records", "../_upstream/linked")
    assert "scenario.yaml: base: '../_upstream/linked' leads out of" in _problem(collection / "clinic-records")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_a_base_app_folder_linked_out_of_the_scenarios_folder_is_refused(collection):
    shutil.copytree(collection / "_upstream" / "clinic", collection.parent / "outside")
    (collection / "_upstream" / "sneaky").mkdir()
    os.symlink(collection.parent / "outside" / "app", collection / "_upstream" / "sneaky" / "app")
    _set_base(collection / "clinic-records", "../_upstream/sneaky")
    assert "../_upstream/sneaky/app/: symbolic links are not allowed" in _problem(collection / "clinic-records")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_an_app_folder_that_is_a_link_is_refused(tmp_path):
    """The same door without a base: the scenario's own app/ as a link to a folder elsewhere."""
    scenario = tmp_path / "clinic-records"
    shutil.copytree(EXAMPLE, scenario, ignore=shutil.ignore_patterns("__pycache__", "app"))
    shutil.copytree(EXAMPLE / "app", tmp_path / "elsewhere", ignore=shutil.ignore_patterns("__pycache__"))
    os.symlink(tmp_path / "elsewhere", scenario / "app")
    assert "app/: symbolic links are not allowed" in _problem(scenario)


def test_a_scenario_that_is_its_own_base_is_refused(collection):
    _set_base(collection / "clinic-records", ".")
    assert "scenario.yaml: base: '.' is a folder already in the chain, which never ends: . -> ." in _problem(
        collection / "clinic-records")


def test_two_scenarios_that_are_each_others_base_are_refused(collection):
    other = collection / "clinic-other"
    shutil.copytree(collection / "clinic-records", other)
    _set_base(other, "../clinic-records")
    _set_base(collection / "clinic-records", "../clinic-other")
    assert ("../clinic-other/scenario.yaml: base: '../clinic-records' is a folder already in the chain, which never "
            "ends: . -> ../clinic-other -> ." in _problem(collection / "clinic-records"))


def test_a_chain_of_bases_deeper_than_the_limit_is_refused(collection):
    previous = "clinic-records"
    for level in range(MAX_DEPTH + 1):
        name = f"level-{level}"
        (collection / name).mkdir()
        (collection / name / "scenario.yaml").write_text(f"base: ../{previous}\n", encoding="utf-8")
        previous = name
    top = collection / "top"
    shutil.copytree(collection / "clinic-records", top)
    _set_base(top, f"../{previous}")
    assert f"base: more than {MAX_DEPTH} bases in a chain" in _problem(top)


def test_a_broken_scenario_yaml_in_a_base_is_named(collection):
    other = collection / "clinic-other"
    shutil.copytree(collection / "clinic-records", other)
    (other / "scenario.yaml").write_text("base: [unclosed\n", encoding="utf-8")
    _set_base(collection / "clinic-records", "../clinic-other")
    assert "../clinic-other/scenario.yaml: not valid YAML" in _problem(collection / "clinic-records")
