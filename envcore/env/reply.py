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
import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

from envcore.env.actions import LIMITS
from envcore.textscan import closing_brace, fenced_blocks, tagged_blocks, without_tagged_blocks

MAX_REPLY_CHARS = LIMITS["reply_chars"]
"""Longer replies are refused unread (a model stuck in a loop)."""
MAX_CANDIDATES = 4096
"""Opening braces tried per candidate text before giving up (the work itself is bounded by
:data:`WORK_BUDGET`)."""
MAX_LENIENT = 16
"""Candidates read leniently (single quotes, trailing commas, Python literals) per reply: the slow path,
tried only where an action key follows the brace."""
WORK_BUDGET = 2 * MAX_REPLY_CHARS
"""Characters the decoders may look at per reply, every candidate together: several times what any
reply a model writes needs, and the bound that keeps a reply built to be slow to read (nested braces,
unclosed fences and tags) to a few milliseconds. Past it the reply is a format error that says so. The
work is counted, not timed, so the same reply always gets the same answer."""
_DEEP_NESTING_COST = 10_000
"""What a decode that gave up on nesting deeper than Python's recursion limit is charged."""
_ATTEMPT_COST = 32
"""What each decode is charged at least, however early it fails: a failed decode costs a few
microseconds whatever its length (the decoder builds an error), so a reply of short failures
(``{"{"{"...``) is bounded by the count of attempts, not only by the characters they read."""
_OBJECT_START = re.compile(r"""\{(?=\s*["'])""")
"""A brace an action can begin at: an object whose first key is a quoted string. Others (``{{``,
``{}``, ``{1: ...``, code) are never tried, at the regular expression engine's speed."""
_LENIENT_WINDOW = 2_000
"""How far past a brace an action key is looked for before reading the object leniently."""

EXAMPLE = '{"tool": "read_file", "path": "app/main.py"}'
FORMAT_ERROR = "format error"
"""How a refused step's ``error`` starts when the reply held no readable action."""

REASONING_TAGS = ("think", "thinking", "reasoning")
TOOL_CALL_TAGS = ("tool_call", "function_call", "action")
_ACTION_KEY = re.compile(r"""["']?\b(tool|name|function|action)\b["']?\s*:""")
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
    visible = without_tagged_blocks(text, REASONING_TAGS).strip()
    if not visible:
        return _error("the reply is empty" if not text.strip() else "the reply has only reasoning, no action")
    problems: list[str] = []
    budget = _Budget(WORK_BUDGET)
    for how, candidate in _candidates(visible):
        found = _object_in(candidate, problems, budget)
        if found is not None:
            action, lenient = found
            normalised = _normalise(action, problems)
            if normalised is not None:
                return ParsedAction(normalised, None, "lenient" if lenient else how)
    detail = f" ({problems[0]})" if problems else ""
    return _error(f"no JSON action found in the reply{detail}")


def _error(reason: str) -> ParsedAction:
    return ParsedAction(None, f"{reason}. Reply with exactly one JSON object, for example {EXAMPLE}")


class _Budget:
    """Characters the decoders may still look at for this reply (see :data:`WORK_BUDGET`)."""

    __slots__ = ("left", "lenient_left")

    def __init__(self, chars: int) -> None:
        self.left, self.lenient_left = chars, MAX_LENIENT

    def spend(self, chars: int) -> None:
        self.left -= max(chars, _ATTEMPT_COST)


def _candidates(text: str):
    """Places an action may be, most explicit first."""
    for _, start, end, _ in tagged_blocks(text, TOOL_CALL_TAGS):
        yield "tool_call", text[start:end].strip()
    for _, block in fenced_blocks(text):
        yield "fence", block
    yield "json", text


def _object_in(text: str, problems: list[str], budget: _Budget) -> tuple[Any, bool] | None:
    """The first JSON object in ``text`` that looks like an action: (value, found leniently)."""
    keys: list[int] | None = None  # where an action key is written, found once per text when needed
    for tried, match in enumerate(_OBJECT_START.finditer(text), 1):
        if tried > MAX_CANDIDATES:
            problems.append("too many braces to search")
            break
        if budget.left <= 0:
            problems.append("too long to search")
            break
        start, lenient = match.start(), False
        try:
            value, end = _LENIENT.raw_decode(text, start)
            budget.spend(end - start)
        except json.JSONDecodeError as exc:
            budget.spend(exc.pos - start + 1)
            if keys is None:
                keys = [m.start() for m in _ACTION_KEY.finditer(text)]
                budget.spend(len(text))
            at = bisect.bisect_left(keys, start)
            if at == len(keys) or keys[at] >= start + _LENIENT_WINDOW:
                continue  # no action key close after this brace: not worth reading leniently
            value, lenient = _decode_lenient(text, start, budget), True
        except RecursionError:  # nested deeper than any action: skip it
            budget.spend(_DEEP_NESTING_COST)
            continue
        if isinstance(value, dict) and _looks_like_action(value):
            return value, lenient
    return None


def _decode_lenient(text: str, start: int, budget: _Budget) -> Any:
    """Single quotes, trailing commas, Python literals: the brace-balanced object at ``text[start]``, if
    any. Tried only where an action key follows the brace (the caller checks), at most
    :data:`MAX_LENIENT` times a reply, and only as far as the budget reaches."""
    if budget.lenient_left <= 0 or budget.left <= 0:
        return None
    budget.lenient_left -= 1
    end = closing_brace(text, start, quotes="\"'", limit=start + budget.left)
    budget.spend((end if end != -1 else min(len(text), start + budget.left)) - start + 1)
    if end == -1:
        return None
    chunk = _TRAILING_COMMA.sub(r"\1", text[start:end + 1])
    budget.spend(2 * len(chunk))  # decoding it, then perhaps parsing it as Python
    try:
        return _LENIENT.decode(chunk)
    except (ValueError, RecursionError):
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
