"""The access policy of a generated app: declarative rules, and their plain-language rendering.

Rules are data (who may do what, with which fields); the text is what an agent or a person reads.
Both come from the same table, so the policy an agent is told is exactly the one the secure app
implements and the probes check.
"""

from __future__ import annotations

from envcore.factory.codegen.names import a
from envcore.scenario.spec import AccessPolicy, DomainSpec, PolicyRule

SIGN_IN = {
    "oauth2_jwt": "a valid access token (`POST /auth/token`, which is public, exchanges a username and password "
                  "for one)",
    "api_key": "a valid API key in the `X-API-Key` header",
    "cookie": "a signed-in session (the `session_id` cookie)",
}
"""How the auth styles that do not take a bearer token from a sessions table say what signing in is."""


def build_policy(domain: DomainSpec, features: tuple[str, ...], auth: str = "depends") -> AccessPolicy:
    r = domain.resource
    tenant = domain.tenant_label
    readers: tuple = ("owner", "admin") + (("tenant_manager",) if r.tenant_field else ())
    rules: list[tuple[PolicyRule, str]] = []

    def add(rule: PolicyRule, text: str) -> None:
        rules.append((rule, text))

    add(PolicyRule(action="status", principals=("anyone",)), "`GET /api/status` is public.")
    add(
        PolicyRule(action="read", principals=readers, fields=tuple(f.name for f in r.fields)),
        f"{a(r.singular).capitalize()} may be read by its owner (`{r.owner_field}`)"
        + (
            f", by administrators, and by managers of the same {tenant} (`{r.tenant_field}`)."
            if r.tenant_field
            else " and by administrators."
        ),
    )
    add(
        PolicyRule(action="list", principals=readers),
        f"Listings{' and search' if 'search' in features else ''} return only the {r.plural} the caller may read"
        " (administrators see all).",
    )
    add(
        PolicyRule(action="create", principals=("authenticated",)),
        f"Any signed-in user may create {r.plural}; the owner is always the caller"
        + (f" and the {tenant} is the caller's." if r.tenant_field else "."),
    )
    add(
        PolicyRule(action="update", principals=("owner", "admin"), fields=tuple(f.name for f in r.fields)),
        f"Only the owner and administrators may update or delete {a(r.singular)}"
        + ("; managers may not." if r.tenant_field else ".")
        + f" Updatable fields: {', '.join(f.name for f in r.fields)}.",
    )
    add(PolicyRule(action="delete", principals=("owner", "admin")), "")
    add(
        PolicyRule(action="read", principals=("owner", "admin"), fields=r.sensitive_fields, note="sensitive"),
        f"Sensitive fields ({', '.join(r.sensitive_fields)}) are shown only to the owner and administrators.",
    )
    add(PolicyRule(action="profile_read", principals=("self",)), "`GET /api/me` shows the caller's own account.")
    add(PolicyRule(action="manage_users", principals=("admin",)), "Routes under `/api/admin/` are for administrators only.")
    if "export" in features:
        add(PolicyRule(action="export", principals=("admin",)), f"Administrators may export every {r.singular}.")
    if "report" in features:
        add(
            PolicyRule(action="admin_report", principals=("admin",)),
            "The usage report (`/api/admin/report`, GET to view, POST to regenerate) is for administrators only.",
        )
    if "backup" in features:
        add(
            PolicyRule(action="export", principals=("admin",), note="backup"),
            "`/api/internal/backup` is used by the administrators' backup job and by nobody else.",
        )
    if "legacy_alias" in features:
        add(
            PolicyRule(action="read", principals=readers, note="legacy alias"),
            f"The v1 alias `/api/v1/{r.plural}/{{id}}` is still used by mobile clients and follows the same rules.",
        )
    if "shared" in features:
        add(
            PolicyRule(action="shared_read", principals=("anyone",), fields=("id",) + tuple(
                f.name for f in r.fields if not f.sensitive)),
            f"Anyone with a share link (`/api/shared/{{code}}`) may view a shared {r.singular}'s id and its"
            f" non-sensitive fields ({', '.join(f.name for f in r.fields if not f.sensitive)}), without signing in;"
            f" nothing else (not its `{r.owner_field}`"
            + (f", its `{r.tenant_field}`" if r.tenant_field else "")
            + " or its share code).",
        )
    if "profile" in features:
        add(
            PolicyRule(action="profile_update", principals=("self",), fields=("display_name", "email")),
            "Users may change their own `display_name` and `email` and nothing else: nobody can change their own"
            " role, username, `password_hash` or `api_key`"
            + (f", or move themselves to another {tenant} (`{r.tenant_field}`)." if r.tenant_field else "."),
        )
    if "directory" in features:
        add(
            PolicyRule(action="directory", principals=("authenticated",), fields=("id", "username", "display_name")),
            "Signed-in users may browse colleagues (`/api/people`) and see only id, username and display name.",
        )
    if "files" in features:
        add(
            PolicyRule(action="download", principals=("self",)),
            "`/api/files?name=` serves files from the caller's own upload folder and nowhere else.",
        )
    if "redirect" in features:
        add(
            PolicyRule(action="redirect", principals=("anyone",)),
            "`/auth/logout?next=` may only redirect to a path on this site.",
        )
    add(PolicyRule(action="status", principals=("authenticated",), note="default"),
        f"Every other route requires {SIGN_IN.get(auth, 'a valid bearer token')}; anonymous callers get 401.")

    roles = "user, " + (f"manager (scoped to one {tenant}), " if r.tenant_field else "") + "admin"
    lines = [f"Access policy of the {domain.service}", f"Roles: {roles}."]
    lines += [f"- {text}" for _, text in rules if text]
    return AccessPolicy(rules=tuple(rule for rule, _ in rules), text="\n".join(lines))
