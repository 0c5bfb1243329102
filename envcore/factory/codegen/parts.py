"""Source fragments of a generated app: config, store, schemas, security, handlers.

Every place a bug can be planted is a *code site*: a key such as ``detail.check`` whose secure
fragment is written here. A flaw is a function ``(names, secure_fragment) -> fragment`` supplied by a
bug-class module; :class:`Sites` swaps it in. Rendering the same spec with and without flaws gives the
vulnerable app and the secure one, and their diff is the reference fix, so the fix is exactly as big
as the bug and touches nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envcore.factory.codegen.names import PY_TYPES, SQL_TYPES, Names, a
from envcore.scenario.spec import ScenarioSpec, UserSpec

Mutation = Callable[[Names, Any], Any]


class Sites:
    """Resolves code sites to their secure fragment or to a flaw's replacement."""

    def __init__(self, names: Names, flaws: Mapping[str, Mutation]) -> None:
        self.names = names
        self.flaws = dict(flaws)
        self.used: set[str] = set()

    def __call__(self, key: str, secure: Any) -> Any:
        self.used.add(key)
        flaw = self.flaws.get(key)
        if flaw is None:
            return secure
        mutated = flaw(self.names, secure)
        if mutated == secure:
            raise ValueError(f"the flaw for code site {key!r} leaves the secure code unchanged")
        return mutated

    def unused_flaws(self) -> set[str]:
        return set(self.flaws) - self.used


@dataclass
class Route:
    """One handler, independent of auth style and layout."""

    group: str
    name: str
    methods: tuple[str, ...]
    path: str
    auth: str  # "public" | "user" | "admin"
    params: list[str]
    body: list[str]
    status_code: int | None = None
    needs_request: bool = False
    doc: str = ""
    response_model: str | None = None
    """The ``response_model`` of the route (the ORM styles serialise rows through schemas)."""


@dataclass
class AppParts:
    """Everything the layout renderer assembles into files."""

    names: Names
    config: list[str]
    store: list[str]
    store_exports: list[str]
    schemas: list[str]
    schema_exports: list[str]
    security: list[str]
    security_exports: list[str]
    routes: list[Route]
    data_files: dict[str, str] = field(default_factory=dict)
    uses_files: bool = False
    uses_redirect: bool = False


def py(value: Any) -> str:
    """A Python literal for generated source, double-quoted like the hand-written code around it."""
    if isinstance(value, str):
        body = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{body}"' if body.isprintable() else repr(value)
    if isinstance(value, tuple):
        inner = ", ".join(py(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(py(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py(k)}: {py(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _id_literal(names: Names, raw: str) -> Any:
    return int(raw) if names.id_type == "int" else raw


# ---------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------


def config_lines(spec: ScenarioSpec, names: Names, uses_files: bool, uses_redirect: bool) -> list[str]:
    base = "Path(__file__).resolve().parent.parent" if names.package else "Path(__file__).resolve().parent"
    lines = [
        f"SERVICE_NAME = {py(names.service)}",
        f'SECRET_KEY_FILE = {base} / "instance" / "secrets.txt"',
        f'SEED_FILE = {base} / "data" / "seed.json"',
    ]
    if uses_files:
        lines.append(f'UPLOAD_DIR = {base} / "uploads"')
    if uses_redirect:
        lines.append('APP_HOST = "app.example.test"')
    lines.append(f"SENSITIVE_FIELDS = {py(names.sensitive)}")
    shared = ("id", *[f for f in names.fields if f not in names.sensitive])
    lines.append(f"SHARED_FIELDS = {py(shared)}")
    lines.append('PROFILE_FIELDS = ("id", "username", "display_name", "email", "role")')
    return lines


# ---------------------------------------------------------------------------------------------
# store: identical function names for the dict and sqlite styles
# ---------------------------------------------------------------------------------------------

USER_COLUMNS = ("id", "username", "display_name", "email", "role", "password_hash", "api_key")


def _user_rows(spec: ScenarioSpec, names: Names) -> list[dict[str, Any]]:
    rows = []
    for u in spec.users:
        row = {
            "id": _id_literal(names, u.user_id),
            "username": u.username,
            "display_name": u.display_name,
            "email": u.email,
            "role": u.role.value,
            "password_hash": u.password_hash,
            "api_key": u.api_key,
        }
        if names.auth == "oauth2_jwt":  # a sign-in password, hashed when the app seeds its store
            row = {k: v for k, v in row.items() if k != "password_hash"} | {"password": login_password(u)}
        if names.tenant:
            row[names.tenant] = u.tenant
        rows.append(row)
    return rows


def _record_rows(spec: ScenarioSpec, names: Names) -> list[dict[str, Any]]:
    rows = []
    for r in spec.records:
        owner = spec.user(r.owner)
        row: dict[str, Any] = {"id": _id_literal(names, r.record_id), names.owner: _id_literal(names, owner.user_id)}
        if names.tenant:
            row[names.tenant] = owner.tenant
        for f in names.fields:
            row[f] = r.values[f]
        row["share_code"] = r.share_code
        rows.append(row)
    return rows


def login_password(user: UserSpec) -> str:
    """The password a user signs in with where the app has a password login: the user's token, so
    that grading, which gives every user a fresh token, gives them a fresh password with it."""
    return user.token


def credential_of(user: UserSpec, auth: str) -> str:
    """What a request carries to prove it comes from ``user``: its API key for ``api_key``, its
    password for ``oauth2_jwt`` (exchanged for a token at the login route), else its session token."""
    return user.api_key if auth == "api_key" else user.token


def keeps_sessions(auth: str) -> bool:
    """Whether the store keeps a ``sessions`` table of tokens (every style but the API key on the user
    row and the signed JWT, which need none)."""
    return auth not in ("api_key", "oauth2_jwt")


def seed_json(spec: ScenarioSpec, names: Names) -> str:
    """The seeded users, sessions and records, as the ``data/seed.json`` file the store loads."""
    tables = {"users": _user_rows(spec, names)}
    if keeps_sessions(names.auth):
        tables["sessions"] = [{"token": u.token, "user_id": _id_literal(names, u.user_id)} for u in spec.users]
    tables[names.p] = _record_rows(spec, names)
    # One row per line: readable, diff-friendly, and written by the C encoder (indent= is pure Python).
    blocks = []
    for table, rows in tables.items():
        body = ",\n".join(f"  {json.dumps(row, ensure_ascii=False)}" for row in rows)
        blocks.append(f" {json.dumps(table)}: [\n{body}\n ]")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def store_lines(spec: ScenarioSpec, names: Names) -> tuple[list[str], list[str]]:
    """Store code. Seed data lives in ``data/seed.json`` (see :func:`seed_json`), so the code of two
    scenarios with the same structure is identical and only their data differs."""
    exports = [
        *credential_lookups(names.auth), "get_user", "all_users", "update_user",
        names.get, names.list, names.search, names.create, names.update, names.delete, names.shared,
    ]
    user_cols = USER_COLUMNS + ((names.tenant,) if names.tenant else ())
    if spec.style.store == "dict":
        return _dict_store(names, user_cols), exports
    return _sqlite_store(spec, names, user_cols), exports


def credential_lookups(auth: str) -> tuple[str, ...]:
    """The store functions that find the user behind a credential, per auth style."""
    if auth == "api_key":
        return ("get_user_by_api_key",)
    if auth == "oauth2_jwt":
        return ("get_user_by_username",)
    return ("get_user_by_token",)


def _key_fn(names: Names) -> list[str]:
    if names.id_type == "int":
        return [
            "def _key(value):",
            "    try:",
            "        return int(value)",
            "    except (TypeError, ValueError):",
            "        return None",
        ]
    return ["def _key(value):", "    return None if value is None else str(value)"]


def _dict_store(names: Names, user_cols) -> list[str]:
    n = names
    lines = [
        f'SEED = json.loads({n.cfg("SEED_FILE")}.read_text(encoding="utf-8"))',
        'USERS = {u["id"]: u for u in SEED["users"]}',
        *(['SESSIONS = {s["token"]: s["user_id"] for s in SEED["sessions"]}'] if keeps_sessions(n.auth) else []),
        f'{n.table} = {{r["id"]: r for r in SEED[{py(n.p)}]}}',
        f"USER_COLUMNS = {py(user_cols)}",
        *_hash_seed_passwords(n, "USERS.values()"),
        "",
        "",
    ]
    lines += _key_fn(n)
    if n.id_type == "int":
        lines += ["", "", f"_next_id = itertools.count(max({n.table}, default=0) + 1)"]
        new_id = "next(_next_id)"
    else:
        lines += ["", "", "_next_id = itertools.count(1)"]
        new_id = f'f"{n.s[:3]}_new{{next(_next_id):04d}}"'
    if n.auth == "api_key":
        lookup = [
            "def get_user_by_api_key(api_key):",
            "    return next((u for u in USERS.values() if api_key and u[\"api_key\"] == api_key), None)",
        ]
    elif n.auth == "oauth2_jwt":
        lookup = [
            "def get_user_by_username(username):",
            "    return next((u for u in USERS.values() if u[\"username\"] == username), None)",
        ]
    else:
        lookup = [
            "def get_user_by_token(token):",
            "    user_id = SESSIONS.get(token)",
            "    return USERS.get(user_id) if user_id is not None else None",
        ]
    lines += [
        "",
        "",
        *lookup,
        "",
        "",
        "def get_user(user_id):",
        "    return USERS.get(_key(user_id))",
        "",
        "",
        "def all_users():",
        "    return list(USERS.values())",
        "",
        "",
        "def update_user(user_id, changes):",
        "    user = USERS[user_id]",
        "    user.update({k: v for k, v in changes.items() if k in USER_COLUMNS and k != \"id\"})",
        "    return user",
        "",
        "",
        f"def {n.get}(record_id):",
        f"    return {n.table}.get(record_id)",
        "",
        "",
        f"def {n.list}(owner=None, tenant=None):",
        "    return [",
        f"        r for r in {n.table}.values()",
        f"        if (owner is None or r[{py(n.owner)}] == owner)",
    ]
    if n.tenant:
        lines.append(f"        and (tenant is None or r[{py(n.tenant)}] == tenant)")
    lines += [
        "    ]",
        "",
        "",
        f"def {n.search}(query, owner=None, tenant=None):",
        "    needle = query.lower()",
        f"    return [r for r in {n.list}(owner, tenant) if needle in str(r[{py(n.title)}]).lower()]",
        "",
        "",
        f"def {n.create}(values):",
        f"    record = {{\"id\": {new_id}, **values, \"share_code\": None}}",
        f"    {n.table}[record[\"id\"]] = record",
        "    return record",
        "",
        "",
        f"def {n.update}(record_id, changes):",
        f"    record = {n.table}[record_id]",
        "    record.update({k: v for k, v in changes.items() if k != \"id\"})",
        "    return record",
        "",
        "",
        f"def {n.delete}(record_id):",
        f"    {n.table}.pop(record_id, None)",
        "",
        "",
        f"def {n.shared}(code):",
        f"    return next((r for r in {n.table}.values() if code and r.get(\"share_code\") == code), None)",
    ]
    return lines


def _hash_seed_passwords(names: Names, accounts: str) -> list[str]:
    """With a password login, the seeded passwords are stored hashed (as signing up stores them)."""
    if names.auth != "oauth2_jwt":
        return []
    return [
        f"for account in {accounts}:  # the seed holds passwords; the store keeps their hashes",
        '    account["password_hash"] = hash_password(account.pop("password"))',
    ]


def _sqlite_lookup(names: Names) -> list[str]:
    if names.auth == "api_key":
        return [
            "def get_user_by_api_key(api_key):",
            '    return _one("SELECT * FROM users WHERE api_key = ?", (api_key,)) if api_key else None',
        ]
    if names.auth == "oauth2_jwt":
        return [
            "def get_user_by_username(username):",
            '    return _one("SELECT * FROM users WHERE username = ?", (username,))',
        ]
    return [
        "def get_user_by_token(token):",
        '    return _one("SELECT users.* FROM users JOIN sessions ON sessions.user_id = users.id WHERE sessions.token = ?", (token,))',
    ]


def _sqlite_store(spec: ScenarioSpec, names: Names, user_cols) -> list[str]:
    n = names
    id_sql = "INTEGER" if n.id_type == "int" else "TEXT"
    user_defs = [f"id {id_sql} PRIMARY KEY"] + [f"{c} TEXT" for c in user_cols if c != "id"]
    field_types = {f.name: f.kind for f in spec.domain.resource.fields}
    rec_defs = [f"id {id_sql} PRIMARY KEY", f"{n.owner} {id_sql} NOT NULL"]
    if n.tenant:
        rec_defs.append(f"{n.tenant} TEXT")
    rec_defs += [f"{f} {SQL_TYPES[field_types[f]]}" for f in n.fields]
    rec_defs.append("share_code TEXT")
    rec_cols = ["id", n.owner] + ([n.tenant] if n.tenant else []) + list(n.fields) + ["share_code"]
    lines = [
        '_db = sqlite3.connect(":memory:", check_same_thread=False)',
        "_db.row_factory = sqlite3.Row",
        "_db.executescript(",
        f'    "CREATE TABLE users ({", ".join(user_defs)});"',
        *([f'    "CREATE TABLE sessions (token TEXT PRIMARY KEY, user_id {id_sql} NOT NULL);"']
          if keeps_sessions(n.auth) else []),
        f'    "CREATE TABLE {n.p} ({", ".join(rec_defs)});"',
        ")",
        f"USER_COLUMNS = {py(user_cols)}",
        f"{n.table}_COLUMNS = {py(tuple(rec_cols))}",
        "",
        "",
        "def _load_seed():",
        f'    seed = json.loads({n.cfg("SEED_FILE")}.read_text(encoding="utf-8"))',
        *[f"    {line}" for line in _hash_seed_passwords(n, 'seed["users"]')],
        "    for table, columns, rows in (",
        '        ("users", USER_COLUMNS, seed["users"]),',
        *(['        ("sessions", ("token", "user_id"), seed["sessions"]),'] if keeps_sessions(n.auth) else []),
        f'        ({py(n.p)}, {n.table}_COLUMNS, seed[{py(n.p)}]),',
        "    ):",
        '        placeholders = ", ".join("?" * len(columns))',
        "        _db.executemany(",
        '            f"INSERT INTO {table} ({\', \'.join(columns)}) VALUES ({placeholders})",',
        "            [tuple(row.get(c) for c in columns) for row in rows],",
        "        )",
        "    _db.commit()",
        "",
        "",
        "_load_seed()",
        "",
        "",
    ]
    lines += _key_fn(n)
    if n.id_type == "int":
        new_id = "None"
    else:
        lines += ["", "", "_next_id = itertools.count(1)"]
        new_id = f'f"{n.s[:3]}_new{{next(_next_id):04d}}"'
    lines += [
        "",
        "",
        "def _one(sql, args=()):",
        "    row = _db.execute(sql, args).fetchone()",
        "    return dict(row) if row is not None else None",
        "",
        "",
        "def _all(sql, args=()):",
        "    return [dict(row) for row in _db.execute(sql, args).fetchall()]",
        "",
        "",
        *_sqlite_lookup(n),
        "",
        "",
        "def get_user(user_id):",
        '    return _one("SELECT * FROM users WHERE id = ?", (_key(user_id),))',
        "",
        "",
        "def all_users():",
        '    return _all("SELECT * FROM users ORDER BY id")',
        "",
        "",
        "def update_user(user_id, changes):",
        "    for column, value in changes.items():",
        '        if column in USER_COLUMNS and column != "id":',
        '            _db.execute(f"UPDATE users SET {column} = ? WHERE id = ?", (value, user_id))',
        "    _db.commit()",
        "    return get_user(user_id)",
        "",
        "",
        f"def {n.get}(record_id):",
        f'    return _one("SELECT * FROM {n.p} WHERE id = ?", (record_id,))',
        "",
        "",
        f"def {n.list}(owner=None, tenant=None):",
        f'    sql, args = "SELECT * FROM {n.p} WHERE 1 = 1", []',
        "    if owner is not None:",
        f'        sql += " AND {n.owner} = ?"',
        "        args.append(owner)",
    ]
    if n.tenant:
        lines += [
            "    if tenant is not None:",
            f'        sql += " AND {n.tenant} = ?"',
            "        args.append(tenant)",
        ]
    lines += [
        '    return _all(sql + " ORDER BY id", args)',
        "",
        "",
        f"def {n.search}(query, owner=None, tenant=None):",
        "    needle = query.lower()",
        f"    return [r for r in {n.list}(owner, tenant) if needle in str(r[{py(n.title)}]).lower()]",
        "",
        "",
        f"def {n.create}(values):",
        f"    row = {{**values, \"id\": {new_id}, \"share_code\": None}}",
        f"    columns = [c for c in {n.table}_COLUMNS if c in row and row[c] is not None or c == \"{n.owner}\"]",
        "    cursor = _db.execute(",
        f'        f"INSERT INTO {n.p} ({{\', \'.join(columns)}}) VALUES ({{\', \'.join(\'?\' * len(columns))}})",',
        "        [row.get(c) for c in columns],",
        "    )",
        "    _db.commit()",
        f'    return {n.get}(row["id"] if row["id"] is not None else cursor.lastrowid)',
        "",
        "",
        f"def {n.update}(record_id, changes):",
        "    for column, value in changes.items():",
        f'        if column in {n.table}_COLUMNS and column != "id":',
        f'            _db.execute(f"UPDATE {n.p} SET {{column}} = ? WHERE id = ?", (value, record_id))',
        "    _db.commit()",
        f"    return {n.get}(record_id)",
        "",
        "",
        f"def {n.delete}(record_id):",
        f'    _db.execute("DELETE FROM {n.p} WHERE id = ?", (record_id,))',
        "    _db.commit()",
        "",
        "",
        f"def {n.shared}(code):",
        "    if not code:",
        "        return None",
        f'    return _one("SELECT * FROM {n.p} WHERE share_code = ?", (code,))',
    ]
    return lines


# ---------------------------------------------------------------------------------------------
# schemas
# ---------------------------------------------------------------------------------------------


def schema_lines(spec: ScenarioSpec, names: Names, sites: Sites, with_profile: bool) -> tuple[list[str], list[str]]:
    n = names
    kinds = {f.name: f.kind for f in spec.domain.resource.fields}
    create_fields = []
    for f in n.fields:
        t = PY_TYPES[kinds[f]]
        create_fields.append(f"    {f}: {t}" if f == n.title else f"    {f}: {t} | None = None")
    create_fields = sites("schemas.create", create_fields)
    update_fields = [f"    {f}: {PY_TYPES[kinds[f]]} | None = None" for f in n.fields]
    lines = [
        f"class {n.model}Create(BaseModel):",
        *create_fields,
        "",
        "",
        f"class {n.model}Update(BaseModel):",
        *update_fields,
    ]
    exports = [f"{n.model}Create", f"{n.model}Update"]
    if with_profile:
        profile = ["    display_name: str | None = None", "    email: str | None = None"]
        lines += ["", "", "class ProfileUpdate(BaseModel):", *sites("schemas.profile", profile)]
        exports.append("ProfileUpdate")
    return lines, exports


# ---------------------------------------------------------------------------------------------
# security: identity resolution, auth style helpers, permission helpers
# ---------------------------------------------------------------------------------------------


def security_lines(spec: ScenarioSpec, names: Names, sites: Sites) -> tuple[list[str], list[str]]:
    """Identity resolution, the auth style's helpers and the permission helpers of the compact auth
    styles (a bearer token the app looks up itself), for dict rows and for ORM rows alike."""
    lines, exports = identity_lines(names, sites)
    policy, policy_exports = policy_lines(names, sites)
    return lines + ["", ""] + policy, exports + ["logger", "resolve_user", *policy_exports]


def identity_lines(names: Names, sites: Sites) -> tuple[list[str], list[str]]:
    """``resolve_user`` (code site ``auth.identity``) and the helpers handlers obtain ``user`` with:
    a ``Depends`` dependency, an inline call, or a decorator. ORM rows come from the request's
    database session, so every helper takes or receives ``db``."""
    n = names
    resolve_body = sites(
        "auth.identity",
        [
            'scheme, _, token = request.headers.get("authorization", "").partition(" ")',
            'if scheme.lower() != "bearer" or not token:',
            "    return None",
            f"return {n.call('get_user_by_token', 'token.strip()')}",
        ],
    )
    lines = [
        f"def resolve_user(request: Request{', db: Session' if n.orm else ''}):",
        '    """Return the user that owns the request\'s bearer token, or None."""',
        *[f"    {line}" for line in resolve_body],
        "",
        "",
    ]
    style = n.auth
    is_admin = f'{n.attr("user", "role")} != "admin"'
    t = n.user_class
    # ORM sessions are synchronous, so their helpers are plain functions (FastAPI runs them in its
    # thread pool); the compact stores keep the coroutines they always had.
    fn = "def" if n.orm else "async def"
    if style == "depends":
        lines += [
            f"{fn} current_user(request: Request{', db: Session = Depends(get_db)' if n.orm else ''}) -> {t}:",
            f"    user = resolve_user(request{', db' if n.orm else ''})",
            "    if user is None:",
            '        raise HTTPException(status_code=401, detail="authentication required")',
            "    return user",
            "",
            "",
            f"{fn} require_admin(user: {t} = Depends(current_user)) -> {t}:",
            f"    if {is_admin}:",
            '        raise HTTPException(status_code=403, detail="administrators only")',
            "    return user",
        ]
        exports = ["current_user", "require_admin"]
    elif style == "inline":
        lines += [
            f"def authenticate(request: Request{', db: Session' if n.orm else ''}) -> {t}:",
            f"    user = resolve_user(request{', db' if n.orm else ''})",
            "    if user is None:",
            '        raise HTTPException(status_code=401, detail="authentication required")',
            "    return user",
            "",
            "",
            f"def ensure_admin(user: {t}) -> None:",
            f"    if {is_admin}:",
            '        raise HTTPException(status_code=403, detail="administrators only")',
        ]
        exports = ["authenticate", "ensure_admin"]
    else:
        call = "handler(*args, **kwargs)" if n.orm else "await handler(*args, **kwargs)"
        resolve = 'resolve_user(request, kwargs["db"])' if n.orm else "resolve_user(request)"
        lines += [
            "def login_required(handler):",
            '    """Authenticate the caller and put the user on request.state."""',
            "",
            "    @functools.wraps(handler)",
            f"    {fn} wrapper(*args, **kwargs):",
            '        request = kwargs["request"]',
            f"        user = {resolve}",
            "        if user is None:",
            '            raise HTTPException(status_code=401, detail="authentication required")',
            "        request.state.user = user",
            f"        return {call}",
            "",
            "    return wrapper",
            "",
            "",
            "def admin_required(handler):",
            '    """Like login_required, and the caller must be an administrator."""',
            "",
            "    @functools.wraps(handler)",
            f"    {fn} wrapper(*args, **kwargs):",
            '        request = kwargs["request"]',
            f"        user = {resolve}",
            "        if user is None:",
            '            raise HTTPException(status_code=401, detail="authentication required")',
            f"        if {is_admin}:",
            '            raise HTTPException(status_code=403, detail="administrators only")',
            "        request.state.user = user",
            f"        return {call}",
            "",
            "    return wrapper",
        ]
        exports = ["login_required", "admin_required"]
    return lines, exports


def policy_lines(names: Names, sites: Sites) -> tuple[list[str], list[str]]:
    """The permission helpers every handler asks (code sites ``policy.*``): who may read or change a
    record, the scope of a listing (store filters, or an ORM ``where`` clause), and the view of a
    record that hides its sensitive fields."""
    n = names
    role, rec = n.attr("user", "role"), n.rec
    owner_test = f"{n.attr(rec, n.owner)} == {n.attr('user', 'id')}"
    read_body = [f'if {role} == "admin":', "    return True"]
    if n.tenant:
        read_body += [
            f'if {role} == "manager" and {n.attr(rec, n.tenant)} == {n.attr("user", n.tenant)}:',
            "    return True",
        ]
    read_body += [f"return {owner_test}"]
    modify_body = [f'if {role} == "admin":', "    return True", f"return {owner_test}"]
    if n.orm:
        scope_body = [f'if {role} == "admin":', "    return true()"]
        if n.tenant:
            scope_body += [f'if {role} == "manager":', f"    return {n.model}.{n.tenant} == user.{n.tenant}"]
        scope_body += [f"return {n.model}.{n.owner} == user.id"]
        scope_type = "ColumnElement[bool]"
        scope_doc = f"The filter that limits queries to the {n.p} the caller may see."
        present_body = [
            f"view = {n.model}Read.model_validate({rec})",
            f'if {role} == "admin" or {owner_test}:',
            "    return view",
            "return view.model_copy(update=dict.fromkeys(SENSITIVE_FIELDS))",
        ]
        types = (f"user: User, {rec}: {n.model}", f"{n.model}Read")
    else:
        scope_body = ['if user["role"] == "admin":', "    return {}"]
        if n.tenant:
            scope_body += ['if user["role"] == "manager":', f'    return {{"tenant": user[{py(n.tenant)}]}}']
        scope_body += ['return {"owner": user["id"]}']
        scope_type = "dict"
        scope_doc = f"Store filters that limit listings to the {n.p} the caller may see."
        present_body = [
            f'if user["role"] == "admin" or record[{py(n.owner)}] == user["id"]:',
            "    return dict(record)",
            "return {k: v for k, v in record.items() if k not in SENSITIVE_FIELDS}",
        ]
        types = ("user: dict, record: dict", "dict")
    who = "owner and administrators" + (f", and managers of the same {n.tenant[:-3]}" if n.tenant else "")
    lines = [
        f"def can_read({types[0]}) -> bool:",
        f'    """Readers of {a(n.s)}: its {who}."""',
        *[f"    {line}" for line in sites("policy.can_read", read_body)],
        "",
        "",
        f"def can_modify({types[0]}) -> bool:",
        f'    """Only the owner of {a(n.s)} and administrators may change or delete it."""',
        *[f"    {line}" for line in sites("policy.can_modify", modify_body)],
        "",
        "",
        f"def visible_scope(user: {n.user_class}) -> {scope_type}:",
        f'    """{scope_doc}"""',
        *[f"    {line}" for line in sites("policy.scope", scope_body)],
        "",
        "",
        f"def present({types[0]}) -> {types[1]}:",
        '    """Hide sensitive fields from everyone but the owner and administrators."""',
        *[f"    {line}" for line in present_body],
    ]
    return lines, ["can_read", "can_modify", "visible_scope", "present"]
