"""Language-model agents: a local ``transformers`` model (optionally with a LoRA adapter) and any
OpenAI-compatible chat endpoint.

Both keep the episode's chat (:class:`~envcore.agents.prompts.Conversation`), ask the model for one
reply per step and send that reply unparsed as ``{"tool": "reply", "text": ...}``: the environment
reads the action out of it, so a reply with no readable action is an invalid step counted the same
way in process, over ``/ws`` and in training.

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
  errors stop the episode with the endpoint's message. A reply given as native ``tool_calls`` is
  passed on as their JSON, which the reply parser understands.
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
from envcore.agents.prompts import Conversation, Message
from envcore.env.actions import A01Observation

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHARS_PER_TOKEN = 3.0
"""Starting guess for fitting a conversation into a token budget (refined per model as it runs)."""


class LLMAgent(Agent):
    """An agent whose actions are a chat model's replies."""

    name = "llm"

    def __init__(self, *, max_chars: int = 48_000, name: str | None = None) -> None:
        self.max_chars = max_chars
        if name:
            self.name = name
        self.conversation = Conversation(max_chars=max_chars)
        self.seed = 0
        self.turn = 0
        self.usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}

    def begin(self, observation: A01Observation, *, seed: int = 0) -> None:
        self.seed, self.turn = seed, 0
        self.conversation = Conversation(max_chars=self.max_chars)
        self.conversation.start(observation)

    def act(self, observation: A01Observation) -> Action:
        if self.turn > 0:
            self.conversation.add_observation(observation)
        started = time.perf_counter()
        text = self.complete(self.conversation.fitted())
        self.usage["calls"] += 1
        self.usage["seconds"] += time.perf_counter() - started
        self.conversation.add_reply(text)
        self.turn += 1
        return {"tool": "reply", "text": text}

    @abstractmethod
    def complete(self, messages: list[Message]) -> str:
        """The model's reply to ``messages``."""


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
    """A local ``transformers`` chat model, optionally with a PEFT LoRA adapter."""

    def __init__(self, model: str | None = None, *, adapter: str | None = None, max_new_tokens: int = 512,
                 temperature: float = 0.0, top_p: float = 1.0, context_tokens: int | None = None,
                 device: str | None = None, name: str | None = None) -> None:
        self.loaded = load_model(model, adapter, device)
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.context_tokens = min(context_tokens or self.loaded.context_tokens, self.loaded.context_tokens)
        if self.context_tokens <= max_new_tokens + 64:
            raise ValueError(f"context of {self.context_tokens} tokens leaves no room for a prompt "
                             f"and {max_new_tokens} new tokens")
        super().__init__(max_chars=self.prompt_tokens_budget() * 4, name=name or f"llm:{self.loaded.label}")

    def prompt_tokens_budget(self) -> int:
        return self.context_tokens - self.max_new_tokens

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat, refitted until they fit the context (the characters-per-token rate
        learned on the way is kept for the next turn)."""
        tokenizer, budget = self.loaded.tokenizer, self.prompt_tokens_budget()
        chars = int(budget * self.loaded.chars_per_token)
        if sum(len(m["content"]) for m in messages) > chars:
            messages = self.conversation.fitted(chars)
        ids: list[int] = []
        for _ in range(8):
            ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
            if len(ids) <= budget:
                return ids
            ratio = sum(len(m["content"]) for m in messages) / max(len(ids), 1)
            self.loaded.chars_per_token = min(self.loaded.chars_per_token, ratio * 0.95)
            chars = int(min(chars * 0.85, budget * ratio * 0.95))
            messages = self.conversation.fitted(chars)
        return ids[-budget:]  # last resort: keep the latest turns

    def complete(self, messages: list[Message]) -> str:
        import torch

        ids = self.prompt_ids(messages)
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
        return tokenizer.decode(new, skip_special_tokens=True)


# -- OpenAI-compatible endpoints -----------------------------------------------------------------------

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class EndpointError(RuntimeError):
    """The endpoint refused the request (not retried) or kept failing (after the retries)."""


def _environ(*names: str) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


class OpenAIChatAgent(LLMAgent):
    """Any OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_new_tokens: int = 1024, temperature: float = 0.0, top_p: float = 1.0, timeout_s: float = 120.0,
                 retries: int = 5, max_chars: int = 48_000, name: str | None = None, client: Any = None) -> None:
        import httpx

        self.model = model or _environ("A01_LLM_MODEL")
        if not self.model:
            raise ValueError("no model: pass one or set A01_LLM_MODEL")
        self.base_url = (base_url or _environ("A01_LLM_BASE_URL", "OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        key = api_key or _environ("A01_LLM_API_KEY", "OPENAI_API_KEY")
        self.max_new_tokens, self.temperature, self.top_p, self.retries = max_new_tokens, temperature, top_p, retries
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = client or httpx.Client(timeout=timeout_s, headers=headers)
        super().__init__(max_chars=max_chars, name=name or f"api:{self.model}")

    def complete(self, messages: list[Message]) -> str:
        import httpx

        body = {"model": self.model, "messages": messages, "max_tokens": self.max_new_tokens,
                "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed * 1_000 + self.turn}
        url = f"{self.base_url}/chat/completions"
        delay, problem = 1.0, ""
        for attempt in range(self.retries + 1):
            try:
                response = self.client.post(url, json=body)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return self._text(response)
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code not in RETRY_STATUS:
                    raise EndpointError(f"{url} refused the request: {problem}")
                retry_after = response.headers.get("retry-after", "")
                if retry_after.replace(".", "", 1).isdigit():
                    delay = max(delay, min(float(retry_after), 60.0))
            if attempt < self.retries:
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise EndpointError(f"{url} kept failing after {self.retries + 1} tries: {problem}")

    def _text(self, response: Any) -> str:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise EndpointError(f"unexpected response from {self.base_url}: {response.text[:300]}") from exc
        usage = data.get("usage") or {}
        self.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        text = message.get("content") or ""
        calls = message.get("tool_calls") or []
        if not text.strip() and calls:
            return json.dumps(calls[0])
        return text
