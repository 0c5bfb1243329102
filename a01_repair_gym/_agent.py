"""The solvers: start a sample's episode, then let the model play it, one environment step per call.

:func:`start_episode` (the task's setup, so it runs whatever solver is used) resets the sample's
session to its scenario, makes the conversation a system message (:data:`SYSTEM_PROMPT`) and the
reset observation's text (what every agent is told), and offers the environment's tools.

:func:`repair_agent` is the default solver, a plain tool loop, written out rather than taken from
``react()`` because the environment's accounting has to hold: every tool call the model makes is one
step of the episode, whatever it looks like. Inspect's own tool execution refuses a call whose
arguments do not match the schema before any tool runs, which would give a model free retries the
environment never counts (and no bound on them); here every call goes to the environment
(:func:`~a01_repair_gym._tools.action_for`), which validates it, answers it and counts it. A turn
with no tool call is the model's reply: the environment reads a JSON tool call from it if there is
one (how models without native tool calling play) and otherwise counts an invalid step. So every turn
takes at least one step and the step budget bounds the loop; the environment ends the episode at
submit or when the budget runs out. An Inspect limit (tokens, messages, time) that stops the loop
first is recorded, and the scorer ends the episode the way a harness's budget running out does.
"""

from __future__ import annotations

from inspect_ai.model import ChatMessageSystem, ChatMessageTool, ChatMessageUser, get_model
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import LimitExceededError

from a01_repair_gym._session import EpisodeProgress, Episodes
from a01_repair_gym._tools import action_for, environment_tools
from envcore.agents.prompts import ROLE, observation_message

TOOL_RULES = """\
Work through the tools, one call at a time: every call is a step of your budget, and a call the \
environment refuses (bad arguments, a diff that does not apply, a path outside the app) costs a step \
too. A reply without a tool call is read for a call written as JSON, such as \
{"tool": "read_file", "path": "app/main.py"}, and otherwise counts as an invalid step. Patches are \
unified diffs against the current files (paths relative to the app, as listed). Call submit once your \
fix is in place: submitting runs hidden security and regression checks and ends the episode; running \
out of steps submits the app as it is, at a cost."""

SYSTEM_PROMPT = f"{ROLE}\n\n{TOOL_RULES}"
"""The system message: the job (the same words every language-model agent of the project gets) and how
a tool-calling model plays it."""

NOT_RUN = "Not run: the episode had already ended."
"""The answer to calls written after the call that ended the episode (each call must be answered)."""


@solver
def start_episode(episodes: Episodes) -> Solver:
    """Reset the sample's episode; the conversation starts with what the environment tells an agent."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        observation = await episodes.start(state, agent_id=str(get_model()))
        state.messages = [ChatMessageSystem(content=SYSTEM_PROMPT), ChatMessageUser(content=observation.text)]

        async def step(action: dict) -> str:
            return observation_message(await episodes.step(state, action))

        state.tools = environment_tools(step)  # for a solver put in place of repair_agent
        return state

    return solve


@solver
def repair_agent(episodes: Episodes) -> Solver:
    """Play the episode until it ends: every tool call, and every turn without one, is one step."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        progress = state.store_as(EpisodeProgress)
        try:
            while not progress.done:
                state = await generate(state, tool_calls="none")
                message = state.output.message
                if not message.tool_calls:
                    observation = await episodes.step(state, {"tool": "reply", "text": state.output.completion})
                    state.messages.append(ChatMessageUser(content=observation_message(observation)))
                    continue
                for call in message.tool_calls:
                    if progress.done:
                        text = NOT_RUN
                    else:
                        action = action_for(call.function, call.arguments, call.parse_error)
                        text = observation_message(await episodes.step(state, action))
                    state.messages.append(ChatMessageTool(content=text, tool_call_id=call.id, function=call.function))
        except LimitExceededError as exc:
            progress.limit = exc.type
            raise
        return state

    return solve
