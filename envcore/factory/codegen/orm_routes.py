"""The handlers of an ORM-backed app, as :class:`Route` records with the same code sites as the compact ones.

Same routes, same paths, same code-site keys and fragment shapes as :mod:`envcore.factory.codegen.routes`,
written the way an app on SQLAlchemy or SQLModel writes them: the record comes from ``db.get``, a
listing is a ``select`` whose ``where`` clause is the caller's scope (``visible_scope(user)``, an ORM
filter), changes are ``setattr`` on the mapped row and a commit, and what a route returns is shaped
by its ``response_model``. Where the response model is what keeps fields private (a share link, the
people directory) the code site holds the pair ``(response_model, body)``, so a flaw can name the
wrong schema, as real bugs of this kind do.
"""

from __future__ import annotations

from envcore.factory.codegen.names import Names
from envcore.factory.codegen.parts import Route, Sites, py
from envcore.factory.codegen.routes import _deny


def _load(n: Names) -> list[str]:
    return [
        f"{n.s} = db.get({n.model}, {n.id})",
        f"if {n.s} is None:",
        f'    raise HTTPException(status_code=404, detail="{n.s} not found")',
    ]


def _with_model(route: Route, site: tuple[str | None, list[str]], head: list[str]) -> Route:
    """``route`` with the response model and the closing lines of a ``(response_model, body)`` site."""
    response_model, tail = site
    route.response_model = response_model
    route.body = [*head, *tail]
    return route


def build_orm_routes(n: Names, features: tuple[str, ...], sites: Sites) -> list[Route]:
    idp = f"{n.id}: {n.id_type}"
    M, rec = n.model, n.s
    read_model = f"{M}Read"
    routes: list[Route] = [
        Route(
            "main", "service_status", ("GET",), "/api/status", "public", [],
            [f'return {{"service": {n.cfg("SERVICE_NAME")}, "status": "ok"}}'],
            doc="Liveness endpoint for the load balancer; public on purpose.",
        ),
    ]
    if "shared" in features:
        route = Route(
            "main", f"read_shared_{n.s}", ("GET",), "/api/shared/{code}", "public", ["code: str"], [],
            doc=f"Anyone holding a share link may view the {n.s}'s non-sensitive fields.",
        )
        head = [
            f"{rec} = {n.first(f'select({M}).where({M}.share_code == code)')}",
            f"if {rec} is None:",
            '    raise HTTPException(status_code=404, detail="unknown share link")',
        ]
        routes.append(_with_model(route, sites("shared.fields", (f"{M}Shared", [f"return {rec}"])), head))

    # -- resource group --------------------------------------------------------------------
    list_params, list_body = sites(
        "list.filter", ([], [n.records_query("visible_scope(user)"), n.present_records])
    )
    routes.append(Route("resource", f"list_{n.p}", ("GET",), f"/api/{n.p}", "user", list_params, list_body,
                        response_model=f"list[{read_model}]"))
    if "search" in features:
        routes.append(
            Route(
                "resource", f"search_{n.p}", ("GET",), f"/api/{n.p}/search", "user", ["q: str"],
                sites("search.filter", [n.records_query("visible_scope(user)", f"{M}.{n.title}.icontains(q)"),
                                        n.present_records]),
                response_model=f"list[{read_model}]",
            )
        )
    read_check = [f"if not can_read(user, {rec}):", *_deny(f"not allowed to view this {n.s}")]
    routes.append(
        Route(
            "resource", f"read_{n.s}", ("GET",), f"/api/{n.p}/{{{n.id}}}", "user", [idp],
            [*_load(n), *sites("detail.check", read_check), f"return present(user, {rec})"],
            response_model=read_model,
        )
    )
    create_body = ["values = payload.model_dump()"]
    create_body += sites("create.owner", [f"values[{py(n.owner)}] = user.id"])
    if n.tenant:
        create_body.append(f"values[{py(n.tenant)}] = user.{n.tenant}")
    create_body += [f"{rec} = {M}(**values)", f"db.add({rec})", "db.commit()", f"db.refresh({rec})", f"return {rec}"]
    routes.append(
        Route(
            "resource", f"create_{n.s}", ("POST",), f"/api/{n.p}", "user", [f"payload: {M}Create"],
            create_body, status_code=201, response_model=read_model,
        )
    )
    modify_check = [f"if not can_modify(user, {rec}):", *_deny(f"not allowed to change this {n.s}")]
    routes.append(
        Route(
            "resource", f"update_{n.s}", ("PATCH",), f"/api/{n.p}/{{{n.id}}}", "user",
            [idp, f"payload: {M}Update"],
            [
                *_load(n),
                *sites("update.check", modify_check),
                "changes = payload.model_dump(exclude_unset=True)",
                "for key, value in changes.items():",
                f"    setattr({rec}, key, value)",
                "db.commit()",
                f"return present(user, {rec})",
            ],
            response_model=read_model,
        )
    )
    routes.append(
        Route(
            "resource", f"delete_{n.s}", ("DELETE",), f"/api/{n.p}/{{{n.id}}}", "user", [idp],
            [
                *_load(n),
                *sites("delete.check", modify_check),
                f"db.delete({rec})",
                "db.commit()",
                f'return {{"deleted": {n.id}}}',
            ],
        )
    )
    if "legacy_alias" in features:
        routes.append(
            Route(
                "legacy", f"read_{n.s}_v1", ("GET",), f"/api/v1/{n.p}/{{{n.id}}}", "user", [idp],
                [*_load(n), *sites("legacy.check", read_check), f"return present(user, {rec})"],
                doc="Kept for mobile clients that still call the v1 API.",
                response_model=read_model,
            )
        )

    # -- account group ---------------------------------------------------------------------
    routes.append(Route("account", "read_me", ("GET",), "/api/me", "user", [], ["return user"],
                        response_model="ProfileOut"))
    if "profile" in features:
        routes.append(
            Route(
                "account", "update_me", ("PATCH",), "/api/me", "user",
                sites("profile.params", ["payload: ProfileUpdate"]),
                [
                    *sites("profile.changes", ["changes = payload.model_dump(exclude_unset=True)"]),
                    "return update_user(db, user, changes)",
                ],
                response_model="ProfileOut",
            )
        )
    if "directory" in features:
        everyone = n.rows("select(User).order_by(User.id)")
        route = Route("account", "list_people", ("GET",), "/api/people", "user", [], [],
                      doc="Colleague directory: names only.")
        routes.append(_with_model(route, sites("directory.list", ("list[PersonOut]", [f"return {everyone}"])), []))
        route = Route("account", "read_person", ("GET",), "/api/people/{person_id}", "user", ["person_id: str"], [])
        head = [
            "person = get_user(db, person_id)",
            "if person is None:",
            '    raise HTTPException(status_code=404, detail="no such person")',
        ]
        routes.append(_with_model(route, sites("directory.detail", ("PersonOut", ["return person"])), head))
    if "files" in features:
        routes.append(
            Route(
                "account", "download_file", ("GET",), "/api/files", "user", ["name: str"],
                [
                    *sites(
                        "files.path",
                        [
                            f'folder = ({n.cfg("UPLOAD_DIR")} / str(user.id)).resolve()',
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
            [*sites("admin.users_guard", []), f"return {n.rows('select(User).order_by(User.id)')}"],
            response_model="list[AccountOut]",
        )
    )
    if "export" in features:
        routes.append(
            Route(
                "admin", f"admin_export_{n.p}", ("GET",), f"/api/admin/{n.p}/export",
                sites("admin.export", "admin"), [],
                [*sites("admin.export_guard", []), f"return {n.rows(f'select({M}).order_by({M}.id)')}"],
                doc=f"Full export of every {n.s}, sensitive fields included.",
                response_model=f"list[{M}Record]",
            )
        )
    if "report" in features:
        owner = f"str({rec}.{n.owner})"
        routes.append(
            Route(
                "admin", "admin_report", ("GET", "POST"), "/api/admin/report", sites("admin.report", "admin"), [],
                [
                    *sites("admin.report_guard", []),
                    f"{n.p} = {n.rows(f'select({M})')}",
                    "owners = {}",
                    f"for {rec} in {n.p}:",
                    f"    owners[{owner}] = owners.get({owner}, 0) + 1",
                    f'return {{"total": len({n.p}), "by_owner": owners, "regenerated": request.method == "POST"}}',
                ],
                needs_request=True,
                doc="GET shows the usage report; POST regenerates it.",
            )
        )
    if "backup" in features:
        users = n.rows("select(User).order_by(User.id)")
        records = n.rows(f"select({M}).order_by({M}.id)")
        routes.append(
            Route(
                "internal", "internal_backup", ("GET",), "/api/internal/backup", sites("internal.backup", "admin"), [],
                [*sites("internal.backup_guard", []), f"users = {users}", f"{n.p} = {records}",
                 f'return {{"users": users, {py(n.p)}: {n.p}}}'],
                doc="Nightly backup job pulls everything from here.",
                response_model="Backup",
            )
        )
    return routes
