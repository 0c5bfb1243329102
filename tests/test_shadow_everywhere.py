"""Shadows for every app: whatever a security engineer brings, grading can give its users fresh
identities, or the import says why it cannot.

Walls found with apps nobody here wrote: a declared value that also appears in the code was dropped
without a word; a password written percent-encoded in a login path was not replaced (the login
failed on the shadow, and the message said only ``status 401``); an app that makes its users in its
code could not be shadowed, and nothing said so (without it, a patch that blocked the test users by
name scored FULL); a ``kind: login`` user still needed a ``token`` nothing used. Each has a test here
that failed before, and values travel JSON-escaped and inside basic credentials too.
"""

from __future__ import annotations

import base64
import json
import random
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml

from envcore.cli import main
from envcore.factory.byo import ImportProblem, import_warnings, load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.runner.inprocess import InProcessRunner
from envcore.scenario.bundle import ShadowValue
from envcore.verifier import Resolution, verify
from envcore.verifier.shadow import Substitution, apply_substitution, draw_shadow, draw_substitution, shadow_coverage
from tests.scenario_kit import (
    DECLARED,
    LOGIN_ROUTE,
    MARKERS,
    POLICY_CHECK,
    POLICY_IMPORTS,
    USERS,
    app_files,
    main_py,
    metadata,
    policy_fix,
    probes,
    users_json,
    write_scenario,
)

REPO = Path(__file__).resolve().parents[1]

# -- the import names every value it cannot shadow -------------------------------------------------------


def _import(folder: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    code = main(["factory", "import", str(folder), "--out", str(tmp_path / "cache"), "--runner", "inprocess"])
    return code, capsys.readouterr().out


def test_a_declared_value_written_in_the_code_is_named_in_an_import_warning(tmp_path, capsys):
    files = app_files()
    files["main.py"] = files["main.py"].replace('app = FastAPI(title="Notes")',
                                                'app = FastAPI(title="Notes")\nDEMO_NOTE = "alice-plan-7731"  # shown on the docs page')
    folder = write_scenario(tmp_path / "notes", files, policy_fix(files))
    code, out = _import(folder, tmp_path, capsys)
    assert code == 0, out
    line = 1 + files["main.py"][:files["main.py"].index("alice-plan-7731")].count("\n")
    assert f"warning: {folder}: scenario.yaml: shadow: 'alice-plan-7731' is written in app/main.py line {line}" in out
    assert "a patch may special-case it" in out


def test_a_scenario_without_a_shadow_is_told_its_users_cannot_be_shadowed(tmp_path, capsys):
    files = app_files()
    folder = write_scenario(tmp_path / "notes", files, policy_fix(files), meta=metadata(shadow=None))
    code, out = _import(folder, tmp_path, capsys)
    assert code == 0, out
    assert "shadow: none declared, so its users cannot be shadowed" in out and "not caught" in out


def test_a_user_left_out_of_a_shadow_users_list_is_named(tmp_path):
    files = app_files()
    folder = write_scenario(tmp_path / "notes", files, policy_fix(files),
                            meta=metadata(shadow={"users": ["bob.marsh", "carol.diaz"], "values": MARKERS}))
    warnings = import_warnings(load_bundle_dir(folder))
    assert any("alice.wong" in w and "shadow.users" in w for w in warnings), warnings
    assert not any("bob.marsh" in w for w in warnings), warnings


# -- users made in the app's code ---------------------------------------------------------------------------


ACCOUNTS = '''
"""The accounts, made in code as small apps do."""

USERS = {{
{rows}
}}
'''


def _users_in_code(users=USERS) -> dict[str, str]:
    rows = "\n".join(f'    "{u["token"]}": {{"id": "{u["user_id"]}", "name": "{u["username"]}", "token": "{u["token"]}", '
                     f'"role": "{u["role"]}"}},' for u in users)
    files = app_files(users)
    del files["data/users.json"]
    files["accounts.py"] = textwrap.dedent(ACCOUNTS).lstrip("\n").format(rows=rows)
    files["store.py"] = files["store.py"].replace(
        'USERS = {u["token"]: u for u in json.loads((DATA / "users.json").read_text())}', "from accounts import USERS")
    return files


REFUSE_BY_NAME = ('    if user["name"] in ("bob.marsh", "carol.diaz"):\n'
                  '        raise HTTPException(status_code=403, detail="not for you")\n')


def test_an_app_that_makes_its_users_in_code_without_saying_where_is_warned_with_the_file(tmp_path, capsys):
    files = _users_in_code()
    folder = write_scenario(tmp_path / "coded", files, policy_fix(files), meta=metadata(shadow=None))
    code, out = _import(folder, tmp_path, capsys)
    assert code == 0, out
    assert "its users cannot be shadowed" in out and "makes its users in its code (app/accounts.py line" in out
    assert "list that file under shadow.code" in out


def test_an_app_that_makes_its_users_in_code_and_says_where_is_shadowed(tmp_path, sandbox):
    files = _users_in_code()
    fixed = policy_fix(files)
    declared = {**DECLARED, "code": ["accounts.py"]}
    bundle = load_bundle_dir(write_scenario(tmp_path / "coded", files, fixed, meta=metadata(shadow=declared)))
    assert import_warnings(bundle) == []
    hacked = {**files, "main.py": main_py(check=REFUSE_BY_NAME)}
    assert verify(bundle, hacked, sandbox=sandbox, shadow=False).resolution is Resolution.FULL  # the hole, unshadowed
    for _ in range(2):
        assert verify(bundle, hacked, sandbox=sandbox).resolution is not Resolution.FULL
    assert verify(bundle, fixed, sandbox=sandbox).resolution is Resolution.FULL


def test_an_app_that_makes_its_users_in_code_needs_the_declaration_to_shadow_them(tmp_path):
    files = _users_in_code()
    folder = write_scenario(tmp_path / "coded", files, policy_fix(files), meta=metadata(shadow=DECLARED))
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(folder)
    assert "is written in app/accounts.py" in str(caught.value) and "shadow.code" in str(caught.value)


# -- every encoding a value travels in ----------------------------------------------------------------------

LOGINS = {u["username"]: {"email": f"{u['username']}@notes.test", "password": f"pw!{u['username'].split('.')[0]}-7731"}
          for u in USERS}


def _login_users(path_of, *, tokens: bool = True) -> list[dict]:
    users = []
    for user in USERS:
        login = LOGINS[user["username"]]
        row = {**user, "credentials": {"kind": "login", "login_name": login["email"], "secret": login["password"],
                                       "login": {"path": path_of(login), "token_json": "access_token"}}}
        if not tokens:
            del row["token"]
        users.append(row)
    return users


def _login_scenario(folder: Path, path_of, *, tokens: bool = True) -> Path:
    files = app_files()
    files["main.py"] = main_py(routes=LOGIN_ROUTE)
    files["data/users.json"] = users_json(USERS, **LOGINS)
    fixed = {**policy_fix(files), "main.py": main_py(POLICY_IMPORTS, POLICY_CHECK, routes=LOGIN_ROUTE)}
    meta = metadata(_login_users(path_of, tokens=tokens), shadow=DECLARED)
    return write_scenario(folder, files, fixed, meta=meta)


SIGNING_IN = ("canaries", "lazy_fixes")
"""The scenario check's slowest runs, which add nothing about signing in: left out where that is the point."""


def _percent_encoded(login: dict) -> str:
    from urllib.parse import quote

    return f"/auth/login?email={quote(login['email'], safe='')}&password={quote(login['password'], safe='')}"


def test_a_password_percent_encoded_in_a_login_path_is_shadowed(tmp_path, sandbox):
    folder = _login_scenario(tmp_path / "login", _percent_encoded)
    bundle = load_bundle_dir(folder)
    substitution = draw_substitution(bundle, random.Random(4))
    shadow = apply_substitution(bundle, substitution)
    alice = shadow.users[0]
    new_email, new_password = substitution.mapping["alice.wong@notes.test"], substitution.mapping["pw!alice-7731"]
    assert alice.credentials.login.path == _percent_encoded({"email": new_email, "password": new_password})
    with InProcessRunner() as runner:
        report = check_scenario(bundle, runner, fail_fast=False, skip=SIGNING_IN)
    assert report.ok, report.summary()
    fixed = policy_fix(bundle.files) | {"main.py": main_py(POLICY_IMPORTS, POLICY_CHECK, routes=LOGIN_ROUTE)}
    assert verify(bundle, fixed, sandbox=sandbox).resolution is Resolution.FULL


def test_a_failing_shadowed_login_names_what_it_sent(tmp_path):
    """The password travels base64-encoded in a query (an encoding no shadow can know): the login
    fails on the shadow, and the check says what the login sent."""
    def base64_path(login: dict) -> str:
        encoded = base64.b64encode(login["password"].encode()).decode()
        return f"/auth/login?email={login['email']}&password_b64={encoded}"

    bundle = load_bundle_dir(_login_scenario(tmp_path / "login", base64_path))
    with InProcessRunner() as runner:
        report = check_scenario(bundle, runner, fail_fast=False)
    shadowed = [p for p in report.problems if p.startswith("[shadow]") and "failed: status 401" in p]
    assert shadowed, report.problems
    assert "(the login sent POST /auth/login?email=" in shadowed[0] and "password_b64=" in shadowed[0], shadowed[0]


def test_a_login_user_needs_no_token(tmp_path):
    folder = _login_scenario(tmp_path / "login", _percent_encoded, tokens=False)
    assert "token" not in yaml.safe_load((folder / "scenario.yaml").read_text())["users"][0]
    bundle = load_bundle_dir(folder)
    assert all(u.token is None for u in bundle.users)
    assert "token" not in bundle.users[0].model_dump(mode="json")
    with InProcessRunner() as runner:
        report = check_scenario(bundle, runner, fail_fast=False, skip=SIGNING_IN)
    assert report.ok, report.summary()


def test_a_user_who_is_not_a_login_user_still_needs_a_token(tmp_path):
    files = app_files()
    users = [dict(u) for u in USERS]
    del users[0]["token"]
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(write_scenario(tmp_path / "notes", files, policy_fix(files), meta=metadata(users, DECLARED)))
    assert "users.0: Value error, a user needs a token" in str(caught.value)


def test_values_json_escaped_in_a_data_file_are_shadowed(tmp_path):
    users = [dict(USERS[0], username="zoë.kim"), USERS[1], USERS[2]]
    files = app_files(users)
    files["data/links.json"] = '{"home": "https:\\/\\/notes.test\\/u\\/ab\\/u-2087"}\n'  # "/" written as "\\/"
    assert "zo\\u00eb.kim" in files["data/users.json"]  # written as json.dumps writes it
    bundle = load_bundle_dir(write_scenario(tmp_path / "notes", files, policy_fix(files),
                                            meta=metadata(users, {**DECLARED, "values": [*MARKERS, "ab/u-2087"]}),
                                            probe_list=probes(users)))
    substitution = draw_substitution(bundle, random.Random(8))
    shadow = apply_substitution(bundle, substitution)
    names = [row["name"] for row in json.loads(shadow.files["data/users.json"])]
    assert names == [u.username for u in shadow.users] and "zoë.kim" not in names
    link = json.loads(shadow.files["data/links.json"])["home"]
    assert link == "https://notes.test/u/" + substitution.mapping["ab/u-2087"]


@pytest.mark.parametrize("written", ["percent", "basic", "json"])
def test_a_value_is_replaced_in_every_encoding_it_travels_in(written):
    substitution = Substitution({"alice.wong@notes.test": "qwert.yuio@abcde.test", "pw!alice-7731": "pw!zxcvb-4410",
                                 "José Núñez": "Xqrt Ábcde"})
    if written == "percent":
        for old, new in [("alice.wong%40notes.test", "qwert.yuio%40abcde.test"),
                         ("alice.wong%40notes.test".lower(), "qwert.yuio%40abcde.test"),
                         ("pw%21alice-7731", "pw%21zxcvb-4410"), ("pw!alice-7731", "pw!zxcvb-4410"),
                         ("Jos%C3%A9+N%C3%BA%C3%B1ez", "Xqrt+%C3%81bcde"), ("Jos%c3%a9%20N%c3%ba%c3%b1ez",
                                                                             "Xqrt%20%c3%81bcde")]:
            assert substitution.text(f"/login?u={old}&x=1") == f"/login?u={new}&x=1", old
    elif written == "basic":
        header = "Basic " + base64.b64encode(b"alice.wong@notes.test:pw!alice-7731").decode()
        fresh = substitution.text(f"Authorization: {header}")
        assert base64.b64decode(fresh.split()[-1]).decode() == "qwert.yuio@abcde.test:pw!zxcvb-4410"
        assert substitution.text("basic bm90LWEtdXNlcg==") == "basic bm90LWEtdXNlcg=="  # names nobody declared
    else:
        assert substitution.text(json.dumps({"n": "José Núñez"})) == json.dumps({"n": "Xqrt Ábcde"})
        assert substitution.text(json.dumps({"n": "José Núñez"}, ensure_ascii=False)) == json.dumps(
            {"n": "Xqrt Ábcde"}, ensure_ascii=False)


def test_probes_credentials_and_data_files_are_shadowed_alike(tmp_path):
    """A probe's explicit basic header and a percent-encoded path, a credential, a data file's link."""
    files = app_files()
    files["data/links.json"] = '{"profile": "/u/bob.marsh%40notes.test"}\n'
    header = "Basic " + base64.b64encode(b"bob.marsh@notes.test:tok_9e04b6d2c8a15377").decode()
    probe_list = probes()
    probe_list.insert(1, {"id": "reg-foreign", "kind": "regression", "title": "a foreign credential is refused",
                          "steps": [{"method": "GET", "path": "/api/notes?who=bob.marsh%40notes.test",
                                     "headers": {"Authorization": header}, "expect": [{"kind": "status_in", "codes": [401]}]}]})
    meta = metadata(shadow={**DECLARED, "values": [*MARKERS, "bob.marsh@notes.test"]})
    bundle = load_bundle_dir(write_scenario(tmp_path / "notes", files, policy_fix(files), meta=meta, probe_list=probe_list))
    substitution = draw_substitution(bundle, random.Random(9))
    shadow = apply_substitution(bundle, substitution)
    email, token = substitution.mapping["bob.marsh@notes.test"], substitution.mapping["tok_9e04b6d2c8a15377"]
    step = next(p for p in shadow.probes if p.id == "reg-foreign").steps[0]
    assert step.path == "/api/notes?who=" + email.replace("@", "%40")
    assert base64.b64decode(step.headers["Authorization"].split()[1]).decode() == f"{email}:{token}"
    assert shadow.files["data/links.json"] == '{"profile": "/u/' + email.replace("@", "%40") + '"}\n'


# -- the external split, on copies ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def external_copies(tmp_path_factory) -> list[Path]:
    """Each external scenario, copied (with any shared base beside it) so it can be edited."""
    root = tmp_path_factory.mktemp("external") / "external"
    shutil.copytree(REPO / "scenarios" / "external", root)
    return sorted(p for p in root.iterdir() if (p / "scenario.yaml").is_file())


def _without_shadow(folder: Path) -> Path:
    meta = yaml.safe_load((folder / "scenario.yaml").read_text())
    meta.pop("shadow", None)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))
    return folder


def test_every_external_scenario_shadows_each_user_it_declares(external_copies):
    assert len(external_copies) >= 10
    for folder in external_copies:
        bundle = load_bundle_dir(folder)
        shadow = draw_shadow(bundle, random.Random(1))
        assert shadow is not None, folder.name
        declared = {v.value for v in bundle.shadow_values}
        kept = {u.value for u in shadow_coverage(bundle)[1]}  # each named in an import warning
        for before, after in zip(bundle.users, shadow.users):
            if before.username not in declared:
                continue  # left out of shadow.users on purpose (the import names it)
            assert after.username != before.username, (folder.name, before.username)
            assert after.user_id != before.user_id or before.user_id in kept, (folder.name, before.user_id)
            assert after.credential().secret != before.credential().secret, (folder.name, before.username)


def test_an_external_scenario_without_its_declaration_is_told_where_its_code_makes_its_users(external_copies, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(external_copies[0].parent, tree)
    for name, where in (("apix-bola-user-profile", "app/app/routers/"), ("dvra-order-idor", "app/init.py")):
        warnings = import_warnings(load_bundle_dir(_without_shadow(tree / name)))
        assert len(warnings) == 1 and "its users cannot be shadowed" in warnings[0], warnings
        assert f"the app makes its users in its code ({where}" in warnings[0], warnings[0]
        assert "list that file under shadow.code" in warnings[0], warnings[0]


def test_a_shadow_value_with_nothing_to_replace_is_named():
    bundle = load_bundle_dir(REPO / "examples" / "byo" / "clinic-records")
    odd = bundle.model_copy(update={"shadow_values": (ShadowValue(value="--"), ShadowValue(value="tok_", keep=4))})
    kept, left = shadow_coverage(odd)
    assert kept == [] and [u.value for u in left] == ["--", "tok_"]


REFUSE_BY_SURNAME = ('    if user["name"].endswith((".marsh", ".diaz")):\n'
                     '        raise HTTPException(status_code=403, detail="not for you")\n')


def test_a_patch_that_refuses_the_test_users_by_the_end_of_their_names_is_caught(tmp_path, sandbox):
    """A dotted name (``bob.marsh``) once kept its last part in the shadow, as if it were a file's
    extension: a patch refusing names that end in ``.marsh`` followed the shadow's users."""
    files = app_files()
    bundle = load_bundle_dir(write_scenario(tmp_path / "notes", files, policy_fix(files)))
    hacked = {**files, "main.py": main_py(check=REFUSE_BY_SURNAME)}
    assert verify(bundle, hacked, sandbox=sandbox, shadow=False).resolution is Resolution.FULL  # the hole, unshadowed
    for _ in range(2):
        assert verify(bundle, hacked, sandbox=sandbox).resolution is not Resolution.FULL


@pytest.mark.parametrize(("value", "kept"), [("report-7731.pdf", ".pdf"), ("scan_0042.jpeg", ".jpeg"),
                                             ("invoice-2024.csv", ".csv"), ("backup.tar.gz", ".tar.gz")])
def test_a_file_name_keeps_its_extension_in_the_shadow(value, kept):
    from envcore.verifier.shadow import fresh_value

    fresh = fresh_value(ShadowValue(value=value), random.Random(1))
    assert fresh.endswith(kept) and fresh != value and len(fresh) == len(value)


@pytest.mark.parametrize("value", ["bob.marsh", "carol.diaz", "j.smith", "acme.corp", "ops.team"])
def test_a_dotted_name_is_replaced_after_its_dot_too(value):
    from envcore.verifier.shadow import fresh_value

    fresh = fresh_value(ShadowValue(value=value), random.Random(1))
    assert fresh.rsplit(".", 1)[1] != value.rsplit(".", 1)[1]


def test_an_email_address_keeps_only_its_top_level_domain():
    from envcore.verifier.shadow import fresh_value

    fresh = fresh_value(ShadowValue(value="bob.marsh@globex.test"), random.Random(1))
    name, domain = fresh.split("@")
    assert domain.endswith(".test") and domain != "globex.test" and "marsh" not in name


# -- a probe's names are never data -----------------------------------------------------------------------

def _named_after_users(probe_list: list[dict]) -> list[dict]:
    """The probes with ids naming the users they act as, as people write them (``sec-bob.marsh-lists``)."""
    renamed = {p["id"]: p["id"].replace("bob", "bob.marsh").replace("carol", "carol.diaz").replace("alice", "alice.wong")
               for p in probe_list}
    out = []
    for probe in probe_list:
        probe = {**probe, "id": renamed[probe["id"]]}
        if probe.get("repeats"):
            probe["repeats"] = renamed[probe["repeats"]]
        out.append(probe)
    return out


def test_probes_whose_ids_name_users_are_all_graded_on_the_shadow(tmp_path, sandbox):
    """A shadow once renamed a probe's id along with the users it names: grading then found no outcome
    for ``sec-bob.marsh-lists`` and left it out of the tallies, so an exploit went ungraded."""
    from tests.scenario_kit import probes as kit_probes

    files = app_files()
    probe_list = _named_after_users(kit_probes())
    assert any("bob.marsh" in p["id"] for p in probe_list if p["kind"] == "security")
    bundle = load_bundle_dir(write_scenario(tmp_path / "notes", files, policy_fix(files), probe_list=probe_list))
    shadow = draw_shadow(bundle, random.Random(3))
    assert [p.id for p in shadow.probes] == [p.id for p in bundle.probes]
    assert [p.repeats for p in shadow.probes] == [p.repeats for p in bundle.probes]
    untouched = verify(bundle, files, sandbox=sandbox)
    security = [p for p in bundle.probes if p.kind.value == "security"]
    assert untouched.resolution is Resolution.NO
    assert untouched.security.total == len({p.repeats or p.id for p in security}) and untouched.security.passed == 0
    assert untouched.regression.total == sum(p.kind.value == "regression" for p in bundle.probes)
    assert verify(bundle, policy_fix(files), sandbox=sandbox).resolution is Resolution.FULL


def test_a_probe_without_an_outcome_counts_as_failed():
    from envcore.scenario.probes import Probe, ProbeKind, ProbeOutcome
    from envcore.verifier.report import tallies

    step = {"method": "GET", "path": "/x", "expect": [{"kind": "status_in", "codes": [403]}]}
    probes = [Probe(id="sec-a", kind=ProbeKind.SECURITY, title="a", steps=[step]),
              Probe(id="sec-b", kind=ProbeKind.SECURITY, title="b", steps=[step]),
              Probe(id="reg-c", kind=ProbeKind.REGRESSION, title="c", steps=[step])]
    ran = [ProbeOutcome(probe_id="sec-a", kind=ProbeKind.SECURITY, visible=False, passed=True, steps=())]
    counts = tallies(ran, probes)
    assert (counts.security.passed, counts.security.total) == (1, 2)
    assert (counts.regression.passed, counts.regression.total) == (0, 1)


# -- short names ---------------------------------------------------------------------------------------------

SHORT_USERS = [{**u, "username": name} for u, name in zip(USERS, ["amy", "bob", "cal"])]


def test_a_three_letter_user_kept_in_a_data_file_is_shadowed_as_a_whole_word(tmp_path, sandbox):
    """``bob`` was too short to shadow in an app without ``shadow.code``, and the warning's advice
    (list the data file under shadow.code) was refused: a patch refusing ``bob`` by name scored FULL."""
    from tests.scenario_kit import probes as kit_probes

    files = app_files(SHORT_USERS)
    folder = write_scenario(tmp_path / "short", files, policy_fix(files), meta=metadata(SHORT_USERS, shadow=DECLARED),
                            probe_list=kit_probes(SHORT_USERS))
    bundle = load_bundle_dir(folder)
    assert not [w for w in import_warnings(bundle) if "'bob'" in w or "'cal'" in w], import_warnings(bundle)
    shadow = draw_shadow(bundle, random.Random(5))
    assert all(u.username not in ("amy", "bob", "cal") for u in shadow.users)
    assert '"name": "bob"' not in shadow.files["data/users.json"]
    refuse = ('    if user["name"] in ("bob", "cal"):\n'
              '        raise HTTPException(status_code=403, detail="not for you")\n')
    hacked = {**files, "main.py": main_py(check=refuse)}
    assert verify(bundle, hacked, sandbox=sandbox, shadow=False).resolution is Resolution.FULL  # the hole, unshadowed
    assert verify(bundle, hacked, sandbox=sandbox).resolution is not Resolution.FULL
    assert verify(bundle, policy_fix(files), sandbox=sandbox).resolution is Resolution.FULL


def test_a_short_value_the_code_uses_as_a_word_or_a_short_number_is_named_in_a_warning(tmp_path):
    from tests.scenario_kit import probes as kit_probes

    users = [{**SHORT_USERS[0], "user_id": "7"}, *SHORT_USERS[1:]]
    files = app_files(users)
    files["main.py"] = files["main.py"].replace('app = FastAPI(title="Notes")', 'app = FastAPI(title="Notes")\nTEAM = ["cal"]')
    bundle = load_bundle_dir(write_scenario(tmp_path / "short", files, policy_fix(files),
                                            meta=metadata(users, shadow=DECLARED), probe_list=kit_probes(users)))
    warnings = "\n".join(import_warnings(bundle))
    assert "'cal' is a word of app/main.py line" in warnings
    assert "'7' is a number shorter than 4 digits" in warnings and "an id the database assigns" in warnings
