"""The ORM stores: SQLAlchemy 2 (``DeclarativeBase``, ``Mapped[...]``) or SQLModel tables on a SQLite file.

A production FastAPI app keeps its data in a database through an ORM: an engine, a ``Session`` per
request from the ``get_db`` dependency, mapped classes for the tables, a few query helpers. This
module writes those parts for the ``sqlalchemy`` and ``sqlmodel`` stores:

* **database**: the engine on ``sqlite:///<app folder>/app.db``, the session factory, the declarative
  base and ``get_db``. The database is a local demo file, so its journal stays in memory and writes
  skip ``fsync`` (pragmas on connect): nothing is created beside it and a request stays fast.
* **models**: ``User``, the resource, and the table of session tokens where the auth style keeps one.
* **crud**: lookups of the user behind a credential, and ``update_user``.
* **seed**: ``init_db``, which the app's lifespan hook runs at start-up: the tables are created afresh
  and filled from ``data/seed.json`` (a data file, so grading can swap identities in it).
* **response schemas**: what each route returns, as Pydantic models read from the rows
  (``from_attributes``): the views of a record, a share link, people, accounts, the backup.

SQLModel keeps its tables in a registry of their own (``class Base(SQLModel, registry=registry())``)
rather than SQLModel's process-wide default, so two apps loaded one after the other in one process
never define the same table twice.
"""

from __future__ import annotations

from envcore.factory.codegen.names import PY_TYPES, Names, a
from envcore.factory.codegen.parts import USER_COLUMNS, keeps_sessions, py
from envcore.scenario.spec import ScenarioSpec

TOKEN_MODEL = "SessionToken"
"""The mapped class of the ``sessions`` table (bearer and cookie styles)."""


def _kinds(spec: ScenarioSpec) -> dict[str, str]:
    return {f.name: f.kind for f in spec.domain.resource.fields}


def database_lines(names: Names) -> list[str]:
    """Engine, session factory, declarative base and the ``get_db`` dependency."""
    n = names
    url = n.cfg("DATABASE_URL")
    lines = [
        f'engine = create_engine({url}, connect_args={{"check_same_thread": False}})',
    ]
    if n.store == "sqlalchemy":
        lines.append("SessionLocal = sessionmaker(bind=engine, autoflush=False, expire_on_commit=False)")
    lines += [
        "",
        "",
        '@event.listens_for(engine, "connect")',
        "def _configure_sqlite(dbapi_connection, connection_record):",
        '    """A local demo database: the journal stays in memory and writes skip fsync."""',
        "    cursor = dbapi_connection.cursor()",
        '    cursor.execute("PRAGMA journal_mode=MEMORY")',
        '    cursor.execute("PRAGMA synchronous=OFF")',
        "    cursor.close()",
        "",
        "",
    ]
    if n.store == "sqlalchemy":
        lines += [
            "class Base(DeclarativeBase):",
            '    """Base class of the mapped tables."""',
            "",
            "",
            "def get_db():",
            '    """One database session per request."""',
            "    db = SessionLocal()",
            "    try:",
            "        yield db",
            "    finally:",
            "        db.close()",
        ]
    else:
        lines += [
            "class Base(SQLModel, registry=registry()):",
            '    """Base class of the tables (with a registry of their own)."""',
            "",
            "",
            "def get_db():",
            '    """One database session per request."""',
            "    with Session(engine) as db:",
            "        yield db",
        ]
    return lines


def _column(names: Names, name: str, py_type: str, *, nullable: bool = False, extra: str = "") -> str:
    """One mapped attribute: ``name: Mapped[str | None] = mapped_column(...)`` or the SQLModel field."""
    annotated = f"{py_type} | None" if nullable else py_type
    if names.store == "sqlalchemy":
        default = f" = mapped_column({extra})" if extra else ""
        return f"    {name}: Mapped[{annotated}]{default}"
    if extra:
        return f"    {name}: {annotated} = Field({'default=None, ' if nullable else ''}{extra})"
    return f"    {name}: {annotated}" + (" = None" if nullable else "")


def _id_column(names: Names, prefix: str) -> str:
    """The primary key: an integer the database assigns, or a string id made up for new rows."""
    if names.id_type == "int":
        if names.store == "sqlalchemy":
            return "    id: Mapped[int] = mapped_column(primary_key=True)"
        return "    id: int | None = Field(default=None, primary_key=True)"
    factory = f'lambda: f"{prefix}_{{uuid.uuid4().hex[:8]}}"'
    if names.store == "sqlalchemy":
        return f"    id: Mapped[str] = mapped_column(primary_key=True, default={factory})"
    return f"    id: str = Field(default_factory={factory}, primary_key=True)"


def _table(names: Names, cls: str, table: str, doc: str, columns: list[str]) -> list[str]:
    head = f"class {cls}(Base):" if names.store == "sqlalchemy" else f"class {cls}(Base, table=True):"
    return [head, f'    """{doc}"""', "", f'    __tablename__ = "{table}"', "", *columns]


def model_lines(spec: ScenarioSpec, names: Names) -> list[str]:
    """The mapped classes: ``User``, the resource, and the session tokens where the style keeps them."""
    n = names
    id_py = n.id_type
    fk = 'ForeignKey("users.id")' if n.store == "sqlalchemy" else 'foreign_key="users.id"'
    unique = "unique=True, index=True"
    user = [
        _id_column(n, "usr"),
        _column(n, "username", "str", extra=unique),
        _column(n, "display_name", "str"),
        _column(n, "email", "str"),
        _column(n, "role", "str"),
        _column(n, "password_hash", "str"),
        _column(n, "api_key", "str", extra="index=True"),
    ]
    if n.tenant:
        user.append(_column(n, n.tenant, "str", nullable=True))
    kinds = _kinds(spec)
    record = [
        _id_column(n, n.s[:3]),
        _column(n, n.owner, id_py, extra=fk),
    ]
    if n.tenant:
        record.append(_column(n, n.tenant, "str", nullable=True))
    for f in n.fields:
        record.append(_column(n, f, PY_TYPES[kinds[f]], nullable=f != n.title))
    record.append(_column(n, "share_code", "str", nullable=True, extra=unique))
    lines = _table(n, "User", "users", "An account.", user)
    if keeps_sessions(n.auth):
        lines += [
            "",
            "",
            *_table(n, TOKEN_MODEL, "sessions", "A session token handed out at sign-in.", [
                _column(n, "token", "str", extra="primary_key=True"),
                _column(n, "user_id", id_py, extra=fk),
            ]),
        ]
    lines += ["", "", *_table(n, n.model, n.p, f"{a(n.s).capitalize()} and who owns it.", record)]
    return lines


def crud_lines(names: Names) -> list[str]:
    """Lookups of the user behind an id or a credential, and ``update_user`` (account columns only,
    never the primary key)."""
    n = names
    convert = (
        ["def _key(value):", "    try:", "        return int(value)", "    except (TypeError, ValueError):",
         "        return None"]
        if n.id_type == "int"
        else ["def _key(value):", "    return None if value is None else str(value)"]
    )
    lines = [
        "USER_COLUMNS = frozenset(User.__table__.columns.keys())",
        "",
        "",
        *convert,
        "",
        "",
        "def get_user(db: Session, user_id) -> User | None:",
        "    key = _key(user_id)",
        "    return db.get(User, key) if key is not None else None",
        "",
        "",
    ]
    if n.auth == "api_key":
        lines += [
            "def get_user_by_api_key(db: Session, api_key: str | None) -> User | None:",
            f"    return {n.first('select(User).where(User.api_key == api_key)')} if api_key else None",
        ]
    elif n.auth == "oauth2_jwt":
        lines += [
            "def get_user_by_username(db: Session, username: str) -> User | None:",
            f"    return {n.first('select(User).where(User.username == username)')}",
        ]
    else:
        joined = f"select(User).join({TOKEN_MODEL}, {TOKEN_MODEL}.user_id == User.id)"
        lines += [
            "def get_user_by_token(db: Session, token: str | None) -> User | None:",
            "    if not token:",
            "        return None",
            f"    statement = {joined}.where({TOKEN_MODEL}.token == token)",
            f"    return {n.first('statement')}",
        ]
    lines += [
        "",
        "",
        "def update_user(db: Session, user: User, changes: dict) -> User:",
        "    for column, value in changes.items():",
        '        if column in USER_COLUMNS and column != "id":',
        "            setattr(user, column, value)",
        "    db.commit()",
        "    db.refresh(user)",
        "    return user",
    ]
    return lines


def seed_lines(names: Names) -> list[str]:
    """``init_db``: create the tables afresh and load ``data/seed.json`` (run by the lifespan hook)."""
    n = names
    session = "SessionLocal()" if n.store == "sqlalchemy" else "Session(engine)"
    hashing = []
    if n.auth == "oauth2_jwt":
        hashing = [
            '    for account in seed["users"]:  # the seed holds passwords; the database keeps their hashes',
            '        account["password_hash"] = hash_password(account.pop("password"))',
        ]
    tables = [("User", '"users"')]
    if keeps_sessions(n.auth):
        tables.append((TOKEN_MODEL, '"sessions"'))
    tables.append((n.model, py(n.p)))
    return [
        "def init_db() -> None:",
        '    """Create the tables afresh and load the seed data."""',
        "    Base.metadata.drop_all(engine)",
        "    Base.metadata.create_all(engine)",
        f'    seed = json.loads({n.cfg("SEED_FILE")}.read_text(encoding="utf-8"))',
        *hashing,
        f"    with {session} as db:",
        *[f"        db.add_all({cls}(**row) for row in seed[{key}])" for cls, key in tables],
        "        db.commit()",
    ]


def response_schema_lines(spec: ScenarioSpec, names: Names, *, login: bool) -> list[str]:
    """The response models: how rows become JSON, and which fields each view of them shows."""
    n = names
    kinds = _kinds(spec)
    rows = "    model_config = ConfigDict(from_attributes=True)"

    def field(name: str, py_type: str, optional: bool) -> str:
        return f"    {name}: {py_type} | None = None" if optional else f"    {name}: {py_type}"

    tenant = [field(n.tenant, "str", True)] if n.tenant else []
    public = [field(f, PY_TYPES[kinds[f]], f != n.title) for f in n.fields if f not in n.sensitive]
    sensitive = [field(f, PY_TYPES[kinds[f]], True) for f in n.fields if f in n.sensitive]
    idt = n.id_type
    lines = [
        f"class {n.model}Read(BaseModel):",
        f'    """{a(n.s).capitalize()} as its readers see it (sensitive fields: the owner and administrators)."""',
        "",
        rows,
        "",
        f"    id: {idt}",
        f"    {n.owner}: {idt}",
        *tenant,
        *public,
        *sensitive,
        "",
        "",
        f"class {n.model}Record({n.model}Read):",
        f'    """{a(n.s).capitalize()} as stored, share code included (exports and backups)."""',
        "",
        "    share_code: str | None = None",
        "",
        "",
        f"class {n.model}Shared(BaseModel):",
        f'    """What a share link shows of {a(n.s)}: its id and its non-sensitive fields."""',
        "",
        rows,
        "",
        f"    id: {idt}",
        *public,
        "",
        "",
        "class PersonOut(BaseModel):",
        '    """A colleague in the people directory."""',
        "",
        rows,
        "",
        f"    id: {idt}",
        "    username: str",
        "    display_name: str",
        "",
        "",
        "class ProfileOut(PersonOut):",
        '    """The caller\'s own account."""',
        "",
        "    email: str",
        "    role: str",
        "",
        "",
        "class AccountOut(BaseModel):",
        '    """An account as administrators list it."""',
        "",
        rows,
        "",
        f"    id: {idt}",
        "    username: str",
        "    email: str",
        "    role: str",
        "",
        "",
        "class UserRecord(BaseModel):",
        '    """An account as stored (backups)."""',
        "",
        rows,
        "",
        f"    id: {idt}",
        *[f"    {c}: str" for c in USER_COLUMNS if c != "id"],
        *tenant,
        "",
        "",
        "class Backup(BaseModel):",
        '    """Everything the nightly backup job stores."""',
        "",
        "    users: list[UserRecord]",
        f"    {n.p}: list[{n.model}Record]",
    ]
    if login:
        lines += [
            "",
            "",
            "class Token(BaseModel):",
            '    """An OAuth2 access token response."""',
            "",
            "    access_token: str",
            "    token_type: str",
        ]
    return lines
