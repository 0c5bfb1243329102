"""The name of every agent ``eval`` and the rollout runner accept, importing no agent.

The command line offers these names as choices before it loads anything: importing the agents
pulls in the environment's action types and, through OpenEnv, its web stack (seconds), which
``--help`` or a mistyped flag should not pay for. :mod:`envcore.agents.catalog` builds the agents
and checks that its registry and these names agree.
"""

from __future__ import annotations

BASELINE_NAMES = ("noop", "deny_all", "random", "heuristic", "oracle")
LLM_KINDS = ("transformers", "openai")
AGENTS = (*BASELINE_NAMES, *LLM_KINDS)


TOOL_FORMATS = ("json", "native", "auto")
"""How a language-model agent calls tools (see :mod:`envcore.agents.tool_calls`); ``json`` is the default."""


def options_problem(name: str, *, model: str | None, adapter: str | None, tool_format: str = "json") -> str | None:
    """Why ``name`` cannot take these language-model options, or ``None``: checked before anything loads."""
    if name not in AGENTS:
        return f"unknown agent {name!r}; choose from {', '.join(AGENTS)}"
    if name in BASELINE_NAMES and (model or adapter):
        return f"--model and --adapter are for language-model agents; {name!r} is a scripted baseline"
    if tool_format not in TOOL_FORMATS:
        return f"unknown tool format {tool_format!r}; choose from {', '.join(TOOL_FORMATS)}"
    if name in BASELINE_NAMES and tool_format != "json":
        return f"--tool-format is for language-model agents; {name!r} is a scripted baseline"
    return None
