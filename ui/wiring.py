"""Glue between the tabs' controllers and Gradio's event system.

Controllers (``PlayController``, ``WatchController``, ``DashboardController``) are plain classes: each
UI action is a method that takes the inputs' values and returns a dict of *named* outputs. They know
nothing of components, so they are tested and benchmarked without a browser (``python -m envcore
bench ui`` times exactly these methods). :func:`bind` turns such a method into a Gradio handler:
names become components, and every action declares only the components it changes, so a click
sends and redraws no more than that.

Mistakes are messages next to the control that made them. An action is bound with ``at=``, the name
of a message component beside its button: a :class:`UserError` (bad input, no episode yet, a session
that expired) is shown there and every other output stays as it was (``gr.skip()``); a step the
environment refused comes back as ``refused`` and a short success note as ``notice``, both shown
there too; an action that says nothing clears the message. Nothing becomes an error overlay. An
action bound without ``at`` shows a :class:`UserError` as a toast.

A method that opens a session takes a ``visitor`` keyword (:class:`~envcore.server.sessions.Visitor`):
``bind(..., visitor=True)`` fills it from the request (the client address, as the server's guard
resolved it, and the page's Gradio session), which is what per-visitor shares count and what ends
with the page. The controllers stay free of requests.

An action that takes a while and has something to show on the way (an agent playing an episode to
its end) is a method returning an iterable of named outputs: :func:`bind_stream` makes it a generator
handler, so Gradio sends each to the page as it comes, and :func:`wire_stream` returns the event, for
a Stop button's ``cancels=``. Its mistakes go to its message component too, before the first output
or on the way.

A toast renders its message as HTML, and a :class:`UserError` often quotes what the visitor typed
(a scenario id, a seed, a path): :func:`toast` escapes it (:func:`ui.safe.html`), so the message is
shown as written and makes no element.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import gradio as gr

from envcore.server.sessions import Visitor
from ui import safe


class UserError(Exception):
    """Something the visitor can fix; its message is shown to them as it is."""


QUICK: dict[str, Any] = {"show_progress": "minimal", "queue": False}
"""Event options for an action that answers in milliseconds (a step, a view): sent straight to its
handler, not through Gradio's queue (whose join-and-stream round trips cost more than the action),
with a small progress mark instead of a shade over every output. Measured click to content in
Chromium by ``python -m envcore bench ui --browser``. What starts a sandbox or runs a whole hidden
suite keeps the queue, which bounds how many wait."""

REFUSED, NOTICE = "refused", "notice"
"""The names under which an action returns a refusal or a note for its message component."""


def message_markdown(text: str, *, refused: bool = True) -> str:
    """The message shown beside a control: escaped, line by line, marked as a refusal or a note."""
    mark = "⚠️" if refused else "✓"
    return f"{mark} {safe.markdown_lines(text)}" if text else ""


def bind(method: Callable[..., Mapping[str, Any]], components: Mapping[str, Any], *,
         visitor: bool = False, at: str | None = None) -> Callable[..., Any]:
    """A Gradio handler calling ``method`` and mapping its named results onto ``components``; with
    ``visitor``, ``method`` also gets ``visitor=`` the :class:`~envcore.server.sessions.Visitor` of the
    request; with ``at``, mistakes, refusals and notes go to the message component of that name (see
    the module docstring)."""
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
            named = dict(method(*args, **kwargs))
        except UserError as exc:
            if at is None:
                toast(str(exc))
                return gr.skip()
            return {components[at]: message_markdown(str(exc))}
        if at is not None:
            refused, notice = named.pop(REFUSED, None), named.pop(NOTICE, None)
            named[at] = message_markdown(refused) if refused else message_markdown(notice or "", refused=False)
        unknown = set(named) - set(components)
        if unknown:  # a programming error, not the visitor's: fail loudly in development and tests
            raise KeyError(f"{method.__qualname__} returned outputs with no component: {sorted(unknown)}")
        if not named:  # Gradio reads an empty dict as too few outputs and marks every one as failed
            return gr.skip()
        return {components[name]: value for name, value in named.items()}

    if visitor:
        return with_visitor
    return functools.wraps(method)(call)


def wire(event: Callable[..., Any], method: Callable[..., Mapping[str, Any]], components: Mapping[str, Any],
         inputs: list[str], changes: list[str], *, at: str | None = None, visitor: bool = False,
         **options: Any) -> Any:
    """Bind ``method`` to ``event`` (e.g. ``button.click``) with the named ``inputs``, declaring as
    outputs only the named components it ``changes`` (and its message component ``at``); ``options``
    go to the event listener (``show_progress``, ``queue`` ...). Returns the event's dependency
    (``.then(...)`` chains a follow-up)."""
    names = list(dict.fromkeys([*changes, *([at] if at else [])]))
    declared = {name: components[name] for name in names}
    return event(bind(method, declared, visitor=visitor, at=at), [components[name] for name in inputs],
                 list(declared.values()), **options)


def bind_stream(method: Callable[..., Iterable[Mapping[str, Any]]], components: Mapping[str, Any], *,
                at: str | None = None) -> Callable[..., Iterator[Any]]:
    """A Gradio generator handler: ``method`` returns an iterable of named outputs, each mapped onto
    ``components`` as :func:`bind` maps one result (refusals and notes to ``at``) and sent to the page
    as soon as it is made. A :class:`UserError`, raised by ``method`` before it yields or on the way,
    ends the stream with its message at ``at`` (a toast without ``at``); what was shown stays."""

    def refuse(exc: UserError) -> Mapping[str, Any]:
        raise exc

    show = bind(lambda named: named, components, at=at)  # one output, mapped exactly as bind maps it
    fail = bind(refuse, components, at=at)

    def stream(*args: Any) -> Iterator[Any]:
        try:
            for named in method(*args):
                yield show(named)
        except UserError as exc:
            yield fail(exc)

    # Gradio streams a handler that is a generator function: this one, named after the method.
    stream.__name__ = method.__name__
    stream.__qualname__ = method.__qualname__
    stream.__doc__ = method.__doc__
    return stream


def wire_stream(event: Callable[..., Any], method: Callable[..., Iterable[Mapping[str, Any]]],
                components: Mapping[str, Any], inputs: list[str], changes: list[str], *,
                at: str | None = None, **options: Any) -> Any:
    """:func:`wire` for a streaming ``method`` (:func:`bind_stream`); returns the event's dependency
    (for ``cancels=``). ``options`` go to the event listener (``show_progress``, ``concurrency_limit`` ...)."""
    names = list(dict.fromkeys([*changes, *([at] if at else [])]))
    declared = {name: components[name] for name in names}
    return event(bind_stream(method, declared, at=at), [components[name] for name in inputs],
                 list(declared.values()), **options)


def visitor_of(request: gr.Request | None) -> Visitor:
    """The visitor making ``request``: its client address and its page's Gradio session."""
    if request is None:
        return Visitor()
    client = getattr(request, "client", None)
    return Visitor(client=getattr(client, "host", None), page=getattr(request, "session_hash", None))


def toast(message: str) -> None:
    """A warning toast showing ``message`` literally (escaped: a toast renders HTML)."""
    gr.Warning(safe.html(message))
