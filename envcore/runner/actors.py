"""Requests as seeded users: where an actor's credentials become the headers of a request.

Every request the grader or the agent sends as a seeded user goes through :class:`ActorSession`:
probe steps in every runner, the agent's ``http_request``, the coach's replays. A session is the
actors' standing with **one app instance** (one probe's worker, one live app's worker): a user whose
credentials are of kind ``login`` signs in there once, with the login request its credentials
declare, before its first request, and what the reply grants (a token, or the cookies it sets) is
sent with its later requests to that same instance. A fresh instance knows nobody, so a new session
signs in again.

How a request is signed (:meth:`ActorSession.sign`): the actor's credential headers come first and
the request's own headers after them, as the bearer token always did, so an app that reads the first
value of a header reads the actor's, and a step's explicit header never replaces the credential
of the same name. Cookies are the exception a browser makes: one ``Cookie`` header carries the
request's own cookies followed by the actor's, so an extra cookie a step sends reaches the app while
the actor's cookie of the same name still wins (the last one does, in the cookie parsers apps use).
A request signed for one actor carries that actor's secrets and nobody else's.

Logins are the grader's own requests: they are never judged. A login that fails (an error status,
no token where the credentials say, no cookie) makes each of that actor's steps fail with the reason
(``login as alice failed: status 401``) without sending it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterable, Mapping
from urllib.parse import urlencode

from envcore.runner.http import HttpRequest, HttpResponse
from envcore.scenario.bundle import BundleUser
from envcore.scenario.credentials import Credentials
from envcore.scenario.probes import _MISSING, _json_at

Actors = Mapping[str, Credentials | str]
"""Each seeded user's credentials, by username, as :meth:`BundleUser.credential` fills them in. A plain
string stands for a bearer token (what a user without credentials sends)."""

MAX_GRANT_CHARS = 4096
"""The longest token or cookie string a login reply may grant; a longer one fails the login (every
later request would carry it)."""


class LoginRequired(ValueError):
    """A request as a ``login`` actor was asked for before that actor signed in to the app instance."""


def actors_of(users: Iterable[BundleUser]) -> dict[str, Credentials]:
    """The :data:`Actors` of a bundle's (or a shadow's) users."""
    return {user.username: user.credential() for user in users}


def credentials_of(actors: Actors, actor: str) -> Credentials:
    """``actor``'s credentials; :class:`KeyError` for a name that is not a seeded user."""
    if actor not in actors:
        raise KeyError(f"probe actor {actor!r} is not a seeded user")
    found = actors[actor]
    if isinstance(found, str):  # a bearer token, exactly as given (whatever characters it holds)
        return Credentials.model_construct(kind="bearer", name=None, secret=found, login_name=None, login=None)
    if found.secret is None and found.kind != "login":  # a login's form or body may carry everything
        raise ValueError(f"the credentials of {actor!r} are not filled in (use BundleUser.credential())")
    return found


def _basic(login_name: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{login_name}:{secret}".encode()).decode("ascii")


def _fixed_headers(credentials: Credentials) -> tuple[tuple[str, str], ...]:
    """The headers of credentials that need no login."""
    secret = credentials.secret or ""
    if credentials.kind == "bearer":
        return (("authorization", f"Bearer {secret}"),)
    if credentials.kind == "header":
        return ((str(credentials.name).lower(), secret),)
    if credentials.kind == "cookie":
        return (("cookie", f"{credentials.name}={secret}"),)
    if credentials.kind == "basic":
        return (("authorization", _basic(credentials.login_name or "", secret)),)
    raise LoginRequired("login credentials need the app's answer to their login")


def _signed(request: HttpRequest, credential_headers: tuple[tuple[str, str], ...]) -> HttpRequest:
    """``request`` with ``credential_headers`` first (see the module docstring for cookies)."""
    own = list(credential_headers)
    rest = list(request.headers)
    granted_cookies = [value for name, value in own if name == "cookie"]
    if granted_cookies:
        explicit = [value for name, value in rest if name == "cookie"]
        rest = [(name, value) for name, value in rest if name != "cookie"]
        own = [(name, value) for name, value in own if name != "cookie"]
        own.append(("cookie", "; ".join([*explicit, *granted_cookies])))
    return dataclasses.replace(request, headers=(*own, *rest))


def _set_cookies(response: HttpResponse) -> list[str]:
    """``name=value`` of every cookie the response sets (one ``Set-Cookie`` line each), empty ones
    (a cookie being cleared) left out."""
    found = []
    for line in response.headers.get("set-cookie", "").split("\n"):
        pair = line.split(";", 1)[0].strip()
        name, sep, value = pair.partition("=")
        if sep and name.strip() and value.strip():
            found.append(f"{name.strip()}={value.strip()}")
    return found


class ActorSession:
    """The actors' standing with one app instance: what their logins there granted, or why one failed.
    See the module docstring."""

    def __init__(self, actors: Actors) -> None:
        self.actors = actors
        self._granted: dict[str, tuple[tuple[str, str], ...]] = {}
        self._failed: dict[str, str] = {}

    def credentials(self, actor: str) -> Credentials:
        return credentials_of(self.actors, actor)

    def needs_login(self, actor: str | None) -> bool:
        """Whether ``actor`` must sign in to this instance before its next request."""
        return (actor is not None and self.credentials(actor).kind == "login"
                and actor not in self._granted and actor not in self._failed)

    def login_request(self, actor: str) -> HttpRequest:
        """The request that signs ``actor`` in (its credentials must be of kind ``login``)."""
        login = self.credentials(actor).login
        if login is None:
            raise ValueError(f"{actor!r} does not sign in with a login request")
        if login.json_body is not None:
            return HttpRequest.build(login.method, login.path, json_body=login.json_body)
        form = urlencode(list((login.form or {}).items())).encode("utf-8")
        return HttpRequest(login.method, login.path, headers=(("content-type", "application/x-www-form-urlencoded"),),
                           body=form)

    def granted(self, actor: str) -> tuple[tuple[str, str], ...]:
        """What ``actor``'s login on this instance granted (headers), empty before or after a failed one."""
        return self._granted.get(actor, ())

    def record_login(self, actor: str, response: HttpResponse) -> str | None:
        """Take the reply to ``actor``'s login; return why it failed, or ``None`` when it granted a
        token or cookies."""
        login = self.credentials(actor).login
        assert login is not None
        reason, granted = self._grant(actor, login.token_json, response)
        if reason is not None:
            self._failed[actor] = f"login as {actor} failed: {reason}"
            return self._failed[actor]
        self._granted[actor] = granted
        return None

    def _grant(self, actor: str, token_json: str | None,
               response: HttpResponse) -> tuple[str | None, tuple[tuple[str, str], ...]]:
        if response.status is None:
            return f"no response ({response.error})", ()
        if response.status >= 400:
            return f"status {response.status}", ()
        if token_json is None:
            cookies = "; ".join(_set_cookies(response))
            if not cookies:
                return f"status {response.status} set no cookie", ()
            if len(cookies) > MAX_GRANT_CHARS:
                return f"its cookies are longer than {MAX_GRANT_CHARS} characters", ()
            return None, (("cookie", cookies),)
        try:
            document = json.loads(response.body.decode("utf-8", "replace") or "null")
        except (ValueError, RecursionError):
            return f"status {response.status} with a reply that is not JSON", ()
        token = _json_at(document, token_json)
        if token is _MISSING or isinstance(token, bool) or not isinstance(token, (str, int)) or token == "":
            return f"status {response.status} with no token at JSON {token_json!r}", ()
        token = str(token)
        if len(token) > MAX_GRANT_CHARS:
            return f"its token is longer than {MAX_GRANT_CHARS} characters", ()
        name = self.credentials(actor).name
        return None, ((name.lower(), token) if name else ("authorization", f"Bearer {token}"),)

    def login_failure(self, actor: str | None) -> str | None:
        """Why ``actor``'s login to this instance failed, if it did."""
        return self._failed.get(actor) if actor is not None else None

    def sign(self, request: HttpRequest, actor: str | None) -> HttpRequest:
        """``request`` as sent by ``actor`` (unchanged for ``None``: anonymous). Raises
        :class:`LoginRequired` for a ``login`` actor that has not signed in to this instance."""
        if actor is None:
            return request
        credentials = self.credentials(actor)
        if credentials.kind != "login":
            return _signed(request, _fixed_headers(credentials))
        if actor in self._granted:
            return _signed(request, self._granted[actor])
        raise LoginRequired(self._failed.get(actor) or f"{actor} has not signed in to this app yet")
