"""Language-model agents: a local ``transformers`` model (optionally with a LoRA adapter) and any
OpenAI-compatible chat endpoint.

Both keep the episode's chat (:class:`~envcore.agents.prompts.Conversation`) and ask the model for
one reply per step, in one of these tool formats (``tool_format``, :data:`~envcore.agents.tool_calls.TOOL_FORMATS`):

* ``json`` (the default): the prompt documents the tools and asks for one JSON action in the text; the
  reply is sent unparsed as ``{"tool": "reply", "text": ...}`` and the environment reads the action
  out of it, so a reply with no readable action is an invalid step counted the same way in process,
  over ``/ws`` and in training.
* ``native``: the tools go to the model as schemas (:func:`~envcore.env.tools.tool_schemas`: the chat
  template's ``tools=``, the endpoint's ``tools``) and the model answers with its own tool calls; the
  first call is the step's action and the others are answered as not run, and anything that is not a
  runnable call reaches the environment as reply text, counted as the JSON format counts it
  (:mod:`envcore.agents.tool_calls`).
* ``auto``: native where the chat template renders tools (or the endpoint takes them), else json.

* :class:`TransformersAgent` loads a model folder or hub name with ``AutoModelForCausalLM`` (plus
  ``peft.PeftModel`` for ``adapter``), renders the chat with the tokenizer's chat template and
  generates greedily unless a ``temperature`` is given (sampling is then seeded per episode and
  step). Loaded models are shared by every agent of a process (:func:`load_model`), and generation on
  one model is serialised, so parallel sessions overlap their environment steps, not their matrix
  multiplications. The prompt is kept within the model's context: the conversation is refitted to a
  smaller character budget until its tokens fit, and only as a last resort cut from the left.
* :class:`OpenAIChatAgent` posts to ``{base_url}/chat/completions`` (vLLM, TGI, Ollama, llama.cpp and
  hosted APIs all speak it). URL, model and key come from arguments or the environment
  (``A01_LLM_BASE_URL``/``OPENAI_BASE_URL``, ``A01_LLM_MODEL``, ``A01_LLM_API_KEY``/``OPENAI_API_KEY``).
  Rate limits and server errors are retried with backoff (``Retry-After`` honoured); other HTTP
  errors stop the episode with the endpoint's message. In the json format a reply given as native
  ``tool_calls`` is passed on as their JSON, which the reply parser understands. In the native format
  the chat keeps the API's shape (assistant ``tool_calls``, one ``tool`` message per call); with
  ``auto``, an endpoint that refuses a request carrying ``tools`` (vLLM without
  ``--enable-auto-tool-choice``, for one) is asked again without them, and the agents of this process
  remember that it does not take tools.
"""

from __future__ import annotations

import json
import os
import threading
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envcore.agents.base import Action, Agent
from envcore.agents.prompts import Conversation, Message, message_chars
from envcore.agents.tool_calls import TOOL_FORMATS, ParsedReply, endpoint_calls, reply_action
from envcore.env.actions import A01Observation

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHARS_PER_TOKEN = 3.0
"""Starting guess for fitting a conversation into a token budget (refined per model as it runs)."""


def check_tool_format(tool_format: str) -> str:
    if tool_format not in TOOL_FORMATS:
        raise ValueError(f"tool format {tool_format!r}: choose from {', '.join(TOOL_FORMATS)}")
    return tool_format


class LLMAgent(Agent):
    """An agent whose actions are a chat model's replies."""

    name = "llm"
    tool_format = "json"
    """The format this agent plays in, ``json`` or ``native`` (``auto`` is settled when it is built)."""

    def __init__(self, *, max_chars: int = 48_000, name: str | None = None, tool_format: str = "json") -> None:
        self.max_chars = max_chars
        if name:
            self.name = name
        self.tool_format = "native" if check_tool_format(tool_format) == "native" else "json"
        self.conversation = Conversation(max_chars=max_chars, native=self.native)
        self.first: A01Observation | None = None
        self.seed = 0
        self.turn = 0
        self.usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}

    @property
    def native(self) -> bool:
        return self.tool_format == "native"

    def begin(self, observation: A01Observation, *, seed: int = 0) -> None:
        self.seed, self.turn, self.first = seed, 0, observation
        self.conversation = Conversation(max_chars=self.max_chars, native=self.native)
        self.conversation.start(observation)

    def act(self, observation: A01Observation) -> Action:
        if self.turn > 0:
            self.conversation.add_observation(observation)
        started = time.perf_counter()
        action = self.native_turn() if self.native else self.json_turn()
        self.usage["calls"] += 1
        self.usage["seconds"] += time.perf_counter() - started
        self.turn += 1
        return action

    def json_turn(self) -> Action:
        text = self.complete(self.conversation.fitted())
        self.conversation.add_reply(text)
        return {"tool": "reply", "text": text}

    def native_turn(self) -> Action:
        """One native reply: its calls kept in the chat (the first is the action), or its text."""
        reply = self.complete_native(self.conversation.fitted())
        if reply.calls and reply.error is None:
            self.conversation.add_tool_calls(reply.content, [call.message() for call in reply.calls])
        else:
            self.conversation.add_reply(reply.text)
        return reply_action(reply)

    def use_json(self) -> None:
        """Play the rest of the episode in the json format, starting the chat again (only before the
        first reply, when nothing has been played)."""
        if self.turn:
            raise RuntimeError("the tool format can only change before the first reply")
        self.tool_format = "json"
        self.conversation = Conversation(max_chars=self.max_chars)
        if self.first is not None:
            self.conversation.start(self.first)

    @abstractmethod
    def complete(self, messages: list[Message]) -> str:
        """The model's reply to ``messages``."""

    def complete_native(self, messages: list[Message]) -> ParsedReply:
        """The model's reply to ``messages`` with the tools offered natively, its calls read."""
        raise NotImplementedError(f"{type(self).__name__} has no native tool format")


# -- local transformers models -------------------------------------------------------------------------

@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    context_tokens: int
    lock: threading.Lock
    label: str
    """``<model folder name>[+<adapter folder name>]``: what agents of this model are called."""
    chars_per_token: float = CHARS_PER_TOKEN


_LOADED: dict[tuple[str, str | None, str], LoadedModel] = {}
_LOADING = threading.Lock()


def _base_of(adapter: str) -> str:
    config = Path(adapter) / "adapter_config.json"
    if not config.is_file():
        raise ValueError(f"{adapter} is not a LoRA adapter folder (no adapter_config.json)")
    base = json.loads(config.read_text()).get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{config} names no base model; pass the model explicitly")
    # a relative folder (the shipped adapters name artifacts/models/...) is relative to where training
    # ran, the project root; anything else is a hub name
    if not Path(base).is_absolute() and not Path(base).exists() and (PROJECT_ROOT / base).is_dir():
        return str(PROJECT_ROOT / base)
    return base


def load_model(model: str | None, adapter: str | None = None, device: str | None = None) -> LoadedModel:
    """Load (once per process) ``model`` with ``adapter`` applied; ``model`` defaults to the adapter's
    base model. ``device`` defaults to CUDA when available."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if model is None:
        if adapter is None:
            raise ValueError("a model (folder or name) or an adapter is required")
        model = _base_of(adapter)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    key = (str(model), str(adapter) if adapter else None, device)
    with _LOADING:
        if key in _LOADED:
            return _LOADED[key]
        tokenizer = AutoTokenizer.from_pretrained(model)
        if tokenizer.chat_template is None:
            raise ValueError(f"{model}: the tokenizer has no chat template; use an instruction-tuned model")
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        network = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
        if adapter:
            from peft import PeftModel

            network = PeftModel.from_pretrained(network, adapter)
        network.to(device).eval()
        config = network.config
        context = getattr(config, "max_position_embeddings", None) or getattr(tokenizer, "model_max_length", 4096)
        label = Path(str(model)).name + (f"+{Path(adapter).name}" if adapter else "")
        loaded = LoadedModel(network, tokenizer, int(min(context, 1_000_000)), threading.Lock(), label)
        _LOADED[key] = loaded
        return loaded


class TransformersAgent(LLMAgent):
    """A local ``transformers`` chat model, optionally with a PEFT LoRA adapter. In the native format
    its chat template renders the tools (a template that cannot is refused when the agent is built)
    and the calls are read from the generated text (:func:`~envcore.agents.tool_calls.parse_tool_calls`)."""

    def __init__(self, model: str | None = None, *, adapter: str | None = None, max_new_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, context_tokens: int | None = None,
                 device: str | None = None, name: str | None = None, tool_format: str = "json") -> None:
        from envcore.agents.tool_calls import ensure_response_template, template_tool_problem
        from envcore.env.tools import tool_schemas

        self.loaded = load_model(model, adapter, device)
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.context_tokens = min(context_tokens or self.loaded.context_tokens, self.loaded.context_tokens)
        if self.context_tokens <= max_new_tokens + 64:
            raise ValueError(f"context of {self.context_tokens} tokens leaves no room for a prompt "
                             f"and {max_new_tokens} new tokens")
        if check_tool_format(tool_format) != "json":
            problem = template_tool_problem(self.loaded.tokenizer)
            if problem and tool_format == "native":
                raise ValueError(f"{self.loaded.label}: its chat template cannot render native tool calls ({problem}); "
                                 "use --tool-format json (or auto, which picks json for it)")
            tool_format = "json" if problem else "native"
        self.tools: list[dict[str, Any]] | None = None
        if tool_format == "native":
            self.tools = tool_schemas()
            with self.loaded.lock:  # the tokenizer is shared by every agent of the model
                ensure_response_template(self.loaded.tokenizer)
        super().__init__(max_chars=self.prompt_tokens_budget() * 4, name=name or f"llm:{self.loaded.label}",
                         tool_format=tool_format)

    def prompt_tokens_budget(self) -> int:
        return self.context_tokens - self.max_new_tokens

    def template_messages(self, messages: list[Message]) -> list[Message]:
        """The chat as chat templates take it: a native call's arguments as an object (the history keeps
        the JSON text an endpoint would be sent), a tool message with its tool's name."""
        names = {}
        out = []
        for message in messages:
            message = dict(message)
            if message.get("tool_calls"):
                calls = []
                for call in message["tool_calls"]:
                    function = dict(call["function"])
                    names[call["id"]] = function["name"]
                    try:
                        function["arguments"] = json.loads(function["arguments"])
                    except (TypeError, ValueError):
                        pass  # kept as written: templates render a text as it is
                    calls.append({**call, "function": function})
                message["tool_calls"] = calls
            elif message["role"] == "tool" and message.get("tool_call_id") in names:
                message["name"] = names[message["tool_call_id"]]
            out.append(message)
        return out

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat, refitted until they fit the context (the characters-per-token rate
        learned on the way is kept for the next turn)."""
        tokenizer, budget = self.loaded.tokenizer, self.prompt_tokens_budget()
        chars = int(budget * self.loaded.chars_per_token)
        if sum(message_chars(m) for m in messages) > chars:
            messages = self.conversation.fitted(chars)
        tools = {"tools": self.tools} if self.tools else {}
        ids: list[int] = []
        for _ in range(8):
            chat = self.template_messages(messages) if self.tools else messages
            ids = list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False,
                                                     **tools))
            if len(ids) <= budget:
                return ids
            ratio = sum(message_chars(m) for m in messages) / max(len(ids), 1)
            self.loaded.chars_per_token = min(self.loaded.chars_per_token, ratio * 0.95)
            chars = int(min(chars * 0.85, budget * ratio * 0.95))
            messages = self.conversation.fitted(chars)
        return ids[-budget:]  # last resort: keep the latest turns

    def complete(self, messages: list[Message]) -> str:
        return self.generate(self.prompt_ids(messages))

    def complete_native(self, messages: list[Message]) -> ParsedReply:
        from envcore.agents.tool_calls import parse_tool_calls

        ids = self.prompt_ids(messages)
        text = self.generate(ids)
        # the end of the prompt: response templates need the part of the assistant turn the template wrote
        prefix = self.loaded.tokenizer.decode(ids[-32:])
        return parse_tool_calls(text, self.loaded.tokenizer, prefix=prefix, turn=self.turn)

    def generate(self, ids: list[int]) -> str:
        """The model's reply to the prompt ``ids``, decoded. In the native format special tokens are kept
        (a template's tool-call markers often are special), up to the end-of-turn token."""
        import torch

        tokenizer, network = self.loaded.tokenizer, self.loaded.model
        sampling = self.temperature > 0
        options: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": sampling}
        if sampling:
            options |= {"temperature": self.temperature, "top_p": self.top_p}
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        with self.loaded.lock, torch.inference_mode():
            if sampling:
                torch.manual_seed(self.seed * 1_000 + self.turn)
            device = next(network.parameters()).device
            inputs = torch.tensor([ids], device=device)
            output = network.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs), pad_token_id=pad, **options)
        new = output[0, len(ids):].tolist()
        self.usage["prompt_tokens"] += len(ids)
        self.usage["completion_tokens"] += len(new)
        if not self.native:
            return tokenizer.decode(new, skip_special_tokens=True)
        ends = {pad, tokenizer.eos_token_id, *_ids(getattr(network.generation_config, "eos_token_id", None))}
        end = next((i for i, token in enumerate(new) if token in ends), len(new))
        return tokenizer.decode(new[:end], skip_special_tokens=False)


def _ids(value: Any) -> list[int]:
    return [value] if isinstance(value, int) else [v for v in (value or []) if isinstance(v, int)]


# -- OpenAI-compatible endpoints -----------------------------------------------------------------------

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class EndpointError(RuntimeError):
    """The endpoint refused the request (not retried) or kept failing (after the retries)."""


class ToolsRefused(EndpointError):
    """The endpoint refused a request because it carried ``tools`` (it serves no native tool calling)."""


_ENDPOINT_TAKES_TOOLS: dict[tuple[str, str], bool] = {}
"""What ``auto`` learned per (base URL, model) in this process: whether the endpoint took ``tools``."""


def _environ(*names: str) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


class OpenAIChatAgent(LLMAgent):
    """Any OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_new_tokens: int = 1024, temperature: float = 0.0, top_p: float = 1.0, timeout_s: float = 120.0,
                 retries: int = 5, max_chars: int = 48_000, name: str | None = None, client: Any = None,
                 tool_format: str = "json") -> None:
        import httpx

        self.model = model or _environ("A01_LLM_MODEL")
        if not self.model:
            raise ValueError("no model: pass one or set A01_LLM_MODEL")
        self.base_url = (base_url or _environ("A01_LLM_BASE_URL", "OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        key = api_key or _environ("A01_LLM_API_KEY", "OPENAI_API_KEY")
        self.max_new_tokens, self.temperature, self.top_p, self.retries = max_new_tokens, temperature, top_p, retries
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = client or httpx.Client(timeout=timeout_s, headers=headers)
        self.asked_format = check_tool_format(tool_format)
        if tool_format == "auto":
            tool_format = "native" if _ENDPOINT_TAKES_TOOLS.get((self.base_url, self.model), True) else "json"
        super().__init__(max_chars=max_chars, name=name or f"api:{self.model}", tool_format=tool_format)

    def complete(self, messages: list[Message]) -> str:
        return self._text(self._post(self._body(messages)))

    def complete_native(self, messages: list[Message]) -> ParsedReply:
        from envcore.env.tools import tool_schemas

        data = self._post(self._body(messages) | {"tools": tool_schemas(), "tool_choice": "auto"})
        _ENDPOINT_TAKES_TOOLS[(self.base_url, self.model)] = True
        message = self._message(data)
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        return ParsedReply(text, text, endpoint_calls(message.get("tool_calls"), turn=self.turn))

    def native_turn(self) -> Action:
        try:
            return super().native_turn()
        except ToolsRefused:
            if self.asked_format != "auto" or self.turn:
                raise
            _ENDPOINT_TAKES_TOOLS[(self.base_url, self.model)] = False
            self.use_json()
            return self.json_turn()

    def _body(self, messages: list[Message]) -> dict[str, Any]:
        return {"model": self.model, "messages": messages, "max_tokens": self.max_new_tokens,
                "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed * 1_000 + self.turn}

    def _post(self, body: dict[str, Any]) -> Any:
        """The endpoint's answer (parsed JSON) to ``body``, retried as the class docstring says."""
        import httpx

        url = f"{self.base_url}/chat/completions"
        delay, problem = 1.0, ""
        for attempt in range(self.retries + 1):
            try:
                response = self.client.post(url, json=body)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return self._json(response)
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code not in RETRY_STATUS:
                    if "tools" in body and "tool" in response.text.lower():
                        raise ToolsRefused(f"{url} refused a request carrying tools: {problem}; the endpoint may "
                                           "serve no native tool calling: use --tool-format json (or auto)")
                    raise EndpointError(f"{url} refused the request: {problem}")
                retry_after = response.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = max(delay, min(float(retry_after), 60.0))
            if attempt < self.retries:
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise EndpointError(f"{url} kept failing after {self.retries + 1} tries: {problem}")

    def _json(self, response: Any) -> Any:
        try:
            data = response.json()
            message = data["choices"][0].get("message") or {}
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EndpointError(f"unexpected response from {self.base_url}: {response.text[:300]}") from exc
        usage = data.get("usage") or {}
        self.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        return data

    @staticmethod
    def _message(data: Any) -> dict[str, Any]:
        return data["choices"][0].get("message") or {}

    def _text(self, data: Any) -> str:
        message = self._message(data)
        text = message.get("content") or ""
        calls = message.get("tool_calls") or []
        if not text.strip() and calls:
            return json.dumps(calls[0])
        return text
