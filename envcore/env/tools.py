"""The one tool registry, and the faces built from it.

:data:`TOOLS` maps each tool's name to its action model (:mod:`envcore.env.actions`); the model's
docstring is the tool's description and its fields are the arguments. Every face is derived from it:
the typed action union over ``/ws``, the MCP tools (:func:`build_mcp_server`), and later the TRL
wrapper and the UI's buttons. Adding a tool is one model plus one handler in
:class:`~envcore.env.episode.Episode`. Names that are not in the registry (``reset``, ``step``,
``state``, ``verify`` ...) are refused by validation everywhere.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Annotated, Any, Callable

from envcore.env.actions import TOOL_MODELS, _Tool

TOOLS: dict[str, type[_Tool]] = {m.model_fields["tool"].default: m for m in TOOL_MODELS}
RESERVED = frozenset({"reset", "step", "state", "close", "verify"})
assert not RESERVED & set(TOOLS), "a tool must not shadow an environment method"

Call = Callable[[str, dict[str, Any]], dict[str, Any]]


def describe(name: str) -> str:
    """The tool's description: its model's docstring, on one paragraph."""
    return " ".join((TOOLS[name].__doc__ or name).split())


def arguments(name: str) -> list[inspect.Parameter]:
    """The tool's arguments as keyword-only parameters, with the model's types, bounds and defaults."""
    params = []
    for field_name, info in TOOLS[name].model_fields.items():
        if field_name in ("tool", "metadata"):
            continue
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        params.append(inspect.Parameter(field_name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return params


def tool_function(name: str, call: Call) -> Callable[..., dict[str, Any]]:
    """A plain function with the tool's name, docstring and signature that forwards to ``call`` (how
    FastMCP, and function-calling frameworks generally, learn a tool's schema).

    A bound method ``call`` (an environment's) is held weakly: FastMCP caches what it builds from
    each tool function for the life of the process (up to 5,000 of them), and a strong reference
    would keep every closed session's environment, with its last episode's files and history, alive
    in that cache."""
    params = arguments(name)
    target = weakref.WeakMethod(call) if inspect.ismethod(call) else (lambda: call)

    def tool(**kwargs: Any) -> dict[str, Any]:
        forward = target()
        if forward is None:
            raise RuntimeError("this session is closed")
        return forward(name, kwargs)

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = describe(name)
    tool.__signature__ = inspect.Signature(params, return_annotation=dict)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": dict}
    return tool


def build_mcp_server(call: Call, name: str = "a01-repair-gym") -> Any:
    """A FastMCP server exposing every tool; each call goes through ``call(tool, arguments)``."""
    from fastmcp import FastMCP

    server = FastMCP(name)
    for tool_name in TOOLS:
        server.tool(tool_function(tool_name, call))
    return server
