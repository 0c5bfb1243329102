"""Apps written as they are anywhere: the libraries real FastAPI apps import, network calls that fail
fast, and stand-in modules a scenario ships for a library that is not provided.

* **Libraries.** One small app per library, each using it in a handler the way real apps do (a Jinja2
  template from a file beside the code, YAML config, a ``.env`` file, rate limits, signed cookies,
  async SQLAlchemy on aiosqlite, fake data...), graded by its probes in the sandbox and in process.
* **No network, failing fast.** In the sandbox every outgoing call (requests, httpx sync and async,
  urllib, a raw socket, a name lookup) raises at once the error its library raises for a network that
  is down, so the app's own ``except`` runs; uncaught, it is a 500 and the app keeps serving. The
  kernel layers alone (the audit hook switched off) refuse as fast.
* **Stand-ins and the names an app may own** (:func:`envcore.sandbox.app_runtime.app_module_names`):
  ``app/stripe.py`` is what ``import stripe`` loads, while a file named after the standard library,
  a provided library, the runtime or an interpreter hook never is, whatever the process imported
  before.
"""

from __future__ import annotations

import base64
import json
import sys
import textwrap

import pytest

from envcore.runner.base import AppSource
from envcore.runner.http import HttpRequest
from envcore.runner.inprocess import InProcessRunner
from envcore.sandbox import LiveApp, Sandbox, SandboxLimits, SandboxRunner, supported_platform
from envcore.sandbox.app_runtime import (
    APP_DISTRIBUTIONS,
    app_module_names,
    importable_modules,
    reserved_app_modules,
    reserved_module_reason,
)
from envcore.sandbox.runner import run_sandboxed
from envcore.scenario.probes import BodyIncludes, JsonEquals, Probe, ProbeKind, ProbeStep, StatusIn
from tests.sandbox_kit import DISABLE_AUDIT_HOOK

SANDBOX = supported_platform() is None
LIMITS = SandboxLimits(request_timeout_s=5, load_timeout_s=10, verify_timeout_s=60, cpu_s=10, memory_mb=256)


@pytest.fixture(scope="module")
def sb():
    if not SANDBOX:
        pytest.skip("the sandbox is Linux only")
    box = Sandbox(limits=LIMITS, spares=1, templates=2).start()
    yield box
    box.close()


@pytest.fixture(scope="module")
def inprocess():
    runner = InProcessRunner()
    yield runner
    runner.close()


@pytest.fixture(params=["sandbox", "inprocess"])
def runner(request):
    if request.param == "sandbox":
        return SandboxRunner(request.getfixturevalue("sb"))
    return request.getfixturevalue("inprocess")


def _files(main: str, others: dict[str, str] | None = None) -> dict[str, str]:
    """An app: ``main.py`` (entry ``main:app``) and ``others`` by path, each dedented."""
    return {"main.py": textwrap.dedent(main).lstrip(),
            **{path: textwrap.dedent(text).lstrip() for path, text in (others or {}).items()}}


def step(path: str, *facts, method: str = "GET", **fields) -> ProbeStep:
    return ProbeStep(method=method, path=path, expect=facts, **fields)


def graded(runner, files: dict[str, str], *steps: ProbeStep):
    """Run one probe made of ``steps`` on the app ``files`` (entry ``main:app``); assert it passes."""
    probe = Probe(id="uses-the-library", kind=ProbeKind.REGRESSION, title="the app uses its library", steps=steps)
    report = runner.run(AppSource(files, "main:app"), [probe], {})
    assert report.load_error is None, report.load_error
    [outcome] = report.outcomes
    assert outcome.passed, [(s.status, s.failures, s.body_excerpt[:400]) for s in outcome.steps]
    return report


def ok(**values) -> tuple:
    return (StatusIn(codes=(200,)), *(JsonEquals(path=k, value=v) for k, v in values.items()))


# == the libraries ===================================================================================

JINJA = _files('''
    from pathlib import Path

    from fastapi import FastAPI, Request
    from fastapi.templating import Jinja2Templates
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    HERE = Path(__file__).parent
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    mail = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape())
    app = FastAPI()

    @app.get("/hello/{name}")
    def hello(request: Request, name: str):
        return templates.TemplateResponse(request, "hello.html", {"name": name})

    @app.get("/mail/{name}")
    def mail_body(name: str):
        return {"text": mail.get_template("mail.txt").render(name=name, count=3)}
''', {"templates/hello.html": "<p>Hello, {{ name }}!</p>\n",
      "templates/mail.txt": "Dear {{ name }}, you have {{ count }} new {{ 'message' if count == 1 else 'messages' }}."})


def test_jinja2_renders_a_template_from_a_file_beside_the_code(runner):
    graded(runner, JINJA,
           step("/hello/<em>Ann", StatusIn(codes=(200,)), BodyIncludes(texts=("<p>Hello, &lt;em&gt;Ann!</p>",))),
           step("/mail/Bo", *ok(text="Dear Bo, you have 3 new messages.")))


YAML = _files('''
    from pathlib import Path

    import yaml
    from fastapi import FastAPI

    CONFIG = yaml.safe_load((Path(__file__).parent / "config.yaml").read_text())
    app = FastAPI()

    @app.get("/roles")
    def roles():
        return {"roles": CONFIG["roles"], "admin": CONFIG["limits"]["admin"]}

    @app.get("/parse")
    def parse(text: str):
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return {"value": yaml.load(text, Loader=loader), "dumped": yaml.safe_dump({"b": [1, 2]}, default_flow_style=True)}
''', {"config.yaml": "roles: [reader, editor]\nlimits:\n  admin: 10\n"})


def test_yaml_reads_config_and_parses_in_a_handler(runner):
    graded(runner, YAML,
           step("/roles", *ok(roles=["reader", "editor"], admin=10)),
           step("/parse", *ok(**{"value.a": [1, "x"], "dumped": "{b: [1, 2]}\n"}), query={"text": "a: [1, x]"}))


DOTENV = _files('''
    import os
    from pathlib import Path

    from dotenv import dotenv_values, load_dotenv
    from fastapi import FastAPI

    load_dotenv(Path(__file__).with_name(".env"))
    SETTINGS = dotenv_values(Path(__file__).with_name(".env"))
    app = FastAPI()

    @app.get("/settings")
    def settings():
        return {"env": os.environ.get("A01_DOTENV_GREETING"), "file": SETTINGS["A01_DOTENV_LIMIT"]}
''', {".env": "A01_DOTENV_GREETING=hello from .env\nA01_DOTENV_LIMIT=5\n"})


def test_dotenv_loads_settings_from_a_dot_env_file(runner):
    graded(runner, DOTENV, step("/settings", *ok(env="hello from .env", file="5")))


EMAIL = _files('''
    from email_validator import EmailNotValidError, validate_email
    from fastapi import FastAPI
    from pydantic import BaseModel, EmailStr

    class Signup(BaseModel):
        email: EmailStr

    app = FastAPI()

    @app.post("/signup")
    def signup(body: Signup):
        return {"email": body.email}

    @app.get("/check")
    def check(address: str):
        try:
            return {"normalized": validate_email(address, check_deliverability=False).normalized}
        except EmailNotValidError:
            return {"normalized": None}
''')


def test_email_validator_checks_addresses_in_a_model_and_a_handler(runner):
    graded(runner, EMAIL,
           step("/signup", *ok(email="ann@example.com"), method="POST", json_body={"email": "ann@example.com"}),
           step("/signup", StatusIn(codes=(422,)), method="POST", json_body={"email": "not an address"}),
           step("/check", *ok(normalized="bo@example.org"), query={"address": "bo@Example.ORG"}),
           step("/check", *ok(normalized=None), query={"address": "bo@@example"}))


ASYNC_SQLITE = _files('''
    from contextlib import asynccontextmanager

    import aiosqlite
    from fastapi import FastAPI
    from sqlalchemy import String, select
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
    from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

    engine = create_async_engine("sqlite+aiosqlite:///./notes.db")
    Session = async_sessionmaker(engine, expire_on_commit=False)

    class Base(DeclarativeBase):
        pass

    class Note(Base):
        __tablename__ = "notes"
        id: Mapped[int] = mapped_column(primary_key=True)
        owner: Mapped[str] = mapped_column(String(40))
        text: Mapped[str] = mapped_column(String(200))

    @asynccontextmanager
    async def lifespan(app):
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        async with Session() as session:
            session.add(Note(owner="ann", text="first"))
            await session.commit()
        yield
        await engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/notes")
    async def add(owner: str, text: str):
        async with Session() as session:
            note = Note(owner=owner, text=text)
            session.add(note)
            await session.commit()
            return {"id": note.id}

    @app.get("/notes/{owner}")
    async def notes(owner: str):
        async with Session() as session:
            rows = (await session.execute(select(Note).where(Note.owner == owner).order_by(Note.id))).scalars().all()
            return {"texts": [note.text for note in rows]}

    @app.get("/count")
    async def count():
        async with aiosqlite.connect("notes.db") as db:
            async with db.execute("SELECT count(*) FROM notes") as cursor:
                (n,) = await cursor.fetchone()
        return {"count": n}
''')


def test_async_sqlalchemy_on_aiosqlite_reads_and_writes(runner):
    graded(runner, ASYNC_SQLITE,
           step("/notes/ann", *ok(texts=["first"])),
           step("/notes", *ok(id=2), method="POST", query={"owner": "ann", "text": "second"}),
           step("/notes/ann", *ok(texts=["first", "second"])),
           step("/count", *ok(count=2)))


SECRET = "a-secret-only-this-test-knows"
SESSIONS = _files(f'''
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from itsdangerous import BadSignature, URLSafeTimedSerializer
    from starlette.middleware.sessions import SessionMiddleware

    SECRET = {SECRET!r}
    links = URLSafeTimedSerializer(SECRET, salt="password-reset")
    app = FastAPI()
    app.add_middleware(SessionMiddleware, secret_key=SECRET)

    @app.get("/login/{{user}}")
    def login(user: str, request: Request):
        request.session["user"] = user
        return {{"reset_link": links.dumps({{"user": user}})}}

    @app.get("/me")
    def me(request: Request):
        return {{"user": request.session.get("user")}}

    @app.get("/reset")
    def reset(token: str):
        try:
            return {{"user": links.loads(token, max_age=3600)["user"]}}
        except BadSignature:
            return JSONResponse({{"detail": "bad link"}}, status_code=400)
''')


def _session_cookie(session: dict) -> str:
    """A cookie as Starlette's SessionMiddleware signs it (with :data:`SECRET`)."""
    from itsdangerous import TimestampSigner

    data = base64.b64encode(json.dumps(session).encode())
    return "session=" + TimestampSigner(SECRET).sign(data).decode()


def test_signed_cookies_with_itsdangerous_and_starlette_sessions(runner):
    from itsdangerous import URLSafeTimedSerializer

    good = URLSafeTimedSerializer(SECRET, salt="password-reset").dumps({"user": "ann"})
    forged = URLSafeTimedSerializer("someone-else's-secret", salt="password-reset").dumps({"user": "ann"})
    graded(runner, SESSIONS,
           step("/login/bo", StatusIn(codes=(200,)), BodyIncludes(texts=("reset_link",))),
           step("/me", *ok(user="ann"), headers={"cookie": _session_cookie({"user": "ann"})}),
           step("/me", *ok(user=None), headers={"cookie": _session_cookie({"user": "ann"})[:-3] + "xyz"}),
           step("/reset", *ok(user="ann"), query={"token": good}),
           step("/reset", StatusIn(codes=(400,)), query={"token": forged}))


RATE_LIMITED = _files('''
    from fastapi import FastAPI, Request
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    limiter = Limiter(key_func=get_remote_address)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.post("/login")
    @limiter.limit("2/minute")
    def login(request: Request):
        return {"ok": True}

    @app.get("/search")
    @limiter.limit("1/minute")
    async def search(request: Request):
        return {"ok": True}
''')


def test_slowapi_rate_limits_a_route(runner):
    graded(runner, RATE_LIMITED,
           step("/login", *ok(ok=True), method="POST"),
           step("/login", *ok(ok=True), method="POST"),
           step("/login", StatusIn(codes=(429,)), method="POST"),
           step("/search", *ok(ok=True)),
           step("/search", StatusIn(codes=(429,))))


FAKE_DATA = _files('''
    from faker import Faker
    from fastapi import FastAPI

    Faker.seed(7)
    fake = Faker()
    PEOPLE = [{"name": fake.name(), "email": fake.email()} for _ in range(3)]
    app = FastAPI()

    @app.get("/people")
    def people():
        return {"count": len(PEOPLE), "all_named": all(p["name"] and "@" in p["email"] for p in PEOPLE)}

    @app.get("/fresh")
    def fresh():
        made_now = Faker()
        made_now.seed_instance(1)
        return {"has_address": bool(made_now.address()), "has_company": bool(made_now.company())}
''')


def test_faker_makes_seed_data_at_load_and_in_a_handler(runner):
    graded(runner, FAKE_DATA,
           step("/people", *ok(count=3, all_named=True)),
           step("/fresh", *ok(has_address=True, has_company=True)))


HTTP_CLIENTS_OFFLINE = _files('''
    import httpx
    import requests
    from fastapi import FastAPI

    def fake_weather(request):
        return httpx.Response(200, json={"city": request.url.params["city"], "sky": "clear"})

    weather = httpx.Client(transport=httpx.MockTransport(fake_weather), base_url="https://weather.example")
    app = FastAPI()

    @app.get("/forecast/{city}")
    def forecast(city: str):
        return weather.get("/now", params={"city": city}).json()

    @app.get("/link")
    def link(q: str):
        prepared = requests.Request("GET", "https://search.example/find", params={"q": q}).prepare()
        return {"url": prepared.url}
''')


def test_http_client_libraries_import_and_work_without_the_network(runner):
    graded(runner, HTTP_CLIENTS_OFFLINE,
           step("/forecast/Oslo", *ok(city="Oslo", sky="clear")),
           step("/link", *ok(url="https://search.example/find?q=a+b"), query={"q": "a b"}))


def test_every_library_the_docs_promise_is_installed():
    """The list an app may import (docs/bundle-format.md) is what this installation provides."""
    import importlib.metadata

    missing = [name for name in APP_DISTRIBUTIONS if _not_installed(importlib.metadata, name)]
    assert not missing, f"not installed: {missing} (requirements/space.txt pins them)"
    for module in ("requests", "httpx", "yaml", "jinja2", "dotenv", "email_validator", "aiosqlite",
                   "itsdangerous", "slowapi", "limits", "faker", "greenlet"):
        assert module in importable_modules(), module


def _not_installed(metadata, name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return True
    return False


TEMPLATE_CASES = {
    "aiosqlite": (ASYNC_SQLITE, (step("/notes", *ok(id=2), method="POST", query={"owner": "bo", "text": "x"}),
                                 step("/notes/bo", *ok(texts=["x"])), step("/count", *ok(count=2)))),
    "slowapi": (RATE_LIMITED, (step("/search", *ok(ok=True)), step("/search", StatusIn(codes=(429,))))),
    "faker": (FAKE_DATA, (step("/fresh", *ok(has_address=True, has_company=True)),)),
    "jinja2": (JINJA, (step("/mail/Bo", *ok(text="Dear Bo, you have 3 new messages.")),)),
    "itsdangerous": (SESSIONS, (step("/me", *ok(user="ann"), headers={"cookie": _session_cookie({"user": "ann"})}),)),
}


@pytest.mark.parametrize("name", sorted(TEMPLATE_CASES))
def test_the_libraries_work_in_workers_forked_from_a_template(sb, name):
    """Grading forks each probe's worker from a template that imported (and may have started) the app:
    the libraries work there too, and every probe starts from the app as loaded."""
    files, steps = TEMPLATE_CASES[name]
    source = AppSource(files, "main:app")
    probes = [Probe(id=f"probe-{i}", kind=ProbeKind.REGRESSION, title="uses the library", steps=steps) for i in range(2)]
    before = sb.stats["from_template"]
    report = run_sandboxed(sb, source, probes, {}, base=source)
    assert report.load_error is None, report.load_error
    assert all(o.passed for o in report.outcomes), [o.failures for o in report.outcomes]
    assert sb.stats["from_template"] >= before + 2


def test_the_live_app_serves_a_library_app_request_after_request(sb):
    with LiveApp(sb, AppSource(ASYNC_SQLITE, "main:app")) as live:
        assert live.request(HttpRequest.build("POST", "/notes", query={"owner": "cy", "text": "hi"})).status == 200
        response = live.request(HttpRequest.build("GET", "/notes/cy"))
    assert (response.status, json.loads(response.body)) == (200, {"texts": ["hi"]})


# == the network: no network, and every call says so at once =========================================

NETWORK = _files('''
    import socket
    import time
    import urllib.error
    import urllib.request

    import httpx
    import requests
    from fastapi import FastAPI

    OUTSIDE = "http://example.com/"
    app = FastAPI()

    def attempt(call, *expected):
        started = time.perf_counter()
        try:
            call()
        except expected as exc:
            return {"caught": True, "error": type(exc).__name__, "oserror": isinstance(exc, OSError),
                    "fast": time.perf_counter() - started < 0.5}
        return {"caught": False, "reached": True}

    @app.get("/requests")
    def with_requests():
        return attempt(lambda: requests.get(OUTSIDE, timeout=10), requests.ConnectionError)

    @app.get("/requests-session")
    def with_a_session():
        with requests.Session() as session:
            return attempt(lambda: session.post("https://api.example.com/charge", json={"x": 1}, timeout=10),
                           requests.RequestException)

    @app.get("/httpx")
    def with_httpx():
        return attempt(lambda: httpx.get(OUTSIDE, timeout=10), httpx.ConnectError)

    @app.get("/httpx-async")
    async def with_httpx_async():
        started = time.perf_counter()
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                await client.get("https://api.example.com/v1/users")
        except httpx.HTTPError as exc:
            return {"caught": True, "error": type(exc).__name__, "fast": time.perf_counter() - started < 0.5}
        return {"caught": False, "reached": True}

    @app.get("/urllib")
    def with_urllib():
        return attempt(lambda: urllib.request.urlopen(OUTSIDE, timeout=10), urllib.error.URLError)

    @app.get("/socket")
    def with_a_socket():
        return attempt(lambda: socket.create_connection(("192.0.2.1", 443), timeout=10), OSError)

    @app.get("/dns")
    def name_lookup():
        return attempt(lambda: socket.getaddrinfo("example.com", 443), OSError)

    @app.get("/deliverable")
    def deliverable():
        from email_validator import validate_email

        started = time.perf_counter()
        checked = validate_email("someone@example.com")  # deliverability checked, as by default: a DNS lookup
        return {"normalized": checked.normalized, "fast": time.perf_counter() - started < 0.5}

    @app.get("/message-id")
    def message_id():
        from email.utils import make_msgid

        return {"made": make_msgid().startswith("<")}  # asks the machine its name

    @app.get("/uncaught")
    def uncaught():
        return requests.get(OUTSIDE, timeout=10).json()

    @app.get("/health")
    def health():
        return {"ok": True}
''')

FAILED_FAST = (StatusIn(codes=(200,)), JsonEquals(path="caught", value=True), JsonEquals(path="fast", value=True))


@pytest.mark.parametrize(("route", "error"), [
    ("/requests", "ConnectionError"),
    ("/requests-session", "ConnectionError"),
    ("/httpx", "ConnectError"),
    ("/httpx-async", "ConnectError"),
    ("/urllib", "URLError"),
    ("/socket", None),
    ("/dns", None),
])
def test_an_outgoing_call_fails_at_once_with_its_librarys_own_error(sb, route, error):
    """The error each client documents for an unreachable host (an ``OSError`` for a raw socket or a
    name lookup), raised in well under a second: the app's own ``except`` runs."""
    named = JsonEquals(path="error", value=error) if error else JsonEquals(path="oserror", value=True)
    graded(SandboxRunner(sb), NETWORK, step(route, *FAILED_FAST, named))


def test_a_lookup_that_finds_no_name_server_is_answered_at_once_as_offline(sb):
    """email-validator checks deliverability by default (a DNS lookup): it finds no name server at once
    and reports the address valid with deliverability unknown, as on a machine without a network; a
    mail library asking the machine's name for a message id gets it (no network involved)."""
    graded(SandboxRunner(sb), NETWORK,
           step("/deliverable", *ok(normalized="someone@example.com", fast=True)),
           step("/message-id", *ok(made=True)))


def test_an_uncaught_network_error_is_a_500_and_the_app_keeps_serving(sb):
    graded(SandboxRunner(sb), NETWORK,
           step("/uncaught", StatusIn(codes=(500,))),
           step("/health", *ok(ok=True)))


def test_with_the_audit_hook_switched_off_the_kernel_still_refuses_the_network_at_once(sb):
    """The audit hook explains; seccomp and Landlock contain. Without the hook a name lookup and a
    connection still fail at once (no socket can be made), with an ``OSError`` the clients wrap."""
    files = {**NETWORK, "main.py": DISABLE_AUDIT_HOOK + "\n" + NETWORK["main.py"]}
    graded(SandboxRunner(sb), files,
           step("/socket", *FAILED_FAST),
           step("/dns", *FAILED_FAST),
           step("/requests", *FAILED_FAST),
           step("/httpx", *FAILED_FAST))


# == stand-ins and the module names an app may own =====================================================

@pytest.mark.parametrize(("paths", "owned", "why"), [
    (["main.py", "models.py", "api/notes.py"], {"main", "models", "api"}, "the app's own modules and packages"),
    (["main.py", "stripe.py"], {"main", "stripe"}, "a stand-in for a library that is not provided"),
    (["main.py", "boto3/__init__.py", "boto3/session.py"], {"main", "boto3"}, "a stand-in package"),
    (["app.py"], {"app"}, "named like the project's own app.py: the app's"),
    (["main.py", "json.py"], {"main"}, "the standard library stays the standard library's"),
    (["main.py", "statistics.py"], {"main"}, "even a standard-library module nobody imported yet"),
    (["main.py", "sqlite3.py", "ctypes/__init__.py"], {"main"}, "standard library, the refused parts too"),
    (["main.py", "fastapi/__init__.py", "fastapi/routing.py"], {"main"}, "the framework"),
    (["main.py", "yaml.py", "requests/api.py", "jwt.py"], {"main"}, "libraries apps may import"),
    (["main.py", "idna.py", "markupsafe.py"], {"main"}, "what those libraries need"),
    (["main.py", "sitecustomize.py", "usercustomize.py", "__main__.py"], {"main"}, "what the interpreter imports"),
    (["main.py", "envcore/sandbox/audit.py"], {"main"}, "the runtime's own package"),
    (["main.py", "data/seed.json", "templates/x.html", "1st.py", "my-module.py"], {"main"}, "not Python, or no identifier"),
])
def test_the_module_names_an_app_may_own(paths, owned, why):
    assert app_module_names(paths) == owned, why
    defined = {p.split("/")[0].removesuffix(".py") for p in paths if p.endswith(".py")}
    assert set(reserved_app_modules(paths)) == {name for name in defined - owned if name.isidentifier()}, why


def test_a_reserved_name_says_why():
    assert reserved_module_reason("json") == "a standard-library module"
    assert "library apps may import" in reserved_module_reason("yaml")
    assert "interpreter" in reserved_module_reason("sitecustomize")
    assert "runtime" in reserved_module_reason("envcore")
    assert reserved_module_reason("stripe") is None


STAND_IN = _files('''
    import stripe
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/pay")
    def pay(amount: int):
        try:
            charge = stripe.Charge.create(amount=amount, currency="eur")
        except stripe.error.CardError as exc:
            return {"paid": False, "reason": str(exc)}
        return {"paid": charge["paid"], "id": charge["id"]}
''', {"stripe/__init__.py": '''
    """A stand-in for the Stripe SDK: charges succeed up to 500, as the scenario's story needs."""
    from stripe import error

    class Charge:
        @staticmethod
        def create(amount, currency):
            if amount > 500:
                raise error.CardError("card declined")
            return {"id": "ch_standin", "paid": True, "currency": currency}
''', "stripe/error.py": '''
    class CardError(Exception):
        pass
'''})


def test_a_scenario_ships_a_stand_in_for_a_library_that_is_not_provided(runner):
    graded(runner, STAND_IN,
           step("/pay", *ok(paid=True, id="ch_standin"), method="POST", query={"amount": "120"}),
           step("/pay", *ok(paid=False, reason="card declined"), method="POST", query={"amount": "900"}))


SHADOWS = _files('''
    import importlib
    import json
    import sqlite3
    import statistics

    import fastapi
    import yaml
    from fastapi import FastAPI

    app = FastAPI()

    def origin(module):
        return "installed" if "HIJACKED" not in vars(module) else "app"

    @app.get("/who")
    def who():
        import csv
        names = ["json", "sqlite3", "statistics", "fastapi", "yaml", "csv"]
        return {name: origin(importlib.import_module(name)) for name in names}

    @app.get("/dump")
    def dump():
        return {"text": json.dumps({"a": 1}), "mean": statistics.mean([1, 2, 3]), "sqlite": sqlite3.sqlite_version > "3"}
''', {"json.py": 'HIJACKED = True\ndef dumps(value, **kw):\n    return "forged"\n',
      "sqlite3.py": "HIJACKED = True\n",
      "statistics.py": "HIJACKED = True\ndef mean(values):\n    return 99\n",
      "csv.py": "HIJACKED = True\n",
      "yaml.py": "HIJACKED = True\n",
      "fastapi/evil.py": "HIJACKED = True\n",
      "sitecustomize.py": "raise SystemExit('sitecustomize ran')\n"})


def test_an_app_file_named_like_the_standard_library_or_a_library_never_replaces_it(runner):
    """A reward hacker's ``json.py``, ``statistics.py`` (not imported by anyone yet), ``sqlite3.py``,
    ``yaml.py`` or ``fastapi/evil.py``: every import is the installed module, in both runners."""
    installed = {name: "installed" for name in ("json", "sqlite3", "statistics", "fastapi", "yaml", "csv")}
    graded(runner, SHADOWS,
           step("/who", StatusIn(codes=(200,)), *(JsonEquals(path=k, value=v) for k, v in installed.items())),
           step("/dump", *ok(text='{"a": 1}', mean=2, sqlite=True)))


def test_a_stand_in_wins_even_where_the_process_imported_the_real_library_before(inprocess):
    """``numpy`` is installed (the Space's charts use it) but no app may import it: an app's stand-in
    ``numpy.py`` is what it gets, in a process that imported the real one first as in a fresh worker."""
    pytest.importorskip("numpy")
    assert "numpy" in sys.modules or __import__("numpy")
    files = _files('''
        import numpy
        from fastapi import FastAPI

        app = FastAPI()

        @app.get("/which")
        def which():
            return {"stand_in": getattr(numpy, "STAND_IN", False)}
    ''', {"numpy.py": "STAND_IN = True\n"})
    graded(inprocess, files, step("/which", *ok(stand_in=True)))
