"""Wire types of an episode: the typed tool actions, the observation and the state.

An action is one tool call, a discriminated union on the ``tool`` field::

    {"tool": "read_file", "path": "app/routers/tickets.py", "start_line": 1, "end_line": 80}
    {"tool": "http_request", "method": "GET", "path": "/api/tickets/3", "as_user": "bob"}
    {"tool": "apply_patch", "diff": "--- a/app/routers/tickets.py\\n+++ ..."}
    {"tool": "submit"}

Every model forbids unknown fields and bounds its sizes (:data:`LIMITS`), so a malformed or oversized
action is refused with a clear message before anything runs. OpenEnv's server validates an action
with ``action_cls.model_validate``; :class:`A01Action` is the class it is given: a root model over
the union, so the wire shape stays flat and ``/schema`` publishes every tool's arguments. ``reset``,
``step``, ``state`` and the verifier are not tools: a ``tool`` value outside :data:`TOOL_NAMES` is
refused, except ``reply`` (:class:`Reply`), which carries a model's raw reply for the environment to
read the action from (so a format error is an invalid step wherever the episode runs).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union

from openenv.core.env_server.types import Action, Observation, State
from pydantic import ConfigDict, Field, RootModel, TypeAdapter, field_validator, model_validator
from pydantic_core import PydanticCustomError

from envcore.scenario.probes import HTTP_METHODS

_SURROGATE = re.compile("[\ud800-\udfff]")

LIMITS = {
    # what an action may carry (refused by validation, before anything runs)
    "path_chars": 512,
    "request_path_chars": 2048,
    "headers": 32,
    "header_chars": 4096,
    "json_body_bytes": 64 * 1024,
    "diff_bytes": 256 * 1024,
    "edit_bytes": 64 * 1024,
    "search_chars": 200,
    "search_results": 200,
    "read_lines": 2000,
    "reply_chars": 200_000,
    # what an observation may carry (cut, with a marker that says so)
    "observation_chars": 50_000,
    "line_chars": 2_000,
    "error_chars": 2_000,
    "response_header_chars": 1_000,
    # what an episode-log record may carry (cut, with a marker; the record itself is always written)
    "log_field_chars": 8_000,
    "log_list_items": 64,
    "log_record_bytes": 4 * 1024 * 1024,
}
"""Documented bounds (see ``docs/environment.md``, Limits). Action arguments over theirs are refused
before anything runs. An observation's ``text`` and each text in its ``result`` are at most
``observation_chars`` (a line of ``read_file`` at most ``line_chars``, an ``error`` at most
``error_chars``, a response header at most ``response_header_chars``), cut with a marker that says
how much was left out. Each text of a logged step is at most ``log_field_chars`` and each list at
most ``log_list_items`` long; a whole record at most ``log_record_bytes`` (see
:mod:`envcore.env.episode_log`). The limits on an app's files (names, sizes, counts) are
:mod:`envcore.filetree`'s."""


def clip(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and a marker saying how many
    characters were left out, ``limit`` characters in all (never less than the marker)."""
    if len(text) <= limit:
        return text
    marker = f" ...[{len(text):,} characters; cut]"
    return text[:max(limit - len(marker), 0)] + marker


def bounded(value: Any, chars: int, items: int | None = None, depth: int = 32) -> Any:
    """A copy of the JSON-like ``value`` in which every text is :func:`clip`-ped to ``chars``, has no
    lone surrogate (each becomes U+FFFD, so it can be encoded), every list keeps at most ``items``
    entries (a list of texts ends with a marker text saying how many were left out) and nesting
    deeper than ``depth`` becomes a marker text. Values already within bounds are returned as they are."""
    if isinstance(value, str):
        value = clip(value, chars)
        return _SURROGATE.sub("\ufffd", value) if not value.isascii() and _SURROGATE.search(value) else value
    if isinstance(value, (dict, list, tuple)) and depth <= 0:
        return "...[nested too deep; cut]"
    if isinstance(value, dict):
        return {bounded(str(key), chars, items, depth - 1): bounded(item, chars, items, depth - 1)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        kept = [bounded(item, chars, items, depth - 1) for item in value[:items]]
        if items is not None and len(value) > items and all(isinstance(v, str) for v in value):
            kept[-1:] = [f"...[{len(value):,} entries; {len(value) - len(kept) + 1:,} cut]"]
        return kept
    return value


def _refuse(reason: str) -> PydanticCustomError:
    """A validator's refusal whose error details are plain JSON. (A ``ValueError`` would put the
    exception object into ``errors()[...]["ctx"]``, which OpenEnv cannot serialise: a 500 on
    ``POST /step`` and a dropped ``/ws`` session instead of a validation error.)"""
    return PydanticCustomError("value_error", "{reason}", {"reason": reason})


class _Tool(Action):
    """A tool call. ``tool`` names the tool; the other fields are its arguments."""

    model_config = ConfigDict(use_attribute_docstrings=True)
    """Each field's docstring is its description: in ``/schema``, in MCP's tool listing and in the
    native tool-calling schemas (:func:`envcore.env.tools.tool_schemas`)."""

    tool: str
    read_only: ClassVar[bool] = True
    """Whether the tool leaves the episode's files and phase as they are."""


class ListFiles(_Tool):
    """List the app's files with their sizes in lines."""

    tool: Literal["list_files"] = "list_files"


class ReadFile(_Tool):
    """Read one file of the app, optionally a line range (1-based, inclusive)."""

    tool: Literal["read_file"] = "read_file"
    path: str = Field(min_length=1, max_length=LIMITS["path_chars"])
    """The file's path as list_files shows it, e.g. app/routers/tickets.py."""
    start_line: int | None = Field(default=None, ge=1)
    """First line to show (1-based); omit for the start of the file."""
    end_line: int | None = Field(default=None, ge=1)
    """Last line to show (inclusive); omit for the end of the file."""


class SearchCode(_Tool):
    """Search the app's files for a text (or a regular expression with ``regex``); returns matching
    lines as ``path:line: text``."""

    tool: Literal["search_code"] = "search_code"
    query: str = Field(min_length=1, max_length=LIMITS["search_chars"])
    """The text to look for (a Python regular expression when regex is true)."""
    regex: bool = False
    """Whether query is a regular expression."""
    path_prefix: str | None = Field(default=None, max_length=LIMITS["path_chars"])
    """Only search files whose path starts with this, e.g. app/routers/."""
    max_results: int = Field(default=50, ge=1, le=LIMITS["search_results"])
    """The most matching lines to return."""


class HttpRequestTool(_Tool):
    """Send an HTTP request to the running app as a seeded user (by username) or anonymously."""

    tool: Literal["http_request"] = "http_request"
    method: str = "GET"
    """The HTTP method: GET, POST, PUT, PATCH or DELETE (also HEAD and OPTIONS)."""
    path: str = Field(min_length=1, max_length=LIMITS["request_path_chars"])
    """The request path with its query string, starting with /, e.g. /api/tickets/3?expand=1."""
    as_user: str | None = Field(default=None, max_length=128)
    """A seeded user's username: the request is signed with their credentials (a bearer token, an
    API-key header, a cookie, basic auth or a login's token). Omit it for an anonymous request."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers (the user's credentials are added for you)."""
    json_body: Any = None
    """A JSON request body, for POST, PUT and PATCH."""
    form: dict[str, str] | None = None
    """A form body instead (what an HTML form posts to a route with Form fields), e.g. {"name": "x"}."""

    @model_validator(mode="after")
    def _one_body(self) -> "HttpRequestTool":
        if self.form is not None and self.json_body is not None:
            raise _refuse("send json_body or form, not both")
        return self

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        upper = value.upper()
        if upper not in HTTP_METHODS:
            raise _refuse(f"method must be one of {', '.join(HTTP_METHODS)}")
        return upper

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise _refuse("path must start with '/' (e.g. /api/items/1?limit=5)")
        if any(ord(c) < 32 or c == "\x7f" for c in value):
            raise _refuse("path must not contain control characters")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > LIMITS["headers"]:
            raise _refuse(f"at most {LIMITS['headers']} headers")
        for name, text in value.items():
            if not name or len(name) + len(text) > LIMITS["header_chars"]:
                raise _refuse(f"header {name[:40]!r} is empty or too long")
            if any(ord(c) < 32 or c in "\x7f:" for c in name) or any(ord(c) < 32 and c != "\t" for c in text):
                raise _refuse(f"header {name[:40]!r} has control characters")
        return value


class ApplyPatch(_Tool):
    """Apply a unified diff (``--- a/path`` / ``+++ b/path`` headers, ``@@`` hunks) to the app's files."""

    tool: Literal["apply_patch"] = "apply_patch"
    read_only: ClassVar[bool] = False
    diff: str = Field(min_length=1, max_length=LIMITS["diff_bytes"])
    """The unified diff to apply."""


class EditFile(_Tool):
    """Replace an exact text in one file; the text must occur exactly once."""

    tool: Literal["edit_file"] = "edit_file"
    read_only: ClassVar[bool] = False
    path: str = Field(min_length=1, max_length=LIMITS["path_chars"])
    """The file to edit, as list_files shows it."""
    search: str = Field(min_length=1, max_length=LIMITS["edit_bytes"])
    """The exact text to replace, copied from the file (it must occur exactly once)."""
    replace: str = Field(max_length=LIMITS["edit_bytes"])
    """The text to put in its place."""


class RunTests(_Tool):
    """Run the scenario's visible probes against the app as patched (hidden probes run only at submit)."""

    tool: Literal["run_tests"] = "run_tests"


class ViewDiff(_Tool):
    """Show the current diff against the original app."""

    tool: Literal["view_diff"] = "view_diff"


class Submit(_Tool):
    """Submit the app as patched: every probe runs, the episode ends and the reward is revealed."""

    tool: Literal["submit"] = "submit"
    read_only: ClassVar[bool] = False


class Reply(_Tool):
    """A language model's whole reply, for harnesses that do not parse it themselves: the environment
    reads the one action in it (:mod:`envcore.env.reply`) and runs that, as one step. A reply with no
    readable action is an invalid action whose error says what a reply should look like. Not a tool:
    agents are not told about it, and it is not an MCP tool."""

    tool: Literal["reply"] = "reply"
    text: str = Field(max_length=LIMITS["reply_chars"])
    """The model's reply, as it wrote it."""


class OutOfBudget(_Tool):
    """For harnesses with a budget of their own (a training run's tokens per episode, a deadline):
    theirs ran out before the step budget did. The episode ends the way running out of steps ends
    it: the app as it is now is submitted, and the budget cost is charged, so running a harness out
    of tokens never pays better than running out of steps. Not a tool: agents are not told about
    it, it is not an MCP tool, and a reply cannot carry it."""

    tool: Literal["out_of_budget"] = "out_of_budget"
    read_only: ClassVar[bool] = False
    budget: str = Field(default="tokens", min_length=1, max_length=64)
    """Which budget ran out, for the record."""


TOOL_MODELS: tuple[type[_Tool], ...] = (ListFiles, ReadFile, SearchCode, HttpRequestTool, ApplyPatch, EditFile,
                                        RunTests, ViewDiff, Submit)
TOOL_NAMES: tuple[str, ...] = tuple(m.model_fields["tool"].default for m in TOOL_MODELS)
WIRE_MODELS: tuple[type[_Tool], ...] = (*TOOL_MODELS, Reply, OutOfBudget)
"""What a step may carry: a tool call, a model's reply to read one from, or a harness's own budget
running out."""
ToolAction = Annotated[Union[tuple(WIRE_MODELS)], Field(discriminator="tool")]  # type: ignore[valid-type]
_adapter: TypeAdapter = TypeAdapter(ToolAction)


class A01Action(RootModel[ToolAction]):  # type: ignore[valid-type]
    """The action class given to OpenEnv: one tool call, validated into its concrete model (``.root``).
    ``/schema`` publishes the union, discriminated on ``tool``."""

    @model_validator(mode="before")
    @classmethod
    def _no_lone_surrogates(cls, data: Any) -> Any:
        """Lone surrogates (a JSON ``"\\ud800"`` escape) become U+FFFD: pydantic refuses them, and its
        error would echo them back in a reply that cannot be encoded, dropping the ``/ws`` session."""
        try:
            return _scrub(data)
        except RecursionError:  # absurdly deep data: validate it as it is
            return data


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {_scrub(key): _scrub(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub(item) for item in value]
    return value


def parse_action(data: Any) -> _Tool:
    """The tool model for ``data`` (a dict or JSON text); :class:`pydantic.ValidationError` if invalid."""
    if isinstance(data, (str, bytes)):
        return _adapter.validate_json(data)
    return _adapter.validate_python(data)


Phase = Literal["exploring", "patched", "submitted"]


class A01Observation(Observation):
    """What the agent sees after each step: a text for the LLM and the same content as fields."""

    text: str = ""
    """The observation rendered for a language model."""
    phase: Phase = "exploring"
    tool: str | None = None
    """The tool this observation answers (``None`` after reset)."""
    result: dict[str, Any] | None = None
    """The tool's structured result (``None`` when the action was refused)."""
    error: str | None = None
    """Why the action was refused; the episode goes on."""
    files: list[str] = Field(default_factory=list)
    steps_left: int = 0
    scenario_id: str = ""
    reward_breakdown: dict[str, Any] | None = None
    """Only on the final observation: every reward component (see :mod:`envcore.env.reward`)."""


class A01State(State):
    """The episode as the server holds it (``GET /state``, ``state`` over ``/ws``)."""

    scenario_id: str = ""
    phase: Phase = "exploring"
    max_steps: int = 0
    invalid_actions: int = 0
    diff: str = ""
    """The current diff against the original app."""
    history: list[dict[str, Any]] = Field(default_factory=list)
    """One entry per step: the action as sent, whether it was refused, and a short summary."""
    done: bool = False
