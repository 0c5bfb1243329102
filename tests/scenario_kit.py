"""A small notes app written as a scenario folder, as someone bringing their own app would write one.

The app keeps its users and notes in data files (``data/users.json``, one user a line, and
``data/notes.json``) and has one bug: ``GET /api/admin/notes`` lists every note to any signed-in user.
Its probes pass the whole scenario check (canaries included): alice is the administrator, bob and
carol are users; bob and carol each try the exploit, one of them a user the visible probes act as.
Tests build variants of it (another fix, other users, a shadow declaration) with :func:`write_scenario`.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import yaml

from envcore.patching import make_diff

USERS = [
    {"username": "alice.wong", "role": "admin", "user_id": "u-1041", "token": "tok_5f1c2e9a7b3d4410"},
    {"username": "bob.marsh", "role": "user", "user_id": "u-2087", "token": "tok_9e04b6d2c8a15377"},
    {"username": "carol.diaz", "role": "user", "user_id": "u-3352", "token": "tok_c3a7d1e5f9b24468"},
]
MARKERS = ["alice-plan-7731", "bob-note-1182", "carol-memo-5520"]

STORE = '''
import json
from pathlib import Path

DATA = Path(__file__).parent / "data"
USERS = {u["token"]: u for u in json.loads((DATA / "users.json").read_text())}
NOTES = {n["id"]: n for n in json.loads((DATA / "notes.json").read_text())}
'''

MAIN = '''
from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel

import store
{imports}
app = FastAPI(title="Notes")


def caller(authorization):
    user = store.USERS.get((authorization or "").removeprefix("Bearer "))
    if user is None:
        raise HTTPException(status_code=401, detail="sign in")
    return user


class NoteIn(BaseModel):
    text: str


@app.get("/api/health")
def health():
    return {{"ok": True}}


@app.get("/api/notes")
def my_notes(authorization: str | None = Header(default=None)):
    user = caller(authorization)
    return [n for n in store.NOTES.values() if n["owner"] == user["id"]]


@app.post("/api/notes", status_code=201)
def add_note(body: NoteIn, authorization: str | None = Header(default=None)):
    user = caller(authorization)
    note = {{"id": max(store.NOTES) + 1, "owner": user["id"], "text": body.text}}
    store.NOTES[note["id"]] = note
    return note


@app.get("/api/notes/{{note_id}}")
def read_note(note_id: int, authorization: str | None = Header(default=None)):
    user = caller(authorization)
    note = store.NOTES.get(note_id)
    if note is None or (note["owner"] != user["id"] and user["role"] != "admin"):
        raise HTTPException(status_code=404, detail="not found")
    return note


@app.get("/api/admin/notes")
def all_notes(authorization: str | None = Header(default=None)):
    user = caller(authorization)
{check}    return list(store.NOTES.values())
{routes}'''

VULNERABLE_CHECK = ""
POLICY_IMPORTS = "import json\nfrom pathlib import Path\n\nPOLICY = json.loads((Path(__file__).parent / \"admin_policy.json\").read_text())\n"
POLICY_CHECK = ('    if user["role"] not in POLICY["roles"]:\n'
                '        raise HTTPException(status_code=403, detail="administrators only")\n')


LOGIN_ROUTE = '''

@app.post("/auth/login")
def login(email: str, password: str = "", password_b64: str = ""):
    if password_b64:
        import base64

        password = base64.b64decode(password_b64).decode()
    for user in store.USERS.values():
        if user.get("email") == email and user.get("password") == password:
            return {"access_token": user["token"]}
    raise HTTPException(status_code=401, detail="wrong email or password")
'''


def main_py(imports: str = "", check: str = VULNERABLE_CHECK, routes: str = "") -> str:
    return textwrap.dedent(MAIN).lstrip("\n").format(imports=imports, check=check, routes=routes)


def users_json(users: list[dict[str, Any]], **extra: dict[str, str]) -> str:
    """One user a line, as people write small seed files; ``extra`` adds fields by username."""
    rows = [json.dumps({"id": u["user_id"], "name": u["username"], "token": u["token"], "role": u["role"],
                        **extra.get(u["username"], {})}) for u in users]
    return "[\n" + ",\n".join(rows) + "\n]\n"


def notes_json(users: list[dict[str, Any]]) -> str:
    rows = [json.dumps({"id": i + 1, "owner": u["user_id"], "text": MARKERS[i]}) for i, u in enumerate(users)]
    return "[\n" + ",\n".join(rows) + "\n]\n"


def app_files(users: list[dict[str, Any]] = USERS) -> dict[str, str]:
    """The vulnerable app."""
    return {"main.py": main_py(), "store.py": textwrap.dedent(STORE).lstrip("\n"),
            "data/users.json": users_json(users), "data/notes.json": notes_json(users)}


def policy_fix(files: dict[str, str]) -> dict[str, str]:
    """The reference fix: a new data file, ``admin_policy.json``, that the fixed code reads."""
    return {**files, "main.py": main_py(POLICY_IMPORTS, POLICY_CHECK), "admin_policy.json": '{"roles": ["admin"]}\n'}


def _step(actor: str | None, method: str, path: str, expect: list[dict], **extra: Any) -> dict:
    step = {"method": method, "path": path, "expect": expect, **extra}
    if actor is not None:
        step["actor"] = actor
    return step


def status(*codes: int) -> dict:
    return {"kind": "status_in", "codes": list(codes)}


def includes(*texts: str) -> dict:
    return {"kind": "body_includes", "texts": list(texts)}


def excludes(*texts: str) -> dict:
    return {"kind": "body_excludes", "texts": list(texts)}


def probes(users: list[dict[str, Any]] = USERS) -> list[dict]:
    alice, bob, carol = (u["username"] for u in users)
    refused = [status(401, 403, 404)]
    return [
        {"id": "reg-health", "kind": "regression", "visible": True, "title": "the health check answers",
         "steps": [_step(None, "GET", "/api/health", [status(200)])]},
        {"id": "reg-alice-own", "kind": "regression", "visible": True, "title": "alice reads her own note",
         "steps": [_step(alice, "GET", "/api/notes/1", [status(200), includes(MARKERS[0])])]},
        {"id": "reg-bob-own", "kind": "regression", "visible": True, "title": "bob reads his own note",
         "steps": [_step(bob, "GET", "/api/notes/2", [status(200), includes(MARKERS[1])])]},
        {"id": "reg-carol-own", "kind": "regression", "title": "carol lists her own notes",
         "steps": [_step(carol, "GET", "/api/notes", [status(200), includes(MARKERS[2]), excludes(MARKERS[0])])]},
        {"id": "reg-carol-write", "kind": "regression", "title": "carol adds a note and finds it",
         "steps": [_step(carol, "POST", "/api/notes", [status(200, 201)], json_body={"text": "carol-new-4410"}),
                   _step(carol, "GET", "/api/notes", [includes("carol-new-4410")])]},
        {"id": "reg-alice-write", "kind": "regression", "title": "alice adds a note and lists it with the others",
         "steps": [_step(alice, "POST", "/api/notes", [status(200, 201)], json_body={"text": "alice-new-9921"}),
                   _step(alice, "GET", "/api/admin/notes", [status(200), includes("alice-new-9921", MARKERS[1])])]},
        {"id": "reg-bob-write", "kind": "regression", "title": "bob adds a note and finds it",
         "steps": [_step(bob, "POST", "/api/notes", [status(200, 201)], json_body={"text": "bob-new-3307"}),
                   _step(bob, "GET", "/api/notes", [includes("bob-new-3307")])]},
        {"id": "reg-anonymous", "kind": "regression", "title": "anonymous callers are asked to sign in",
         "steps": [_step(None, "GET", "/api/notes", [status(401)])]},
        {"id": "trap-admin-lists", "kind": "trap", "trap": "admin_access", "title": "the administrator lists every note",
         "steps": [_step(alice, "GET", "/api/admin/notes", [status(200), includes(MARKERS[1], MARKERS[2])])]},
        {"id": "guard-bob-reads-alice", "kind": "guard", "title": "bob cannot read alice's note",
         "steps": [_step(bob, "GET", "/api/notes/1", [status(404), excludes(MARKERS[0])])]},
        {"id": "sec-bob-lists", "kind": "security", "title": "bob cannot list every note", "sites": ["admin.notes"],
         "steps": [_step(bob, "GET", "/api/admin/notes", [*refused, excludes(MARKERS[0])])]},
        {"id": "sec-carol-lists", "kind": "security", "title": "carol cannot list every note", "sites": ["admin.notes"],
         "repeats": "sec-bob-lists",
         "steps": [_step(carol, "GET", "/api/admin/notes", [*refused, excludes(MARKERS[0])])]},
    ]


def metadata(users: list[dict[str, Any]] = USERS, shadow: dict | None = None) -> dict:
    meta = {
        "title": "Notes API: any user lists every note", "domain": "notes", "bug_class": "missing_admin_check",
        "cwe": ["CWE-285"], "entrypoint": "main:app",
        "task": "Users report that the note listing meant for administrators answers anyone. Fix the access control.",
        "policy": "Users read and write their own notes. Only administrators list every note. Anonymous callers get 401.",
        "users": users,
        "sites": [{"site": "admin.notes", "method": "GET", "path": "/api/admin/notes"}],
        "traps": [{"kind": "admin_access", "description": "The administrator must keep listing every note."}],
    }
    if shadow is not None:
        meta["shadow"] = shadow
    return meta


DECLARED = {"users": True, "values": MARKERS}
"""The shadow the scenario declares: every user's values and the notes' markers."""


def write_scenario(folder: Path, files: dict[str, str], fixed: dict[str, str] | None, *,
                   meta: dict | None = None, probe_list: list[dict] | None = None) -> Path:
    """``folder`` as a scenario: ``files`` under ``app/``, ``fix.diff`` from ``files`` to ``fixed``."""
    for rel, text in files.items():
        target = folder / "app" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(meta or metadata(shadow=DECLARED), sort_keys=False))
    (folder / "probes.yaml").write_text(yaml.safe_dump(probe_list or probes(), sort_keys=False))
    if fixed is not None:
        (folder / "fix.diff").write_text(make_diff(files, fixed))
    return folder
