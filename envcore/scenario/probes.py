"""Declarative HTTP probes: the data a verifier interprets, never code.

A probe is a short sequence of HTTP requests sent as a named seeded user (or anonymously), each with
a list of *facts* the response must satisfy. Facts are a closed, discriminated union so a bundle can
only ask for checks the runner knows how to evaluate: nothing in a probe is ever executed.

Probe kinds follow SWE-bench's fail-to-pass / pass-to-pass split:

* ``security`` probes exercise the planted bug; they fail on the vulnerable app and must pass after
  a correct fix (fail-to-pass).
* ``regression`` probes exercise legitimate use; they pass before and must still pass after
  (pass-to-pass).
* ``trap`` probes are regression probes aimed at a lazy fix (an intentionally public route, an
  admin who must keep access, a legacy alias that must keep working); each names the trap it backs.
* ``guard`` probes are security checks the vulnerable app already passes (anonymous callers get 401
  on an admin route, one user cannot delete another's record on a route that is not the bug's); they
  must still pass after the fix (pass-to-pass), and exist to catch a fix that opens a new hole. A
  failing guard costs security credit, not legitimate use (see :mod:`envcore.env.reward`).

State semantics: one verification loads the app once and runs its probes in bundle order (generated
bundles put regression and trap probes first and security probes last), so earlier probes' writes are
visible to later ones. Generated scenarios give every mutating probe its own records and users so that
order never decides an outcome.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlencode

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from envcore.scenario.dumps import without_unset

HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
"""Methods a probe step may use."""

DENIED = (401, 403, 404)
"""Statuses that count as "access refused" (404 is accepted: hiding existence is a valid fix)."""


def known_method(value: str) -> str:
    """``value`` in upper case, if it is one of :data:`HTTP_METHODS` (a validator's check)."""
    value = value.upper()
    if value not in HTTP_METHODS:
        raise ValueError(f"unsupported HTTP method {value!r}")
    return value


def absolute_path(value: str, message: str) -> str:
    """``value`` if it starts with ``/`` (a validator's check), else a ``ValueError`` saying ``message``."""
    if not value.startswith("/"):
        raise ValueError(message)
    return value


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProbeKind(str, Enum):
    """What a probe checks: the bug (security), legitimate use (regression), a lazy fix (trap) or
    security the app already has and must keep (guard)."""

    SECURITY = "security"
    REGRESSION = "regression"
    TRAP = "trap"
    GUARD = "guard"


class StatusIn(_Wire):
    """The response status is one of ``codes``."""

    kind: Literal["status_in"] = "status_in"
    codes: tuple[int, ...]


class BodyIncludes(_Wire):
    """Every string in ``texts`` occurs in the response body."""

    kind: Literal["body_includes"] = "body_includes"
    texts: tuple[str, ...]


class BodyExcludes(_Wire):
    """No string in ``texts`` occurs in the response body (leak markers, secrets)."""

    kind: Literal["body_excludes"] = "body_excludes"
    texts: tuple[str, ...]


class JsonEquals(_Wire):
    """The JSON value at dotted ``path`` (``a.b.0``) equals ``value``."""

    kind: Literal["json_equals"] = "json_equals"
    path: str
    value: Any


class JsonKeysAbsent(_Wire):
    """None of ``keys`` appears as an object key anywhere in the JSON body."""

    kind: Literal["json_keys_absent"] = "json_keys_absent"
    keys: tuple[str, ...]


class RedirectLocal(_Wire):
    """A ``Location`` header, if present, points inside this app (``/path``, no scheme or host)."""

    kind: Literal["redirect_local"] = "redirect_local"


class HeaderEquals(_Wire):
    """Response header ``name`` (case-insensitive) equals ``value``."""

    kind: Literal["header_equals"] = "header_equals"
    name: str
    value: str


Fact = Annotated[
    Union[StatusIn, BodyIncludes, BodyExcludes, JsonEquals, JsonKeysAbsent, RedirectLocal, HeaderEquals],
    Field(discriminator="kind"),
]


class ProbeStep(_Wire):
    """One request and the facts its response must satisfy."""

    actor: str | None = None
    """Username of a seeded user whose token is sent; ``None`` sends the request anonymously."""
    method: str
    """HTTP method (upper case)."""
    path: str
    """Request path, starting with ``/``; may contain characters a browser would normalise."""
    query: dict[str, str] = Field(default_factory=dict)
    """Query parameters, sent URL-encoded in this order."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers (the actor's ``Authorization`` header is added by the runner)."""
    json_body: Any = None
    """JSON request body, or ``None`` for no body."""
    form: dict[str, str] | None = None
    """A form body (``application/x-www-form-urlencoded``, what an HTML form posts), instead of
    ``json_body``. Left out of every dump when ``None``, so bundles written before it keep their hash."""
    expect: tuple[Fact, ...] = ()
    """Facts the response must satisfy; an empty tuple accepts any response."""

    @model_validator(mode="after")
    def _one_body(self) -> "ProbeStep":
        if self.form is not None and self.json_body is not None:
            raise ValueError("a step sends json_body or form, not both")
        return self

    @model_serializer(mode="wrap")
    def _without_default_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "form")

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        return known_method(value)

    @field_validator("path")
    @classmethod
    def _absolute_path(cls, value: str) -> str:
        return absolute_path(value, "probe paths start with '/'")

    @property
    def route_key(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def request_line(self) -> str:
        """``METHOD /path?query`` as a person reads it: the query URL-encoded, slashes, dots, colons and
        braces left as they are (``GET /api/files?name=../../secrets.txt``)."""
        query = f"?{urlencode(self.query, safe='/.:{}')}" if self.query else ""
        return f"{self.method} {self.path}{query}"


class Probe(_Wire):
    """A named, declarative HTTP check."""

    id: str
    """Unique within its bundle; stable across regenerations of the same seed."""
    kind: ProbeKind
    visible: bool = False
    """Visible probes may be run by the agent; hidden ones only by the verifier at submit."""
    title: str
    """One line saying what the probe establishes."""
    steps: tuple[ProbeStep, ...] = Field(min_length=1)
    sites: tuple[str, ...] = ()
    """Bug sites this probe covers (security probes), used to grade partial fixes."""
    trap: str | None = None
    """The trap this probe backs, for ``kind == trap``: the trap's name, or its kind when it has none
    (:attr:`envcore.scenario.spec.Trap.key`)."""
    repeats: str | None = None
    """For a security probe that tries another one's exploit again as another user: that probe's id.
    An exploit counts as refused only when it and every repeat of it are (:func:`exploit_of`), so a
    patch that closes a hole for some intruders and leaves it open to others closes nothing. Left
    out of every dump when ``None``, so bundles written before it keep their content hash."""

    @model_serializer(mode="wrap")
    def _without_missing_repeats(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_unset(handler(self), "repeats")

    @model_validator(mode="after")
    def _repeats_only_exploits(self) -> "Probe":
        if self.repeats is not None and (self.kind != ProbeKind.SECURITY or self.repeats == self.id):
            raise ValueError(f"probe {self.id}: only a security probe repeats another's exploit, and not its own")
        return self


def exploit_of(probe: Probe) -> str:
    """The exploit a security probe tries: the id of the probe it repeats, or its own."""
    return probe.repeats or probe.id


class StepResult(_Wire):
    """What one probe step got back, and which facts failed."""

    status: int | None
    """HTTP status, or ``None`` when no response arrived (handler crashed the transport)."""
    body_excerpt: str
    failures: tuple[str, ...]


class ProbeOutcome(_Wire):
    """The verdict on one probe."""

    probe_id: str
    kind: ProbeKind
    visible: bool
    passed: bool
    steps: tuple[StepResult, ...]

    @property
    def failures(self) -> list[str]:
        return [failure for step in self.steps for failure in step.failures]


# --------------------------------------------------------------------------------------------
# Fact evaluation: pure functions of (fact, status, headers, body). The runner calls these in the
# grading process; nothing here runs inside the app under test.
# --------------------------------------------------------------------------------------------

_MISSING = object()


def _json_at(document: Any, path: str) -> Any:
    node = document
    for part in path.split(".") if path else []:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _keys_anywhere(document: Any) -> set[str]:
    found: set[str] = set()
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.update(str(key) for key in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _is_local_location(location: str) -> bool:
    location = location.strip()
    if not location.startswith("/") or location.startswith("//") or location.startswith("/\\"):
        return False
    return "://" not in location.split("?", 1)[0]


def check_fact(fact: Fact, status: int, headers: dict[str, str], body: bytes) -> str | None:
    """Return ``None`` when ``fact`` holds for the response, else a one-line reason."""
    text = body.decode("utf-8", "replace")
    if isinstance(fact, StatusIn):
        return None if status in fact.codes else f"status {status} not in {list(fact.codes)}"
    if isinstance(fact, BodyIncludes):
        missing = [t for t in fact.texts if t not in text]
        return None if not missing else f"body lacks {missing}"
    if isinstance(fact, BodyExcludes):
        leaked = [t for t in fact.texts if t in text]
        return None if not leaked else f"body leaks {leaked}"
    if isinstance(fact, (JsonEquals, JsonKeysAbsent)):
        try:
            document = json.loads(text) if text else None
        except (ValueError, RecursionError):  # a hostile body nested past the parser's depth is not JSON either
            return "body is not JSON"
        if isinstance(fact, JsonEquals):
            got = _json_at(document, fact.path)
            if got is _MISSING:
                return f"JSON has no {fact.path!r}"
            return None if got == fact.value else f"JSON {fact.path!r} is {got!r}, expected {fact.value!r}"
        present = sorted(set(fact.keys) & _keys_anywhere(document))
        return None if not present else f"JSON exposes keys {present}"
    if isinstance(fact, RedirectLocal):
        location = headers.get("location")
        if location is None or _is_local_location(location):
            return None
        return f"redirects off-site to {location!r}"
    if isinstance(fact, HeaderEquals):
        got = headers.get(fact.name.lower())
        return None if got == fact.value else f"header {fact.name} is {got!r}, expected {fact.value!r}"
    raise TypeError(f"unknown fact {fact!r}")  # pragma: no cover - the union is closed


def describe_fact(fact: Fact) -> str:
    """A short human rendering of a fact, for reports and the UI."""
    if isinstance(fact, StatusIn):
        return f"status in {list(fact.codes)}"
    if isinstance(fact, BodyIncludes):
        return f"body includes {list(fact.texts)}"
    if isinstance(fact, BodyExcludes):
        return f"body excludes {list(fact.texts)}"
    if isinstance(fact, JsonEquals):
        return f"JSON {fact.path} == {fact.value!r}"
    if isinstance(fact, JsonKeysAbsent):
        return f"JSON has none of keys {list(fact.keys)}"
    if isinstance(fact, RedirectLocal):
        return "any redirect stays on this site"
    return f"header {fact.name} == {fact.value!r}"
