"""Glue between the tabs' controllers and Gradio's event system.

Controllers (``PlayController``, ``WatchController``, ``DashboardController``) are plain classes: each
UI action is a method that takes the inputs' values and returns a dict of *named* outputs. They know
nothing of components, so they are tested and benchmarked without a browser (``python -m envcore
bench ui`` times exactly these methods). :func:`bind` turns such a method into a Gradio handler:
names become components, and a :class:`UserError` (bad input, a session that expired, an episode
that cannot start) becomes a toast saying why, leaving every output as it was. This avoids the long
positional tuples that make Gradio apps hard to change.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import gradio as gr


class UserError(Exception):
    """Something the visitor can fix; its message is shown to them as it is."""


def bind(method: Callable[..., Mapping[str, Any]], components: Mapping[str, Any]) -> Callable[..., dict[Any, Any]]:
    """A Gradio handler calling ``method`` and mapping its named results onto ``components``."""

    @functools.wraps(method)
    def handler(*args: Any) -> dict[Any, Any]:
        try:
            named = method(*args)
        except UserError as exc:
            gr.Warning(str(exc))
            return {}
        unknown = set(named) - set(components)
        if unknown:  # a programming error, not the visitor's: fail loudly in development and tests
            raise KeyError(f"{method.__qualname__} returned outputs with no component: {sorted(unknown)}")
        return {components[name]: value for name, value in named.items()}

    return handler


def outputs(components: Mapping[str, Any]) -> list[Any]:
    """Every component a bound handler may update (Gradio wants them declared)."""
    return list(components.values())
