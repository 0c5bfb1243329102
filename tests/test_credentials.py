"""Actors with any credentials: a bearer token, an API-key header, a cookie, basic auth, a custom
identity header, or a login request that returns a token or sets a session cookie.

One small notes app, written here with each way of telling its users apart, is graded through the
real sandbox verifier (its reference fix FULL, the app as shipped not), explored through an
episode's ``http_request``, replayed by the coach, run by the in-process and pytest runners, shadowed,
and exported and imported back. The rules every request as a user follows are checked on their own:
a login happens once per app instance and before the actor's first step there, a failed login fails
the step with its reason, a request for one actor carries no other actor's secret, and an explicit
header never replaces the actor's credential of the same name.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml
from pydantic import ValidationError

from envcore.cache import ScenarioCache
from envcore.env import render
from envcore.env.coach import Coach
from envcore.env.episode import Episode
from envcore.env.hints import hint_text
from envcore.factory.byo import export_bundle_dir, load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.patching import apply_patch, make_diff
from envcore.runner.actors import ActorSession, LoginRequired, actors_of
from envcore.runner.base import AppSource
from envcore.runner.execute import ProbeExchange, step_request
from envcore.runner.http import HttpRequest, HttpResponse
from envcore.runner.inprocess import InProcessRunner
from envcore.runner.pytest_subprocess import PytestSubprocessRunner
from envcore.sandbox import supported_platform
from envcore.sandbox.runner import run_sandboxed
from envcore.scenario import Bundle, BundleMetrics, BundleUser, Credentials, Probe
from envcore.scenario.probes import DENIED
from envcore.scenario.spec import SiteRef
from envcore.verifier import Resolution, verify
from envcore.verifier.shadow import Substitution, apply_substitution, identities_of

sandboxed = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")

# -- the app ------------------------------------------------------------------------------------------

PEOPLE = {
    "alice": {"id": "101", "token": "tok_alice_7Q2W", "api_key": "key-alice-K93M", "email": "alice.w@example.test",
              "password": "pw-alice-X1RT", "note": "NOTE-A7Q3"},
    "bob": {"id": "102", "token": "tok_bob_4K8P", "api_key": "key-bob-Z5N2", "email": "bob.k@example.test",
            "password": "pw-bob-R6VY", "note": "NOTE-B4K9"},
}

APP = '''\
import base64
import json
import secrets
from pathlib import Path
from urllib.parse import parse_qsl

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

ROOT = Path(__file__).resolve().parent
USERS = json.loads((ROOT / "data" / "users.json").read_text())
NOTES = json.loads((ROOT / "data" / "notes.json").read_text())
SESSIONS = {}
LOGINS = {}
app = FastAPI()


def _user(**match):
    return next((u for u in USERS if all(u[k] == v for k, v in match.items())), None)


def _signed_in(user):
    LOGINS[user["name"]] = LOGINS.get(user["name"], 0) + 1
    session = secrets.token_hex(12)
    SESSIONS[session] = user
    return session


@app.post("/auth/token")
async def token(request: Request):
    form = dict(parse_qsl((await request.body()).decode()))
    user = _user(email=form.get("username"), password=form.get("password"))
    if user is None:
        raise HTTPException(401, "wrong name or password")
    return {"access_token": _signed_in(user), "token_type": "bearer"}


@app.post("/login")
async def login(request: Request):
    data = await request.json()
    user = _user(email=data.get("email"), password=data.get("password"))
    if user is None:
        raise HTTPException(401, "wrong name or password")
    response = JSONResponse({"ok": True})
    response.set_cookie("session", _signed_in(user), httponly=True)
    return response

{caller}

def require(request):
    user = caller(request)
    if user is None:
        raise HTTPException(401, "sign in first")
    return user


@app.get("/me")
async def me(request: Request):
    user = require(request)
    return {"username": user["name"], "logins": LOGINS.get(user["name"], 0)}


@app.get("/notes/{note_id}")
async def read_note(note_id: str, request: Request):
    user = require(request)
    note = NOTES.get(note_id)
    if note is None:
        raise HTTPException(404, "no such note")
    return note
'''

FIX_FROM = '''        raise HTTPException(404, "no such note")
    return note
'''
FIX_TO = '''        raise HTTPException(404, "no such note")
    if note["owner"] != user["name"]:
        raise HTTPException(404, "no such note")
    return note
'''

CALLERS = {
    "bearer": '''
def caller(request):
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return _user(token=value) if scheme == "Bearer" and value else None
''',
    "header": '''
def caller(request):
    key = request.headers.get("x-api-key")
    return _user(api_key=key) if key else None
''',
    "cookie": '''
def caller(request):
    sid = request.cookies.get("sid")
    return _user(token=sid) if sid else None
''',
    "basic": '''
def caller(request):
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme != "Basic":
        return None
    email, _, password = base64.b64decode(value).decode().partition(":")
    return _user(email=email, password=password)
''',
    "identity": '''
def caller(request):
    claimed = request.headers.get("x-user-id")
    return _user(id=claimed) if claimed else None
''',
    "login_json": '''
def caller(request):
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return SESSIONS.get(value) if scheme == "Bearer" else None
''',
    "login_header": '''
def caller(request):
    return SESSIONS.get(request.headers.get("x-session", ""))
''',
    "login_cookie": '''
def caller(request):
    return SESSIONS.get(request.cookies.get("session", ""))
''',
}


def credentials_for(kind: str, person: dict) -> dict | None:
    """The credentials ``scenario.yaml`` would give ``person`` for an app that signs requests ``kind``'s way."""
    return {
        "bearer": {"kind": "bearer"},
        "header": {"kind": "header", "name": "X-API-Key", "secret": person["api_key"]},
        "cookie": {"kind": "cookie", "name": "sid"},
        "basic": {"kind": "basic", "login_name": person["email"], "secret": person["password"]},
        "identity": {"kind": "header", "name": "X-User-Id", "secret": person["id"]},
        "login_json": {"kind": "login", "login": {"path": "/auth/token", "token_json": "access_token",
                                                  "form": {"username": person["email"],
                                                           "password": person["password"]}}},
        "login_header": {"kind": "login", "name": "X-Session", "login_name": person["email"],
                         "secret": person["password"], "login": {"path": "/auth/token", "token_json": "access_token"}},
        "login_cookie": {"kind": "login", "login": {"path": "/login", "json_body": {"email": person["email"],
                                                                                   "password": person["password"]}}},
    }[kind]


KINDS = list(CALLERS)
SANDBOXED_KINDS = ["bearer", "header", "cookie", "basic", "identity", "login_json", "login_cookie"]


def _step(actor, method, path, *expect, headers=None):
    step = {"actor": actor, "method": method, "path": path, "expect": list(expect)}
    if headers:
        step["headers"] = headers
    return step


def notes_bundle(kind: str, *, password_of_alice: str | None = None) -> Bundle:
    """The notes app signing requests ``kind``'s way, as a scenario: bob reading alice's note is the bug."""
    files = {
        "app.py": APP.replace("{caller}", textwrap.dedent(CALLERS[kind]).strip() + "\n"),
        "data/users.json": json.dumps([{"name": name, **{k: v for k, v in p.items() if k != "note"}}
                                       for name, p in PEOPLE.items()], indent=1),
        "data/notes.json": json.dumps({"n1": {"owner": "alice", "text": f"Alice's plan {PEOPLE['alice']['note']}"},
                                       "n2": {"owner": "bob", "text": f"Bob's plan {PEOPLE['bob']['note']}"}}),
    }
    fixed = dict(files, **{"app.py": files["app.py"].replace(FIX_FROM, FIX_TO)})
    assert fixed["app.py"] != files["app.py"]
    users = []
    for name, person in PEOPLE.items():
        secretly = dict(person, password=password_of_alice) if name == "alice" and password_of_alice else person
        users.append(BundleUser(username=name, role="member", user_id=person["id"], token=person["token"],
                                credentials=credentials_for(kind, secretly)))
    logins = 1 if kind.startswith("login") else 0
    probes = [
        Probe(id="reg-own-note", kind="regression", visible=True, title="alice reads her own note", steps=(
            _step("alice", "GET", "/notes/n1", {"kind": "status_in", "codes": [200]},
                  {"kind": "body_includes", "texts": [PEOPLE["alice"]["note"]]}),)),
        Probe(id="reg-me-twice", kind="regression", visible=True, title="bob asks who he is twice", steps=(
            _step("bob", "GET", "/me", {"kind": "json_equals", "path": "username", "value": "bob"}),
            _step("bob", "GET", "/me", {"kind": "json_equals", "path": "logins", "value": logins}))),
        Probe(id="reg-anonymous", kind="regression", title="nobody reads a note without signing in", steps=(
            _step(None, "GET", "/notes/n2", {"kind": "status_in", "codes": [401]}),)),
        Probe(id="sec-other-note", kind="security", title="bob cannot read alice's note", sites=("notes.read",),
              steps=(_step("bob", "GET", "/notes/n1", {"kind": "status_in", "codes": list(DENIED)},
                           {"kind": "body_excludes", "texts": [PEOPLE["alice"]["note"]]}),)),
    ]
    declared = [(p[k], 0) for p in PEOPLE.values() for k in ("token", "api_key", "email", "password", "note")]
    return Bundle(
        generator="test", title=f"Notes signed with {kind}", domain="notes", bug_class="idor_read",
        cwe=("CWE-639",), variant="custom", code_style="custom", tier=1, entrypoint="app:app", files=files,
        users=tuple(users), task="Members must only read their own notes.",
        policy_text="A member reads their own notes; nobody reads another member's notes.",
        probes=tuple(probes), reference_fix=make_diff(files, fixed),
        sites=(SiteRef(site="notes.read", method="GET", path="/notes/{note_id}"),),
        metrics=BundleMetrics(files=1, source_lines=files["app.py"].count("\n"), routes=4, sites=1, traps=0,
                              fix_lines=2, fix_files=1, subtle_variant=False, decoy_routes=0, score=1.0),
        shadow_values=identities_of(declared),
    ).with_id()


def fixed_files(bundle: Bundle) -> dict[str, str]:
    return apply_patch(bundle.files, bundle.reference_fix)


# -- the schema ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("credentials, fragment", [
    ({"kind": "header"}, "need a name"),
    ({"kind": "cookie", "secret": "x"}, "need a name"),
    ({"kind": "login"}, "need a login request"),
    ({"kind": "bearer", "login": {"path": "/login"}}, "take no login request"),
    ({"kind": "header", "name": "X-Key", "login": {"path": "/login"}}, "take no login request"),
    ({"kind": "bearer", "name": "X-Key"}, "take no name"),
    ({"kind": "header", "name": "X Key"}, "not a valid header name"),
    ({"kind": "cookie", "name": "sid;x"}, "not a valid cookie name"),
    ({"kind": "header", "name": "Host"}, "cannot be sent in the Host header"),
    ({"kind": "header", "name": "X-Key", "login_name": "alice"}, "take no login_name"),
    ({"kind": "header", "name": "X-Key", "secret": "a\r\nX-Admin: 1"}, "control character"),
    ({"kind": "cookie", "name": "sid", "secret": "a; admin=1"}, "cookie's secret"),
    ({"kind": "basic", "login_name": "a:b"}, "cannot contain ':'"),
    ({"kind": "login", "name": "X-Token", "login": {"path": "/login"}}, "needs login.token_json"),
    ({"kind": "login", "login": {"path": "login"}}, "starts with '/'"),
    ({"kind": "login", "login": {"path": "/login", "form": {"a": "b"}, "json_body": {"a": "b"}}}, "not both"),
    ({"kind": "login", "login": {"path": "/login", "method": "FETCH"}}, "unsupported HTTP method"),
    ({"kind": "tls"}, "Input should be"),
    ({"kind": "header", "name": "X-Key", "scheme": "Token"}, "Extra inputs are not permitted"),
])
def test_credentials_that_cannot_sign_a_request_are_refused(credentials, fragment):
    with pytest.raises(ValidationError) as caught:
        BundleUser(username="alice", role="member", user_id="1", token="tok", credentials=credentials)
    assert fragment in str(caught.value)


def test_credentials_are_filled_in_with_the_users_own_values():
    user = BundleUser(username="alice", role="member", user_id="1", token="tok_a",
                      credentials={"kind": "login", "login": {"path": "/auth/token", "token_json": "access_token"}})
    filled = user.credential()
    assert filled.secret == "tok_a" and filled.login_name == "alice"
    assert filled.login is not None and filled.login.form == {"username": "alice", "password": "tok_a"}
    assert user.credentials is not None and user.credentials.secret is None  # the bundle keeps what was written
    assert BundleUser(username="bob", role="member", user_id="2", token="tok_b").credential() == \
        Credentials(kind="bearer", secret="tok_b")


@pytest.mark.slow  # re-derives all 1,000 shipped ids; the rule itself is tested by default above
def test_users_without_credentials_keep_every_shipped_scenario_id():
    cache = ScenarioCache.open(None)  # loading checks every bundle's content hash against its id
    bundles = list(cache)
    assert bundles and all(b.with_id().scenario_id == b.scenario_id for b in bundles)
    for bundle in bundles:  # the realistic family's users carry credentials; every other user dumps as before
        for user, dumped in zip(bundle.users, json.loads(bundle.canonical_json())["users"]):
            assert ("credentials" in dumped) == (user.credentials is not None)
    bundles = [b for b in bundles if all(u.credentials is None for u in b.users)]
    first = bundles[0]
    data = json.loads(first.model_dump_json())
    for user in data["users"]:
        user["credentials"] = None
    assert Bundle.model_validate(data).with_id().scenario_id == first.scenario_id
    for user in data["users"]:
        user["credentials"] = {"kind": "bearer"}
    signed = Bundle.model_validate(data)
    assert signed.with_id().scenario_id != first.scenario_id  # credentials are part of what the id covers
    assert actors_of(signed.users) == actors_of(first.users)  # and an explicit bearer signs as before


# -- requests as users --------------------------------------------------------------------------------


def _logged_in(kind: str) -> ActorSession:
    """A session in which every actor of the notes app signed ``kind``'s way has signed in."""
    session = ActorSession(actors_of(notes_bundle(kind).users))
    for name in PEOPLE:
        if session.needs_login(name):
            granted = (HttpResponse(200, {}, json.dumps({"access_token": f"granted-{name}-S1"}).encode())
                       if kind != "login_cookie" else
                       HttpResponse(200, {"set-cookie": f"session=granted-{name}-S1; HttpOnly; Path=/"}, b""))
            assert session.record_login(name, granted) is None
    return session


@pytest.mark.parametrize("kind", KINDS)
def test_a_request_for_one_actor_never_carries_another_actors_secrets(kind):
    session = _logged_in(kind)
    for name in PEOPLE:
        request = session.sign(HttpRequest.build("GET", "/me"), name)
        sent = json.dumps([request.path, request.headers, request.body.decode()])
        for other, person in PEOPLE.items():
            if other == name:
                continue
            leaked = [v for k, v in person.items() if k != "note" and v in sent] + \
                     ([f"granted-{other}-S1"] if f"granted-{other}-S1" in sent else [])
            assert leaked == [], (name, other, leaked)
        assert request.headers, f"a request as {name} carries no credential"


@pytest.mark.parametrize("kind, explicit, header", [
    ("bearer", {"Authorization": "Bearer forged"}, "authorization"),
    ("header", {"X-API-Key": PEOPLE["alice"]["api_key"]}, "x-api-key"),
    ("identity", {"X-User-Id": PEOPLE["alice"]["id"]}, "x-user-id"),
    ("login_header", {"X-Session": "forged"}, "x-session"),
])
def test_an_explicit_header_does_not_replace_the_actors_credential_of_the_same_name(kind, explicit, header):
    session = _logged_in(kind)
    request = session.sign(HttpRequest.build("GET", "/me", headers=explicit), "bob")
    values = [v for k, v in request.headers if k == header]
    assert len(values) == 2 and values[1] == next(iter(explicit.values()))  # sent, after the actor's
    assert values[0] != values[1]  # the first (what apps read) is bob's own


def test_an_extra_cookie_reaches_the_app_beside_the_actors_cookie_which_wins_on_its_name():
    session = _logged_in("login_cookie")
    request = session.sign(HttpRequest.build("GET", "/me", headers={"Cookie": "theme=dark; session=forged"}), "bob")
    cookies = [v for k, v in request.headers if k == "cookie"]
    assert cookies == ["theme=dark; session=forged; session=granted-bob-S1"]


def test_a_login_actors_request_cannot_be_built_before_it_signs_in():
    probe = notes_bundle("login_json").probes[0]
    with pytest.raises(LoginRequired):
        step_request(probe.steps[0], actors_of(notes_bundle("login_json").users))


def test_a_probe_signs_each_login_actor_in_once_before_its_first_step():
    bundle = notes_bundle("login_cookie")
    probe = Probe(id="two-users", kind="regression", title="t", steps=(
        _step("bob", "GET", "/me"), _step(None, "GET", "/me"), _step("alice", "GET", "/me"), _step("bob", "GET", "/me")))
    exchange = ProbeExchange(probe.steps, actors_of(bundle.users))
    sent = []
    while (request := exchange.next_request()) is not None:
        sent.append(f"{request.method} {request.path} {dict(request.headers).get('cookie', '-')}")
        user = "bob" if "bob" in request.body.decode() else "alice"
        exchange.answer(HttpResponse(200, {"set-cookie": f"session=s-{user}"}, b"") if request.path == "/login"
                        else HttpResponse(200, {}, b"{}"))
    assert sent == ["POST /login -", "GET /me session=s-bob", "GET /me -", "POST /login -", "GET /me session=s-alice",
                    "GET /me session=s-bob"]


@pytest.mark.parametrize("reply, reason", [
    (HttpResponse(401, {}, b'{"detail": "no"}'), "login as bob failed: status 401"),
    (HttpResponse(200, {}, b'{"token": "x"}'), "login as bob failed: status 200 with no token at JSON 'access_token'"),
    (HttpResponse(200, {}, b"<html>"), "login as bob failed: status 200 with a reply that is not JSON"),
    (HttpResponse(None, error="the app stopped"), "login as bob failed: no response (the app stopped)"),
])
def test_a_failed_login_fails_the_actors_steps_with_its_reason_and_sends_none(reply, reason):
    bundle = notes_bundle("login_json")
    probe = bundle.probes[1]  # bob, twice
    exchange = ProbeExchange(probe.steps, actors_of(bundle.users))
    sent = []
    while (request := exchange.next_request()) is not None:
        sent.append(request.path)
        exchange.answer(reply)
    assert sent == ["/auth/token"]
    assert [r.not_sent for r in exchange.answers] == [reason, reason]


# -- graded through the sandbox -----------------------------------------------------------------------


@sandboxed
@pytest.mark.parametrize("kind", SANDBOXED_KINDS)
def test_the_reference_fix_grades_full_and_the_shipped_app_does_not_whatever_signs_the_requests(kind, sandbox):
    bundle = notes_bundle(kind)
    fixed = verify(bundle, fixed_files(bundle), sandbox=sandbox)  # on shadow data: fresh keys, passwords, emails
    assert fixed.shadow and fixed.outcome == "graded", fixed.summary()
    assert fixed.resolution is Resolution.FULL and fixed.reward == 1.0, fixed.summary()
    shipped = verify(bundle, bundle.files, sandbox=sandbox)
    assert shipped.resolution is Resolution.NO and shipped.reward == 0.0, shipped.summary()
    assert shipped.regression.passed == shipped.regression.total == 3  # legitimate use works as shipped
    exploit = next(p for p in shipped.probes if p.probe_id == "sec-other-note")
    assert not exploit.passed and exploit.expected[0].startswith("GET /notes/n1 as bob:")
    assert "anonymous" not in exploit.expected[0] and exploit.got == ("served",)


@sandboxed
def test_a_failed_login_is_that_steps_failure_in_the_report(sandbox):
    bundle = notes_bundle("login_json", password_of_alice="pw-not-hers")
    report = verify(bundle, fixed_files(bundle), sandbox=sandbox, shadow=False)
    own = next(p for p in report.probes if p.probe_id == "reg-own-note")
    assert not own.passed and own.failures == ("login as alice failed: the app's answer: refused",)
    assert report.resolution is Resolution.NO
    bob = next(p for p in report.probes if p.probe_id == "reg-me-twice")
    assert bob.passed  # bob signs in on his own


@sandboxed
def test_each_probe_signs_in_to_its_own_worker(sandbox):
    bundle = notes_bundle("login_cookie")
    probes = [bundle.probes[1]] * 3  # each must see exactly one login: its own, in its own fresh app
    report = run_sandboxed(sandbox, AppSource(fixed_files(bundle), bundle.entrypoint), probes, actors_of(bundle.users))
    assert report.loaded and [o.passed for o in report.outcomes] == [True, True, True], report.outcomes
    assert report.requests == 3 * 3  # two steps and one login per probe


# -- the agent and the person playing -----------------------------------------------------------------


@sandboxed
@pytest.mark.parametrize("kind", SANDBOXED_KINDS)
def test_http_request_as_a_user_is_signed_with_its_credentials_and_names_the_user(kind, sandbox):
    bundle = notes_bundle(kind)
    logins = 1 if kind.startswith("login") else 0
    episode = Episode(bundle, sandbox, max_steps=10)
    try:
        intro = episode.first_observation()
        assert "alice (member; signed with " in intro.text
        assert intro.result["users"][0]["signed_with"] == bundle.user("alice").credential().describe()
        assert all(secret not in intro.text for secret in (PEOPLE["alice"]["api_key"], PEOPLE["alice"]["password"]))
        for _ in range(2):  # the second request reuses the first one's login
            seen = episode.step({"tool": "http_request", "method": "GET", "path": "/me", "as_user": "alice"})
            assert seen.error is None and seen.result["status"] == 200, seen.text
            assert json.loads(seen.result["body"]) == {"username": "alice", "logins": logins}
            assert seen.text.startswith("GET /me as alice -> 200")
        patched = episode.step({"tool": "edit_file", "path": "app.py", "search": "app = FastAPI()",
                                "replace": "app = FastAPI(title='notes')"})
        assert patched.error is None
        again = episode.step({"tool": "http_request", "method": "GET", "path": "/me", "as_user": "alice"})
        assert json.loads(again.result["body"]) == {"username": "alice", "logins": logins}  # signed in again
        anonymous = episode.step({"tool": "http_request", "method": "GET", "path": "/me"})
        assert anonymous.result["status"] == 401 and "as anonymous" in anonymous.text
    finally:
        episode.close_live()


@sandboxed
def test_http_request_as_a_user_whose_login_fails_says_why(sandbox):
    episode = Episode(notes_bundle("login_cookie", password_of_alice="pw-not-hers"), sandbox, max_steps=5)
    try:
        seen = episode.step({"tool": "http_request", "method": "GET", "path": "/me", "as_user": "alice"})
        assert seen.result["status"] is None
        assert "login as alice failed: status 401" in seen.result["error"] and "as alice" in seen.text
        bob = episode.step({"tool": "http_request", "method": "GET", "path": "/me", "as_user": "bob"})
        assert bob.result["status"] == 200
    finally:
        episode.close_live()


@sandboxed
def test_the_coach_replays_a_login_users_request_signed_in(sandbox):
    episode = Episode(notes_bundle("login_cookie"), sandbox, max_steps=5)
    coach = Coach(episode)
    try:
        exploit = coach.judge({"tool": "http_request", "method": "GET", "path": "/notes/n1", "as_user": "bob"})
        assert exploit is not None and exploit.exploit and exploit.shipped.status == 200
        assert exploit.fixed.status == 404
        own = coach.judge({"tool": "http_request", "method": "GET", "path": "/notes/n1", "as_user": "alice"})
        assert own is not None and own.legitimate and not own.exploit
    finally:
        coach.close()
        episode.close_live()


def test_the_exploit_hint_names_the_user_and_how_its_requests_are_signed():
    bundle = notes_bundle("header")
    text = hint_text(bundle, "exploit", "full")
    assert "as `bob` (member; signed with the header X-API-Key)" in text
    assert PEOPLE["bob"]["api_key"] not in text
    assert "bob (member; signed with a login at POST /login, then the cookies it sets)" in \
        render.intro(notes_bundle("login_cookie"), 5)


# -- other runners ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_in_process_runner_signs_every_kind(kind):
    bundle = notes_bundle(kind)
    actors = actors_of(bundle.users)
    forged = Probe(id="forged", kind="regression", title="an explicit header does not make bob alice", steps=(
        _step("bob", "GET", "/me", {"kind": "json_equals", "path": "username", "value": "bob"},
              headers={"X-API-Key": PEOPLE["alice"]["api_key"], "X-User-Id": PEOPLE["alice"]["id"],
                       "Authorization": f"Bearer {PEOPLE['alice']['token']}"}),))
    with InProcessRunner(isolate_probes=True) as runner:
        shipped = runner.run(AppSource(bundle.files, bundle.entrypoint), (*bundle.probes, forged), actors)
        fixed = runner.run(AppSource(fixed_files(bundle), bundle.entrypoint), (*bundle.probes, forged), actors)
    assert {o.probe_id: o.passed for o in shipped.outcomes} == {
        "reg-own-note": True, "reg-me-twice": True, "reg-anonymous": True, "sec-other-note": False, "forged": True}
    assert all(o.passed for o in fixed.outcomes), fixed.outcomes


def test_the_pytest_runner_signs_in_like_the_others():
    bundle = notes_bundle("login_cookie")
    with PytestSubprocessRunner(timeout_s=120) as runner:
        shipped = runner.run(AppSource(bundle.files, bundle.entrypoint), bundle.probes, actors_of(bundle.users))
    assert shipped.loaded, shipped.load_error
    assert {o.probe_id: o.passed for o in shipped.outcomes} == {
        "reg-own-note": True, "reg-me-twice": True, "reg-anonymous": True, "sec-other-note": False}


# -- shadows and the scenario folder ------------------------------------------------------------------


def test_a_shadow_replaces_a_credentials_secret_login_name_and_login_values_but_not_its_names():
    bundle = notes_bundle("login_header")
    user = bundle.user("alice")
    mapping = {PEOPLE["alice"]["password"]: "pw-qwert-Z9ZZ", PEOPLE["alice"]["email"]: "wxyzq.v@example.test",
               "X-Session": "Y-Session", "access_token": "zzzzzz_token", "/auth/token": "/auth/xxxxx"}
    shadow = apply_substitution(bundle, Substitution(mapping)).user("alice").credentials
    assert shadow is not None and user.credentials is not None
    assert (shadow.secret, shadow.login_name) == ("pw-qwert-Z9ZZ", "wxyzq.v@example.test")
    assert shadow.login is not None and shadow.login.path == "/auth/xxxxx"
    assert (shadow.kind, shadow.name, shadow.login.token_json) == ("login", "X-Session", "access_token")
    form = apply_substitution(notes_bundle("login_json"), Substitution(mapping)).user("alice").credential().login
    assert form is not None and form.form == {"username": "wxyzq.v@example.test", "password": "pw-qwert-Z9ZZ"}
    body = apply_substitution(notes_bundle("login_cookie"), Substitution(mapping)).user("alice").credential().login
    assert body is not None and body.json_body == {"email": "wxyzq.v@example.test", "password": "pw-qwert-Z9ZZ"}


@pytest.mark.parametrize("kind", [kind if kind in ("bearer", "login_cookie")  # a token and a login by default
                                  else pytest.param(kind, marks=pytest.mark.slow) for kind in KINDS])
def test_a_scenario_folder_keeps_its_users_credentials_through_export_and_import(kind, tmp_path):
    bundle = notes_bundle(kind)
    folder = export_bundle_dir(bundle, tmp_path / kind)
    written = yaml.safe_load((folder / "scenario.yaml").read_text(encoding="utf-8"))
    assert written["users"][0]["credentials"]["kind"] == credentials_for(kind, PEOPLE["alice"])["kind"]
    assert None not in written["users"][0]["credentials"].values()
    imported = load_bundle_dir(folder)
    assert imported.users == bundle.users
    assert actors_of(imported.users) == actors_of(bundle.users)
    report = check_scenario(imported, fail_fast=False)  # the import's own check signs in as the users too
    assert report.ok, report.summary()
