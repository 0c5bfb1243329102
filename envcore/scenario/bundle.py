"""The bundle: a compiled, executable scenario, and its content hash.

A bundle holds everything needed to serve and grade one episode: the vulnerable app's files and
entrypoint, the seeded users with their tokens (and credentials, where the app signs requests some
other way than with a bearer token), the task statement and policy text, the declarative probes
(visible and hidden) and the reference fix as a unified diff. Generated bundles also carry
the spec they came from, so a cache entry can be re-derived and compared byte for byte.

The content hash is SHA-256 over the bundle's canonical JSON without the ``scenario_id`` itself; the
first 16 hex digits are the scenario id and the cache file name. Any edit to any byte of a cached
bundle changes the hash, which is how the cache detects tampering.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from envcore.scenario.credentials import Credentials
from envcore.scenario.dumps import without_unset
from envcore.scenario.probes import Probe, ProbeKind
from envcore.scenario.spec import ScenarioSpec, SiteRef, Trap

BUNDLE_VERSION = 2
"""Bump when the meaning of a bundle field changes; old caches then fail to load with a clear error.
Version 2 added :attr:`Bundle.shadow_values` (grading replaces them with fresh values)."""

ID_LENGTH = 16


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BundleUser(_Model):
    """A seeded account as the runtime needs it."""

    username: str
    role: str
    tenant: str | None = None
    user_id: str
    token: str | None = None
    """The user's secret: its bearer token, or what its credentials send by default. Only a user who
    signs in with a login request (credentials of kind ``login``) may go without one, when its
    credentials say what the login sends (a ``secret``, or the login's ``form`` or ``json_body``).
    Left out of every dump when ``None``, so every bundle written before it could be keeps its hash."""
    credentials: Credentials | None = None
    """How a request as this user is signed (:mod:`envcore.scenario.credentials`); ``None``: its
    ``token`` as a bearer token. Left out of every dump when ``None``, so a bundle's content hash is
    what it was before users could have credentials."""

    @model_validator(mode="after")
    def _has_a_secret(self) -> "BundleUser":
        if self.token is not None:
            return self
        credentials = self.credentials
        if credentials is None or credentials.kind != "login" or credentials.login is None:
            raise ValueError("a user needs a token (only a user whose credentials are of kind login may go without)")
        if credentials.secret is None and credentials.login.form is None and credentials.login.json_body is None:
            raise ValueError("a login user without a token needs credentials.secret (its password), or the login's "
                             "form or json_body")
        return self

    @model_serializer(mode="wrap")
    def _without_default_credentials(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "credentials", "token")

    def credential(self) -> Credentials:
        """The credentials requests as this user carry, with its own values filled in."""
        return (self.credentials or Credentials()).for_user(self.username, self.token)


class ShadowValue(_Model):
    """A value the agent can see that grading replaces with a fresh one of the same shape (see
    :mod:`envcore.verifier.shadow`): a username, an id, a token, a marker in a record's text."""

    value: str
    keep: int = Field(default=0, ge=0)
    """Leading characters kept as they are (a prefix such as ``tok_``)."""


class BundleMetrics(_Model):
    """Features measured on the compiled app; the tier is derived from them."""

    files: int
    source_lines: int
    routes: int
    sites: int
    traps: int
    fix_lines: int
    """Changed lines (added + removed) in the reference fix."""
    fix_files: int
    subtle_variant: bool
    decoy_routes: int
    score: float
    """Weighted difficulty score; see ``envcore.factory.difficulty``."""


class ShadowInCode(_Model):
    """Identities an app keeps in its code, which a shadow replaces all the same (an app that makes
    its users in code, and signs their tokens itself). See :mod:`envcore.verifier.shadow`."""

    files: tuple[str, ...] = ()
    """Code files (bundle paths) where the app makes its users: inside their string literals, on the
    lines a patch left as they were, the shadow replaces the declared values as in a data file."""
    jwt_secret: str | None = None
    """The HS256 secret the app signs its bearer tokens with: a user's token that is a JWT signed with
    it is signed anew, its claims shadowed, for the shadow's users."""


class Bundle(_Model):
    """One compiled scenario. ``files`` is the vulnerable app as the agent first sees it."""

    bundle_version: int = BUNDLE_VERSION
    generator: str
    """Version of the generator (or ``import``) that produced this bundle."""
    scenario_id: str = ""
    title: str
    domain: str
    bug_class: str
    cwe: tuple[str, ...]
    variant: str
    code_style: str
    tier: int = Field(ge=1, le=3)
    entrypoint: str
    """``module.path:attribute`` of the ASGI app, relative to the bundle root."""
    files: dict[str, str]
    users: tuple[BundleUser, ...]
    task: str
    policy_text: str
    probes: tuple[Probe, ...]
    reference_fix: str
    """Unified diff (``a/`` and ``b/`` prefixes) that turns ``files`` into the secure app."""
    sites: tuple[SiteRef, ...]
    traps: tuple[Trap, ...] = ()
    metrics: BundleMetrics
    spec: ScenarioSpec | None = None
    shadow_values: tuple[ShadowValue, ...] = ()
    """The identities grading replaces with fresh ones, everywhere but in the code, for every grading
    (empty: graded on the bundle's own data). Declared by whoever made the bundle."""
    shadow_in_code: ShadowInCode | None = None
    """Where the code holds identities the shadow replaces too (``None``: nowhere). Left out of every
    dump when ``None``, so bundles written before it keep their content hash."""

    @model_serializer(mode="wrap")
    def _without_missing_shadow_in_code(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "shadow_in_code")

    @field_validator("bundle_version")
    @classmethod
    def _current(cls, version: int) -> int:
        if version != BUNDLE_VERSION:
            raise ValueError(f"bundle format {version}, this code reads {BUNDLE_VERSION}: rebuild the scenario cache "
                             "(python -m envcore factory build)")
        return version

    # -- identity ---------------------------------------------------------------------------

    def canonical_json(self) -> str:
        """Deterministic JSON of everything but the id (sorted keys, no whitespace)."""
        data = self.model_dump(mode="json", exclude={"scenario_id"})
        return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def content_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    def with_id(self) -> "Bundle":
        return self.model_copy(update={"scenario_id": self.content_hash()[:ID_LENGTH]})

    # -- views ------------------------------------------------------------------------------

    def probes_of(self, kind: ProbeKind | None = None, *, visible: bool | None = None) -> list[Probe]:
        return [
            p
            for p in self.probes
            if (kind is None or p.kind == kind) and (visible is None or p.visible == visible)
        ]

    @property
    def visible_probes(self) -> list[Probe]:
        return self.probes_of(visible=True)

    def trap_named(self, key: str | None) -> Trap | None:
        """The trap a trap probe names (by :attr:`~envcore.scenario.spec.Trap.key`), or ``None``."""
        return next((trap for trap in self.traps if key is not None and trap.key == key), None)

    def user(self, username: str) -> BundleUser:
        for candidate in self.users:
            if candidate.username == username:
                return candidate
        raise KeyError(username)

    def summary(self) -> dict[str, Any]:
        """Manifest row: what the cache index and the scenario browser show."""
        return {
            "scenario_id": self.scenario_id,
            "title": self.title,
            "domain": self.domain,
            "bug_class": self.bug_class,
            "cwe": list(self.cwe),
            "variant": self.variant,
            "code_style": self.code_style,
            "tier": self.tier,
            "traps": [t.key for t in self.traps],
            "probes": {
                kind.value: len(self.probes_of(kind)) for kind in ProbeKind
            },
            "visible_probes": len(self.visible_probes),
        }
