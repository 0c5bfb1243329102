"""Chat prompts for language-model agents, rendered from the tool registry and the observations.

The conversation is the usual one for tool-using chat models:

* a **system** message: what the job is, how to answer (one JSON tool call per turn), and every
  tool with its arguments, rendered from :data:`envcore.env.tools.TOOLS` (the same registry the
  wire format, MCP and the TRL wrapper are built from, so the docs cannot drift from the tools);
* the first **user** message: the reset observation's text (the task, the access policy, the seeded
  users, the files);
* then one **assistant** message per reply and one **user** message per observation.

In the native tool-calling format (``Conversation(native=True)``, ``system_prompt(native_tools=True)``)
the system message says what the job is and that one tool is called per turn: the tools reach the
model as schemas (:func:`envcore.env.tools.tool_schemas`, through the chat template or the API's
``tools``), not as text. An assistant message then carries ``tool_calls`` and the observation comes
back as a ``tool`` message answering the first call's ``tool_call_id``; every further call of the
same reply is answered with :data:`ONE_CALL_PER_TURN` (each call must be answered, and only one runs).
A reply with no call is answered by a **user** message, as in the JSON format.

:class:`Conversation` keeps that history within a size budget (``max_chars``). Older tool outputs
are shortened first (a file read long ago is worth less than the latest one), then the oldest turns
are dropped (an assistant message with every message answering it, so no tool message is left
without its call); the system message, the task and the latest observation always stay. A turn's text
counts in characters so the budget holds for any tokenizer; set it from the model's context
(``~3.5 characters a token`` for code is a safe rule).
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from envcore.env.actions import A01Observation
from envcore.env.tools import TOOLS, arguments, describe

Message = dict[str, Any]
"""A chat message: ``role`` and ``content`` (text), plus ``tool_calls`` on an assistant's native calls
and ``tool_call_id`` on a tool's answer."""

OUTPUT_RULES = """\
Answer every turn with exactly one tool call: a JSON object whose "tool" field names the tool and
whose other fields are its arguments, for example
{"tool": "read_file", "path": "app/main.py"}
You may reason briefly first (inside <think>...</think> if you like), but write only one JSON object:
the first one that names a tool is the action. Patches are unified
diffs against the current files (paths relative to the app, as listed). End with {"tool": "submit"}
once your fix is in place: submitting runs hidden security and regression checks."""

ROLE = """\
You are a security engineer fixing Broken Access Control (OWASP A01) in a FastAPI app. Read the code,
reproduce the problem with requests as the seeded users, patch the app so it follows its access
policy, check that legitimate use still works, and submit. Change as little as needed."""


def _type_name(annotation: typing.Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation) if a is not type(None))
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))


def tool_docs() -> str:
    """One entry per tool: its call shape and description, from the registry."""
    entries = []
    for name in TOOLS:
        params = []
        for p in arguments(name):
            optional = p.default is not p.empty
            params.append(f"{p.name}{'?' if optional else ''}: {_type_name(p.annotation)}")
        entries.append(f"- {name}({', '.join(params)}): {describe(name)}")
    return "\n".join(entries)


NATIVE_OUTPUT_RULES = """\
Act through the tools you are given, one tool call per turn; each call's result comes back to you.
Patches are unified diffs against the current files (paths relative to the app, as listed). Call
submit once your fix is in place: submitting runs hidden security and regression checks."""


def system_prompt(native_tools: bool = False) -> str:
    """The system message. ``native_tools``: for models that call tools through their chat
    template's or endpoint's own format, where the tools travel as schemas
    (:func:`envcore.env.tools.tool_schemas`), so the message neither lists them nor asks for JSON
    in the text."""
    if native_tools:
        return f"{ROLE}\n\n{NATIVE_OUTPUT_RULES}"
    return f"{ROLE}\n\n{OUTPUT_RULES}\n\nTools:\n{tool_docs()}"


ONE_CALL_PER_TURN = ("Not run: only one tool call is taken per turn, the first of the reply. "
                     "Call this tool again on its own if you still need it.")
"""The answer to every call of a reply after its first (which is the step's action)."""


def observation_message(observation: A01Observation) -> str:
    """The user turn that answers one action: the environment's own text plus the budget left."""
    text = observation.text or (f"Error: {observation.error}" if observation.error else json.dumps(observation.result))
    return f"{text}\n\n[{observation.steps_left} steps left]"


def message_chars(message: Message) -> int:
    """A message's size in characters: its text, and the names and arguments of its native calls."""
    size = len(message.get("content") or "")
    for call in message.get("tool_calls") or ():
        function = (call.get("function") or {}) if isinstance(call, dict) else {}
        size += len(str(function.get("name") or "")) + len(str(function.get("arguments") or ""))
    return size


def _turn_starts(messages: list[Message]) -> list[int]:
    """Where each turn after the task starts: an assistant message, then the messages answering it."""
    return [i for i in range(2, len(messages)) if i == 2 or messages[i]["role"] == "assistant"]


@dataclass
class Conversation:
    """The chat history of one episode, kept under ``max_chars`` (see the module docstring)."""

    max_chars: int = 48_000
    old_output_chars: int = 1_500
    """How much of an older observation survives once the budget is tight."""
    messages: list[Message] = field(default_factory=list)
    native: bool = False
    """Native tool calling: the native system prompt, and observations answering calls as tool messages."""

    def start(self, first: A01Observation) -> None:
        self.messages = [{"role": "system", "content": system_prompt(native_tools=self.native)},
                         {"role": "user", "content": observation_message(first)}]

    def add_reply(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def add_tool_calls(self, content: str, calls: list[dict[str, Any]]) -> None:
        """An assistant message with native calls (OpenAI's ``{"id", "type", "function"}`` entries); the
        next observation answers the first, :data:`ONE_CALL_PER_TURN` the others."""
        self.messages.append({"role": "assistant", "content": content, "tool_calls": calls})

    def add_observation(self, observation: A01Observation) -> None:
        text = observation_message(observation)
        last = self.messages[-1] if self.messages else {}
        calls = last.get("tool_calls") if last.get("role") == "assistant" else None
        if not calls:
            self.messages.append({"role": "user", "content": text})
            return
        for index, call in enumerate(calls):
            self.messages.append({"role": "tool", "tool_call_id": call["id"],
                                  "content": text if index == 0 else ONE_CALL_PER_TURN})

    def size(self) -> int:
        return sum(message_chars(m) for m in self.messages)

    def fitted(self, max_chars: int | None = None) -> list[Message]:
        """The messages to send: the whole history if it fits, else shortened as described above."""
        budget = self.max_chars if max_chars is None else max_chars
        messages = [dict(m) for m in self.messages]

        def size() -> int:
            return sum(message_chars(m) for m in messages)

        if size() <= budget:
            return messages
        # 1. shorten older observations (never the task, never the latest turn)
        starts = _turn_starts(messages)
        for m in messages[2:starts[-1] if starts else 2]:
            if m["role"] in ("user", "tool") and len(m["content"]) > self.old_output_chars:
                cut = self.old_output_chars
                m["content"] = m["content"][:cut] + f"\n[... {len(m['content']) - cut} characters of an older output cut]"
        # 2. drop the oldest turns after the task, each with the messages answering it
        while size() > budget and len(starts := _turn_starts(messages)) > 1:
            del messages[2:starts[1]]
        # 3. last resort: cut the latest observation, then the task, from the middle (the system
        #    prompt, which says how to answer, always stays whole)
        starts = _turn_starts(messages)
        latest = starts[-1] + 1 if starts and starts[-1] + 1 < len(messages) else len(messages) - 1
        for index in (latest, 1):
            over = size() - budget
            if over <= 0 or len(messages) < 2:
                break
            content = messages[index]["content"] or ""
            keep = max(len(content) - over - 64, 400)
            if keep < len(content):
                messages[index]["content"] = f"{content[: keep // 2]}\n[... cut to fit the context ...]\n{content[-(keep // 2):]}"
        return messages
