"""Chat prompts for language-model agents, rendered from the tool registry and the observations.

The conversation is the usual one for tool-using chat models:

* a **system** message: what the job is, how to answer (one JSON tool call per turn), and every
  tool with its arguments, rendered from :data:`envcore.env.tools.TOOLS` (the same registry the
  wire format, MCP and the TRL wrapper are built from, so the docs cannot drift from the tools);
* the first **user** message: the reset observation's text (the task, the access policy, the seeded
  users, the files);
* then one **assistant** message per reply and one **user** message per observation.

:class:`Conversation` keeps that history within a size budget (``max_chars``). Older tool outputs
are shortened first (a file read long ago is worth less than the latest one), then the oldest turns
are dropped; the system message, the task and the latest observation always stay. A turn's text
counts in characters so the budget holds for any tokenizer; set it from the model's context
(``~3.5 characters a token`` for code is a safe rule).
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass, field

from envcore.env.actions import A01Observation
from envcore.env.tools import TOOLS, arguments, describe

Message = dict[str, str]

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


def observation_message(observation: A01Observation) -> str:
    """The user turn that answers one action: the environment's own text plus the budget left."""
    text = observation.text or (f"Error: {observation.error}" if observation.error else json.dumps(observation.result))
    return f"{text}\n\n[{observation.steps_left} steps left]"


@dataclass
class Conversation:
    """The chat history of one episode, kept under ``max_chars`` (see the module docstring)."""

    max_chars: int = 48_000
    old_output_chars: int = 1_500
    """How much of an older observation survives once the budget is tight."""
    messages: list[Message] = field(default_factory=list)

    def start(self, first: A01Observation) -> None:
        self.messages = [{"role": "system", "content": system_prompt()},
                         {"role": "user", "content": observation_message(first)}]

    def add_reply(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def add_observation(self, observation: A01Observation) -> None:
        self.messages.append({"role": "user", "content": observation_message(observation)})

    def size(self) -> int:
        return sum(len(m["content"]) for m in self.messages)

    def fitted(self, max_chars: int | None = None) -> list[Message]:
        """The messages to send: the whole history if it fits, else shortened as described above."""
        budget = self.max_chars if max_chars is None else max_chars
        messages = [dict(m) for m in self.messages]
        if sum(len(m["content"]) for m in messages) <= budget:
            return messages
        # 1. shorten older observations (never the task, never the latest turn)
        for m in messages[2:-1]:
            if m["role"] == "user" and len(m["content"]) > self.old_output_chars:
                cut = self.old_output_chars
                m["content"] = m["content"][:cut] + f"\n[... {len(m['content']) - cut} characters of an older output cut]"
        # 2. drop the oldest assistant/user pairs after the task
        while sum(len(m["content"]) for m in messages) > budget and len(messages) > 4:
            del messages[2:4]
        # 3. last resort: cut the latest observation, then the task, from the middle (the system
        #    prompt, which says how to answer, always stays whole)
        for index in (-1, 1):
            over = sum(len(m["content"]) for m in messages) - budget
            if over <= 0 or len(messages) < 2:
                break
            content = messages[index]["content"]
            keep = max(len(content) - over - 64, 400)
            if keep < len(content):
                messages[index]["content"] = f"{content[: keep // 2]}\n[... cut to fit the context ...]\n{content[-(keep // 2):]}"
        return messages
