"""Render a ScenarioSpec into FastAPI source files, with or without planted flaws.

``render_app(spec, flaws)`` is the only entry point: ``flaws`` maps code-site keys to mutations
(from the bug-class registry). Rendering is a pure function of its inputs, so the same spec always
gives the same bytes. The compact code styles are assembled by :mod:`.layout`; every style with an
ORM store, a ``fastapi.security`` auth scheme or a router-project layout by :mod:`.project`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from envcore.factory.codegen.layout import render_package, render_single
from envcore.factory.codegen.names import Names
from envcore.factory.codegen.orm_routes import build_orm_routes
from envcore.factory.codegen.parts import (
    AppParts,
    Mutation,
    Route,
    Sites,
    config_lines,
    schema_lines,
    security_lines,
    seed_json,
    store_lines,
)
from envcore.factory.codegen.project import build_sections, layout_modules, render_modules, secrets_file
from envcore.factory.codegen.routes import FEATURES, build_routes
from envcore.scenario.spec import CodeStyle, ScenarioSpec

__all__ = ["FEATURES", "Mutation", "Names", "RenderedApp", "render_app"]


@dataclass(frozen=True)
class RenderedApp:
    files: dict[str, str]
    entrypoint: str
    routes: tuple[Route, ...]


def is_compact(style: CodeStyle) -> bool:
    """Whether ``style`` is one of the compact styles (every axis one of its first values)."""
    return (style.layout in ("single_file", "package") and style.auth in ("depends", "inline", "decorator")
            and style.store in ("dict", "sqlite"))


def _data_files(spec: ScenarioSpec, names: Names) -> dict[str, str]:
    secrets = f"SECRET_KEY={spec.app_secret}\n" if is_compact(spec.style) else secrets_file(names, spec.app_secret)
    files = {"instance/secrets.txt": secrets, "data/seed.json": seed_json(spec, names)}
    for f in spec.files:
        files[f"uploads/{spec.user(f.owner).user_id}/{f.name}"] = f.content
    return files


def render_app(spec: ScenarioSpec, flaws: Mapping[str, Mutation] | None = None) -> RenderedApp:
    if not is_compact(spec.style):
        return _render_project(spec, flaws)
    names = Names.of(spec)
    sites = Sites(names, flaws or {})
    features = tuple(spec.features)
    routes = build_routes(names, features, sites)
    schemas, schema_exports = schema_lines(spec, names, sites, "profile" in features)
    security, security_exports = security_lines(spec, names, sites)
    store, store_exports = store_lines(spec, names)
    parts = AppParts(
        names=names,
        config=config_lines(spec, names, "files" in features, "redirect" in features),
        store=store,
        store_exports=store_exports,
        schemas=schemas,
        schema_exports=schema_exports,
        security=security,
        security_exports=security_exports,
        routes=routes,
        data_files=_data_files(spec, names),
    )
    unused = sites.unused_flaws()
    if unused:
        raise ValueError(f"flaws target code sites this app does not have: {sorted(unused)}")
    render = render_package if spec.style.layout == "package" else render_single
    files, entrypoint = render(parts, spec.style.auth)
    return RenderedApp(files=dict(sorted(files.items())), entrypoint=entrypoint, routes=tuple(routes))


def _render_project(spec: ScenarioSpec, flaws: Mapping[str, Mutation] | None) -> RenderedApp:
    names = Names.of(spec)
    sites = Sites(names, flaws or {})
    features = tuple(spec.features)
    routes = (build_orm_routes if names.orm else build_routes)(names, features, sites)
    schemas, _ = schema_lines(spec, names, sites, "profile" in features)
    compact_store = [] if names.orm else store_lines(spec, names)[0]
    sections = build_sections(spec, names, sites, routes, schemas)
    modules, entrypoint = layout_modules(sections, compact_store)
    unused = sites.unused_flaws()
    if unused:
        raise ValueError(f"flaws target code sites this app does not have: {sorted(unused)}")
    files = render_modules(modules, names)
    files.update(_data_files(spec, names))
    return RenderedApp(files=dict(sorted(files.items())), entrypoint=entrypoint, routes=tuple(sections.routes))
