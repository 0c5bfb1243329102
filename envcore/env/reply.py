"""Turning a language model's reply into one action: tolerant of how models actually write.

An agent is asked for one JSON object per turn (``{"tool": "read_file", "path": "app/main.py"}``).
Models wrap it in Markdown fences, add prose before and after, think aloud first (``<think>``),
emit their chat template's tool-call syntax (``<tool_call>{"name": ..., "arguments": {...}}``,
OpenAI's ``{"function": {"name": ..., "arguments": "<json string>"}}``), put raw newlines inside
JSON strings (a diff, typically), use single quotes or leave a trailing comma. :func:`parse_action_text`
accepts all of these and returns the action as a plain dict, or a :class:`ParsedAction` with an
``error`` that says what was wrong and what a valid reply looks like. It never raises: a reply that
cannot be read is a *format error*. An episode given a ``reply`` action
(:class:`~envcore.env.actions.Reply`) runs this parser itself and counts a format error as an
invalid action, so every harness accounts for them the same way.

The parser only finds and normalises the object; whether the tool and its arguments are valid is
the environment's decision (:func:`envcore.env.actions.parse_action`), so the two cannot disagree.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from envcore.env.actions import LIMITS
from envcore.textscan import closing_brace

MAX_REPLY_CHARS = LIMITS["reply_chars"]
"""Longer replies are refused unread (a model stuck in a loop)."""
MAX_CANDIDATES = 256
"""Opening braces tried per reply before giving up."""

EXAMPLE = '{"tool": "read_file", "path": "app/main.py"}'
FORMAT_ERROR = "format error"
"""How a refused step's ``error`` starts when the reply held no readable action."""

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?(</\1>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_TOOL_CALL = re.compile(r"<(tool_call|function_call|action)>\s*(.*?)\s*(</\1>|$)", re.DOTALL | re.IGNORECASE)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_LENIENT = json.JSONDecoder(strict=False)  # raw newlines and tabs inside strings are accepted
_ARGUMENT_KEYS = ("arguments", "args", "parameters", "params", "input", "tool_input")


@dataclass(frozen=True)
class ParsedAction:
    action: dict[str, Any] | None
    """The action as a dict with a ``tool`` key, or ``None`` on a format error."""
    error: str | None = None
    """Why no action could be read (shown to the model as the step's error)."""
    how: str = ""
    """Where the action was found: ``json``, ``fence``, ``tool_call``, ``embedded``, ``lenient``."""

    @property
    def ok(self) -> bool:
        return self.action is not None


def is_format_error(error: str | None) -> bool:
    """Whether an observation's ``error`` says the reply held no readable action."""
    return bool(error) and error.startswith(FORMAT_ERROR)


def parse_action_text(text: Any) -> ParsedAction:
    """The one action in a model's reply; see the module docstring."""
    if not isinstance(text, str):
        return _error(f"the reply is not text ({type(text).__name__})")
    if len(text) > MAX_REPLY_CHARS:
        return _error(f"the reply is {len(text):,} characters long (at most {MAX_REPLY_CHARS:,})")
    visible = _THINK.sub("", text).strip()
    if not visible:
        return _error("the reply is empty" if not text.strip() else "the reply has only reasoning, no action")
    problems: list[str] = []
    for how, candidate in _candidates(visible):
        found = _object_in(candidate, problems)
        if found is not None:
            action, lenient = found
            normalised = _normalise(action, problems)
            if normalised is not None:
                return ParsedAction(normalised, None, "lenient" if lenient else how)
    detail = f" ({problems[0]})" if problems else ""
    return _error(f"no JSON action found in the reply{detail}")


def _error(reason: str) -> ParsedAction:
    return ParsedAction(None, f"{reason}. Reply with exactly one JSON object, for example {EXAMPLE}")


def _candidates(text: str):
    """Places an action may be, most explicit first."""
    for match in _TOOL_CALL.finditer(text):
        yield "tool_call", match.group(2)
    for match in _FENCE.finditer(text):
        yield "fence", match.group(2)
    yield "json", text


def _object_in(text: str, problems: list[str]) -> tuple[Any, bool] | None:
    """The first JSON object in ``text`` that looks like an action: (value, found leniently)."""
    for tried, match in enumerate(re.finditer(r"\{", text), 1):
        if tried > MAX_CANDIDATES:
            problems.append("too many braces to search")
            break
        lenient = False
        try:
            value, _ = _LENIENT.raw_decode(text, match.start())
        except ValueError:
            value, lenient = _decode_lenient(text, match.start()), True
        if isinstance(value, dict) and _looks_like_action(value):
            return value, lenient
    return None


def _decode_lenient(text: str, start: int) -> Any:
    """Single quotes, trailing commas, Python literals: the brace-balanced object at ``text[start]``, if any."""
    end = closing_brace(text, start, quotes="\"'")
    if end == -1:
        return None
    chunk = _TRAILING_COMMA.sub(r"\1", text[start:end + 1])
    try:
        return _LENIENT.decode(chunk)
    except ValueError:
        pass
    try:
        return ast.literal_eval(chunk)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _looks_like_action(value: dict) -> bool:
    return any(key in value for key in ("tool", "name", "function", "action"))


def _normalise(value: dict, problems: list[str]) -> dict[str, Any] | None:
    """``{"tool": name, **arguments}`` from the shapes models use."""
    if isinstance(value.get("function"), dict):  # OpenAI: {"type": "function", "function": {...}}
        value = value["function"]
    name = value.get("tool", value.get("name", value.get("action")))
    if not isinstance(name, str) or not name.strip():
        problems.append("its tool name is missing or not a string")
        return None
    arguments: dict[str, Any] = {}
    for key in _ARGUMENT_KEYS:
        if key in value:
            nested = value[key]
            if isinstance(nested, str):  # OpenAI sends arguments as a JSON string
                try:
                    nested = _LENIENT.decode(nested) if nested.strip() else {}
                except ValueError:
                    problems.append(f"its {key!r} is not a JSON object")
                    return None
            if not isinstance(nested, dict):
                problems.append(f"its {key!r} is not an object")
                return None
            arguments.update(nested)
            break
    rest = {k: v for k, v in value.items() if k not in ("tool", "name", "action", "type", *_ARGUMENT_KEYS)}
    return {"tool": name.strip(), **rest, **arguments}
