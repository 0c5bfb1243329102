"""Plain HTTP request/response values and the ASGI call that moves them.

Requests are built from probe steps (or, later, agent tool calls) and sent to an ASGI app by
calling it directly with a hand-built scope: no sockets, no client library, about half a millisecond
a request. Response bodies are capped so a hostile app cannot exhaust the grader's memory.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import unquote, urlencode

MAX_BODY_BYTES = 1_000_000
"""Response bytes kept per request; the rest is dropped and the response marked truncated."""


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    @classmethod
    def build(
        cls,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        json_body: Any = None,
        form: Mapping[str, str] | None = None,
    ) -> "HttpRequest":
        hdrs: list[tuple[str, str]] = []
        if token:
            hdrs.append(("authorization", f"Bearer {token}"))
        body = b""
        if json_body is not None:
            body = json.dumps(json_body).encode()
            hdrs.append(("content-type", "application/json"))
        elif form is not None:
            body = urlencode(list(form.items())).encode("utf-8")
            hdrs.append(("content-type", "application/x-www-form-urlencoded"))
        hdrs += [(k.lower(), v) for k, v in (headers or {}).items()]
        return cls(method.upper(), path, tuple((query or {}).items()), tuple(hdrs), body)


@dataclass(frozen=True)
class HttpResponse:
    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str | None = None
    truncated: bool = False
    note: str | None = None
    """Said by the runner, not the app (e.g. that the app was restarted before this request)."""
    not_sent: str | None = None
    """Why the runner never sent the request (its actor's login failed): the step fails with it."""
    traceback: str | None = None
    """The app's traceback of the exception that escaped it (:func:`envcore.runner.diagnostics.app_traceback`),
    only from a runner asked for diagnostics: the scenario's author's tools, never grading."""


def _scope(request: HttpRequest) -> dict[str, Any]:
    path, _, inline_query = request.path.partition("?")
    query = urlencode(list(request.query))
    if inline_query:
        query = inline_query + ("&" + query if query else "")
    headers = [(b"host", b"app.example.test")]
    headers += [(k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in request.headers]
    if request.body:
        headers.append((b"content-length", str(len(request.body)).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": unquote(path),
        "raw_path": path.encode("latin-1", "replace"),
        "root_path": "",
        "query_string": query.encode("latin-1", "replace"),
        "headers": headers,
        "client": ("203.0.113.7", 50000),
        "server": ("app.example.test", 80),
        "state": {},
    }


JOINERS = {"set-cookie": "\n"}
"""How the values of a repeated response header are joined (any other: ``", "``)."""


async def call_asgi(app: Any, request: HttpRequest, *,
                    on_error: Callable[[BaseException], str] | None = None) -> HttpResponse:
    """Send one request to an ASGI app and collect its response. ``on_error`` turns an exception
    that escaped the app into the response's ``traceback`` (diagnostics; ``None``: none is kept)."""
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await asyncio.sleep(3600)  # a well-behaved app never asks twice; a misbehaving one waits
        return {"type": "http.disconnect"}  # pragma: no cover

    status: int | None = None
    headers: dict[str, str] = {}
    chunks: list[bytes] = []
    size = 0
    truncated = False

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size, truncated
        if message["type"] == "http.response.start":
            status = int(message["status"])
            for key, value in message.get("headers", []):
                name, text = key.decode("latin-1").lower(), value.decode("latin-1")
                # A repeated header keeps every value (RFC 9110's list form; cookies one per line,
                # since a cookie may hold a comma): the last one alone would hide a second Location
                # or every cookie but one.
                headers[name] = f"{headers[name]}{JOINERS.get(name, ', ')}{text}" if name in headers else text
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if size < MAX_BODY_BYTES:
                chunks.append(chunk[: MAX_BODY_BYTES - size])
            truncated = truncated or size + len(chunk) > MAX_BODY_BYTES
            size += len(chunk)

    error = trace = None
    try:
        await app(_scope(request), receive, send)
    except Exception as exc:  # the app's own failure: Starlette has usually sent a 500 already
        error = f"{type(exc).__name__}: {exc}"
        trace = on_error(exc) if on_error is not None else None
    return HttpResponse(status, headers, b"".join(chunks), error, truncated, traceback=trace)


class Lifespan:
    """Runs an app's ASGI lifespan protocol around a batch of requests.

    ``describe`` turns the exception a failing startup raised into the one line a load error is
    (the runners pass the loader's ``short_traceback``, relative to the app's folder). Without it the
    failure is the server's own message, which Starlette fills with the whole interpreter traceback:
    every frame's absolute path, the sandbox's folders and the installation's files included."""

    def __init__(self, app: Any, describe: Callable[[BaseException], str] | None = None) -> None:
        self.app = app
        self.describe = describe
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None
        self.supported = True

    async def _receive(self) -> dict[str, Any]:
        return await self.inbox.get()

    async def _send(self, message: dict[str, Any]) -> None:
        await self.outbox.put(message)

    async def _wait(self) -> dict[str, Any] | None:
        getter = asyncio.ensure_future(self.outbox.get())
        done, _ = await asyncio.wait({getter, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if getter in done:
            return getter.result()
        getter.cancel()
        return None

    async def startup(self) -> str | None:
        """Return ``None`` on success, or the startup failure message."""
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self.task = asyncio.ensure_future(self.app(scope, self._receive, self._send))
        await self.inbox.put({"type": "lifespan.startup"})
        message = await self._wait()
        if message is None:  # the app returned or raised without answering: no lifespan support
            self.supported = False
            if not self.task.cancelled():
                self.task.exception()  # retrieved so asyncio does not log it; not a startup failure
            return None
        if message["type"] == "lifespan.startup.failed":
            raised = await self._raised() if self.describe is not None else None
            if raised is not None:
                return self.describe(raised)
            return message.get("message") or "startup failed"
        return None

    async def _raised(self) -> BaseException | None:
        """The exception the lifespan task ended with: Starlette re-raises the startup's own right
        after reporting the failure, so the task is done or about to be."""
        assert self.task is not None
        await asyncio.wait({self.task}, timeout=1.0)
        if not self.task.done() or self.task.cancelled():
            return None
        return self.task.exception()

    async def shutdown(self) -> None:
        if not self.supported or self.task is None or self.task.done():
            return
        await self.inbox.put({"type": "lifespan.shutdown"})
        await self._wait()


class WouldReachApp(BaseException):
    """Raised by a gate in ``closed`` mode instead of letting a request through to the app.

    A ``BaseException`` so that the response collector, which turns app errors into responses,
    lets it propagate to the runner."""


def gate_body(status: int) -> bytes:
    """What a gate answers with (the body FastAPI itself would send for that status)."""
    detail = {403: "forbidden", 404: "Not Found"}.get(status, "refused")
    return json.dumps({"detail": detail}).encode()


def gate_app(app: Any, status: int, path_patterns: tuple[str, ...] | None, *, closed: bool = False) -> Any:
    """Wrap ``app`` so that matching HTTP requests get ``status`` without reaching it.

    With ``closed`` a request that the gate would let through raises :class:`WouldReachApp`
    instead: the runner uses this to try a batch without protecting the app's state first."""
    import re

    patterns = None if path_patterns is None else [re.compile(p) for p in path_patterns]
    body = gate_body(status)

    async def gated(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (patterns is None or any(p.match(scope["path"]) for p in patterns)):
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if closed:
            raise WouldReachApp()
        await app(scope, receive, send)

    return gated
