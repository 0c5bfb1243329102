"""The environment's tools as Inspect tools, built from the one tool registry.

Every tool of :data:`envcore.env.tools.TOOLS` becomes an Inspect :class:`~inspect_ai.tool.ToolDef`
with the registry's name, its description (:func:`~envcore.env.tools.describe`) and its arguments as
the action model's JSON schema (types, bounds, defaults and each field's description), so what an
Inspect model is told cannot drift from what ``/ws``, MCP and the prompts say.

A tool call is turned into one wire action by :func:`action_for`, and the environment alone decides
whether it is valid: a call with bad arguments is an invalid step, counted and answered in the
environment's words, exactly as it is over ``/ws`` or in a training run. Calls that name no tool of the
registry (a made-up name, or ``reply`` and ``out_of_budget``, which the wire carries but agents are
never offered), and calls whose arguments are not JSON, are sent as the model's reply
(:class:`~envcore.env.actions.Reply`), which the environment reads and refuses as an invalid step.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from inspect_ai.tool import ToolDef, ToolParams
from inspect_ai.util import JSONSchema

from envcore.env.actions import LIMITS, clip
from envcore.env.tools import TOOLS, describe

Step = Callable[[dict[str, Any]], Awaitable[str]]
"""Runs one wire action as a step of the sample's episode; returns what the model reads."""

_NOT_ARGUMENTS = ("tool", "metadata")
"""Fields of an action model that are not a tool's arguments (the discriminator, OpenEnv's metadata)."""


def tool_parameters(name: str) -> ToolParams:
    """The arguments of the registry's tool ``name`` as Inspect tool parameters (JSON schema)."""
    schema = TOOLS[name].model_json_schema()
    if "$defs" in schema:  # every argument is a plain JSON value today; a nested model would need inlining
        raise ValueError(f"tool {name!r}: nested argument models are not supported")
    properties = {
        field: JSONSchema.model_validate({k: v for k, v in spec.items() if k != "title"})
        for field, spec in schema.get("properties", {}).items()
        if field not in _NOT_ARGUMENTS
    }
    required = [field for field in schema.get("required", []) if field not in _NOT_ARGUMENTS]
    return ToolParams(properties=properties, required=required)


def action_for(function: str, arguments: Mapping[str, Any] | None, parse_error: str | None = None) -> dict[str, Any]:
    """The wire action for one tool call (see the module docstring)."""
    arguments = dict(arguments or {})
    if parse_error is None and function in TOOLS:
        return {**arguments, "tool": function}
    if parse_error is not None:
        # no JSON in the text: the environment finds no action in it and refuses the step as unreadable
        text = f"The call to the tool {function[:64]!r} could not be read: its arguments are not valid JSON."
    else:
        text = json.dumps({"tool": function, **{k: v for k, v in arguments.items() if k != "tool"}}, default=str)
    return {"tool": "reply", "text": clip(text, LIMITS["reply_chars"])}


def environment_tools(step: Step) -> list[ToolDef]:
    """One Inspect tool per registry tool; calling one runs :func:`action_for` of the call as a step."""
    return [_tool_def(name, step) for name in TOOLS]


def _tool_def(name: str, step: Step) -> ToolDef:
    async def execute(**kwargs: Any) -> str:
        # A ``**kwargs: Any`` signature makes Inspect pass the arguments through as the model wrote them.
        return await step(action_for(name, kwargs))

    execute.__name__ = name
    # parallel=False: the calls of one turn are steps of one episode, taken in the order written
    return ToolDef(execute, name=name, description=describe(name), parameters=tool_parameters(name), parallel=False)
