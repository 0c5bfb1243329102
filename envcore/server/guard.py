"""Who a request comes from, and the limits that keep one client of a public server from taking it.

The server is public (a Hugging Face Space): anyone may open the page, the WebSocket sessions and the
JSON routes. Three things here, used by :func:`envcore.env.server.create_env_app` and the page:

* :class:`ClientPolicy`: the address a request comes from, and whether per-client caps apply to it.
  The address is the TCP peer's. ``X-Forwarded-For`` is read only when the peer is a trusted proxy
  (``A01_TRUSTED_PROXIES``: addresses or networks, comma-separated, or ``*`` for any peer); anyone else
  could write any address into it. The client is then the rightmost forwarded address that is not
  itself a trusted proxy: the address the outermost trusted proxy saw, which a client cannot forge by
  sending the header itself (a proxy appends to what it is sent). With ``*`` any peer is a proxy, and
  so is every hop inside the hosting network (private, shared, loopback and link-local addresses,
  :data:`INTERNAL_NETWORKS`), so the client is the rightmost public address in the header: the one the
  hosting network's edge appended. A Hugging Face Space (``SPACE_ID`` set) is reachable only through
  its proxy, so there the default is ``*``; elsewhere it is none. Clients in ``A01_UNCAPPED_CLIENTS``
  (default loopback: a trainer, an evaluation or a benchmark on the same machine opens every session
  it needs) are not capped; empty: every client is.
* :func:`per_client_cap`: a client's share of a pool of sessions: an environment variable, by default a
  quarter of the pool (at least one), so that one client never holds every slot.
* :class:`ClientGuard`, ASGI middleware in front of the whole app: it puts the resolved address into
  the request's scope (``scope["client"]``, what Gradio's ``gr.Request.client`` and every route see)
  and into :data:`CURRENT_CLIENT` (what the WebSocket session pool reads); it answers 413 to an HTTP
  body over ``max_body_bytes``, declared or streamed, and closes a WebSocket connection whose message
  is over ``max_message_bytes`` (code 1009, message too big), in both cases before the app has more of
  it. It does not rely on the route to report the overflow: OpenEnv's ``/mcp`` reads its body inside a
  ``try`` that turns any error into a JSON-RPC parse error with status 200 (Starlette's own body limit
  raises inside that ``try``), so the guard tells the app the client left and replaces whatever the
  app answers with the 413. :class:`RefusedRoutes` answers 403 on routes the server does not offer to
  the public (the page's file-upload routes).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envcore.settings import SettingError, positive_int

CURRENT_CLIENT: ContextVar[str | None] = ContextVar("a01_client", default=None)
"""The resolved client address of the request being served (``None`` outside a request)."""

DEFAULT_UNCAPPED = ("127.0.0.0/8", "::1")
INTERNAL_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8",
                     "169.254.0.0/16", "::1/128", "fc00::/7", "fe80::/10")
"""Addresses of a hosting network's own hops (RFC 1918, shared, loopback, link-local, unique local)."""
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""HTTP request bodies. An action's largest argument (a 256 KiB diff, a 200,000-character reply, JSON-
escaped) fits many times over, and an action a few megabytes too large still reaches validation, which
says which field is too long; past this the body is not read at all."""
DEFAULT_MAX_WS_MESSAGE_BYTES = 8 * 1024 * 1024
"""WebSocket messages: the same bound, for the same actions sent over ``/ws`` (uvicorn's own is 16 MiB)."""
WS_MESSAGE_TOO_BIG = 1009

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _networks(text: str | Iterable[str], variable: str) -> tuple[_Network, ...]:
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text)]
    out = []
    for item in items:
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise SettingError(f"{variable} holds {item!r}, which is not an IP address or network") from None
    return tuple(out)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _within(address: str | None, networks: tuple[_Network, ...]) -> bool:
    parsed = _address(address) if address else None
    return parsed is not None and any(parsed in network for network in networks)


_INTERNAL = _networks(INTERNAL_NETWORKS, "INTERNAL_NETWORKS")


@dataclass(frozen=True)
class ClientPolicy:
    """How a request's client address is found, and whom per-client caps spare (see the module)."""

    trusted_proxies: tuple[_Network, ...] = ()
    trust_any_proxy: bool = False
    """``A01_TRUSTED_PROXIES=*``: any peer is a proxy, and so are the hosting network's own hops."""
    uncapped: tuple[_Network, ...] = ()

    @classmethod
    def from_environ(cls, environ: Any = None) -> ClientPolicy:
        """From ``A01_TRUSTED_PROXIES`` (default ``*`` on a Hugging Face Space, ``SPACE_ID`` set, else
        none) and ``A01_UNCAPPED_CLIENTS`` (default loopback)."""
        environ = os.environ if environ is None else environ
        trusted = environ.get("A01_TRUSTED_PROXIES")
        if trusted is None:
            trusted = "*" if environ.get("SPACE_ID") else ""
        uncapped = environ.get("A01_UNCAPPED_CLIENTS")
        return cls(trusted_proxies=() if trusted.strip() == "*" else _networks(trusted, "A01_TRUSTED_PROXIES"),
                   trust_any_proxy=trusted.strip() == "*",
                   uncapped=_networks(DEFAULT_UNCAPPED if uncapped is None else uncapped, "A01_UNCAPPED_CLIENTS"))

    def is_proxy(self, address: str | None) -> bool:
        return self.trust_any_proxy or _within(address, self.trusted_proxies)

    def client(self, peer: str | None, forwarded_for: Iterable[str] = ()) -> str | None:
        """The client address of a request from ``peer`` carrying these ``X-Forwarded-For`` values."""
        if peer is None or not self.is_proxy(peer):
            return peer
        hops = [h.strip() for value in forwarded_for for h in value.split(",") if h.strip()]
        trusted = _INTERNAL if self.trust_any_proxy else self.trusted_proxies
        for hop in reversed(hops):
            if _address(hop) is None:  # not an address (a name, "unknown", garbage): stop believing the chain
                return peer
            if not _within(hop, trusted):
                return str(_address(hop))
        return str(_address(hops[0])) if hops else peer

    def is_capped(self, client: str | None) -> bool:
        """Whether per-client caps apply to ``client`` (``None``, an in-process caller: no)."""
        return client is not None and not _within(client, self.uncapped)


def per_client_cap(total: int, variable: str, environ: Any = None) -> int:
    """A client's share of ``total`` sessions: ``variable`` if set (a positive integer), else a quarter
    of ``total``, at least one."""
    return positive_int(variable, max(1, total // 4), environ=environ)


def env_bytes(variable: str, default: int, environ: Any = None) -> int:
    """A positive byte count from ``variable`` (plain digits), or ``default``."""
    return positive_int(variable, default, unit="number of bytes", environ=environ)


class ClientGuard:
    """ASGI middleware: resolves the client address (see :class:`ClientPolicy`) and bounds HTTP bodies
    and WebSocket messages; see the module docstring."""

    def __init__(self, app: ASGIApp, policy: ClientPolicy, *, max_body_bytes: int | None = None,
                 max_message_bytes: int | None = None) -> None:
        self.app = app
        self.policy = policy
        self.max_body_bytes = max_body_bytes
        self.max_message_bytes = max_message_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        peer = scope.get("client")
        forwarded = [value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"x-forwarded-for"]
        client = self.policy.client(peer[0] if peer else None, forwarded)
        if client is not None and (not peer or client != peer[0]):
            scope["client"] = (client, 0)
        token = CURRENT_CLIENT.set(client)
        try:
            if scope["type"] == "websocket" and self.max_message_bytes:
                receive, send = self._bounded(receive, send)
                await self.app(scope, receive, send)
            elif scope["type"] == "http" and self.max_body_bytes:
                await self._bounded_body(scope, receive, send)
            else:
                await self.app(scope, receive, send)
        finally:
            CURRENT_CLIENT.reset(token)

    async def _bounded_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app on a body of at most ``max_body_bytes``: a larger declared length is refused
        before the app runs; a body that grows past the cap ends there (the app is told the client
        left) and the answer is a 413 whatever the app makes of it."""
        limit = self.max_body_bytes
        assert limit is not None
        declared = next((value for name, value in scope.get("headers", ()) if name == b"content-length"), None)
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        received = 0
        over = started = False

        async def bounded_receive() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over and not started:
                started = True
                await _too_large(send, limit)
            if over:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, bounded_receive, guarded_send)
        except Exception:
            if not over:
                raise
        if over and not started:
            await _too_large(send, limit)

    def _bounded(self, receive: Receive, send: Send) -> tuple[Receive, Send]:
        """``receive`` that closes the connection (1009) on a message over the cap and tells the app the
        client left; ``send`` that drops what the app sends after that."""
        limit = self.max_message_bytes
        closed = False

        async def bounded_receive() -> Message:
            nonlocal closed
            message = await receive()
            if message["type"] == "websocket.receive":
                size = len(message.get("bytes") or b"") + len((message.get("text") or "").encode("utf-8", "surrogatepass"))
                if size > limit:  # type: ignore[operator]
                    closed = True
                    await send({"type": "websocket.close", "code": WS_MESSAGE_TOO_BIG,
                                "reason": f"message over {limit} bytes"})
                    return {"type": "websocket.disconnect", "code": WS_MESSAGE_TOO_BIG}
            return message

        async def guarded_send(message: Message) -> None:
            if not closed:
                await send(message)

        return bounded_receive, guarded_send


async def _too_large(send: Send, limit: int) -> None:
    body = f"request body over {limit} bytes".encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class RefusedRoutes:
    """ASGI middleware: 403 (HTTP) or a refused handshake (WebSocket) for any path under ``prefixes``."""

    def __init__(self, app: ASGIApp, prefixes: Iterable[str], message: str) -> None:
        self.app = app
        self.prefixes = tuple(prefixes)
        self.message = message

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] in ("http", "websocket") else ""
        if not any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.prefixes):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": self.message})
            return
        body = self.message.encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
