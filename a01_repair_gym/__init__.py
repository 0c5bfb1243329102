"""The A01 repair gym as Inspect AI tasks: ``inspect eval a01_repair_gym/test --model <model>``.

One task per evaluation split (``test``, ``test_styles``, ``external``, and ``private``, generated at
evaluation time from a secret). Each sample is one episode of the environment: the model is told what
any agent is told, plays it with the environment's own tools (one call, one step, within the same step
budget), and is scored with the environment's own reward. docs/inspect.md says how to run them, and
``eval.yaml`` lists them for the Inspect Evals register.

The parts, for building other tasks on the environment: :func:`split_task` (a task over any split of a
cache or a server), :func:`start_episode` and :func:`repair_agent` (the solvers),
:func:`environment_reward` with :func:`full_fix_rate` and :func:`mean_reward` (the scorer, its metric
and its epoch reducer), and :func:`environment_tools` (the tool registry as Inspect tools).
"""

from a01_repair_gym._agent import SYSTEM_PROMPT, repair_agent, start_episode
from a01_repair_gym._offline import estimate_offline
from a01_repair_gym._scorer import environment_reward, full_fix_rate, mean_reward
from a01_repair_gym._session import EpisodeProgress, Episodes, LocalSession, RemoteSession
from a01_repair_gym._task import external, private, split_task, test, test_styles
from a01_repair_gym._tools import action_for, environment_tools, tool_parameters

estimate_offline()  # Inspect's token estimate, also where tiktoken cannot download its encoding

__all__ = [
    "SYSTEM_PROMPT",
    "EpisodeProgress",
    "Episodes",
    "LocalSession",
    "RemoteSession",
    "action_for",
    "environment_reward",
    "environment_tools",
    "external",
    "full_fix_rate",
    "mean_reward",
    "private",
    "repair_agent",
    "split_task",
    "start_episode",
    "test",
    "test_styles",
    "tool_parameters",
]
