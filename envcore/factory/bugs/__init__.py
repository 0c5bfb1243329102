"""The bug-class registry: one module per OWASP A01 pattern, one line each here."""

from __future__ import annotations

from envcore.factory.bugs import (
    broken_logic,
    client_identity,
    forced_browsing,
    idor_read,
    idor_write,
    list_leak,
    mass_assignment,
    missing_admin,
    open_redirect,
    path_traversal,
    sensitive_exposure,
    tenant_leak,
)
from envcore.factory.bugs.base import BugClass, ProbeContext, Variant, site_refs

BUG_CLASSES: dict[str, BugClass] = {
    module.BUG.name: module.BUG
    for module in (
        idor_read,
        idor_write,
        list_leak,
        missing_admin,
        broken_logic,
        client_identity,
        mass_assignment,
        sensitive_exposure,
        path_traversal,
        forced_browsing,
        tenant_leak,
        open_redirect,
    )
}


def get_bug_class(name: str) -> BugClass:
    try:
        return BUG_CLASSES[name]
    except KeyError:
        raise KeyError(f"unknown bug class {name!r}; known: {sorted(BUG_CLASSES)}") from None


__all__ = ["BUG_CLASSES", "BugClass", "ProbeContext", "Variant", "get_bug_class", "site_refs"]
