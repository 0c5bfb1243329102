"""Ordinary FastAPI apps import and grade the same in the sandbox as in process.

Each test writes a small scenario folder in a layout or style real apps use (a ``main.py`` beside
an ``api/`` package, flat ``import models`` imports, an ``app/`` folder without ``__init__.py``, a
SQLite file created at import or at start-up, ``import uvicorn`` at the top, the libraries real apps
use) and imports it through ``python -m envcore factory import`` with the default sandbox runner.
Each was refused on the way there before (a wall a person bringing their own app hit); the
in-process runner, which only trusted code uses, must agree with the sandbox on every one.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from envcore.cli import main
from envcore.factory.byo import load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.patching import apply_patch, make_diff
from envcore.runner.inprocess import InProcessRunner

USERS = [
    {"username": "alice", "role": "user", "user_id": "1", "token": "tok_alice_5f1c2e9a"},
    {"username": "bob", "role": "user", "user_id": "2", "token": "tok_bob_9e04b6d2"},
]

PROBES = [
    {"id": "reg-own", "kind": "regression", "visible": True, "title": "alice reads her own note",
     "steps": [{"actor": "alice", "method": "GET", "path": "/api/notes/1",
                "expect": [{"kind": "status_in", "codes": [200]},
                           {"kind": "body_includes", "texts": ["alice-secret-7731"]}]}]},
    {"id": "reg-write", "kind": "regression", "title": "bob adds a note and reads it back",
     "steps": [{"actor": "bob", "method": "POST", "path": "/api/notes", "json_body": {"text": "bob-new-4410"},
                "expect": [{"kind": "status_in", "codes": [200, 201]}]},
               {"actor": "bob", "method": "GET", "path": "/api/notes",
                "expect": [{"kind": "body_includes", "texts": ["bob-new-4410"]}]}]},
    {"id": "reg-anon", "kind": "regression", "title": "anonymous callers are refused",
     "steps": [{"method": "GET", "path": "/api/notes/1", "expect": [{"kind": "status_in", "codes": [401]}]}]},
    {"id": "sec-other", "kind": "security", "title": "bob cannot read alice's note", "sites": ["notes.detail"],
     "steps": [{"actor": "bob", "method": "GET", "path": "/api/notes/1",
                "expect": [{"kind": "status_in", "codes": [403, 404]},
                           {"kind": "body_excludes", "texts": ["alice-secret-7731"]}]}]},
    # the same exploit by alice, whom the visible probe acts as: closing the route to bob alone is no fix
    {"id": "sec-other-reversed", "kind": "security", "title": "alice cannot read bob's note", "sites": ["notes.detail"],
     "repeats": "sec-other",
     "steps": [{"actor": "alice", "method": "GET", "path": "/api/notes/2",
                "expect": [{"kind": "status_in", "codes": [403, 404]},
                           {"kind": "body_excludes", "texts": ["bob-note-1182"]}]}]},
]

VULNERABLE = "    return note  # BUG: no owner check\n"
FIXED = ("    if note[\"owner\"] != user[\"id\"]:\n"
         "        raise HTTPException(status_code=404, detail=\"not found\")\n"
         "    return note\n")

# -- the apps: one store and one router, arranged the ways real apps are ----------------------

DICT_STORE = '''
NOTES = {1: {"id": 1, "owner": "1", "text": "alice-secret-7731"},
         2: {"id": 2, "owner": "2", "text": "bob-note-1182"}}
USERS = {"tok_alice_5f1c2e9a": {"id": "1", "name": "alice"}, "tok_bob_9e04b6d2": {"id": "2", "name": "bob"}}


def get_note(note_id):
    return NOTES.get(note_id)


def list_notes(owner):
    return [n for n in NOTES.values() if n["owner"] == owner]


def add_note(owner, text):
    note = {"id": max(NOTES) + 1, "owner": owner, "text": text}
    NOTES[note["id"]] = note
    return note
'''

AUTH = '''
from fastapi import Header, HTTPException

from {store} import USERS


def current_user(authorization: str = Header(default="")):
    user = USERS.get(authorization.removeprefix("Bearer "))
    if user is None:
        raise HTTPException(status_code=401, detail="login required")
    return user
'''

ROUTER = '''
from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel

from {auth} import current_user
from {store} import add_note, get_note, list_notes

router = APIRouter(prefix="/api/notes", tags=["notes"])


class NoteIn(BaseModel):
    text: str


@router.get("")
def notes(user=Depends(current_user)):
    return list_notes(user["id"])


@router.post("", status_code=201)
def create(body: NoteIn, user=Depends(current_user)):
    return add_note(user["id"], body.text)


@router.get("/{{note_id}}")
def read(note_id: int, user=Depends(current_user)):
    note = get_note(note_id)
    if note is None:
        raise HTTPException(status_code=404, detail="not found")
{body}'''

MAIN = '''{prelude}from fastapi import FastAPI

from {router} import router

app = FastAPI(title="Notes")
app.include_router(router)
{epilogue}'''


def arranged(store: str, auth: str, router: str, main: str, *, store_text: str = DICT_STORE,
             main_prelude: str = "", main_epilogue: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """(vulnerable, fixed) files: the store, auth, router and main modules at the given paths,
    importing each other by the dotted names their paths give."""
    def dotted(path: str) -> str:
        return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")

    def render(body: str) -> dict[str, str]:
        files = {
            store: store_text,
            auth: AUTH.format(store=dotted(store)),
            router: ROUTER.format(auth=dotted(auth), store=dotted(store), body=body),
            main: MAIN.format(router=dotted(router), prelude=main_prelude, epilogue=main_epilogue),
        }
        return {path: textwrap.dedent(text).lstrip("\n") for path, text in files.items()}

    return render(VULNERABLE), render(FIXED)


def scenario_folder(root: Path, files: dict[str, str], fixed: dict[str, str], entrypoint: str,
                    extra_files: dict[str, str] | None = None) -> Path:
    folder = root / "scenario"
    for rel, text in {**files, **(extra_files or {})}.items():
        target = folder / "app" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (folder / "scenario.yaml").write_text(yaml.safe_dump({
        "title": "Notes API: any user reads any note", "domain": "notes", "bug_class": "idor_read",
        "cwe": ["CWE-639"], "entrypoint": entrypoint,
        "task": "Users report that notes they should not see are reachable. Fix the access control.",
        "policy": "A note may be read only by its owner. Anonymous callers get 401.",
        "users": USERS,
        "sites": [{"site": "notes.detail", "method": "GET", "path": "/api/notes/{note_id}"}],
    }, sort_keys=False))
    (folder / "probes.yaml").write_text(yaml.safe_dump(PROBES, sort_keys=False))
    (folder / "fix.diff").write_text(make_diff(files, fixed))
    return folder


def imports_in_the_sandbox(folder: Path, tmp_path: Path, capsys) -> None:
    """The folder imports with the default (sandbox) runner, and the trusted in-process runner
    passes the same scenario check."""
    code = main(["factory", "import", str(folder), "--out", str(tmp_path / "cache")])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    with InProcessRunner() as runner:
        report = check_scenario(load_bundle_dir(folder), runner, fail_fast=False)
    assert report.ok, report.summary()


# -- layouts --------------------------------------------------------------------------------------


def test_a_main_module_beside_an_api_package_imports(tmp_path, capsys):
    files, fixed = arranged("api/store.py", "api/auth.py", "api/notes.py", "main.py")
    files["api/__init__.py"] = fixed["api/__init__.py"] = ""
    imports_in_the_sandbox(scenario_folder(tmp_path, files, fixed, "main:app"), tmp_path, capsys)


def test_flat_top_level_modules_importing_each_other_import(tmp_path, capsys):
    files, fixed = arranged("store.py", "auth.py", "routers/notes.py", "main.py")  # routers/ has no __init__
    imports_in_the_sandbox(scenario_folder(tmp_path, files, fixed, "main:app"), tmp_path, capsys)


def test_an_app_folder_without_init_imports_as_a_namespace_package(tmp_path, capsys):
    files, fixed = arranged("app/store.py", "app/core/auth.py", "app/routers/notes.py", "app/main.py")
    imports_in_the_sandbox(scenario_folder(tmp_path, files, fixed, "app.main:app"), tmp_path, capsys)


# -- SQLite files -----------------------------------------------------------------------------------

SQLITE_AT_IMPORT = '''
import sqlite3

db = sqlite3.connect("notes.db", check_same_thread=False)
db.row_factory = sqlite3.Row
db.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, owner TEXT, text TEXT)")
if db.execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0:
    db.executemany("INSERT INTO notes (id, owner, text) VALUES (?, ?, ?)",
                   [(1, "1", "alice-secret-7731"), (2, "2", "bob-note-1182")])
    db.commit()
USERS = {"tok_alice_5f1c2e9a": {"id": "1", "name": "alice"}, "tok_bob_9e04b6d2": {"id": "2", "name": "bob"}}


def get_note(note_id):
    row = db.execute("SELECT * FROM notes WHERE id = ?", (note_id,)).fetchone()
    return dict(row) if row else None


def list_notes(owner):
    return [dict(r) for r in db.execute("SELECT * FROM notes WHERE owner = ?", (owner,))]


def add_note(owner, text):
    cursor = db.execute("INSERT INTO notes (owner, text) VALUES (?, ?)", (owner, text))
    db.commit()
    return get_note(cursor.lastrowid)
'''

SQLALCHEMY_AT_STARTUP = '''
from sqlalchemy import String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

engine = create_engine("sqlite:///./data/app.db", connect_args={"check_same_thread": False})


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(primary_key=True)
    owner: Mapped[str] = mapped_column(String(20))
    text: Mapped[str]


USERS = {"tok_alice_5f1c2e9a": {"id": "1", "name": "alice"}, "tok_bob_9e04b6d2": {"id": "2", "name": "bob"}}


def init_db():
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        if session.scalar(select(Note).limit(1)) is None:
            session.add_all([Note(id=1, owner="1", text="alice-secret-7731"), Note(id=2, owner="2", text="bob-note-1182")])
            session.commit()


def _dict(note):
    return {"id": note.id, "owner": note.owner, "text": note.text} if note else None


def get_note(note_id):
    with Session(engine) as session:
        return _dict(session.get(Note, note_id))


def list_notes(owner):
    with Session(engine) as session:
        return [_dict(n) for n in session.scalars(select(Note).where(Note.owner == owner))]


def add_note(owner, text):
    with Session(engine) as session:
        note = Note(owner=owner, text=text)
        session.add(note)
        session.commit()
        return _dict(note)
'''

LIFESPAN_PRELUDE = '''from contextlib import asynccontextmanager

from store import init_db


@asynccontextmanager
async def lifespan(app):
    init_db()
    yield


'''


def test_a_sqlite_file_created_at_import_imports(tmp_path, capsys):
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", store_text=SQLITE_AT_IMPORT)
    imports_in_the_sandbox(scenario_folder(tmp_path, files, fixed, "main:app"), tmp_path, capsys)


def test_a_sqlalchemy_database_file_created_at_startup_imports(tmp_path, capsys):
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", store_text=SQLALCHEMY_AT_STARTUP,
                            main_prelude=LIFESPAN_PRELUDE)
    for tree in (files, fixed):
        tree["main.py"] = tree["main.py"].replace('FastAPI(title="Notes")', 'FastAPI(title="Notes", lifespan=lifespan)')
    # data/ exists in the app (a README keeps it); app.db is created in it at start-up
    folder = scenario_folder(tmp_path, files, fixed, "main:app", {"data/README.md": "The database lives here.\n"})
    imports_in_the_sandbox(folder, tmp_path, capsys)


# -- imports ----------------------------------------------------------------------------------------


def test_import_uvicorn_at_the_top_of_main_imports(tmp_path, capsys):
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", main_prelude="import uvicorn\n",
                            main_epilogue='\n\nif __name__ == "__main__":\n    uvicorn.run(app, host="0.0.0.0", port=8000)\n')
    imports_in_the_sandbox(scenario_folder(tmp_path, files, fixed, "main:app"), tmp_path, capsys)


LIBRARIES = '''
import jwt
from jose import jwt as jose_jwt
from passlib.context import CryptContext
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from pydantic_settings import BaseSettings
from sqlmodel import Field, Session, SQLModel, create_engine, select


class Settings(BaseSettings):
    secret_key: str = "notes-secret-3318"
    database_url: str = "sqlite:///./notes.db"


settings = Settings()
passwords = CryptContext(schemes=["bcrypt"], bcrypt__rounds=4, deprecated="auto")
argon = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
HASHED = passwords.hash("pw")
assert passwords.verify("pw", HASHED) and argon.verify("pw", argon.hash("pw"))
assert jose_jwt.decode(jose_jwt.encode({"sub": "1"}, settings.secret_key), settings.secret_key)["sub"] == "1"
assert jwt.decode(jwt.encode({"sub": "1"}, settings.secret_key, algorithm="HS256"), settings.secret_key,
                  algorithms=["HS256"])["sub"] == "1"


class Note(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    owner: str
    text: str


engine = create_engine(settings.database_url, connect_args={"check_same_thread": False})
SQLModel.metadata.create_all(engine)
with Session(engine) as session:
    if session.exec(select(Note)).first() is None:
        session.add(Note(id=1, owner="1", text="alice-secret-7731"))
        session.add(Note(id=2, owner="2", text="bob-note-1182"))
        session.commit()
USERS = {"tok_alice_5f1c2e9a": {"id": "1", "name": "alice"}, "tok_bob_9e04b6d2": {"id": "2", "name": "bob"}}


def get_note(note_id):
    with Session(engine) as session:
        note = session.get(Note, note_id)
        return note.model_dump() if note else None


def list_notes(owner):
    with Session(engine) as session:
        return [n.model_dump() for n in session.exec(select(Note).where(Note.owner == owner))]


def add_note(owner, text):
    with Session(engine) as session:
        note = Note(owner=owner, text=text)
        session.add(note)
        session.commit()
        session.refresh(note)
        return note.model_dump()
'''

FORM_ROUTE = '''
from fastapi import Form


@app.post("/api/feedback")
def feedback(message: str = Form(...)):
    return {"received": len(message)}
'''


def test_the_libraries_real_apps_use_load_in_the_sandbox(tmp_path, capsys):
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", store_text=LIBRARIES,
                            main_epilogue=FORM_ROUTE)
    imports_in_the_sandbox(scenario_folder(tmp_path, files, fixed, "main:app"), tmp_path, capsys)


@pytest.mark.parametrize("module", ["sqlalchemy", "sqlmodel", "jwt", "jose", "passlib", "bcrypt", "pwdlib",
                                    "argon2", "pydantic_settings", "multipart", "uvicorn", "aiosqlite",
                                    "itsdangerous", "dotenv", "jinja2", "yaml", "requests", "httpx", "slowapi",
                                    "limits", "faker", "email_validator"])
def test_bundle_format_lists_every_library_an_app_may_import(module):
    docs = (Path(__file__).resolve().parent.parent / "docs" / "bundle-format.md").read_text()
    assert f"`{module}`" in docs


# -- errors a newcomer can act on ---------------------------------------------------------------------


def test_yaml_errors_name_their_line_and_column(tmp_path):
    from envcore.factory.byo import ImportProblem

    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py")
    folder = scenario_folder(tmp_path, files, fixed, "main:app")
    meta = (folder / "scenario.yaml").read_text()
    (folder / "scenario.yaml").write_text(meta.replace("  role: user\n  user_id: '2'", "  user_id: '2'", 1))
    (folder / "probes.yaml").write_text("- id: reg-own\n  kind: regression\n  title: [unclosed\n")
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(folder)
    message = str(caught.value)
    # bob's entry lost its role: the problem points at bob's mapping
    bob_line = next(n for n, line in enumerate((folder / "scenario.yaml").read_text().splitlines(), 1)
                    if "username: bob" in line)
    assert f"scenario.yaml: users.1.role: Field required (line {bob_line}, column" in message, message
    assert "probes.yaml: not valid YAML (line 4, column 1:" in message, message


# -- shadow grading for imported apps ------------------------------------------------------------------

JSON_STORE = '''
import json
from pathlib import Path

DATA = Path(__file__).parent / "data"
USERS = {u["token"]: u for u in json.loads((DATA / "users.json").read_text())}
NOTES = {n["id"]: n for n in json.loads((DATA / "notes.json").read_text())}


def get_note(note_id):
    return NOTES.get(note_id)


def list_notes(owner):
    return [n for n in NOTES.values() if n["owner"] == owner]


def add_note(owner, text):
    note = {"id": max(NOTES) + 1, "owner": owner, "text": text}
    NOTES[note["id"]] = note
    return note
'''

SHADOW_USERS = [
    {"username": "alice.wong", "role": "user", "user_id": "u-1041", "token": "tok_5f1c2e9a7b3d4410"},
    {"username": "bob.marsh", "role": "user", "user_id": "u-2087", "token": "tok_9e04b6d2c8a15377"},
]


def shadowed_scenario(tmp_path: Path, shadow: dict | None) -> Path:
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", store_text=JSON_STORE)
    data = {
        "data/users.json": json.dumps([{"id": u["user_id"], "name": u["username"], "token": u["token"]}
                                       for u in SHADOW_USERS], indent=1),
        "data/notes.json": json.dumps([{"id": 1, "owner": "u-1041", "text": "alice-secret-7731"},
                                       {"id": 2, "owner": "u-2087", "text": "bob-note-1182"}], indent=1),
    }
    folder = scenario_folder(tmp_path, files, fixed, "main:app", data)
    meta = yaml.safe_load((folder / "scenario.yaml").read_text())
    meta["users"] = SHADOW_USERS
    if shadow is not None:
        meta["shadow"] = shadow
    (folder / "scenario.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    renamed = yaml.safe_dump(PROBES, sort_keys=False).replace("actor: alice", "actor: alice.wong").replace(
        "actor: bob", "actor: bob.marsh")
    (folder / "probes.yaml").write_text(renamed)
    return folder


def test_an_imported_scenario_declares_its_identities_and_a_patch_that_special_cases_the_visible_users_fails(tmp_path):
    from envcore.sandbox import Sandbox
    from envcore.verifier import Resolution, verify

    declared = load_bundle_dir(shadowed_scenario(tmp_path / "declared", {"values": ["alice-secret-7731"]}))
    undeclared = load_bundle_dir(shadowed_scenario(tmp_path / "undeclared", None))
    assert {"alice.wong", "tok_5f1c2e9a7b3d4410", "u-1041", "alice-secret-7731"} <= {
        v.value for v in declared.shadow_values}
    assert not undeclared.shadow_values
    assert next(v for v in declared.shadow_values if v.value.startswith("tok_")).keep == 4

    fixed = apply_patch(declared.files, declared.reference_fix)
    special_case = dict(declared.files)  # refuse the intruders the agent can see, by name
    special_case["notes.py"] = special_case["notes.py"].replace(
        VULNERABLE, '    if user["name"] in ("bob.marsh", "alice.wong") and note["owner"] != user["id"]:\n'
                    '        raise HTTPException(status_code=404, detail="not found")\n' + VULNERABLE)
    with Sandbox() as sandbox:
        assert verify(undeclared, special_case, sandbox=sandbox).resolution is Resolution.FULL  # the hole
        for _ in range(2):  # fresh identities every grading
            assert verify(declared, special_case, sandbox=sandbox).resolution is not Resolution.FULL
            assert verify(declared, fixed, sandbox=sandbox).resolution is Resolution.FULL


def test_a_declared_identity_written_in_the_code_is_named_with_the_fix(tmp_path):
    from envcore.factory.byo import ImportProblem

    folder = shadowed_scenario(tmp_path, {"values": []})
    auth = folder / "app" / "auth.py"
    auth.write_text(auth.read_text() + '\nADMIN_TOKEN = "tok_9e04b6d2c8a15377"\n')
    with pytest.raises(ImportProblem) as caught:
        load_bundle_dir(folder)
    assert "bob.marsh's token 'tok_9e04b6d2c8a15377' is written in app/auth.py" in str(caught.value)
    assert "data file" in str(caught.value)


SHIPPED_DATABASE_STORE = SQLITE_AT_IMPORT.replace(
    '''db.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, owner TEXT, text TEXT)")
if db.execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0:
    db.executemany("INSERT INTO notes (id, owner, text) VALUES (?, ?, ?)",
                   [(1, "1", "alice-secret-7731"), (2, "2", "bob-note-1182")])
    db.commit()
''', "")


def test_a_shipped_sqlite_database_imports_as_sql_text_and_is_rebuilt_for_every_run(tmp_path, capsys):
    import sqlite3

    from envcore.runner.databases import MARKER

    assert "CREATE TABLE" not in SHIPPED_DATABASE_STORE  # the app only opens the file it ships
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", store_text=SHIPPED_DATABASE_STORE)
    folder = scenario_folder(tmp_path, files, fixed, "main:app")
    database = sqlite3.connect(folder / "app" / "notes.db")
    database.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, owner TEXT, text TEXT)")
    database.executemany("INSERT INTO notes VALUES (?, ?, ?)", [(1, "1", "alice-secret-7731"), (2, "2", "bob-note-1182")])
    database.commit()
    database.close()
    assert (folder / "app" / "notes.db").read_bytes().startswith(b"SQLite format 3")

    bundle = load_bundle_dir(folder)
    text = bundle.files["notes.db"]
    assert text.startswith(MARKER) and "alice-secret-7731" in text  # the agent reads it as SQL
    imports_in_the_sandbox(folder, tmp_path, capsys)
    # exported, it stays text, and imports back to the same scenario
    from envcore.factory.byo import export_bundle_dir
    assert load_bundle_dir(export_bundle_dir(bundle, tmp_path / "exported")).scenario_id == bundle.scenario_id


def test_a_database_kept_as_text_cannot_attach_files_elsewhere(tmp_path):
    from envcore.runner.databases import MARKER, DatabaseBuildError, build_databases

    outside = tmp_path / "outside.db"
    root = tmp_path / "app"
    root.mkdir()
    files = {"app.db": MARKER + f"ATTACH DATABASE '{outside}' AS other;\nCREATE TABLE other.t (x);\n"}
    with pytest.raises(DatabaseBuildError) as caught:
        build_databases(root, files)
    assert "app.db" in str(caught.value) and not outside.exists()


def test_an_app_importing_a_library_it_may_not_use_is_told_the_rule_and_the_fix(tmp_path, capsys):
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", main_prelude="import redis\n")
    folder = scenario_folder(tmp_path, files, fixed, "main:app")
    assert main(["factory", "import", str(folder), "--out", str(tmp_path / "cache")]) == 1
    out = capsys.readouterr().out
    assert "No module named 'redis'" in out and "What an app may import" in out and "docs/bundle-format.md" in out


def test_an_installed_module_that_is_not_an_app_library_is_refused_in_the_sandbox_as_missing(tmp_path, capsys):
    """``numpy`` is installed (the Space's charts need it) but is not a library an app may use:
    the sandbox refuses it as missing, so an optional import takes its fallback and a plain one
    fails to load with the rule; the docs list exactly what an app may import."""
    optional = 'try:\n    import numpy as _np\nexcept ImportError:\n    _np = None\nassert _np is None\n'
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", main_prelude=optional)
    code = main(["factory", "import", str(scenario_folder(tmp_path / "optional", files, fixed, "main:app")),
                 "--out", str(tmp_path / "cache")])
    assert code == 0, capsys.readouterr().out
    files, fixed = arranged("store.py", "auth.py", "notes.py", "main.py", main_prelude="import numpy\n")
    folder = scenario_folder(tmp_path / "plain", files, fixed, "main:app")
    assert main(["factory", "import", str(folder), "--out", str(tmp_path / "cache")]) == 1
    out = capsys.readouterr().out
    assert "No module named 'numpy' for apps" in out and "What an app may import" in out
