"""Every agent by name, and how to build one: what ``eval``, the rollout runner and the demo share.

``AGENTS`` lists the names: the scripted baselines (``noop``, ``deny_all``, ``random``,
``heuristic``, ``oracle``) and the two language-model kinds, ``transformers`` (a local model folder
or hub name, optionally with a LoRA ``adapter``) and ``openai`` (an OpenAI-compatible endpoint).
:class:`LLMOptions` holds what a language-model agent is built with, its tool format included
(``json``, ``native`` or ``auto``: :mod:`envcore.agents.tool_calls`).
:func:`agent_factory` returns a zero-argument factory (rollouts build one agent per session) and
the agent id its episodes are logged under.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envcore.agents.base import Agent
from envcore.agents.baselines import BASELINES, OracleAgent
from envcore.agents.names import AGENTS, BASELINE_NAMES, LLM_KINDS, options_problem

if tuple(BASELINES) != BASELINE_NAMES:  # one list of names for the command line, one registry here
    raise ImportError(f"envcore.agents.names lists {BASELINE_NAMES}, the baselines are {tuple(BASELINES)}")

__all__ = ["AGENTS", "LLM_KINDS", "LLMOptions", "agent_factory"]


@dataclass(frozen=True)
class LLMOptions:
    model: str | None = None
    adapter: str | None = None
    max_new_tokens: int | None = None
    temperature: float = 0.0
    base_url: str | None = None
    device: str | None = None
    tool_format: str = "json"
    """``json`` (one JSON action in the reply's text), ``native`` (the chat template's or endpoint's own
    tool calls) or ``auto`` (native where the template renders tools or the endpoint takes them)."""


def agent_factory(name: str, *, cache: Any = None, llm: LLMOptions = LLMOptions(),
                  agent_id: str | None = None) -> tuple[Callable[[], Agent], str]:
    """(factory, agent id) for the agent called ``name``; bad combinations raise ``ValueError``."""
    problem = options_problem(name, model=llm.model, adapter=llm.adapter, tool_format=llm.tool_format)
    if problem:
        raise ValueError(problem)
    if name in BASELINES:
        agent_class = BASELINES[name]
        if agent_class is OracleAgent:
            return (lambda: OracleAgent(cache)), agent_id or name
        return agent_class, agent_id or name
    if name == "transformers":
        from envcore.agents.llm import TransformersAgent

        if not (llm.model or llm.adapter):
            raise ValueError("the transformers agent needs --model (a folder or hub name) or --adapter")
        if llm.adapter and not Path(llm.adapter).is_dir():
            raise ValueError(f"adapter folder {llm.adapter} does not exist")
        options: dict[str, Any] = {"adapter": llm.adapter, "temperature": llm.temperature, "device": llm.device,
                                   "tool_format": llm.tool_format}
        if llm.max_new_tokens:
            options["max_new_tokens"] = llm.max_new_tokens
        # built now, so a model that cannot load fails before any episode; it is the first agent handed out
        first = TransformersAgent(llm.model, name=agent_id, **options)
        options["tool_format"] = first.tool_format  # "auto" settled once, by the first agent's template check
        return _first_then(first, lambda: TransformersAgent(llm.model, name=first.name, **options)), first.name
    from envcore.agents.llm import OpenAIChatAgent

    if llm.adapter:
        raise ValueError("--adapter is for the transformers agent; an endpoint serves its own adapters")
    options = {"base_url": llm.base_url, "temperature": llm.temperature, "tool_format": llm.tool_format}
    if llm.max_new_tokens:
        options["max_new_tokens"] = llm.max_new_tokens
    first = OpenAIChatAgent(llm.model, name=agent_id, **options)
    return _first_then(first, lambda: OpenAIChatAgent(llm.model, name=first.name, **options)), first.name


def _first_then(first: Agent, make: Callable[[], Agent]) -> Callable[[], Agent]:
    """A factory that hands out ``first`` once, then new agents from ``make``."""
    spare = [first]

    def factory() -> Agent:
        try:
            return spare.pop()  # atomic: sessions may ask at once
        except IndexError:
            return make()

    return factory
