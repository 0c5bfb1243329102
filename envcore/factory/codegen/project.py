"""Assemble an app in the styles of production FastAPI projects: ORM stores, security schemes, router modules.

The compact styles (one file or a small package, a dict or ``sqlite3`` store, a bearer token the app
looks up itself) are assembled by :mod:`~envcore.factory.codegen.layout`, byte for byte as they always
were. Every other style comes through here, where an app is a list of *sections* (configuration,
password and token helpers, the store, models, queries, seeding, schemas, auth dependencies,
permission helpers, routes) that a layout places in modules:

* ``single_file``: every section in ``app.py``;
* ``package``: ``app/`` with ``config``, ``crypto``, ``store``, ``schemas`` and ``security`` modules,
  routes in ``app/routers/``, relative imports;
* ``routers``: ``app/`` laid out like a production project (``config`` with a ``pydantic-settings``
  ``Settings``, ``security``, ``database``, ``models``, ``crud``, ``seed``, ``schemas``, ``deps``,
  ``policy``, ``routers/<area>.py`` with ``APIRouter(prefix=..., tags=...)``, ``main``), imported as
  ``from app.models import Note``;
* ``routers_flat``: the same modules at the top level, imported as ``from models import Note``.

Imports are derived, not written: every module imports exactly the names its code uses (read from
its syntax tree, so words in strings and attribute names never count) from the standard library,
the libraries of the style, or the app's own module that defines them.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field

from envcore.factory.codegen.auth import crypto_lines, dependency_lines, login_route
from envcore.factory.codegen.names import DEPENDENCY_AUTH, Names
from envcore.factory.codegen.orm import crud_lines, database_lines, model_lines, response_schema_lines, seed_lines
from envcore.factory.codegen.parts import Route, Sites, identity_lines, policy_lines, py
from envcore.scenario.spec import ScenarioSpec

WIDTH = 100
"""Longer signatures and imports are wrapped, one name a line."""
SETTINGS_PREFIX = "APP_"
"""Environment variables (and lines of ``instance/secrets.txt``) that configure a ``routers`` app."""

STDLIB_MODULES = ("functools", "itertools", "json", "logging", "os", "sqlite3", "uuid")
"""Standard-library modules generated code uses as ``module.name``."""
STDLIB_NAMES = {
    "Path": "pathlib",
    "asynccontextmanager": "contextlib",
    "datetime": "datetime",
    "timedelta": "datetime",
    "timezone": "datetime",
}
LIBRARY_MODULES = ("jwt",)
LIBRARY_NAMES = {
    "APIRouter": "fastapi", "Depends": "fastapi", "FastAPI": "fastapi", "HTTPException": "fastapi",
    "Request": "fastapi", "Security": "fastapi",
    "PlainTextResponse": "fastapi.responses", "RedirectResponse": "fastapi.responses",
    "APIKeyCookie": "fastapi.security", "APIKeyHeader": "fastapi.security",
    "OAuth2PasswordBearer": "fastapi.security", "OAuth2PasswordRequestForm": "fastapi.security",
    "BaseModel": "pydantic", "ConfigDict": "pydantic",
    "BaseSettings": "pydantic_settings", "SettingsConfigDict": "pydantic_settings",
    "PasswordHash": "pwdlib", "BcryptHasher": "pwdlib.hashers.bcrypt",
}
ORM_NAMES = {
    "sqlalchemy": {
        "ColumnElement": "sqlalchemy", "ForeignKey": "sqlalchemy", "create_engine": "sqlalchemy",
        "event": "sqlalchemy", "select": "sqlalchemy", "true": "sqlalchemy",
        "DeclarativeBase": "sqlalchemy.orm", "Mapped": "sqlalchemy.orm", "Session": "sqlalchemy.orm",
        "mapped_column": "sqlalchemy.orm", "sessionmaker": "sqlalchemy.orm",
    },
    "sqlmodel": {
        "ColumnElement": "sqlalchemy", "event": "sqlalchemy", "true": "sqlalchemy", "registry": "sqlalchemy.orm",
        "Field": "sqlmodel", "SQLModel": "sqlmodel", "Session": "sqlmodel", "create_engine": "sqlmodel",
        "select": "sqlmodel",
    },
}


@dataclass
class Module:
    """One source file: its docstring and its blocks of code (each a list of lines)."""

    path: str
    doc: str
    blocks: list[list[str]]
    local: bool = True
    """Whether other modules import names from it (router modules and the entrypoint are not)."""
    imports_after: list[str] = field(default_factory=list)
    """Extra import lines (the entrypoint's ``from app.routers import ...``)."""


@dataclass
class Sections:
    """An app's code, section by section, before a layout places it in modules."""

    names: Names
    config: list[str]
    crypto: list[str]
    store: list[str]
    models: list[str]
    crud: list[str]
    seed: list[str]
    schemas: list[str]
    deps: list[str]
    policy: list[str]
    routes: list[Route]


# -- handlers -------------------------------------------------------------------------------


def render_handler(route: Route, n: Names, target: str, path: str) -> list[str]:
    """One route as a decorated function: the caller arrives through the auth style, ORM handlers
    get the request's database session, and the route's response model is declared."""
    extra = f", status_code={route.status_code}" if route.status_code else ""
    if route.response_model:
        extra += f", response_model={route.response_model}"
    if len(route.methods) == 1:
        lines = [f"@{target}.{route.methods[0].lower()}({py(path)}{extra})"]
    else:
        lines = [f"@{target}.api_route({py(path)}, methods={py(list(route.methods))}{extra})"]
    params = list(route.params)
    pre: list[str] = []
    needs_request = route.needs_request
    needs_db = False
    if route.auth != "public":
        admin = route.auth == "admin"
        if n.auth in DEPENDENCY_AUTH:
            dependency = "require_admin" if admin else ("current_user" if n.auth == "depends" else "get_current_user")
            params.append(f"user: {n.user_class} = Depends({dependency})")
        elif n.auth == "inline":
            needs_request = True
            pre.append(f"user = authenticate(request{', db' if n.orm else ''})")
            if admin:
                pre.append("ensure_admin(user)")
        else:
            needs_request = needs_db = True
            lines.append("@admin_required" if admin else "@login_required")
            pre.append("user = request.state.user")
    if n.orm and (needs_db or re.search(r"\bdb\b", "\n".join(pre + route.body))):
        params.append("db: Session = Depends(get_db)")
    if needs_request:
        params.insert(0, "request: Request")
    lines += signature(f"{'def' if n.orm else 'async def'} {route.name}", params)
    if route.doc:
        lines.append(f"    {py(route.doc)}" if '"' in route.doc else f'    """{route.doc}"""')
    lines += [f"    {line}" for line in pre + route.body]
    return lines


def signature(head: str, params: list[str]) -> list[str]:
    """``head(params):`` on one line, or one parameter a line when that is too long (as black writes it)."""
    line = f"{head}({', '.join(params)}):"
    if len(line) <= WIDTH:
        return [line]
    return [f"{head}(", *[f"    {p}," for p in params], "):"]


def route_area(route: Route, n: Names) -> tuple[str, str]:
    """(router module, prefix) of a route, by its path; ``("", "")`` for the entrypoint's own routes."""
    path = route.path
    if path == "/api/status" or path.startswith("/api/shared/"):
        return "", ""
    for prefix, area in ((f"/api/v1/{n.p}", "legacy"), (f"/api/{n.p}", n.p), ("/api/admin", "admin"),
                         ("/api/internal", "internal"), ("/auth", "auth")):
        if path == prefix or path.startswith(prefix + "/"):
            return area, prefix
    return "account", "/api"


# -- configuration --------------------------------------------------------------------------


def config_lines(n: Names, features: tuple[str, ...]) -> list[str]:
    """Module constants (``single_file`` and ``package``) or a ``Settings`` class (the router layouts)."""
    shared = ("id", *[f for f in n.fields if f not in n.sensitive])
    policy = [
        f"SENSITIVE_FIELDS = {py(n.sensitive)}",
        f"SHARED_FIELDS = {py(shared)}",
        'PROFILE_FIELDS = ("id", "username", "display_name", "email", "role")',
    ]
    jwt = n.auth == "oauth2_jwt"
    if not n.settings:
        base = "Path(__file__).resolve().parent.parent" if n.layout == "package" else "Path(__file__).resolve().parent"
        lines = [
            f"BASE_DIR = {base}",
            f"SERVICE_NAME = {py(n.service)}",
            'SECRET_KEY_FILE = BASE_DIR / "instance" / "secrets.txt"',
            'SEED_FILE = BASE_DIR / "data" / "seed.json"',
        ]
        if "files" in features:
            lines.append('UPLOAD_DIR = BASE_DIR / "uploads"')
        if "redirect" in features:
            lines.append('APP_HOST = "app.example.test"')
        if n.orm:
            lines.append('DATABASE_URL = f"sqlite:///{BASE_DIR / \'app.db\'}"')
        if jwt:
            lines += [
                'SECRET_KEY = SECRET_KEY_FILE.read_text(encoding="utf-8").strip().partition("=")[2]',
                "ACCESS_TOKEN_EXPIRE_MINUTES = 30",
            ]
        return lines + policy
    base = "Path(__file__).resolve().parent.parent" if n.layout == "routers" else "Path(__file__).resolve().parent"
    fields = [
        f"    service_name: str = {py(n.service)}",
        '    secret_key: str = "change-me"',
        '    seed_file: Path = BASE_DIR / "data" / "seed.json"',
    ]
    if n.orm:
        fields.append('    database_url: str = f"sqlite:///{BASE_DIR / \'app.db\'}"')
    if "files" in features:
        fields.append('    upload_dir: Path = BASE_DIR / "uploads"')
    if "redirect" in features:
        fields.append('    app_host: str = "app.example.test"')
    if jwt:
        fields.append("    access_token_expire_minutes: int = 30")
    return [
        f"BASE_DIR = {base}",
        "",
        "",
        "class Settings(BaseSettings):",
        f'    """Configuration: {SETTINGS_PREFIX}* variables, then instance/secrets.txt, then these defaults."""',
        "",
        "    model_config = SettingsConfigDict(",
        f'        env_prefix="{SETTINGS_PREFIX}", env_file=BASE_DIR / "instance" / "secrets.txt", extra="ignore"',
        "    )",
        "",
        *fields,
        "",
        "",
        "settings = Settings()",
        "",
        *policy,
    ]


def secrets_file(n: Names, secret: str) -> str:
    """``instance/secrets.txt``: a dotenv line the app's configuration reads. A key that signs access
    tokens gets the length HS256 asks for (the scenario's secret, lengthened by its own digest)."""
    if n.auth == "oauth2_jwt":
        secret += hashlib.sha256(secret.encode()).hexdigest()[:40]
    return f"{SETTINGS_PREFIX if n.settings else ''}SECRET_KEY={secret}\n"


# -- sections -------------------------------------------------------------------------------


def build_sections(
    spec: ScenarioSpec, n: Names, sites: Sites, routes: list[Route], request_schemas: list[str]
) -> Sections:
    """The app's sections for its store and auth style (the login route joins the routes with JWT)."""
    features = tuple(spec.features)
    jwt = n.auth == "oauth2_jwt"
    if n.auth in ("depends", "inline", "decorator"):
        deps, _ = identity_lines(n, sites)
    else:
        deps, _ = dependency_lines(n, sites)
    policy, _ = policy_lines(n, sites)
    schemas = list(request_schemas)
    if n.orm:
        schemas += ["", "", *response_schema_lines(spec, n, login=jwt)]
    if jwt:
        routes = [*routes, login_route(n)]
    return Sections(
        names=n,
        config=config_lines(n, features),
        crypto=crypto_lines(n) if jwt else [],
        store=database_lines(n) if n.orm else [],
        models=model_lines(spec, n) if n.orm else [],
        crud=crud_lines(n) if n.orm else [],
        seed=seed_lines(n) if n.orm else [],
        schemas=schemas,
        deps=['logger = logging.getLogger("app.security")', "", "", *deps],
        policy=policy,
        routes=routes,
    )


# -- layouts --------------------------------------------------------------------------------


def _main_blocks(s: Sections, includes: list[str], target_routes: list[Route]) -> list[list[str]]:
    n = s.names
    service = n.cfg("SERVICE_NAME")
    blocks: list[list[str]] = []
    if n.orm:
        blocks.append([
            "@asynccontextmanager",
            "async def lifespan(app: FastAPI):",
            '    """Build and seed the database before the first request."""',
            "    init_db()",
            "    yield",
        ])
        blocks.append([f"app = FastAPI(title={service}, lifespan=lifespan)", *includes])
    else:
        blocks.append([f"app = FastAPI(title={service})", *includes])
    blocks += [render_handler(r, n, "app", r.path) for r in target_routes]
    return blocks


def layout_modules(s: Sections, compact_store: list[str]) -> tuple[list[Module], str]:
    """The modules of the app and its entrypoint, for the style's layout."""
    n = s.names
    store = compact_store if not n.orm else s.store
    if n.layout == "single_file":
        blocks = [
            ["# --- configuration ---", *s.config],
            ["# --- passwords and access tokens ---", *s.crypto] if s.crypto else [],
            ["# --- data store ---", *store],
            ["# --- models ---", *s.models] if s.models else [],
            ["# --- queries ---", *s.crud] if s.crud else [],
            ["# --- seed data ---", *s.seed] if s.seed else [],
            ["# --- schemas ---", *s.schemas],
            ["# --- authentication and access policy ---", *s.deps, "", "", *s.policy],
            ["# --- routes ---"],
        ]
        blocks += _main_blocks(s, [], s.routes)
        doc = f"{n.service}: a FastAPI service."
        return [Module("app.py", doc, blocks, local=False)], "app:app"

    package = n.layout in ("package", "routers")
    root = "app/" if package else ""
    areas: dict[str, tuple[str, list[Route]]] = {}
    main_routes: list[Route] = []
    for route in s.routes:
        area, prefix = route_area(route, n)
        if not area:
            main_routes.append(route)
        else:
            areas.setdefault(area, (prefix, []))[1].append(route)

    modules: list[Module] = []
    if package:
        modules.append(Module("app/__init__.py", n.service + ".", [], local=False))
    modules.append(Module(f"{root}routers/__init__.py", "HTTP routes, one module per area.", [], local=False))
    if n.layout == "package":
        modules.append(Module("app/config.py", "Settings.", [s.config]))
        if s.crypto:
            modules.append(Module("app/crypto.py", "Password hashing and signed access tokens.", [s.crypto]))
        orm_blocks = [s.store, s.models, s.crud, s.seed] if n.orm else [store]
        modules.append(Module("app/store.py", "Data access.", [b for b in orm_blocks if b]))
        modules.append(Module("app/schemas.py", "Request and response bodies.", [s.schemas]))
        modules.append(Module("app/security.py", "Authentication and the access policy.", [s.deps, s.policy]))
    else:
        modules.append(Module(f"{root}config.py", "Application settings.", [s.config]))
        if s.crypto:
            modules.append(Module(f"{root}security.py", "Password hashing and signed access tokens.", [s.crypto]))
        if n.orm:
            modules += [
                Module(f"{root}database.py", "The database engine and the per-request session.", [s.store]),
                Module(f"{root}models.py", "Database tables.", [s.models]),
                Module(f"{root}crud.py", "Queries shared by the routes and the auth dependencies.", [s.crud]),
                Module(f"{root}seed.py", "Builds the database and loads the seed data.", [s.seed]),
            ]
        else:
            modules.append(Module(f"{root}store.py", "Data access.", [store]))
        modules.append(Module(f"{root}schemas.py", "Request and response bodies.", [s.schemas]))
        modules.append(Module(f"{root}deps.py", "Authentication dependencies.", [s.deps]))
        modules.append(Module(f"{root}policy.py", "Who may see and change what.", [s.policy]))

    for area, (prefix, routes) in areas.items():
        handlers = [render_handler(r, n, "router", r.path[len(prefix):]) for r in routes]
        blocks = [[f"router = APIRouter(prefix={py(prefix)}, tags=[{py(area)}])"], *handlers]
        modules.append(Module(f"{root}routers/{area}.py", f"Routes under {prefix}.", blocks, local=False))

    package_name = {"package": ".routers", "routers": "app.routers"}.get(n.layout, "routers")
    includes = [f"app.include_router({area}.router)" for area in areas]
    main = Module(f"{root}main.py", "Application entrypoint.", _main_blocks(s, includes, main_routes), local=False,
                  imports_after=[from_import(package_name, sorted(areas))])
    modules.append(main)
    return modules, ("app.main:app" if package else "main:app")


# -- imports and text -----------------------------------------------------------------------

def _join(blocks: list[list[str]]) -> str:
    out: list[str] = []
    for block in blocks:
        if not block:
            continue
        if out:
            out += ["", ""]
        out += block
    return "\n".join(out).rstrip() + "\n" if out else ""


def defined_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def used_names(tree: ast.Module) -> set[str]:
    """Names a module's code refers to (attribute names and words in strings are not names)."""
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def _import_lines(groups: dict[str, set[str]], plain: set[str]) -> list[str]:
    """``import x`` lines first, then ``from x import a, b`` sorted by module (the isort default)."""
    lines = [f"import {m}" for m in sorted(plain)]
    lines += [from_import(m, sorted(names, key=_by_type)) for m, names in sorted(groups.items())]
    return lines


def from_import(module: str, names: list[str]) -> str:
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= WIDTH:
        return line
    return "\n".join([f"from {module} import (", *[f"    {name}," for name in names], ")"])


def _by_type(name: str) -> tuple[int, str]:
    """isort's order of imported names: constants, then classes, then functions and modules."""
    return (0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2, name.lower())


def render_modules(modules: list[Module], n: Names) -> dict[str, str]:
    """The modules' text, each with the imports its code needs."""
    bodies = {m.path: _join(m.blocks) for m in modules}
    trees = {path: ast.parse(body) for path, body in bodies.items()}
    exports = {m.path: defined_names(trees[m.path]) for m in modules if m.local}
    library = {**LIBRARY_NAMES, **ORM_NAMES.get(n.store, {})}
    files: dict[str, str] = {}
    for m in modules:
        body = bodies[m.path]
        if not body:
            files[m.path] = f'"""{m.doc}"""\n'
            continue
        used = used_names(trees[m.path]) - defined_names(trees[m.path])
        std_plain = {x for x in STDLIB_MODULES if x in used}
        std_from: dict[str, set[str]] = {}
        for name, module in STDLIB_NAMES.items():
            if name in used:
                std_from.setdefault(module, set()).add(name)
        lib_plain = {x for x in LIBRARY_MODULES if x in used}
        lib_from: dict[str, set[str]] = {}
        for name, module in library.items():
            if name in used:
                lib_from.setdefault(module, set()).add(name)
        local: list[str] = []
        for other, names in exports.items():
            wanted = sorted((names & used) - set(library) - set(STDLIB_NAMES), key=_by_type)
            if other == m.path or not wanted:
                continue
            module = other[:-3].replace("/", ".")
            if n.layout == "package":
                module = "." + module.split(".", 1)[1] if m.path.count("/") == 1 else ".." + module.split(".", 1)[1]
            local.append(from_import(module, wanted))
        local = sorted(local + m.imports_after)
        groups = [_import_lines(std_from, std_plain), _import_lines(lib_from, lib_plain), local]
        imports = "\n\n".join("\n".join(g) for g in groups if g)
        definition = body.startswith(("def ", "async def ", "class ", "@"))
        gap = ("\n\n\n" if definition else "\n\n") if imports else "\n"
        files[m.path] = f'"""{m.doc}"""\n\n' + imports + gap + body
    return files
