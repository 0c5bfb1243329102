"""The one tool registry, and the faces built from it.

:data:`TOOLS` maps each tool's name to its action model (:mod:`envcore.env.actions`); the model's
docstring is the tool's description and its fields are the arguments. Every face is derived from it:
the typed action union over ``/ws``, the MCP tools (:func:`build_mcp_server`), the native
tool-calling schemas that chat templates and OpenAI-compatible endpoints take (:func:`tool_schemas`),
the methods of TRL's ``environment_factory`` class (:func:`tool_method`, whose Google-style docstring
and plain type hints are what ``transformers.utils.get_json_schema`` reads) and the UI's buttons. Adding a tool is one model plus one handler in
:class:`~envcore.env.episode.Episode`. Names that are not in the registry (``reset``, ``step``,
``state``, ``verify`` ...) are refused by validation everywhere.
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
import weakref
from typing import Annotated, Any, Callable, Union, get_args, get_origin

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

    return _dressed(tool, name, describe(name), params, dict)


def _dressed(function: Callable[..., Any], name: str, doc: str, params: list[inspect.Parameter],
             returns: type) -> Callable[..., Any]:
    """``function`` named ``name``, with ``doc`` and the signature and annotations of ``params``: what
    schema readers (FastMCP, ``transformers.utils.get_json_schema``) read a tool from."""
    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    function.__signature__ = inspect.Signature(params, return_annotation=returns)  # type: ignore[attr-defined]
    function.__annotations__ = {p.name: p.annotation for p in params if p.name != "self"} | {"return": returns}
    return function


def build_mcp_server(call: Call, name: str = "a01-repair-gym") -> Any:
    """A FastMCP server exposing every tool; each call goes through ``call(tool, arguments)``."""
    from fastmcp import FastMCP

    server = FastMCP(name)
    for tool_name in TOOLS:
        server.tool(tool_function(tool_name, call))
    return server


# ----- native tool calling ---------------------------------------------------------------------
def _clean(schema: Any) -> Any:
    """A pydantic JSON schema without pydantic's titles, and ``X | None`` as plain ``X`` (the
    argument is then optional: it is not required, and leaving it out means ``None``)."""
    if isinstance(schema, dict):
        options = schema.get("anyOf")
        if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
            kept = next(o for o in options if o != {"type": "null"})
            schema = {k: v for k, v in schema.items() if k != "anyOf"} | kept
        return {k: _clean(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_clean(item) for item in schema]
    return schema


@functools.cache
def _tool_schema(name: str) -> dict[str, Any]:
    full = TOOLS[name].model_json_schema()
    properties = {k: _clean(v) for k, v in full.get("properties", {}).items() if k not in ("tool", "metadata")}
    for value in properties.values():
        if value.get("default", 0) is None:
            del value["default"]
    parameters: dict[str, Any] = {"type": "object", "properties": properties,
                                  "required": [k for k in full.get("required", []) if k in properties]}
    return {"type": "function", "function": {"name": name, "description": describe(name), "parameters": parameters}}


def tool_schema(name: str) -> dict[str, Any]:
    """The tool as a native tool-calling schema (OpenAI's ``{"type": "function", "function": {...}}``,
    which ``transformers`` chat templates take as ``tools=`` too): its description, and its arguments
    with their types, bounds, defaults and descriptions, from the action model."""
    return copy.deepcopy(_tool_schema(name))


def tool_schemas() -> list[dict[str, Any]]:
    """Every tool's :func:`tool_schema`, in the registry's order."""
    return [tool_schema(name) for name in TOOLS]


_JSON_VALUE = Union[dict, list, str, int, float, bool, None]


def _plain(annotation: Any) -> Any:
    """A type hint that ``transformers.utils.get_json_schema`` understands: no ``Annotated`` bounds,
    ``Literal`` kept, and a free JSON value as the union of JSON's types."""
    if annotation is Any:
        return _JSON_VALUE
    origin = get_origin(annotation)
    if origin is Annotated:
        return _plain(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return Union[tuple(_plain(a) for a in get_args(annotation))]
    return annotation


def _described(name: str) -> dict[str, str]:
    properties = _tool_schema(name)["function"]["parameters"]["properties"]
    return {arg: " ".join(str(value.get("description") or arg.replace("_", " ")).split())
            for arg, value in properties.items()}


def google_docstring(name: str) -> str:
    """The tool's description with an ``Args:`` section (one line per argument), the docstring format
    ``transformers`` parses into a tool schema."""
    lines = [describe(name)]
    described = _described(name)
    if described:
        lines += ["", "Args:"] + [f"    {arg}: {text}" for arg, text in described.items()]
    lines += ["", "Returns:", "    What the environment answered, as text."]
    return "\n".join(lines)


def tool_method(name: str, step: Callable[[Any, str, dict[str, Any]], str]) -> Callable[..., str]:
    """A method (first argument ``self``) with the tool's name, docstring and argument types that
    forwards to ``step(self, name, arguments)``: how a class becomes a set of tools for TRL's
    ``environment_factory``. Arguments left out are not sent, so the action model's defaults apply."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        p.replace(annotation=_plain(p.annotation),
                  default=None if p.default is not inspect.Parameter.empty and not isinstance(
                      p.default, (str, int, float, bool, type(None))) else p.default)
        for p in arguments(name)]

    def method(self: Any, **kwargs: Any) -> str:
        return step(self, name, {k: v for k, v in kwargs.items() if v is not None or k not in _defaults(name)})

    return _dressed(method, name, google_docstring(name), params, str)


@functools.cache
def _defaults(name: str) -> frozenset[str]:
    """Arguments with a default (left out when a caller passes ``None`` for them)."""
    return frozenset(p.name for p in arguments(name) if p.default is not inspect.Parameter.empty)
