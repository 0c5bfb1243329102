"""The handlers of a generated app, as style-independent :class:`Route` records.

Handler bodies speak only of ``user`` (the authenticated caller) and store/permission helpers; the
layout renderer decides how ``user`` is obtained (``Depends``, an inline call, or a decorator).
Optional routes are switched on by the spec's ``features``.

Administrators' routes start with an empty ``<site>_guard`` code site: the secure app puts nothing
there (the route's auth level does the work), and it is where a flaw or a narrow fix writes a check
of its own inside the handler.
"""

from __future__ import annotations

from envcore.factory.codegen.names import Names
from envcore.factory.codegen.parts import Route, Sites, py

FEATURES = (
    "search",
    "legacy_alias",
    "shared",
    "profile",
    "directory",
    "files",
    "redirect",
    "export",
    "report",
    "backup",
)
"""Optional routes; each one the app has is also a place a lazy fix can break."""


def _deny(detail: str) -> list[str]:
    return [f"    raise HTTPException(status_code=403, detail={py(detail)})"]


def _load(n: Names) -> list[str]:
    return [
        f"record = {n.get}({n.id})",
        "if record is None:",
        f'    raise HTTPException(status_code=404, detail="{n.s} not found")',
    ]


def build_routes(n: Names, features: tuple[str, ...], sites: Sites) -> list[Route]:
    idp = f"{n.id}: {n.id_type}"
    routes: list[Route] = [
        Route(
            "main", "service_status", ("GET",), "/api/status", "public", [],
            [f'return {{"service": {n.cfg("SERVICE_NAME")}, "status": "ok"}}'],
            doc="Liveness endpoint for the load balancer; public on purpose.",
        ),
    ]
    if "shared" in features:
        routes.append(
            Route(
                "main", f"read_shared_{n.s}", ("GET",), "/api/shared/{code}", "public", ["code: str"],
                [
                    f"record = {n.shared}(code)",
                    "if record is None:",
                    '    raise HTTPException(status_code=404, detail="unknown share link")',
                    *sites("shared.fields", ["return {k: record[k] for k in SHARED_FIELDS}"]),
                ],
                doc=f"Anyone holding a share link may view the {n.s}'s non-sensitive fields.",
            )
        )

    # -- resource group --------------------------------------------------------------------
    list_params, list_body = sites(
        "list.filter",
        ([], [f"records = {n.list}(**visible_scope(user))", "return [present(user, r) for r in records]"]),
    )
    routes.append(Route("resource", f"list_{n.p}", ("GET",), f"/api/{n.p}", "user", list_params, list_body))
    if "search" in features:
        routes.append(
            Route(
                "resource", f"search_{n.p}", ("GET",), f"/api/{n.p}/search", "user", ["q: str"],
                sites(
                    "search.filter",
                    [f"records = {n.search}(q, **visible_scope(user))", "return [present(user, r) for r in records]"],
                ),
            )
        )
    read_check = ["if not can_read(user, record):", *_deny(f"not allowed to view this {n.s}")]
    routes.append(
        Route(
            "resource", f"read_{n.s}", ("GET",), f"/api/{n.p}/{{{n.id}}}", "user", [idp],
            [*_load(n), *sites("detail.check", read_check), "return present(user, record)"],
        )
    )
    create_body = ["values = payload.model_dump()"]
    create_body += sites("create.owner", [f'values[{py(n.owner)}] = user["id"]'])
    if n.tenant:
        create_body.append(f"values[{py(n.tenant)}] = user[{py(n.tenant)}]")
    create_body.append(f"return {n.create}(values)")
    routes.append(
        Route(
            "resource", f"create_{n.s}", ("POST",), f"/api/{n.p}", "user", [f"payload: {n.model}Create"],
            create_body, status_code=201,
        )
    )
    modify_check = ["if not can_modify(user, record):", *_deny(f"not allowed to change this {n.s}")]
    routes.append(
        Route(
            "resource", f"update_{n.s}", ("PATCH",), f"/api/{n.p}/{{{n.id}}}", "user",
            [idp, f"payload: {n.model}Update"],
            [
                *_load(n),
                *sites("update.check", modify_check),
                "changes = payload.model_dump(exclude_unset=True)",
                f"return present(user, {n.update}({n.id}, changes))",
            ],
        )
    )
    routes.append(
        Route(
            "resource", f"delete_{n.s}", ("DELETE",), f"/api/{n.p}/{{{n.id}}}", "user", [idp],
            [
                *_load(n),
                *sites("delete.check", modify_check),
                f"{n.delete}({n.id})",
                f'return {{"deleted": {n.id}}}',
            ],
        )
    )
    if "legacy_alias" in features:
        routes.append(
            Route(
                "legacy", f"read_{n.s}_v1", ("GET",), f"/api/v1/{n.p}/{{{n.id}}}", "user", [idp],
                [*_load(n), *sites("legacy.check", read_check), "return present(user, record)"],
                doc="Kept for mobile clients that still call the v1 API.",
            )
        )

    # -- account group ---------------------------------------------------------------------
    routes.append(
        Route(
            "account", "read_me", ("GET",), "/api/me", "user", [],
            ["return {k: user[k] for k in PROFILE_FIELDS}"],
        )
    )
    if "profile" in features:
        routes.append(
            Route(
                "account", "update_me", ("PATCH",), "/api/me", "user",
                sites("profile.params", ["payload: ProfileUpdate"]),
                [
                    *sites("profile.changes", ["changes = payload.model_dump(exclude_unset=True)"]),
                    'updated = update_user(user["id"], changes)',
                    "return {k: updated[k] for k in PROFILE_FIELDS}",
                ],
            )
        )
    if "directory" in features:
        public_fields = '("id", "username", "display_name")'
        routes.append(
            Route(
                "account", "list_people", ("GET",), "/api/people", "user", [],
                sites("directory.list", [f"return [{{k: u[k] for k in {public_fields}}} for u in all_users()]"]),
                doc="Colleague directory: names only.",
            )
        )
        routes.append(
            Route(
                "account", "read_person", ("GET",), "/api/people/{person_id}", "user", ["person_id: str"],
                [
                    "person = get_user(person_id)",
                    "if person is None:",
                    '    raise HTTPException(status_code=404, detail="no such person")',
                    *sites("directory.detail", [f"return {{k: person[k] for k in {public_fields}}}"]),
                ],
            )
        )
    if "files" in features:
        routes.append(
            Route(
                "account", "download_file", ("GET",), "/api/files", "user", ["name: str"],
                [
                    *sites(
                        "files.path",
                        [
                            f'folder = ({n.cfg("UPLOAD_DIR")} / str({n.attr("user", "id")})).resolve()',
                            "target = (folder / name).resolve()",
                            "if not target.is_relative_to(folder) or not target.is_file():",
                            '    raise HTTPException(status_code=404, detail="file not found")',
                        ],
                    ),
                    "return PlainTextResponse(Path(target).read_text())",
                ],
                doc="Serve a file from the caller's own upload folder.",
            )
        )
    if "redirect" in features:
        routes.append(
            Route(
                "account", "logout", ("GET",), "/auth/logout", "public", ['next: str = "/"'],
                [
                    *sites(
                        "redirect.check",
                        [
                            'if not next.startswith("/") or next.startswith("//") or "\\\\" in next:',
                            '    next = "/"',
                        ],
                    ),
                    "return RedirectResponse(url=next, status_code=303)",
                ],
                doc="End the session and send the browser back into the app.",
            )
        )

    # -- admin group -----------------------------------------------------------------------
    routes.append(
        Route(
            "admin", "admin_list_users", ("GET",), "/api/admin/users", sites("admin.users", "admin"), [],
            [
                *sites("admin.users_guard", []),
                'return [{k: u[k] for k in ("id", "username", "email", "role")} for u in all_users()]',
            ],
        )
    )
    if "export" in features:
        routes.append(
            Route(
                "admin", f"admin_export_{n.p}", ("GET",), f"/api/admin/{n.p}/export", sites("admin.export", "admin"), [],
                [*sites("admin.export_guard", []), f"return {n.list}()"],
                doc=f"Full export of every {n.s}, sensitive fields included.",
            )
        )
    if "report" in features:
        routes.append(
            Route(
                "admin", "admin_report", ("GET", "POST"), "/api/admin/report", sites("admin.report", "admin"), [],
                [
                    *sites("admin.report_guard", []),
                    f"records = {n.list}()",
                    "owners = {}",
                    "for r in records:",
                    f"    owners[str(r[{py(n.owner)}])] = owners.get(str(r[{py(n.owner)}]), 0) + 1",
                    'return {"total": len(records), "by_owner": owners, "regenerated": request.method == "POST"}',
                ],
                needs_request=True,
                doc="GET shows the usage report; POST regenerates it.",
            )
        )
    if "backup" in features:
        routes.append(
            Route(
                "internal", "internal_backup", ("GET",), "/api/internal/backup", sites("internal.backup", "admin"), [],
                [*sites("internal.backup_guard", []), f'return {{"users": all_users(), {py(n.p)}: {n.list}()}}'],
                doc="Nightly backup job pulls everything from here.",
            )
        )
    return routes
