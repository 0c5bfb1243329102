"""A warm-up before forking: one request that only library code answers.

Every probe runs in a fork of the app as loaded: a sandbox template's workers, the in-process
runner's forks (the factory's check). A fork's first request does per-app first-use work in
FastAPI, Starlette, Pydantic and asyncio (objects built on the first call through an app's stack,
memory first written), and each fork did it again. Serving one request before forking does that
work once, for every fork (about 12% of an isolated verification's CPU in process, 7% in the
sandbox, on cache v5).

The request must leave the app exactly as it was, so nothing of the app's own may run: it is a
fixed ``GET`` of a path no route matches, sent only when every piece that answers it is library
code known to keep no state of its own (:func:`why_not`): the app and router classes, every route
class, the middleware (CORS, GZip, trusted hosts, sessions; any other, ``@app.middleware`` above
all, rules the warm-up out), the exception handlers and the router's 404. While it is served every
call into the app's files is recorded; a call, a new or replaced attribute of the app or its router
(a middleware stack the request built, where the startup had not, is dropped again, so a startup may
still add middleware), or an answer other than 404 means the template is not used
(:class:`WarmUpBroke`).

The request is the same for every template, every probe and every grading: it carries nothing
about them, and the app never runs a line for it.
"""

from __future__ import annotations

import asyncio
import sys
import types
from typing import Any, Callable

from envcore.runner.http import HttpRequest, call_asgi

WARMUP_PATH = "/.a01-warm-up/not-a-route"
"""The one path the warm-up asks for (no app routes it: :func:`why_not` checks)."""
LIBRARIES = ("fastapi.", "starlette.")
STATELESS_MIDDLEWARE = frozenset({
    "starlette.middleware.cors.CORSMiddleware",
    "starlette.middleware.gzip.GZipMiddleware",
    "starlette.middleware.trustedhost.TrustedHostMiddleware",
    "starlette.middleware.httpsredirect.HTTPSRedirectMiddleware",
    "starlette.middleware.sessions.SessionMiddleware",
})
"""Middleware whose answer to a request depends on the request alone (what it keeps is its
configuration): the warm-up may pass through it. Anything else may count or remember requests."""


def record_calls_under(root: str, into: set[tuple[str, str]]) -> Callable[[], None]:
    """Record (path under ``root``, qualified name) of every function of a file under ``root`` that is
    called, until the returned function is called. Only around trusted code (a profile hook sees
    every call of this thread)."""
    prefix = root.rstrip("/") + "/"
    previous = sys.getprofile()

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(prefix):
                into.add((code.co_filename[len(prefix):], code.co_qualname))

    sys.setprofile(profile)
    return lambda: sys.setprofile(previous)


class WarmUpBroke(Exception):
    """App code ran, or the app changed, while the warm-up request was served."""


def _qualified(obj: Any) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _library(obj: Any) -> bool:
    return _qualified(obj).startswith(LIBRARIES)


def _function_in_library(function: Any) -> bool:
    function = getattr(function, "__func__", function)
    return str(getattr(function, "__module__", "") or "").startswith(LIBRARIES)


def why_not(app: Any) -> str | None:
    """Why the warm-up request could reach code of the app's own (``None``: it cannot)."""
    router = getattr(app, "router", None)
    if not _library(app) or router is None or not _library(router):
        return "the app or its router is not FastAPI's or Starlette's own class"
    for middleware in getattr(app, "user_middleware", None) or []:
        cls = getattr(middleware, "cls", None)
        if cls is None or _qualified(cls) not in STATELESS_MIDDLEWARE:
            return f"middleware {getattr(cls, '__qualname__', cls)!r} may keep state"
    for key, handler in (getattr(app, "exception_handlers", None) or {}).items():
        if not _function_in_library(handler):
            return f"the app handles {getattr(key, '__name__', key)!r} itself"
    if not _function_in_library(getattr(router, "default", None)):
        return "the router's 404 is the app's own"
    for route in getattr(router, "routes", None) or []:
        if not _library(route):
            return f"route class {type(route).__qualname__!r} is the app's own"
        # the path as sent, and with the slash the router tries before it answers 404
        for path in (WARMUP_PATH, WARMUP_PATH + "/"):
            scope = {"type": "http", "path": path, "root_path": "", "method": "GET",
                     "headers": [(b"host", b"app.example.test")]}
            match, _ = route.matches(scope)
            if getattr(match, "name", "NONE") != "NONE":
                return "a route matches the warm-up's path"
    return None


def warm_up(app: Any, record_calls: Callable[[set], Callable[[], None]]) -> str | None:
    """Serve the warm-up request to ``app`` if nothing of the app's can answer it; return why it
    was not sent (``None``: it was). ``record_calls(into)`` starts recording calls into the app's
    files and returns the function that stops it. Raises :class:`WarmUpBroke` if app code ran or
    the app or its router changed anyway."""
    reason = why_not(app)
    if reason is not None:
        return reason
    before = {id(holder): dict(vars(holder)) for holder in (app, app.router)}
    called: set = set()
    loop = asyncio.new_event_loop()
    stop = record_calls(called)
    try:
        response = loop.run_until_complete(call_asgi(app, HttpRequest("GET", WARMUP_PATH)))
    finally:
        stop()
        loop.close()
    app.middleware_stack = before[id(app)].get("middleware_stack")  # as it was: built by the startup, or not yet
    if called:
        raise WarmUpBroke(f"the warm-up request ran the app's own code ({sorted(called)[0]})")
    if response.status != 404:
        raise WarmUpBroke(f"the warm-up request was answered {response.status}, not 404")
    for holder in (app, app.router):
        now, was = vars(holder), before[id(holder)]
        if now.keys() != was.keys() or any(now[key] is not was[key] for key in was):
            raise WarmUpBroke(f"the warm-up request changed the {type(holder).__name__}")
    return None
