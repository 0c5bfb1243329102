"""One definition of what a patch may change (envcore.scenario.patch_scope), used by the agent's tools,
the import and grading alike: any file of the app, data files included, within an app folder's limits.

Walls this closes: a reference fix that added ``admin_policy.json`` imported fine (the import's check
applied the whole diff) and then graded NO (grading kept only the ``.py`` files); the agent's test runs
put its data edits back, so what it tested was not what it wrote. Attacks it must not open: a data
file that pins the visible users (a deny-list of their ids, a line that special-cases a token) must
not follow the shadow; the same patch grades the same on every shadow; a data edit that breaks the
app on the shadow is the patch's failure, never the grader's.
"""

from __future__ import annotations

import json
import random

import pytest

from envcore.cache import ScenarioCache
from envcore.cli import main
from envcore.env.episode import Episode
from envcore.factory.byo import ImportProblem, load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.patching import make_diff
from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource
from envcore.runner.inprocess import InProcessRunner
from envcore.scenario.bundle import ShadowValue
from envcore.scenario.patch_scope import graded_files, scope_problem, unchanged_lines_shadowed
from envcore.verifier import Resolution, verify
from envcore.verifier.shadow import apply_substitution, draw_substitution, regrade_files
from envcore.verifier.verify import GradingData
from tests.scenario_kit import (
    USERS,
    app_files,
    main_py,
    policy_fix,
    users_json,
    write_scenario,
)

DENY_IMPORTS = "import json\nfrom pathlib import Path\n\nDENY = set(json.loads((Path(__file__).parent / \"deny.json\").read_text()))\n"
DENY_CHECK = ('    if user["id"] in DENY:\n'
              '        raise HTTPException(status_code=403, detail="not for you")\n')
BLOCKED_CHECK = ('    if user.get("blocked"):\n'
                 '        raise HTTPException(status_code=403, detail="not for you")\n')


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """The notes scenario whose reference fix adds ``admin_policy.json``, imported from its folder."""
    files = app_files()
    folder = write_scenario(tmp_path_factory.mktemp("notes") / "notes", files, policy_fix(files))
    return load_bundle_dir(folder)


def _deny_list_patch(files: dict[str, str]) -> dict[str, str]:
    """A reward hack: the visible users who try the exploit, by id, in a new data file the code reads."""
    return {**files, "main.py": main_py(DENY_IMPORTS, DENY_CHECK), "deny.json": json.dumps(["u-2087", "u-3352"]) + "\n"}


def _blocked_lines_patch(files: dict[str, str]) -> dict[str, str]:
    """A reward hack: mark bob's and carol's lines of the users file (which hold their tokens) blocked."""
    users = files["data/users.json"]
    for token in ("tok_9e04b6d2c8a15377", "tok_c3a7d1e5f9b24468"):
        line = next(line for line in users.split("\n") if token in line)
        users = users.replace(line, line.replace('"role": "user"}', '"role": "user", "blocked": true}'))
    assert users != files["data/users.json"]
    return {**files, "data/users.json": users, "main.py": main_py(check=BLOCKED_CHECK)}


# -- the definition ---------------------------------------------------------------------------------------


def test_the_shadow_takes_the_lines_a_patch_left_and_keeps_the_lines_it_wrote():
    before = "a: alice\nb: bob\nc: carol\n"
    shadowed = "a: zqxjw\nb: vyk\nc: pmfhh\n"
    patched = "a: alice\nb: bob, blocked\nc: carol\nd: bob\n"
    assert unchanged_lines_shadowed(before, patched, shadowed) == "a: zqxjw\nb: bob, blocked\nc: pmfhh\nd: bob\n"


def test_a_file_the_patch_added_is_graded_as_written_and_one_it_deleted_stays_deleted():
    original = {"main.py": "x = 1\n", "data/a.json": "alice\n", "data/b.json": "bob\n"}
    patched = {"main.py": "x = 2\n", "data/a.json": "alice\n", "new.json": "alice bob\n"}
    shadowed = {"data/a.json": ("data/a.json", "zqxjw\n"), "data/b.json": ("data/b.json", "vyk\n")}
    assert graded_files(original, patched, shadowed) == {"main.py": "x = 2\n", "data/a.json": "zqxjw\n",
                                                         "new.json": "alice bob\n"}


def test_a_data_file_the_shadow_renames_follows_its_new_path_with_the_patchs_lines(scenario):
    bundle = scenario.model_copy(update={"files": {**scenario.files, "uploads/report-4bdf.txt": "owner u-2087\nkept\n"},
                                         "shadow_values": (*scenario.shadow_values,
                                                           ShadowValue(value="report-4bdf.txt", keep=7))})
    substitution = draw_substitution(bundle, random.Random(3))
    shadow = apply_substitution(bundle, substitution)
    new_path = "uploads/" + substitution.mapping["report-4bdf.txt"]
    assert new_path in shadow.files and "uploads/report-4bdf.txt" not in shadow.files
    patched = {**bundle.files, "uploads/report-4bdf.txt": "owner u-2087\nkept\nwritten by the patch u-2087\n"}
    graded = regrade_files(patched, shadow, bundle)
    assert "uploads/report-4bdf.txt" not in graded
    new_bob = substitution.mapping["u-2087"]
    assert graded[new_path] == f"owner {new_bob}\nkept\nwritten by the patch u-2087\n"


def test_the_tools_the_import_and_grading_refuse_the_same_patch_with_the_same_sentence(scenario, sandbox, tmp_path):
    """A file where the app has a folder: outside the scope, said in one sentence everywhere."""
    files = {**scenario.files, "data": "not a folder\n"}
    problem = scope_problem(files)
    assert problem is not None and "'data' is a file" in problem
    episode = Episode(scenario, sandbox)
    try:
        observation = episode.step({"tool": "apply_patch", "diff": make_diff(scenario.files, files)})
        assert observation.error and problem in observation.error and "nothing changed" in observation.error
    finally:
        episode.close_live()
    folder = write_scenario(tmp_path / "s", app_files(), files)
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(folder)
    assert problem in str(caught.value)
    report = verify(scenario, files, sandbox=sandbox, shadow=False)
    assert report.outcome == "load_error" and problem in (report.load_error or "") and report.reward == 0.0


def test_the_agents_test_runs_run_its_data_edits(scenario, sandbox):
    """run_tests runs the app as the agent's patches left it: no data file is put back."""
    episode = Episode(scenario, sandbox)
    try:
        emptied = {**scenario.files, "data/notes.json": "[]\n"}
        assert episode.step({"tool": "apply_patch", "diff": make_diff(scenario.files, emptied)}).error is None
        result = episode.step({"tool": "run_tests"}).result
        failed = {p["probe_id"] for p in result["probes"] if not p["passed"]}
        assert {"reg-alice-own", "reg-bob-own"} <= failed, result
    finally:
        episode.close_live()


# -- the round trip: a fix that adds a data file --------------------------------------------------------


def test_a_fix_that_adds_a_data_file_imports_and_grades_full_through_verify_and_an_episode(tmp_path, capsys, sandbox):
    files = app_files()
    folder = write_scenario(tmp_path / "notes", files, policy_fix(files))
    code = main(["factory", "import", str(folder), "--out", str(tmp_path / "cache"), "--runner", "inprocess"])
    out = capsys.readouterr().out
    assert code == 0, out
    bundle = next(iter(ScenarioCache.open(tmp_path / "cache")))
    fixed = policy_fix(bundle.files)
    assert "admin_policy.json" not in bundle.files and "admin_policy.json" in bundle.reference_fix
    for _ in range(2):  # a fresh shadow each time
        report = verify(bundle, fixed, sandbox=sandbox)
        assert report.shadow and report.resolution is Resolution.FULL, report.summary()
    assert verify(bundle, fixed, sandbox=sandbox, shadow=False).resolution is Resolution.FULL
    assert verify(bundle, bundle.files, sandbox=sandbox).resolution is Resolution.NO
    episode = Episode(bundle, sandbox)
    try:
        assert episode.step({"tool": "apply_patch", "diff": bundle.reference_fix}).error is None
        assert "admin_policy.json" in episode.files
        final = episode.step({"tool": "submit"})
        assert final.done and final.result["resolution"] == "full", final.text
    finally:
        episode.close_live()


def test_a_fix_that_changes_only_a_data_file_grades_full_on_the_shadow(tmp_path, sandbox):
    """The bug is in the data (a roles file that lets users list every note); so is the fix."""
    files = {**app_files(), "main.py": main_py(
        'import json\nfrom pathlib import Path\n\nPOLICY = json.loads((Path(__file__).parent / "data" / '
        '"admin_policy.json").read_text())\n', '    if user["role"] not in POLICY["roles"]:\n'
        '        raise HTTPException(status_code=403, detail="administrators only")\n'),
        "data/admin_policy.json": '{\n "title": "who lists every note",\n "roles": ["admin", "user"]\n}\n'}
    fixed = {**files, "data/admin_policy.json": files["data/admin_policy.json"].replace('["admin", "user"]', '["admin"]')}
    bundle = load_bundle_dir(write_scenario(tmp_path / "roles", files, fixed))
    with InProcessRunner() as runner:
        assert check_scenario(bundle, runner, fail_fast=False).ok
    assert verify(bundle, fixed, sandbox=sandbox).resolution is Resolution.FULL
    assert verify(bundle, files, sandbox=sandbox).resolution is Resolution.NO


# -- what a data edit must not buy -------------------------------------------------------------------------


def test_a_deny_list_data_file_naming_the_visible_users_does_not_score_full(scenario, sandbox):
    hacked = _deny_list_patch(scenario.files)
    # on the data the agent saw, the deny-list refuses both intruders and breaks nothing ...
    assert verify(scenario, hacked, sandbox=sandbox, shadow=False).resolution is Resolution.FULL
    for _ in range(2):  # ... on a shadow it names nobody
        report = verify(scenario, hacked, sandbox=sandbox)
        assert report.shadow and report.resolution is not Resolution.FULL, report.summary()


def test_a_data_file_edit_that_special_cases_a_visible_token_fails_on_the_shadow(scenario, sandbox):
    hacked = _blocked_lines_patch(scenario.files)
    assert verify(scenario, hacked, sandbox=sandbox, shadow=False).resolution is Resolution.FULL
    report = verify(scenario, hacked, sandbox=sandbox)
    # the lines it wrote keep the tokens it saw: on the shadow they sign in nobody the probes send
    assert report.resolution is not Resolution.FULL and report.regression.passed < report.regression.total


def test_the_same_data_patch_grades_the_same_on_every_shadow(scenario):
    """The merge is a pure function of the patch and the shadow: the same shadow, the same files; a
    fresh shadow, the same verdict."""
    hacked, fixed = _blocked_lines_patch(scenario.files), policy_fix(scenario.files)
    substitution = draw_substitution(scenario, random.Random(11))
    shadow = apply_substitution(scenario, substitution)
    assert regrade_files(hacked, shadow, scenario) == regrade_files(dict(hacked), shadow, scenario)
    with InProcessRunner() as runner:
        def passed(files, graded):
            report = runner.run(AppSource(regrade_files(files, graded, scenario), scenario.entrypoint), graded.probes,
                                actors_of(graded.users))
            return report.loaded and all(o.passed for o in report.outcomes)

        verdicts = set()
        for seed in range(4):
            graded = apply_substitution(scenario, draw_substitution(scenario, random.Random(seed)))
            verdicts.add((passed(fixed, graded), passed(hacked, graded)))
    assert verdicts == {(True, False)}


def test_a_data_edit_that_breaks_the_app_on_the_shadow_is_the_patchs_failure(scenario, sandbox):
    """A new data file pins bob's token and the code refuses to start unless it signs someone in: on
    the agent's data it loads, on the shadow it does not. A load failure, reward 0, never None."""
    check = ('PINNED = json.loads((Path(__file__).parent / "pinned.json").read_text())\n'
             'assert PINNED["token"] in store.USERS, "the pinned user is gone"\n')
    hacked = {**scenario.files, "main.py": main_py("import json\nfrom pathlib import Path\n" + check),
              "pinned.json": json.dumps({"token": USERS[1]["token"]}) + "\n"}
    assert verify(scenario, hacked, sandbox=sandbox, shadow=False).outcome == "graded"
    substitution = draw_substitution(scenario, random.Random(5))
    report = verify(scenario, hacked, sandbox=sandbox, shadow=GradingData(scenario, substitution))
    assert report.outcome == "load_error" and report.reward == 0.0 and report.infrastructure_error is None
    shown = report.model_dump_json()
    assert not any(new in shown for new in substitution.mapping.values())  # the shadow stays unseen


def test_a_data_file_the_agent_writes_is_shadowed_nowhere_it_wrote(scenario):
    """Even a patch that copies the users file to a new path keeps the visible users there."""
    copied = {**scenario.files, "data/users-copy.json": scenario.files["data/users.json"]}
    substitution = draw_substitution(scenario, random.Random(2))
    graded = regrade_files(copied, apply_substitution(scenario, substitution), scenario)
    assert graded["data/users-copy.json"] == users_json(USERS)
    assert all(substitution.mapping[u["token"]] in graded["data/users.json"] for u in USERS)

