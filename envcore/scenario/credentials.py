"""How a request proves which seeded user sends it: the credentials of a :class:`BundleUser`.

Real apps tell their users apart in many ways: a bearer token, an API key in a header of their own,
a session cookie, HTTP basic auth, a custom identity header (``X-User-Id``), or a token or cookie
handed out by a login request. A user's :class:`Credentials` say which, as data (like probes, they
are interpreted by the runner, never executed), so an imported app is graded with the requests it
really accepts and reports can name the user behind each of them.

A user without credentials sends its ``token`` as a bearer token, as every generated scenario does.
Credentials as written in a scenario leave out what defaults to the user's own values (``secret``:
the token; ``login_name``: the username); :meth:`Credentials.for_user` fills them in, and the runner
only ever sees credentials filled in that way (:meth:`envcore.scenario.bundle.BundleUser.credential`).

Kinds, and what a request as the user carries:

* ``bearer``: ``Authorization: Bearer <secret>``;
* ``header``: ``<name>: <secret>`` (an API key, or an identity header such as ``X-User-Id``);
* ``cookie``: ``Cookie: <name>=<secret>``;
* ``basic``: ``Authorization: Basic base64(<login_name>:<secret>)``;
* ``login``: the :class:`LoginRequest` is sent first, to the same app instance, and what its reply
  grants is sent with every request as the user: the token at ``token_json`` (as a bearer token, or
  in the header ``name``), or else the cookies the reply sets.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from envcore.scenario.probes import absolute_path, known_method

CredentialKind = Literal["bearer", "header", "cookie", "basic", "login"]

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
"""An HTTP token (RFC 9110 section 5.6.2): what a header or cookie name may be made of."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_COOKIE_VALUE = re.compile(r"^[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*$")
"""A cookie value as RFC 6265 allows it unquoted: no space, quote, comma, semicolon or backslash."""
RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding"})
"""Headers the runner writes itself; a credential cannot be sent in one of them."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoginRequest(_Model):
    """The request a ``login`` user sends before any other, once per app instance."""

    method: str = "POST"
    path: str
    """Starts with ``/``; may carry an inline query."""
    form: dict[str, str] | None = None
    """Sent as ``application/x-www-form-urlencoded`` (an OAuth2 password form)."""
    json_body: Any = None
    """Sent as JSON instead of ``form``. With neither, the form ``{username: <login_name>, password:
    <secret>}`` is sent."""
    token_json: str | None = None
    """Dotted JSON path of the token in the reply (``access_token``, ``data.token``); ``None``: the
    cookies the reply sets are what the user sends back."""

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        return known_method(value)

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        return absolute_path(value, "a login path starts with '/'")

    @field_validator("token_json")
    @classmethod
    def _some_path(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("token_json names where the token is in the reply; leave it out to use cookies")
        return value

    @model_validator(mode="after")
    def _one_body(self) -> LoginRequest:
        if self.form is not None and self.json_body is not None:
            raise ValueError("a login sends either form or json_body, not both")
        return self


class Credentials(_Model):
    """How requests as one user prove who sends them (see the module docstring)."""

    kind: CredentialKind = "bearer"
    name: str | None = None
    """``header``: the header's name; ``cookie``: the cookie's name; ``login``: optional, the header
    the login's token is sent in (instead of ``Authorization: Bearer``)."""
    secret: str | None = Field(default=None, min_length=1)
    """The key, cookie value or password; ``None``: the user's token."""
    login_name: str | None = Field(default=None, min_length=1)
    """``basic`` and ``login``: the name the user signs in with; ``None``: the username."""
    login: LoginRequest | None = None
    """``login`` only: the request that signs the user in."""

    @model_validator(mode="after")
    def _consistent(self) -> Credentials:
        kind = self.kind
        if kind in ("header", "cookie") and self.name is None:
            raise ValueError(f"credentials of kind {kind} need a name (the {kind}'s name)")
        if kind in ("bearer", "basic") and self.name is not None:
            raise ValueError(f"credentials of kind {kind} take no name")
        if kind == "login":
            if self.login is None:
                raise ValueError("credentials of kind login need a login request")
            if self.name is not None and self.login.token_json is None:
                raise ValueError("name says which header carries the login's token: it needs login.token_json")
        elif self.login is not None:
            raise ValueError(f"credentials of kind {kind} take no login request (only kind login does)")
        if self.login_name is not None and kind not in ("basic", "login"):
            raise ValueError(f"credentials of kind {kind} take no login_name (only basic and login do)")
        if self.name is not None:
            if not _TOKEN.match(self.name):
                raise ValueError(f"{self.name!r} is not a valid {'cookie' if kind == 'cookie' else 'header'} name")
            if kind != "cookie" and self.name.lower() in RESERVED_HEADERS:
                raise ValueError(f"a credential cannot be sent in the {self.name} header")
        for field, value in (("secret", self.secret), ("login_name", self.login_name)):
            if value is not None and _CONTROL.search(value):
                raise ValueError(f"{field} contains a control character")
        if kind == "cookie" and self.secret is not None and not _COOKIE_VALUE.match(self.secret):
            raise ValueError("a cookie's secret cannot hold spaces, quotes, commas, semicolons or backslashes")
        if kind == "basic" and self.login_name is not None and ":" in self.login_name:
            raise ValueError("a basic-auth login_name cannot contain ':'")
        return self

    def for_user(self, username: str, token: str | None) -> Credentials:
        """These credentials with the user's own values where they default to them: ``secret`` (the
        token), ``login_name`` (the username) and a login's form (``username`` and ``password``). A
        login user without a token keeps no secret: its login's form or body says what it sends."""
        secret = self.secret if self.secret is not None else token
        update: dict[str, Any] = {"secret": secret}
        if self.kind in ("basic", "login"):
            update["login_name"] = self.login_name if self.login_name is not None else username
        if self.login is not None and self.login.form is None and self.login.json_body is None:
            form = {"username": update["login_name"], "password": secret}
            update["login"] = self.login.model_copy(update={"form": form})
        return self.model_copy(update=update)

    def describe(self) -> str:
        """How a request as the user is signed, in words and without its secret."""
        if self.kind == "bearer":
            return "a bearer token"
        if self.kind == "header":
            return f"the header {self.name}"
        if self.kind == "cookie":
            return f"the cookie {self.name}"
        if self.kind == "basic":
            return "HTTP basic auth"
        assert self.login is not None
        if self.login.token_json is None:
            carried = "the cookies it sets"
        else:
            carried = f"its token in the header {self.name}" if self.name else "its token as a bearer token"
        return f"a login at {self.login.method} {self.login.path}, then {carried}"
