"""Assemble :class:`AppParts` into files for one code style.

Two layouts: ``single_file`` (everything in ``app.py``) and ``package`` (``app/`` with config, store,
schemas, security and one router module per group). Three auth styles decide how a handler obtains
``user``: a ``Depends`` parameter, an inline ``authenticate(request)`` call, or a decorator that puts
the user on ``request.state``. The output is a ``{path: text}`` mapping plus the entrypoint.
"""

from __future__ import annotations

import functools
import re

from envcore.factory.codegen.parts import AppParts, Route, py

GROUP_PREFIX = {
    "resource": lambda n: f"/api/{n.p}",
    "legacy": lambda n: f"/api/v1/{n.p}",
    "account": lambda n: "",
    "admin": lambda n: "/api/admin",
    "internal": lambda n: "/api/internal",
}
GROUP_MODULE = {
    "resource": lambda n: n.p,
    "legacy": lambda n: "legacy",
    "account": lambda n: "account",
    "admin": lambda n: "admin",
    "internal": lambda n: "internal",
}


def _handler(route: Route, auth_style: str, target: str, path: str) -> list[str]:
    lines: list[str] = []
    if len(route.methods) == 1:
        extra = f", status_code={route.status_code}" if route.status_code else ""
        lines.append(f"@{target}.{route.methods[0].lower()}({py(path)}{extra})")
    else:
        lines.append(f"@{target}.api_route({py(path)}, methods={py(list(route.methods))})")
    params = list(route.params)
    pre: list[str] = []
    needs_request = route.needs_request
    if route.auth != "public":
        admin = route.auth == "admin"
        if auth_style == "depends":
            params.append(f"user: dict = Depends({'require_admin' if admin else 'current_user'})")
        elif auth_style == "inline":
            needs_request = True
            pre.append("user = authenticate(request)")
            if admin:
                pre.append("ensure_admin(user)")
        else:
            needs_request = True
            lines.append("@admin_required" if admin else "@login_required")
            pre.append("user = request.state.user")
    if needs_request:
        params.insert(0, "request: Request")
    lines.append(f"async def {route.name}({', '.join(params)}):")
    if route.doc:
        lines.append(f"    {py(route.doc)}" if '"' in route.doc else f'    """{route.doc}"""')
    lines += [f"    {line}" for line in pre + route.body]
    return lines


def _join(blocks: list[list[str]]) -> str:
    out: list[str] = []
    for block in blocks:
        if not block:
            continue
        if out:
            out += ["", ""]
        out += block
    return "\n".join(out).rstrip() + "\n"


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=512)
def _words(text: str) -> frozenset[str]:
    """Identifiers in ``text`` (memoised: each module's text is asked about several times)."""
    return frozenset(_WORD.findall(text))


def _used(names: list[str], text: str) -> list[str]:
    words = _words(text)
    return [name for name in names if name in words]


def _stdlib_imports(parts: AppParts, text: str) -> list[str]:
    words = _words(text)
    lines = [
        f"import {module}"
        for module in ("functools", "itertools", "json", "logging", "os", "sqlite3")
        if module in words and re.search(rf"\b{module}\.", text)
    ]
    if "Path" in words:
        lines.append("from pathlib import Path")
    return lines


def _fastapi_imports(text: str, with_app: bool, with_router: bool) -> list[str]:
    words = _words(text)
    names = [n for n in ("Depends", "HTTPException", "Request") if n in words]
    if with_app:
        names.append("FastAPI")
    if with_router:
        names.append("APIRouter")
    lines = [f"from fastapi import {', '.join(sorted(names))}"] if names else []
    responses = [n for n in ("PlainTextResponse", "RedirectResponse") if n in words]
    if responses:
        lines.append(f"from fastapi.responses import {', '.join(responses)}")
    if "BaseModel" in words:
        lines.append("from pydantic import BaseModel")
    return lines


def render_single(parts: AppParts, auth_style: str) -> tuple[dict[str, str], str]:
    n = parts.names
    handlers = [_handler(r, auth_style, "app", r.path) for r in parts.routes]
    body_blocks = [
        ["# --- configuration ---", *parts.config],
        ["# --- data store ---", *parts.store],
        ["# --- request schemas ---", *parts.schemas],
        ["# --- authentication and access policy ---", 'logger = logging.getLogger("app.security")', "", *parts.security],
        ["# --- routes ---", "app = FastAPI(title=SERVICE_NAME)"],
        *handlers,
    ]
    body = _join(body_blocks)
    header = [f'"""{n.service}: a small FastAPI service."""', ""]
    imports = _stdlib_imports(parts, body) + [""] + _fastapi_imports(body, True, False)
    text = "\n".join(header + imports) + "\n\n" + body
    return {"app.py": text, **parts.data_files}, "app:app"


def render_package(parts: AppParts, auth_style: str) -> tuple[dict[str, str], str]:
    n = parts.names
    files: dict[str, str] = {"app/__init__.py": f'"""{n.service}."""\n', "app/routers/__init__.py": '"""HTTP routes, one module per area."""\n'}

    def module(doc: str, blocks: list[list[str]], local: list[str], with_app=False, with_router=False) -> str:
        body = _join(blocks)
        groups = [_stdlib_imports(parts, body), _fastapi_imports(body, with_app, with_router), local]
        imports = "\n\n".join("\n".join(g) for g in groups if g)
        return f'"""{doc}"""\n\n' + imports + ("\n\n\n" if imports else "\n") + body

    config_names = re.findall(r"^([A-Z_]+) =", "\n".join(parts.config), re.M)
    files["app/config.py"] = module("Settings.", [parts.config], [])
    store_config = _used(config_names, _join([parts.store]))
    store_local = [f"from .config import {', '.join(store_config)}"] if store_config else []
    files["app/store.py"] = module("Data access.", [parts.store], store_local)
    files["app/schemas.py"] = module("Request bodies.", [parts.schemas], [])
    sec_text = _join([parts.security])
    sec_local = []
    cfg = _used(["SENSITIVE_FIELDS"], sec_text)
    if cfg:
        sec_local.append(f"from .config import {', '.join(cfg)}")
    st = _used(parts.store_exports, sec_text)
    if st:
        sec_local.append(f"from .store import {', '.join(st)}")
    files["app/security.py"] = module(
        "Authentication and the access policy.",
        [['logger = logging.getLogger("app.security")'], parts.security],
        sec_local,
    )

    groups: dict[str, list[Route]] = {}
    main_routes: list[Route] = []
    for route in parts.routes:
        (main_routes if route.group == "main" else groups.setdefault(route.group, [])).append(route)

    router_modules = []
    for group, routes in groups.items():
        prefix = GROUP_PREFIX[group](n)
        handlers = [_handler(r, auth_style, "router", r.path[len(prefix):]) for r in routes]
        tag = GROUP_MODULE[group](n)
        prefix_arg = f"prefix={py(prefix)}, " if prefix else ""
        blocks = [[f"router = APIRouter({prefix_arg}tags=[{py(tag)}])"], *handlers]
        text = _join(blocks)
        local = _local_imports(parts, config_names, text, "..")
        doc = f"Routes under {prefix}." if prefix else f"Routes of the {tag} area."
        files[f"app/routers/{tag}.py"] = module(doc, blocks, local, with_router=True)
        router_modules.append(tag)

    handlers = [_handler(r, auth_style, "app", r.path) for r in main_routes]
    include = [f"app.include_router({m}.router)" for m in router_modules]
    blocks = [["app = FastAPI(title=SERVICE_NAME)", *include], *handlers]
    text = _join(blocks)
    local = _local_imports(parts, config_names, text, ".")
    local.append(f"from .routers import {', '.join(router_modules)}")
    files["app/main.py"] = module("Application entrypoint.", blocks, local, with_app=True)
    files.update(parts.data_files)
    return files, "app.main:app"


def _local_imports(parts: AppParts, config_names: list[str], text: str, dots: str) -> list[str]:
    lines = []
    for module, exports in (
        ("config", config_names),
        ("schemas", parts.schema_exports),
        ("security", parts.security_exports),
        ("store", parts.store_exports),
    ):
        used = _used(exports, text)
        if used:
            lines.append(f"from {dots}{module} import {', '.join(used)}")
    return lines
