"""TRL's ``environment_factory`` door: the environment as a class whose methods are the tools.

``GRPOTrainer(environment_factory=A01ToolEnv, ...)`` works as TRL documents it: TRL builds one
instance per rollout of the generation batch (pooled and reused), calls ``reset(**row)`` before each
rollout and appends what it returns (the episode's first observation) to the prompt, exposes every
public method as a native tool (the methods are made from the one tool registry,
:mod:`envcore.env.tools`, with the Google-style docstrings and plain type hints TRL's schema reader
needs), and calls ``get_reward()`` once per finished rollout. :class:`ToolEnvironments` is the
factory to pass when the instances should share a runtime, play against servers, or log episodes:
``GRPOTrainer(environment_factory=ToolEnvironments(session_factory, max_steps=12))``.

**Grading does not serialize across the batch.** TRL 1.16 calls each rollout's tools, and then each
rollout's ``get_reward``, one rollout after the other (an ``async`` tool is awaited before the next
rollout's tools run), so an environment that graded inside ``submit`` would make a batch of 16
rollouts wait 16 gradings in a row. Here every step that can end an episode (``submit``, and the
last step of the budget, which submits the app as it stands) is handed to a thread pool shared by
the factory's instances, and the tool answers at once; the first ``get_reward`` of a round also
ends, in the same pool, every episode of the round that ended without a submit. The round's
gradings therefore run side by side while the model goes on generating, and ``get_reward`` only
collects them. Other tools (``run_tests``, ``http_request`` ...) run when called, as TRL calls them.

**What an episode is.** Each row of the training data names its episode in an ``episode`` column
(the episode keys of :mod:`envcore.training.episodes`, so GRPO's rollouts of one prompt play the
same scenario from the same seed); without one, ``reset`` draws a scenario of the factory's split.
A rollout ends when the model submits, when the step budget runs out (the environment submits the
app as it stands, with its budget cost), or when the model answers without calling a tool (TRL then
stops the rollout): that episode is submitted the same way as running out of steps
(``out_of_budget``), so stopping early never pays better than running out of steps. A call with bad
arguments is an invalid step with the environment's own error, as anywhere else.

**Rewards.** ``get_reward`` is the environment's reward. An episode whose grading failed for
infrastructure reasons (reward ``None``) gets the mean reward of the round's other episodes with
the same key (advantage zero), as in :mod:`envcore.training.rollout`, never a fixed value that a
policy could prefer to a failing patch. Each round's metrics (``env/reward``, ``env/full_fix`` ...,
the same names as the ``rollout_func`` path) go to the trainer when one is attached
(:meth:`ToolEnvironments.attach`).
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from envcore.agents.prompts import observation_message
from envcore.env.episode import DEFAULT_MAX_STEPS
from envcore.env.tools import TOOLS, tool_method
from envcore.training.episodes import EpisodeKey

STOPPED_WITHOUT_SUBMIT = {"tool": "out_of_budget", "budget": "tool calls"}
"""How an episode whose model stopped calling tools ends (see the module docstring)."""

ENDED = ("The episode is over: the app was submitted and is being graded; the reward comes when the rollout "
         "ends. Further calls do nothing.")


class ToolEnvironments:
    """A factory of :class:`A01ToolEnv` instances that share sessions' origin, a grading pool and
    the round's bookkeeping; pass it as ``environment_factory``.

    ``session_factory(index)`` opens session ``index`` (an object with ``reset(seed=, agent_id=,
    **options)``, ``step(action)`` and ``close()``: :func:`envcore.agents.rollouts.local_sessions` or
    ``remote_sessions``); ``None``: in-process sessions on the default runtime."""

    def __init__(self, session_factory: Callable[[int], Any] | None = None, *, max_steps: int = DEFAULT_MAX_STEPS,
                 split: str = "train", agent_id: str = "trl-environment-factory", grading_threads: int = 32,
                 seed: int = 0) -> None:
        if session_factory is None:
            from envcore.agents.rollouts import local_sessions
            from envcore.env.environment import default_runtime

            session_factory = local_sessions(default_runtime(), None, "training")
        self.session_factory = session_factory
        self.max_steps, self.split, self.agent_id = max_steps, split, agent_id
        self.pool = ThreadPoolExecutor(max_workers=grading_threads, thread_name_prefix="a01-grading")
        self.members: list[A01ToolEnv] = []
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.env_seconds = 0.0
        """Wall time the trainer's thread spent in the environment: resets, tool calls and waiting
        for grading in ``get_reward`` (gradings that ran while the model generated are not counted)."""
        self.generation_seconds = 0.0
        """Not measured on this path (TRL generates); kept for :class:`~envcore.training.metrics.StepTimer`."""
        self.rounds = 0
        self.last_metrics: dict[str, float] = {}
        self._trainer: Any = None

    def __call__(self) -> "A01ToolEnv":
        return A01ToolEnv(group=self)

    def attach(self, trainer: Any) -> None:
        """Log each round's metrics into ``trainer``'s (held weakly)."""
        self._trainer = weakref.ref(trainer)

    def _join(self, env: "A01ToolEnv") -> int:
        with self.lock:
            self.members.append(env)
            return len(self.members) - 1

    # ----- one round ---------------------------------------------------------------------------
    def finish_round(self) -> None:
        """End every episode of the round that has not ended, side by side; then fill the rewards of
        infrastructure failures and log the round's metrics. Called by the round's first
        ``get_reward`` (the others find it done)."""
        with self.lock:
            playing = [m for m in self.members if m.in_round]
            if not playing or all(m.rewarded is not None for m in playing):
                return
            for member in playing:
                member._end_without_submit()
            started = time.perf_counter()
            finals = [member._final_observation() for member in playing]
            self.env_seconds += time.perf_counter() - started
            by_key: dict[Any, list[float]] = defaultdict(list)
            for member, final in zip(playing, finals):
                if final is not None and final.reward is not None:
                    by_key[member.key].append(float(final.reward))
            every = [r for rewards in by_key.values() for r in rewards]
            for member, final in zip(playing, finals):
                if final is not None and final.reward is not None:
                    member.rewarded = float(final.reward)
                else:
                    known = by_key.get(member.key) or every
                    member.rewarded = statistics.fmean(known) if known else 0.0
            self.rounds += 1
            self._log(playing)

    def _log(self, playing: list["A01ToolEnv"]) -> None:
        from envcore.training.rollout import episode_metrics, log_metrics

        values = episode_metrics(playing)
        values["env/stopped_without_submit"] = statistics.fmean(float(m.stopped_early) for m in playing)
        self.last_metrics = values
        log_metrics(self._trainer() if self._trainer is not None else None, values)

    def close(self) -> None:
        for member in list(self.members):
            member._close()
        self.pool.shutdown(wait=True, cancel_futures=False)


_default_group: ToolEnvironments | None = None
_default_lock = threading.Lock()


def _default() -> ToolEnvironments:
    global _default_group
    with _default_lock:
        if _default_group is None:
            _default_group = ToolEnvironments()
        return _default_group


class A01ToolEnv:
    """One rollout's environment for TRL's ``environment_factory``; see the module docstring. Its
    public methods other than ``reset`` and ``get_reward`` are exactly the environment's tools (TRL
    offers every public method to the model), so everything else is private."""

    def __init__(self, group: ToolEnvironments | None = None) -> None:
        self._group = group or _default()
        self._index = self._group._join(self)
        self._session: Any = None
        self.key: EpisodeKey | None = None
        self.in_round = False
        self.rewarded: float | None = None
        self.steps = 0
        self.steps_left = 0
        self.stopped_early = False
        self._ending: Future | None = None
        self._final: Any = None

    # ----- TRL's protocol ------------------------------------------------------------------------
    def reset(self, episode: str | None = None, **_: Any) -> str:
        """Start the rollout's episode (the row's ``episode`` key, or a draw from the factory's split)
        and return its first observation, which TRL appends to the prompt."""
        group = self._group
        if self._session is None:
            self._session = group.session_factory(self._index)
        if episode:
            self.key = EpisodeKey.parse(episode)
            options: dict[str, Any] = {"scenario": self.key.scenario, "split": "any"}
            seed = self.key.seed
        else:
            with group.lock:
                seed = group.rng.randrange(2**31)
            self.key = None
            options = {"split": group.split}
        self._ending, self._final, self.rewarded = None, None, None
        self.steps = 0
        self.stopped_early = False
        started = time.perf_counter()
        first = self._session.reset(seed=seed, agent_id=group.agent_id, max_steps=group.max_steps, **options)
        if self.key is None:
            self.key = EpisodeKey(first.scenario_id, seed)
        self._charge(started)
        self.steps_left = first.steps_left
        self.in_round = True
        return observation_message(first)

    def get_reward(self) -> float:
        """The episode's reward (see the module docstring); ends the round's episodes first."""
        if not self.in_round:
            return 0.0
        self._group.finish_round()
        self.in_round = False
        return float(self.rewarded if self.rewarded is not None else 0.0)

    # ----- the episode -----------------------------------------------------------------------------
    def _tool(self, name: str, arguments: dict[str, Any]) -> str:
        if not self.in_round:
            return "Error: no episode: the environment was not reset"
        if self._ending is not None or self._final is not None:
            return ENDED
        action = {"tool": name, **arguments}
        self.steps += 1
        if name == "submit" or self.steps_left <= 1:
            # this step ends the episode (a submit, or the budget's last step): graded in the pool
            self._ending = self._group.pool.submit(self._session.step, action)
            if name == "submit":
                return "Submitted: every probe runs now; the reward comes when the rollout ends."
            return ("That was the episode's last step: the app is submitted as it stands and graded; the reward "
                    "comes when the rollout ends.")
        started = time.perf_counter()
        observation = self._session.step(action)
        self._charge(started)
        self.steps_left = observation.steps_left
        if observation.done:
            self._final = observation
        return observation_message(observation)

    def _end_without_submit(self) -> None:
        """An episode still open when its rollout ended (the model stopped calling tools): submitted
        as running out of steps, in the pool."""
        if self._ending is None and self._final is None and self._session is not None:
            self.stopped_early = True
            self._ending = self._group.pool.submit(self._session.step, STOPPED_WITHOUT_SUBMIT)

    def _final_observation(self) -> Any:
        """The episode's last observation (waiting for its grading); ``None`` if grading raised."""
        if self._final is None and self._ending is not None:
            try:
                self._final = self._ending.result()
            except Exception:  # noqa: BLE001 - a session that broke: no reward, like an infrastructure error
                self._final = None
        return self._final

    format_errors = 0
    """For :func:`~envcore.training.rollout.episode_metrics`: none on this path (a reply TRL cannot read
    as a call ends the rollout, which is :attr:`stopped_early`)."""

    @property
    def truncated(self) -> bool:
        """For :func:`~envcore.training.rollout.episode_metrics`: the episode ended without a submit
        because the rollout did (the model stopped calling tools)."""
        return self.stopped_early

    @property
    def final(self) -> Any:
        """For :func:`~envcore.training.rollout.episode_metrics`: the final observation (a stand-in
        without reward when grading could not run)."""
        from envcore.env.actions import A01Observation

        return self._final if self._final is not None else A01Observation(done=True, reward=None)

    def _charge(self, started: float) -> None:
        with self._group.lock:
            self._group.env_seconds += time.perf_counter() - started

    def _close(self) -> None:
        if self._session is not None:
            try:
                self._session.close()
            finally:
                self._session = None


def _step(self: A01ToolEnv, name: str, arguments: dict[str, Any]) -> str:
    return self._tool(name, arguments)


for _name in TOOLS:
    setattr(A01ToolEnv, _name, tool_method(_name, _step))
del _name


def tool_dataset(keys: list[EpisodeKey]) -> Any:
    """The episode keys as TRL's training data for this path: a conversational ``prompt`` (the
    native-tools system message and an empty user turn, which ``reset``'s first observation fills)
    and the ``episode`` column that ``reset`` reads. The model never sees the key."""
    from datasets import Dataset

    from envcore.agents.prompts import system_prompt

    prompt = [{"role": "system", "content": system_prompt(native_tools=True)}, {"role": "user", "content": ""}]
    return Dataset.from_dict({"prompt": [prompt] * len(keys), "episode": [k.prompt() for k in keys]})


def check_tool_template(tokenizer: Any) -> str | None:
    """Why ``tokenizer``'s chat template cannot carry native tool calls in TRL's loop, or ``None``."""
    from trl.chat_template_utils import supports_tool_calling

    if not getattr(tokenizer, "chat_template", None):
        return "the tokenizer has no chat template"
    if not supports_tool_calling(tokenizer):
        return ("its chat template cannot render tool calls (user -> assistant with tool_calls -> tool); use a "
                "tool-calling model (e.g. artifacts/models/tiny-tool-llm, Qwen2.5/Qwen3 instruct), set "
                "model.chat_template to one that can, or grpo.path: rollout_func")
    return None
