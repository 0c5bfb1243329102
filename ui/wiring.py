"""Glue between the tabs' controllers and Gradio's event system.

Controllers (``PlayController``, ``WatchController``, ``DashboardController``) are plain classes: each
UI action is a method that takes the inputs' values and returns a dict of *named* outputs. They know
nothing of components, so they are tested and benchmarked without a browser (``python -m envcore
bench ui`` times exactly these methods). :func:`bind` turns such a method into a Gradio handler:
names become components, and a :class:`UserError` (bad input, a session that expired, an episode
that cannot start) becomes a toast saying why, leaving every output as it was (``gr.skip()``: an
empty dict would read as too few outputs, and Gradio would mark each output as failed). This avoids the long
positional tuples that make Gradio apps hard to change.

A method that opens a session takes a ``visitor`` keyword (:class:`~envcore.server.sessions.Visitor`):
``bind(..., visitor=True)`` fills it from the request (the client address, as the server's guard
resolved it, and the page's Gradio session), which is what per-visitor shares count and what ends
with the page. The controllers stay free of requests.

A toast renders its message as HTML, and a :class:`UserError` often quotes what the visitor typed
(a scenario id, a seed, a path): :func:`toast` escapes it (:func:`ui.safe.html`), so the message is
shown as written and makes no element.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import gradio as gr

from envcore.server.sessions import Visitor
from ui import safe


class UserError(Exception):
    """Something the visitor can fix; its message is shown to them as it is."""


def bind(method: Callable[..., Mapping[str, Any]], components: Mapping[str, Any], *,
         visitor: bool = False) -> Callable[..., Any]:
    """A Gradio handler calling ``method`` and mapping its named results onto ``components``; with
    ``visitor``, ``method`` also gets ``visitor=`` the :class:`~envcore.server.sessions.Visitor` of the
    request."""
    if visitor:
        def with_visitor(request: gr.Request, *args: Any) -> Any:
            return call(*args, visitor=visitor_of(request))

        # Gradio passes the request to a parameter annotated gr.Request: the signature must be this
        # function's own, not the method's (no functools.wraps), while the name stays the method's.
        with_visitor.__name__ = method.__name__
        with_visitor.__qualname__ = method.__qualname__
        with_visitor.__doc__ = method.__doc__

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            named = method(*args, **kwargs)
        except UserError as exc:
            toast(str(exc))
            return gr.skip()
        unknown = set(named) - set(components)
        if unknown:  # a programming error, not the visitor's: fail loudly in development and tests
            raise KeyError(f"{method.__qualname__} returned outputs with no component: {sorted(unknown)}")
        if not named:  # Gradio reads an empty dict as too few outputs and marks every one as failed
            return gr.skip()
        return {components[name]: value for name, value in named.items()}

    if visitor:
        return with_visitor
    return functools.wraps(method)(call)


def visitor_of(request: gr.Request | None) -> Visitor:
    """The visitor making ``request``: its client address and its page's Gradio session."""
    if request is None:
        return Visitor()
    client = getattr(request, "client", None)
    return Visitor(client=getattr(client, "host", None), page=getattr(request, "session_hash", None))


def outputs(components: Mapping[str, Any]) -> list[Any]:
    """Every component a bound handler may update (Gradio wants them declared)."""
    return list(components.values())


def toast(message: str) -> None:
    """A warning toast showing ``message`` literally (escaped: a toast renders HTML)."""
    gr.Warning(safe.html(message))
