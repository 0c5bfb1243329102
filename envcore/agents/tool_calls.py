"""Native tool calls: reading them out of a model's reply, and turning one into the step's action.

Instruction models trained for tool use, and OpenAI-compatible endpoints, call tools in their own
format rather than by writing a JSON action in the text: the tools go into the prompt as schemas
(:func:`envcore.env.tools.tool_schemas`) and the reply carries structured calls. This module is the
agents' side of that format (``--tool-format native``).

**Reading calls** out of a local model's generated text (:func:`parse_tool_calls`):

1. the tokenizer's own response template, ``tokenizer.parse_response`` (transformers >= 5.13), when
   it has one; :func:`ensure_response_template` sets one with TRL's ``add_response_schema`` for the
   templates TRL knows (Qwen3 among them);
2. otherwise, or when that parser gives up, the common formats, in a table tried in order:
   Hermes/Qwen ``<tool_call>{json}</tool_call>``, Mistral ``[TOOL_CALLS]`` (a JSON list, or
   ``name[ARGS]{json}``) and Llama 3.1 (a reply that is one ``{"name": ..., "parameters": ...}``
   object).

A reply whose format announces a call that cannot be read (broken JSON, no name, arguments that are
not an object) is *unreadable* (:attr:`ParsedReply.error`): none of its calls is taken, so a
malformed call is never dropped while a later one runs. Reading is linear in the reply's length
(the reply is written by whoever controls the model).

**One action per step** (the environment's rule). :func:`call_action` turns the *first* call into
the action; the agent answers the others with :data:`~envcore.agents.prompts.ONE_CALL_PER_TURN`.
A call of a registered tool with an object of arguments becomes the tool action itself
(``{"tool": "read_file", "path": ...}``), which the environment validates like any action, so the
episode log shows the call as the step's action. Everything else goes to the environment as a
``reply`` action for its reply reader (:mod:`envcore.env.reply`), exactly as the JSON-in-text format
sends every reply: a reply with no call (its text), an unreadable one (its text), a call of an
unknown or reserved tool name or with arguments that are not a JSON object (the call as JSON). The
environment then counts the step as it counts the same text in the JSON-in-text format: a reply
with no action is a format error, an unknown tool or a bad argument a validation error, each one
invalid step with the environment's own message, and the harness's own actions (``reply``,
``out_of_budget``) are refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from envcore.agents.names import TOOL_FORMATS as _NAMES
from envcore.env.actions import LIMITS, TOOL_NAMES
from envcore.textscan import tagged_blocks, without_tagged_blocks

TOOL_FORMATS = _NAMES
"""``json``: one JSON action written in the reply (the prompt documents the tools); ``native``: the
chat template's or API's own tool calls (the tools go as schemas); ``auto``: native where the chat
template renders tools, or the endpoint takes them, else json."""
MAX_CALLS = 16
"""Calls read per reply; the rest are ignored (only the first runs anyway)."""
REASONING_TAGS = ("think", "thinking", "reasoning")
_DECODER = json.JSONDecoder(strict=False)  # as lenient as the environment's reader: raw newlines in strings


@dataclass(frozen=True)
class ToolCall:
    """One native call as the model made it."""

    name: str
    arguments: dict[str, Any] | None
    """The arguments, or ``None`` when they are not a JSON object."""
    raw_arguments: str = "{}"
    """The arguments as written (JSON text): what an OpenAI-compatible endpoint is sent back."""
    id: str = ""
    """The call's id (an endpoint's, or one the agent gave it)."""

    @property
    def text(self) -> str:
        """The call as one JSON object, the way the environment's reply reader takes a call."""
        return json.dumps({"name": self.name, "arguments": self.raw_arguments if self.arguments is None else self.arguments},
                          ensure_ascii=False)

    def message(self) -> dict[str, Any]:
        """The call as an assistant message's ``tool_calls`` entry (OpenAI's shape)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.raw_arguments}}


@dataclass(frozen=True)
class ParsedReply:
    """What a reply holds: its text, and the native calls read from it."""

    text: str
    """The reply as the model wrote it."""
    content: str = ""
    """The reply's text besides its calls (what the chat history keeps as the assistant's words)."""
    calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    """Why the reply's native calls could not be read (then ``calls`` is empty)."""
    how: str = ""
    """Which reader found the calls: ``response_template``, ``hermes``, ``mistral``, ``llama``, or ``""``."""


def call_action(call: ToolCall) -> dict[str, Any]:
    """The action for one call; see the module docstring."""
    if call.arguments is not None and call.name in TOOL_NAMES and "tool" not in call.arguments:
        return {"tool": call.name, **call.arguments}
    return {"tool": "reply", "text": call.text}


def reply_action(reply: ParsedReply) -> dict[str, Any]:
    """The step's action: the first call's, or the reply's text for the environment to read."""
    if reply.calls and reply.error is None:
        return call_action(reply.calls[0])
    return {"tool": "reply", "text": reply.text}


def decode_arguments(value: Any) -> dict[str, Any] | None:
    """Arguments as an object: a dict as it is, JSON text decoded (empty text is no arguments), else
    ``None``; read as leniently as the environment reads them."""
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = _DECODER.decode(value)
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _raw(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps({} if arguments is None else arguments,
                                                                   ensure_ascii=False)


def call_ids(turn: int, count: int) -> list[str]:
    """Ids for the calls of a local model's reply: nine letters and digits, the shape the strictest chat
    templates (Mistral's) accept, unique within an episode of up to 1,000 turns."""
    return [f"call{turn % 1000:03d}{index % 100:02d}" for index in range(count)]


# ----- endpoints ---------------------------------------------------------------------------------
def endpoint_calls(raw_calls: Any, *, turn: int = 0) -> tuple[ToolCall, ...]:
    """An OpenAI-compatible message's ``tool_calls`` as :class:`ToolCall` s (ids given where missing)."""
    if not isinstance(raw_calls, list):
        return ()
    calls = []
    for index, raw in enumerate(raw_calls[:MAX_CALLS]):
        function = raw.get("function") if isinstance(raw, dict) else None
        function = function if isinstance(function, dict) else {}
        name = function.get("name")
        arguments = function.get("arguments")
        ident = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"] else None
        calls.append(ToolCall(name if isinstance(name, str) else "", decode_arguments(arguments), _raw(arguments),
                              ident or call_ids(turn, index + 1)[-1]))
    return tuple(calls)


# ----- generated text ----------------------------------------------------------------------------
class _Unreadable(ValueError):
    """A call the format announces but that cannot be read."""


def _call_of(value: Any, argument_keys: tuple[str, ...] = ("arguments", "parameters")) -> tuple[str, Any]:
    if not isinstance(value, dict):
        raise _Unreadable("a call is not a JSON object")
    if isinstance(value.get("function"), dict):  # {"type": "function", "function": {...}}
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _Unreadable("a call has no tool name")
    arguments = next((value[k] for k in argument_keys if k in value), None)
    if decode_arguments(arguments) is None:
        raise _Unreadable(f"the arguments of {name!r} are not a JSON object")
    return name, arguments


def _json_at(text: str, start: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        raise _Unreadable("a call is not valid JSON") from None


def _hermes(text: str) -> tuple[list[tuple[str, Any]], str] | None:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number (Hermes, Qwen 2.5/3)."""
    blocks = list(tagged_blocks(text, ("tool_call",)))
    if not blocks:
        return None
    calls = []
    for _, start, end, close in blocks[:MAX_CALLS]:
        body = text[start:end].strip()
        if not body.startswith("{"):
            raise _Unreadable("a <tool_call> block is not valid JSON")
        value, used = _json_at(body, 0)
        if body[used:].strip() and end < close:  # in a block cut off after its JSON, what follows is not read
            raise _Unreadable("a <tool_call> block is not valid JSON")
        calls.append(_call_of(value))
    return calls, without_tagged_blocks(text, ("tool_call",))


_MISTRAL_MARK = "[TOOL_CALLS]"
_MISTRAL_NAME = re.compile(r"\s*([A-Za-z0-9_.-]{1,64})\[ARGS\]")


def _mistral(text: str) -> tuple[list[tuple[str, Any]], str] | None:
    """``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (v3) or ``[TOOL_CALLS]name[ARGS]{...}``."""
    first = text.find(_MISTRAL_MARK)
    if first == -1:
        return None
    calls: list[tuple[str, Any]] = []
    position = first
    while position != -1 and len(calls) < MAX_CALLS:
        start = position + len(_MISTRAL_MARK)
        named = _MISTRAL_NAME.match(text, start)
        if named:
            arguments, end = _json_at(text, named.end())
            calls.append(_call_of({"name": named.group(1), "arguments": arguments}))
        else:
            start += len(text[start:]) - len(text[start:].lstrip())
            value, end = _json_at(text, start)
            calls.extend(_call_of(v) for v in (value if isinstance(value, list) else [value])[:MAX_CALLS])
        position = text.find(_MISTRAL_MARK, end)
    return calls[:MAX_CALLS], text[:first]


_LLAMA_WRAPPERS = ("<|python_tag|>", "<|eot_id|>", "<|eom_id|>")


def _llama(text: str) -> tuple[list[tuple[str, Any]], str] | None:
    """Llama 3.1: the reply is one ``{"name": ..., "parameters": {...}}`` object (nothing else)."""
    body = text
    for mark in _LLAMA_WRAPPERS:
        body = body.replace(mark, "")
    body = body.strip()
    if not re.match(r'\{\s*"name"\s*:', body):
        return None
    value, end = _json_at(body, 0)
    if body[end:].strip():
        return None  # an object followed by prose: not a Llama call (the environment reads the text)
    if not isinstance(value, dict) or not ({"parameters", "arguments"} & set(value)):
        return None
    return [_call_of(value)], ""


READERS: tuple[tuple[str, Callable[[str], tuple[list[tuple[str, Any]], str] | None]], ...] = (
    ("hermes", _hermes), ("mistral", _mistral), ("llama", _llama))
"""The common formats, tried in order; the first that finds a call (or a broken one) decides."""


def _parsed(text: str, how: str, found: list[tuple[str, Any]], content: str, turn: int) -> ParsedReply:
    ids = call_ids(turn, len(found))
    calls = tuple(ToolCall(name.strip(), decode_arguments(arguments), _raw(arguments), ident)
                  for (name, arguments), ident in zip(found, ids))
    return ParsedReply(text, content.strip(), calls, None, how)


def _with_template(text: str, tokenizer: Any, prefix: str, turn: int) -> ParsedReply | None:
    """The calls as the tokenizer's response template reads them; ``None`` when it has none, fails, or
    reads a call it cannot name (the format readers then try)."""
    if getattr(tokenizer, "response_template", None) is None or not hasattr(tokenizer, "parse_response"):
        return None
    try:
        message = tokenizer.parse_response(text, prefix=prefix)
        found = [_call_of(call) for call in (message.get("tool_calls") or [])[:MAX_CALLS]]
    except Exception:  # noqa: BLE001 - any failure of the template's parser leaves it to the readers
        return None
    content = message.get("content")
    return _parsed(text, "response_template", found, content if isinstance(content, str) else "", turn)


def parse_tool_calls(text: str, tokenizer: Any = None, *, prefix: str = "", turn: int = 0) -> ParsedReply:
    """The native calls in a generated ``text``; see the module docstring. ``prefix`` is the end of the
    prompt (some response templates need the part of the assistant turn the template wrote); ``turn``
    numbers the calls' ids."""
    if not isinstance(text, str):
        return ParsedReply("", error="the reply is not text")
    if len(text) > LIMITS["reply_chars"]:
        return ParsedReply(text, error="the reply is too long to read")
    if tokenizer is not None:
        parsed = _with_template(text, tokenizer, prefix, turn)
        if parsed is not None:
            return parsed
    visible = without_tagged_blocks(text, REASONING_TAGS)
    for how, reader in READERS:
        try:
            found = reader(visible)
        except _Unreadable as exc:
            return ParsedReply(text, visible.strip(), (), str(exc), how)
        if found is not None:
            return _parsed(text, how, *found, turn)
    return ParsedReply(text, visible.strip())


# ----- chat templates ----------------------------------------------------------------------------
def ensure_response_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer.parse_response`` can read this model's replies: it has a response template,
    or TRL knows its chat template and sets one."""
    if getattr(tokenizer, "response_template", None) is not None:
        return True
    if not hasattr(tokenizer, "parse_response"):
        return False
    try:
        from trl.chat_template_utils import add_response_schema

        add_response_schema(tokenizer)
    except Exception:  # noqa: BLE001 - TRL missing, or a template it does not know: the readers do the work
        return False
    return getattr(tokenizer, "response_template", None) is not None


_PROBE_NAME, _PROBE_TEXT = "probe_tool_q7x", "probe description k2v"
_PROBE_ARGUMENT, _PROBE_RESULT = "probe_value_m4w", "probe result z8c"


def template_tool_problem(tokenizer: Any) -> str | None:
    """Why the tokenizer's chat template cannot hold a native tool-calling chat, or ``None`` when it can:
    it must render the tools it is given, an assistant's call and the tool's answer."""
    probe = {"type": "function", "function": {"name": _PROBE_NAME, "description": _PROBE_TEXT, "parameters": {
        "type": "object", "properties": {"value": {"type": "string", "description": "a value"}}, "required": ["value"]}}}
    user = {"role": "user", "content": "hello"}
    try:
        shown = tokenizer.apply_chat_template([user], tools=[probe], add_generation_prompt=True, tokenize=False)
    except Exception as exc:  # noqa: BLE001 - a template that raises on tools= cannot take them
        return f"it fails on tools ({type(exc).__name__}: {str(exc)[:120]})"
    if _PROBE_NAME not in shown or _PROBE_TEXT not in shown:
        return "it does not render the tools it is given"
    ident = call_ids(0, 1)[0]
    chat = [user, {"role": "assistant", "content": "", "tool_calls": [
        {"id": ident, "type": "function", "function": {"name": _PROBE_NAME, "arguments": {"value": _PROBE_ARGUMENT}}}]},
        {"role": "tool", "tool_call_id": ident, "name": _PROBE_NAME, "content": _PROBE_RESULT}]
    try:
        shown = tokenizer.apply_chat_template(chat, tools=[probe], tokenize=False)
    except Exception as exc:  # noqa: BLE001
        return f"it fails on a tool call and its result ({type(exc).__name__}: {str(exc)[:120]})"
    if _PROBE_ARGUMENT not in shown or _PROBE_RESULT not in shown:
        return "it drops an assistant's tool call or the tool's result"
    return None
