"""ScenarioSpec: the authored description of one access-control repair scenario.

A spec says *what* the app is (domain, resource, fields, who the users are, what they own), *what
the access policy is* (declarative rules with a plain-language rendering), *which bug is planted where*
(bug class, CWE ids, variant, sites) and *which traps punish a lazy fix*. It says nothing about source
text: the compiler renders the app from the spec, so two specs that are equal produce byte-identical
bundles.

Identities are drawn per seed: usernames, numeric or string ids, tokens, tenant names and record
markers all change with the seed, so an agent cannot special-case a test user or a record id.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from envcore.scenario.dumps import without_unset

SPEC_VERSION = 1
"""Bump when the meaning of a spec field changes."""

_IDENT = re.compile(r"^[a-z][a-z0-9_]{1,30}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Role(str, Enum):
    """Roles a seeded user can hold. ``manager`` is tenant-scoped; ``admin`` is global."""

    USER = "user"
    MANAGER = "manager"
    ADMIN = "admin"


FieldKind = Literal["text", "int", "money", "date", "bool", "email"]


class FieldSpec(_Model):
    """One attribute of the resource."""

    name: str
    kind: FieldKind = "text"
    sensitive: bool = False
    """Sensitive fields may only be shown to the record's owner and to admins."""
    words: tuple[str, ...] = ()
    """Vocabulary for generated text values (the generator adds a unique marker)."""

    @model_validator(mode="after")
    def _identifier(self) -> "FieldSpec":
        if not _IDENT.match(self.name):
            raise ValueError(f"field name {self.name!r} must be a lower-case identifier")
        return self


class ResourceSpec(_Model):
    """The one resource type the app manages (``notes``, ``invoices``, ...)."""

    singular: str
    plural: str
    fields: tuple[FieldSpec, ...] = Field(min_length=2)
    title_field: str
    """A non-sensitive text field that identifies a record to people (and carries a unique marker)."""
    owner_field: str = "owner_id"
    tenant_field: str | None = None
    """Set when the domain is multi-tenant (``org_id``, ``clinic_id``...)."""

    @model_validator(mode="after")
    def _consistent(self) -> "ResourceSpec":
        for name in (self.singular, self.plural, self.owner_field, self.tenant_field or "x_id"):
            if not _IDENT.match(name):
                raise ValueError(f"{name!r} must be a lower-case identifier")
        if self.singular == self.plural:
            raise ValueError("singular and plural must differ")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError("duplicate field names")
        reserved = {"id", self.owner_field, self.tenant_field, "share_code"}
        if reserved & set(names):
            raise ValueError(f"fields may not be named {sorted(n for n in reserved & set(names) if n)}")
        title = next((f for f in self.fields if f.name == self.title_field), None)
        if title is None or title.kind != "text" or title.sensitive:
            raise ValueError("title_field must name a non-sensitive text field")
        if not any(f.sensitive and f.kind == "text" for f in self.fields):
            raise ValueError("a resource needs at least one sensitive text field")
        return self

    @property
    def sensitive_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.sensitive)

    @property
    def editable_fields(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


class DomainSpec(_Model):
    """A business domain: the story and the resource the generated app serves."""

    name: str
    service: str
    """Human name of the service, e.g. ``Clinic appointments API``."""
    resource: ResourceSpec
    tenant_label: str = "organisation"
    tenant_names: tuple[str, ...] = ("Acme", "Globex")


class CodeStyle(_Model):
    """How the app's source is laid out. Each axis changes where the fix must go.

    The first values of each axis are the generator's compact styles (one file or a small package, a
    bearer token the app looks up itself, a dict or an in-memory ``sqlite3`` store). The others write
    what production FastAPI apps look like: ``routers`` (a project of ``APIRouter`` modules with
    models, schemas, database, dependencies and ``pydantic-settings`` config, imported through the
    ``app`` package) and ``routers_flat`` (the same modules at the top level, imported flat: ``from
    models import Note``); ``oauth2_jwt`` (``OAuth2PasswordBearer``, a password login and PyJWT tokens),
    ``api_key`` (``APIKeyHeader``) and ``cookie`` (``APIKeyCookie`` session ids); ``sqlalchemy`` (the
    SQLAlchemy 2 ORM) and ``sqlmodel`` (SQLModel tables), both on a SQLite file the app creates and
    seeds at start-up."""

    layout: Literal["single_file", "package", "routers", "routers_flat"] = "single_file"
    auth: Literal["depends", "inline", "decorator", "oauth2_jwt", "api_key", "cookie"] = "depends"
    store: Literal["dict", "sqlite", "sqlalchemy", "sqlmodel"] = "dict"
    id_type: Literal["int", "str"] = "int"

    @property
    def label(self) -> str:
        return f"{self.layout}/{self.auth}/{self.store}/{self.id_type}"


class UserSpec(_Model):
    """A seeded account. Tokens are bearer tokens the runner sends for probes and requests."""

    username: str
    display_name: str
    user_id: str
    role: Role
    tenant: str | None = None
    token: str
    email: str
    password_hash: str
    api_key: str


class RecordSpec(_Model):
    """One seeded record of the resource."""

    record_id: str
    owner: str
    """Username of the owner."""
    values: dict[str, Any]
    share_code: str | None = None
    """Set when the record is shared through the public share link."""
    purpose: str = ""
    """What the generator seeded it for (``read``, ``target_update``...); probes look records up by it."""


class FileSpec(_Model):
    """A file in a user's upload folder, served by the download route when the app has one."""

    owner: str
    name: str
    content: str


Principal = Literal["anyone", "authenticated", "owner", "self", "admin", "tenant_manager"]
PolicyAction = Literal[
    "status",
    "read",
    "list",
    "search",
    "create",
    "update",
    "delete",
    "export",
    "manage_users",
    "admin_report",
    "purge",
    "profile_read",
    "profile_update",
    "directory",
    "shared_read",
    "download",
    "redirect",
]


class PolicyRule(_Model):
    """One declarative rule: who may perform an action, and with which fields."""

    action: PolicyAction
    principals: tuple[Principal, ...]
    fields: tuple[str, ...] = ()
    """For updates: the fields that may change. For reads: the fields that may be shown."""
    note: str = ""
    """Extra wording for the plain-language rendering."""


class AccessPolicy(_Model):
    """The access policy as rules; ``text`` is the plain-language rendering shown to agents."""

    rules: tuple[PolicyRule, ...]
    text: str


class SiteRef(_Model):
    """Where the bug lives: a named check slot in the generated app."""

    site: str
    """Site id, e.g. ``detail.check`` or ``auth.identity``."""
    method: str
    path: str
    """The route a request exploits through this site (method + path template)."""


class BugTarget(_Model):
    """The planted bug."""

    bug_class: str
    cwe: tuple[str, ...]
    variant: str
    sites: tuple[SiteRef, ...] = Field(min_length=1)


TrapKind = Literal["public_route", "admin_access", "second_site", "legacy_alias"]
"""The traps the generator plants (a scenario may also declare ``custom`` ones, see :class:`Trap`)."""

CUSTOM_TRAP = "custom"
"""The kind of a trap a scenario's author names and describes in their own words."""

TRAP_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
"""What a trap's name looks like: a short slug (``anonymous-401``), so it can never hold a path."""


class Trap(_Model):
    """A decoy that punishes a naive fix; every trap is backed by at least one probe.

    Trap probes refer to a trap by its :attr:`key`: its ``name`` when it has one, else its ``kind``.
    A ``custom`` trap must have a name (``{kind: custom, name: anonymous-401, description: ...}``).
    An unnamed trap serialises exactly as before names existed (no ``name`` key), so the content hash
    of every bundle written without them is unchanged."""

    kind: TrapKind | Literal["custom"]
    description: str
    name: str | None = Field(default=None, pattern=TRAP_NAME)
    """The name trap probes use in ``trap:`` (required for ``custom``; ``None``: the kind is the name)."""

    @model_validator(mode="after")
    def _named_when_custom(self) -> Trap:
        if self.kind == CUSTOM_TRAP and self.name is None:
            raise ValueError("a custom trap needs a name (trap probes refer to it by that name)")
        return self

    @model_serializer(mode="wrap")
    def _without_missing_name(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "name")

    @property
    def key(self) -> str:
        """How trap probes name this trap: its name, or its kind when it has none."""
        return self.name or self.kind


class DifficultyFeatures(_Model):
    """Authored features that make a scenario harder; the compiler adds measured ones."""

    sites: int
    traps: int
    subtle_variant: bool
    """The vulnerable code has a check that looks right (logged, swallowed, weakened)."""
    decoy_routes: int
    """Optional routes that are correct but look like candidates for the bug."""


class SpecDraft(_Model):
    """What an author chooses; everything else (people, ids, tokens, records) is drawn from the seed.

    The same draft expanded with two seeds gives two apps with identical source code and different
    data, which is what lets a verifier grade a patch against identities the agent never saw."""

    domain: str | DomainSpec
    bug_class: str
    variant: str
    style: CodeStyle = CodeStyle()
    traps: tuple[TrapKind, ...] = ()
    decoys: tuple[str, ...] = ()
    """Optional routes added although the bug does not need them."""


class ScenarioSpec(_Model):
    """Everything the compiler needs to build one scenario bundle."""

    spec_version: int = SPEC_VERSION
    seed: int
    domain: DomainSpec
    style: CodeStyle
    features: tuple[str, ...]
    """Optional routes the app has (``search``, ``legacy_alias``, ``profile``, ``directory``...)."""
    users: tuple[UserSpec, ...]
    records: tuple[RecordSpec, ...]
    files: tuple[FileSpec, ...] = ()
    roles: dict[str, str]
    """Named parts users play in probes: ``victim``, ``attacker``, ``admin``, ...: username."""
    policy: AccessPolicy
    bug: BugTarget
    traps: tuple[Trap, ...] = ()
    difficulty: DifficultyFeatures
    app_secret: str
    """Per-seed secret the app keeps in its config (marker for leaks; never a probe input)."""
    author: str = "template"
    draft: SpecDraft | None = None
    """The draft this spec was expanded from (``None`` for specs written by hand)."""

    @model_validator(mode="after")
    def _references(self) -> "ScenarioSpec":
        usernames = {u.username for u in self.users}
        if len(usernames) != len(self.users):
            raise ValueError("usernames must be unique")
        if len({u.user_id for u in self.users}) != len(self.users):
            raise ValueError("user ids must be unique")
        if len({u.token for u in self.users}) != len(self.users):
            raise ValueError("tokens must be unique")
        for part, username in self.roles.items():
            if username not in usernames:
                raise ValueError(f"role {part!r} names unknown user {username!r}")
        if len({r.record_id for r in self.records}) != len(self.records):
            raise ValueError("record ids must be unique")
        field_names = {f.name for f in self.domain.resource.fields}
        for record in self.records:
            if record.owner not in usernames:
                raise ValueError(f"record {record.record_id} has unknown owner {record.owner!r}")
            if set(record.values) != field_names:
                raise ValueError(f"record {record.record_id} must set exactly the resource fields")
        if self.domain.resource.tenant_field and any(u.tenant is None for u in self.users):
            raise ValueError("every user needs a tenant in a multi-tenant domain")
        return self

    def user(self, username: str) -> UserSpec:
        for candidate in self.users:
            if candidate.username == username:
                return candidate
        raise KeyError(username)

    def player(self, part: str) -> UserSpec:
        """The user playing ``part`` (``victim``, ``attacker``, ``admin``...)."""
        return self.user(self.roles[part])

    def records_of(self, username: str) -> list[RecordSpec]:
        return [r for r in self.records if r.owner == username]

    @property
    def tenanted(self) -> bool:
        return self.domain.resource.tenant_field is not None
