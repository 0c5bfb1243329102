"""Probe kinds for real reviews: ``guard`` probes and traps a scenario names itself.

A guard is a security check that already holds on the vulnerable app and must keep holding (anonymous
callers get 401 on the admin route; bob cannot delete alice's invoice): a fix that closes the bug but
opens a guarded hole is not FULL and loses its security credit. A user-named trap
(``{kind: custom, name: ..., description: ...}``) is backed by trap probes that name it; reports,
failure categories and the Space's probe table show its name and description.

Everything here runs on one small hand-written invoices app, written out as a scenario folder,
imported like any bring-your-own app, checked by the scenario check and graded through the sandboxed
verifier.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from envcore.cache import ScenarioCache
from envcore.cli import main
from envcore.env.episode_log import EpisodeRecord
from envcore.env.reward import RewardInputs, compute_reward
from envcore.factory.byo import ImportProblem, export_bundle_dir, load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.feedback.categories import categorize, episode_facts
from envcore.patching import apply_patch, make_diff
from envcore.sandbox import Sandbox, SandboxLimits, supported_platform
from envcore.scenario.probes import ProbeKind
from envcore.scenario.spec import Trap
from envcore.verifier import Resolution, verify
from envcore.verifier.disclosure import disclose
from envcore.verifier.report import Tally, VerificationReport
from ui.rollout_view import probe_frame

APP = textwrap.dedent('''
    """Invoices API: people read and delete their own invoices; administrators also list accounts."""

    from fastapi import FastAPI, Header, HTTPException

    app = FastAPI()

    ACCOUNTS = {
        "tok-alice-5k2": {"username": "alice", "id": "u-1", "role": "user"},
        "tok-bob-9x4": {"username": "bob", "id": "u-2", "role": "user"},
        "tok-root-7q1": {"username": "root", "id": "u-9", "role": "admin"},
    }
    INVOICES = {
        "inv-a1": {"id": "inv-a1", "owner_id": "u-1", "amount": 120, "memo": "ALICE-MEMO-31"},
        "inv-a2": {"id": "inv-a2", "owner_id": "u-1", "amount": 75, "memo": "ALICE-MEMO-32"},
        "inv-b1": {"id": "inv-b1", "owner_id": "u-2", "amount": 40, "memo": "BOB-MEMO-77"},
    }


    def caller(authorization: str | None) -> dict:
        scheme, _, token = (authorization or "").partition(" ")
        account = ACCOUNTS.get(token.strip()) if scheme.lower() == "bearer" else None
        if account is None:
            raise HTTPException(status_code=401, detail="sign in first")
        return account


    @app.get("/api/status")
    def status() -> dict:
        return {"status": "ok"}


    @app.get("/api/invoices/{invoice_id}")
    def read_invoice(invoice_id: str, authorization: str | None = Header(default=None)):
        caller(authorization)
        invoice = INVOICES.get(invoice_id)
        if invoice is None:
            raise HTTPException(status_code=404, detail="no such invoice")
        return invoice


    @app.delete("/api/invoices/{invoice_id}")
    def delete_invoice(invoice_id: str, authorization: str | None = Header(default=None)):
        account = caller(authorization)
        invoice = INVOICES.get(invoice_id)
        if invoice is None or invoice["owner_id"] != account["id"]:
            raise HTTPException(status_code=404, detail="no such invoice")
        del INVOICES[invoice_id]
        return {"deleted": invoice_id}


    @app.get("/api/admin/users")
    def list_users(authorization: str | None = Header(default=None)):
        account = caller(authorization)
        if account["role"] != "admin":
            raise HTTPException(status_code=403, detail="administrators only")
        return [{"username": a["username"], "role": a["role"]} for a in ACCOUNTS.values()]
''').lstrip()

ENTRY = "ledger_api.py"
READ_CHECK = ('    caller(authorization)\n    invoice = INVOICES.get(invoice_id)\n    if invoice is None:\n')
READ_FIXED = ('    account = caller(authorization)\n    invoice = INVOICES.get(invoice_id)\n'
              '    if invoice is None or (invoice["owner_id"] != account["id"] and account["role"] != "admin"):\n')
DELETE_CHECK = '    if invoice is None or invoice["owner_id"] != account["id"]:\n'
LOGIN_WALL = textwrap.dedent('''

    @app.middleware("http")
    async def login_wall(request, call_next):
        """Every request needs a signed-in caller."""
        from fastapi.responses import JSONResponse

        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token.strip() not in ACCOUNTS:
            return JSONResponse({"detail": "sign in first"}, status_code=401)
        return await call_next(request)
''')

STATUS_TRAP = {"kind": "custom", "name": "status-page-public",
               "description": "The status page stays public: a login wall in front of every route breaks it."}
ADMIN_TRAP = {"kind": "admin_access", "description": "Administrators keep reading every invoice."}

DENIED = [401, 403, 404]


def _step(actor, method, path, *facts):
    step = {"method": method, "path": path, "expect": list(facts)}
    if actor:
        step["actor"] = actor
    return step


def _status(*codes):
    return {"kind": "status_in", "codes": list(codes)}


def _probes() -> list[dict]:
    """Legitimate use first, then the guards, then the exploit (the order the scenario check runs them in)."""
    return [
        {"id": "reg-own-invoice", "kind": "regression", "visible": True, "title": "alice reads her own invoice",
         "steps": [_step("alice", "GET", "/api/invoices/inv-a1", _status(200),
                         {"kind": "body_includes", "texts": ["ALICE-MEMO-31"]})]},
        {"id": "reg-owner-deletes", "kind": "regression", "title": "alice deletes her own invoice",
         "steps": [_step("alice", "DELETE", "/api/invoices/inv-a2", _status(200))]},
        {"id": "trap-admin-reads", "kind": "trap", "trap": "admin_access", "title": "an administrator reads any invoice",
         "steps": [_step("root", "GET", "/api/invoices/inv-b1", _status(200),
                         {"kind": "body_includes", "texts": ["BOB-MEMO-77"]})]},
        {"id": "trap-status-public", "kind": "trap", "trap": "status-page-public",
         "title": "anyone can read the status page",
         "steps": [_step(None, "GET", "/api/status", _status(200))]},
        {"id": "guard-anonymous-admin-users", "kind": "guard", "visible": True,
         "title": "anonymous callers get 401 from the account list",
         "steps": [_step(None, "GET", "/api/admin/users", _status(401))]},
        {"id": "guard-bob-cannot-delete", "kind": "guard", "title": "bob cannot delete alice's invoice",
         "steps": [_step("bob", "DELETE", "/api/invoices/inv-a1", _status(*DENIED)),
                   _step("alice", "GET", "/api/invoices/inv-a1", _status(200))]},
        {"id": "sec-bob-reads-alice", "kind": "security", "sites": ["invoices.detail"],
         "title": "bob cannot read alice's invoice",
         "steps": [_step("bob", "GET", "/api/invoices/inv-a1", _status(*DENIED),
                         {"kind": "body_excludes", "texts": ["ALICE-MEMO-31"]})]},
    ]


def _metadata(traps) -> dict:
    users = [{"username": "alice", "role": "user", "user_id": "u-1", "token": "tok-alice-5k2"},
             {"username": "bob", "role": "user", "user_id": "u-2", "token": "tok-bob-9x4"},
             {"username": "root", "role": "admin", "user_id": "u-9", "token": "tok-root-7q1"}]
    return {"title": "Invoices API: anyone signed in reads any invoice", "domain": "billing", "bug_class": "idor",
            "cwe": ["CWE-639"], "entrypoint": "ledger_api:app",
            "task": "Fix the access-control bug in the invoices API.",
            "policy": "People read and delete their own invoices; administrators read every invoice and list "
                      "accounts; the status page is public.",
            "users": users,
            "sites": [{"site": "invoices.detail", "method": "GET", "path": "/api/invoices/{invoice_id}"}],
            "traps": traps}


def write_scenario(folder: Path, *, probes=None, traps=None, fix: dict[str, str] | None = None) -> Path:
    """The invoices scenario as a folder (``probes``, ``traps`` and the fixed files may be replaced)."""
    (folder / "app").mkdir(parents=True)
    (folder / "app" / ENTRY).write_text(APP, encoding="utf-8")
    meta = _metadata([ADMIN_TRAP, STATUS_TRAP] if traps is None else traps)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    (folder / "probes.yaml").write_text(yaml.safe_dump(_probes() if probes is None else probes, sort_keys=False),
                                        encoding="utf-8")
    fixed = fix if fix is not None else {ENTRY: APP.replace(READ_CHECK, READ_FIXED)}
    (folder / "fix.diff").write_text(make_diff({ENTRY: APP}, fixed), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return load_bundle_dir(write_scenario(tmp_path_factory.mktemp("invoices") / "invoices"))


@pytest.fixture(scope="module")
def sb():
    if supported_platform() is not None:
        pytest.skip("the sandbox is Linux only")
    box = Sandbox(limits=SandboxLimits(request_timeout_s=2, load_timeout_s=5, verify_timeout_s=20, cpu_s=5,
                                       memory_mb=192), spares=1).start()
    yield box
    box.close()


def _fixed(bundle):
    return apply_patch(bundle.files, bundle.reference_fix)


def _reward(report):
    return compute_reward(RewardInputs(report=report, steps_used=2, max_steps=20))


def _record(bundle, report, breakdown, diff) -> EpisodeRecord:
    return EpisodeRecord(episode_id="e1", agent_id="reviewer", scenario_id=bundle.scenario_id,
                         scenario_hash=bundle.content_hash(), bug_class=bundle.bug_class, tier=bundle.tier,
                         started_at=0, ended_at=1, outcome="submitted", max_steps=20, diff=diff,
                         verification=report.model_dump(mode="json"), reward=breakdown.reward,
                         reward_breakdown=breakdown.model_dump(mode="json"))


# ----- guards --------------------------------------------------------------------------------------
def test_a_scenario_with_guards_passes_the_check_and_its_reference_fix_is_full(scenario, sb):
    assert [p.id for p in scenario.probes_of(ProbeKind.GUARD)] == ["guard-anonymous-admin-users",
                                                                  "guard-bob-cannot-delete"]
    report = check_scenario(scenario, fail_fast=False)
    assert report.ok, report.summary()

    graded = verify(scenario, _fixed(scenario), sandbox=sb)
    assert graded.resolution is Resolution.FULL, graded.summary()
    assert graded.guard.passed == graded.guard.total == 2
    breakdown = _reward(graded)
    assert breakdown.reward > 0.95
    assert breakdown.gates["guards_hold"] is True
    assert breakdown.value("guards_broken") == 0.0

    shipped = verify(scenario, scenario.files, sandbox=sb)
    assert shipped.resolution is Resolution.NO and shipped.guard.passed == 2, shipped.summary()


def test_a_fix_that_opens_a_guarded_hole_is_not_full_and_loses_its_security_credit(scenario, sb):
    opened = {ENTRY: _fixed(scenario)[ENTRY].replace(DELETE_CHECK, "    if invoice is None:\n")}
    report = verify(scenario, opened, sandbox=sb)
    assert report.security.passed == report.security.total == 1  # the bug itself is closed
    assert report.guard.passed == 1 and report.guard.total == 2
    assert report.resolution is Resolution.NO and report.reward == 0.0
    assert "guards 1/2" in report.summary()
    broken = next(p for p in report.probes if p.probe_id == "guard-bob-cannot-delete")
    assert not broken.passed and broken.kind is ProbeKind.GUARD

    breakdown = _reward(report)
    security = next(c for c in breakdown.components if c.name == "security_blocked")
    assert security.value == 0.0 and security.measured == 1.0
    assert "guard" in security.detail
    guards = next(c for c in breakdown.components if c.name == "guards_broken")
    assert guards.value == pytest.approx(-0.25) and guards.measured == pytest.approx(0.5)
    assert "guard-bob-cannot-delete" in guards.detail
    assert breakdown.gates == {"app_loads": True, "legit_use_kept": True, "guards_hold": False}
    assert breakdown.reward < 0 < _reward(verify(scenario, _fixed(scenario), sandbox=sb)).reward

    category, detail = categorize(episode_facts(_record(scenario, report, breakdown, make_diff(scenario.files, opened)),
                                                scenario))
    assert category.name == "guard_broken" and detail == "guard broken: guard-bob-cannot-delete"

    words = disclose(report, scenario, "words")
    hidden = next(p for p in words.probes if p.probe_id == "guard-bob-cannot-delete")
    assert hidden.expected == ("bob cannot delete alice's invoice",)
    assert hidden.failures and "new hole" in hidden.failures[0] and "/api/" not in hidden.failures[0]


def test_a_guard_that_fails_on_the_shipped_app_is_refused_by_the_check_by_name(tmp_path, capsys):
    probes = _probes()
    probes.insert(4, {"id": "guard-status-needs-login", "kind": "guard", "title": "the status page needs a login",
                      "steps": [_step(None, "GET", "/api/status", _status(401))]})
    folder = write_scenario(tmp_path / "invoices", probes=probes)
    problems = check_scenario(load_bundle_dir(folder), fail_fast=False).problems
    assert problems and problems[0].startswith(
        "[vulnerable] guard probe guard-status-needs-login fails on the vulnerable app"), problems
    assert main(["factory", "import", str(folder), "--out", str(tmp_path / "cache")]) == 1
    assert "guard probe guard-status-needs-login fails on the vulnerable app" in capsys.readouterr().out
    assert not (tmp_path / "cache").exists()


def test_a_guard_the_reference_fix_breaks_is_refused_by_the_check_by_name(tmp_path):
    admin_check = '    account = caller(authorization)\n    if account["role"] != "admin":\n'
    opened = '    account = ACCOUNTS["tok-root-7q1"]  # the account list is read as root\n    if account["role"] != "admin":\n'
    assert admin_check in APP
    fixed = APP.replace(READ_CHECK, READ_FIXED).replace(admin_check, opened)
    problems = check_scenario(load_bundle_dir(write_scenario(tmp_path / "invoices", fix={ENTRY: fixed})),
                              fail_fast=False).problems
    assert any(p.startswith("[reference] guard probe guard-anonymous-admin-users fails with the reference fix")
               for p in problems), problems


def test_guards_count_in_the_reward_only_when_a_scenario_has_them():
    def report(guard: Tally) -> VerificationReport:
        return VerificationReport(scenario_id="s", outcome="graded", resolution=Resolution.FULL, reward=1.0,
                                  security=Tally(passed=1, total=1), regression=Tally(passed=3, total=3), guard=guard)

    plain = _reward(report(Tally()))
    assert "guards_broken" not in [c.name for c in plain.components]
    assert plain.gates == {"app_loads": True, "legit_use_kept": True}
    held = _reward(report(Tally(passed=4, total=4)))
    assert held.reward == plain.reward and held.value("guards_broken") == 0.0
    broken = _reward(report(Tally(passed=3, total=4)))
    assert broken.value("security_blocked") == 0.0 and broken.value("guards_broken") == pytest.approx(-0.125)


# ----- user-named traps ----------------------------------------------------------------------------
def test_user_named_traps_survive_export_and_import(scenario, tmp_path):
    assert scenario.traps[1] == Trap(kind="custom", name="status-page-public", description=STATUS_TRAP["description"])
    assert scenario.traps[1].key == "status-page-public" and scenario.traps[0].key == "admin_access"
    exported = export_bundle_dir(scenario, tmp_path / "exported")
    written = yaml.safe_load((exported / "scenario.yaml").read_text(encoding="utf-8"))["traps"]
    assert written == [ADMIN_TRAP, STATUS_TRAP]
    again = load_bundle_dir(exported)
    assert again.traps == scenario.traps and again.probes == scenario.probes
    assert again.scenario_id == scenario.scenario_id
    assert scenario.summary()["traps"] == ["admin_access", "status-page-public"]
    assert scenario.summary()["probes"]["guard"] == 2


def test_a_lazy_fix_that_breaks_a_user_named_trap_is_penalised_and_named_in_the_report(scenario, sb):
    walled = {ENTRY: _fixed(scenario)[ENTRY] + LOGIN_WALL}
    report = verify(scenario, walled, sandbox=sb)
    assert report.security.passed == 1 and report.trap.passed == 1 and report.trap.total == 2
    assert report.resolution is Resolution.NO
    sprung = next(p for p in report.probes if p.probe_id == "trap-status-public")
    assert not sprung.passed
    assert sprung.trap == "status-page-public" and sprung.trap_description == STATUS_TRAP["description"]
    kept = next(p for p in report.probes if p.probe_id == "trap-admin-reads")
    assert kept.trap == "admin_access" and kept.trap_description == ADMIN_TRAP["description"]
    assert next(p for p in report.probes if p.probe_id == "reg-own-invoice").trap is None

    breakdown = _reward(report)
    assert breakdown.value("security_blocked") == 0.0 and breakdown.value("legit_use_broken") < 0
    assert breakdown.reward < 0
    category, detail = categorize(episode_facts(_record(scenario, report, breakdown, make_diff(scenario.files, walled)),
                                                scenario))
    assert category.name == "over_restriction" and detail == "trap sprung: status-page-public"

    table = probe_frame(report.model_dump(mode="json"))
    cell = table.loc[table["probe"] == "trap-status-public", "kind"].item()
    assert "status-page-public" in cell and STATUS_TRAP["description"] in cell

    words = disclose(report, scenario, "words")
    hidden = next(p for p in words.probes if p.probe_id == "trap-status-public")
    assert hidden.failures == ("a trap was sprung (status-page-public): the app's answer: refused",)


def test_a_trap_probe_naming_an_undeclared_trap_is_an_import_error_naming_both(tmp_path):
    probes = _probes()
    probes[3]["trap"] = "status-page-open"
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(write_scenario(tmp_path / "invoices", probes=probes))
    message = str(caught.value)
    assert "probes.yaml[3]: trap probe trap-status-public names trap 'status-page-open'" in message
    assert "scenario.yaml" in message and "admin_access, status-page-public" in message


def test_a_custom_trap_needs_a_name_and_names_are_unique(tmp_path):
    nameless = {"kind": "custom", "description": "something"}
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(write_scenario(tmp_path / "a", traps=[ADMIN_TRAP, STATUS_TRAP, nameless]))
    assert "scenario.yaml: traps.2: Value error, a custom trap needs a name" in str(caught.value)
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(write_scenario(tmp_path / "b", traps=[ADMIN_TRAP, STATUS_TRAP, STATUS_TRAP]))
    assert "scenario.yaml: traps: two traps are named 'status-page-public'" in str(caught.value)


def test_a_declared_user_named_trap_without_a_probe_is_named_by_the_check(tmp_path):
    extra = {"kind": "custom", "name": "export-csv", "description": "The CSV export keeps working."}
    bundle = load_bundle_dir(write_scenario(tmp_path / "invoices", traps=[ADMIN_TRAP, STATUS_TRAP, extra]))
    problems = check_scenario(bundle, fail_fast=False).problems
    assert "[structure] trap export-csv has no trap probe (add a probe with kind: trap and trap: export-csv)" \
        in problems, problems


# ----- the shipped cache ---------------------------------------------------------------------------
@pytest.mark.slow  # loads all 1,000 shipped scenarios
def test_unnamed_traps_dump_as_before_so_the_shipped_cache_still_loads():
    assert Trap(kind="admin_access", description="d").model_dump() == {"kind": "admin_access", "description": "d"}
    assert Trap(kind="custom", name="n-1", description="d").model_dump() == {"kind": "custom", "description": "d",
                                                                             "name": "n-1"}
    cache = ScenarioCache.open(None)
    loaded = [cache.load(scenario_id) for scenario_id in cache.ids()]  # each load checks the content hash
    assert loaded and all(b.scenario_id == b.content_hash()[:16] for b in loaded)
