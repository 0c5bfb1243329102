"""IDOR read (CWE-639): a record is served to anyone who knows its id.

The detail route loads the record by the id in the URL and returns it without asking whether the
caller may see it. Subtle variants keep a check that logs or swallows the failure instead of refusing.

Forbidden paths: every caller the policy does not let read the record asks for it by id, through
every route the broken check guards: plain users who do not own it and, in multi-tenant domains,
managers of another tenant (a fix that only stops plain users lets them through).
"""

from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, check_skipped_for, drop, let_through


def _check_logged(names, secure):
    return [
        f"if not can_read(user, {names.rec}):",
        f'    logger.warning("user %s opened {names.s} %s they do not own", {names.attr("user", "id")}, {names.id})',
    ]


def _check_swallowed(names, secure):
    return [
        "try:",
        f"    if not can_read(user, {names.rec}):",
        f'        raise PermissionError("not allowed to view this {names.s}")',
        "except PermissionError:",
        '    logger.info("ownership check failed; serving the read-only view")',
    ]


def _probes(*sites: str):
    def build(ctx: ProbeContext):
        record = ctx.record("read")
        out = []
        if "detail" in sites:
            out.append(
                ctx.security(
                    f"other users cannot read the victim's {ctx.names.s} by id",
                    ctx.read_steps(record),
                    "detail",
                )
            )
        if "legacy" in sites:
            out.append(ctx.legacy_read_security(record))
        return out

    return build


def _narrow(*keys: str):
    """The route checks restored, each skipped for one kind of intruder."""
    return let_through("read", lambda who: {key: check_skipped_for(who) for key in keys}, "reading the record by id")


BUG = BugClass(
    name="idor_read",
    cwe=("CWE-639",),
    title="Insecure direct object reference (read)",
    symptom="users can open records that belong to someone else by changing the id in the URL",
    variants=(
        Variant("missing_check", ("detail",), {"detail.check": drop()}, _probes("detail"),
                description="the detail route has no ownership check", narrow_fixes=_narrow("detail.check")),
        Variant("logged_not_enforced", ("detail",), {"detail.check": _check_logged}, _probes("detail"),
                subtle=True, description="the ownership check only logs a warning",
                narrow_fixes=_narrow("detail.check")),
        Variant("swallowed_exception", ("detail",), {"detail.check": _check_swallowed}, _probes("detail"),
                subtle=True, description="the ownership check raises and then catches its own exception",
                narrow_fixes=_narrow("detail.check")),
        Variant("missing_check_with_alias", ("detail", "legacy"),
                {"detail.check": drop(), "legacy.check": drop()}, _probes("detail", "legacy"),
                features=("legacy_alias",), site_keys={"detail": ("detail.check",), "legacy": ("legacy.check",)},
                description="neither the detail route nor its v1 alias checks ownership",
                narrow_fixes=_narrow("detail.check", "legacy.check")),
    ),
)
