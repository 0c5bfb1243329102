"""The rollout function GRPO trains on: whole multi-turn episodes against the real environment.

**This is the ``rollout_func`` door** (``grpo.path: rollout_func``, the default; TRL's
``environment_factory`` door is :mod:`envcore.training.tool_env`, and docs/training.md says when to
choose which). The environment reads the action out of the model's own reply
(``{"tool": "reply", "text": ...}``), so a format error is an invalid step that costs reward, counted
the same way in training, in evaluation and over ``/ws``, and any chat model can be trained, tool
template or not. The rollout is ours: the prompts are exactly those of ``eval --agent transformers``
(:mod:`envcore.agents.prompts`, rendered from the one tool registry), so the adapter is evaluated on
the distribution it was trained on, and the step budget, the completion budget and the per-step
metrics are the environment's.

:class:`EpisodeRollout` is that function. For the prompts of one generation round (episode keys,
already repeated ``num_generations`` times by TRL; see :mod:`envcore.training.episodes`) it:

1. resets one session per key, all at once (sessions are opened once and reused: one per rollout
   of the generation batch, in process or spread over servers);
2. plays every episode in lockstep: one **batched** generation for all live episodes, then their
   environment steps in parallel threads, until each is done: the model submitted, the step
   budget ran out, or the next turn would not fit the completion budget (the episode then ends
   with the environment's ``out_of_budget`` action, which submits the app with the same cost as
   running out of steps, and is counted as ``truncated``);
3. returns each episode as one sequence (:mod:`envcore.training.turns`) with an ``env_mask`` over
   the environment's tokens, and the environment's reward as ``env_reward`` for
   :func:`environment_reward`. With ``learn_after_format_error=False`` the mask also covers the
   replies after an episode's first format error (they are played and scored, not learned from).

An episode whose verification failed for infrastructure reasons has no reward; it must not be
learned from, so it gets its group's mean reward (advantage zero) and is counted in
``env/infrastructure_errors``.

Metrics (means over the round's episodes, logged with TRL's own and so to Trackio): ``env/reward``,
``env/full_fix``, ``env/partial``, ``env/format_error_rate`` (share of steps whose reply held no
readable action), ``env/episode_steps``, ``env/truncated``, ``env/infrastructure_errors``, one
``env/component/<name>`` per reward component (same names as the breakdown), and the round's
``time/env_s`` and ``time/generation_s``.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from envcore.agents.prompts import Message, observation_message, system_prompt
from envcore.env.reply import is_format_error
from envcore.training.episodes import EpisodeKey
from envcore.training.generation import Generated
from envcore.training.turns import TurnEncoder

OUT_OF_TOKENS = {"tool": "out_of_budget", "budget": "completion tokens"}


class CapacityError(RuntimeError):
    """A server cannot hold the sessions the generation batch needs."""


def check_capacity(urls: list[str], sessions: int, *, client: Any = None) -> dict[str, int]:
    """Ask every server in ``urls`` (``GET /capacity``) whether it can take its share of ``sessions``
    (equal shares: each new session goes to the least-loaded server, so idle ones fill in turn);
    raise :class:`CapacityError` saying what to change if one cannot."""
    import httpx

    http = client or httpx.Client(timeout=10)
    shares = {url: 0 for url in urls}
    for index in range(sessions):
        shares[urls[index % len(urls)]] += 1
    free = {}
    try:
        for url, needed in shares.items():
            try:
                reply = http.get(f"{url}/capacity")
                reply.raise_for_status()
                data = reply.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise CapacityError(f"cannot read {url}/capacity ({exc}); is it an A01 repair gym server?") from None
            free[url] = int(data["available"])
            if free[url] < needed:
                raise CapacityError(
                    f"{url} takes {data['max_sessions']} concurrent sessions ({data['active_sessions']} open), but this run "
                    f"needs {needed} there: one per rollout of the generation batch ({sessions}) over {len(urls)} "
                    f"server(s). Start it with A01_MAX_SESSIONS={needed + data['active_sessions']} or more, add servers, "
                    "or lower grpo.per_device_train_batch_size x gradient_accumulation_steps.")
    finally:
        if client is None:
            http.close()
    return free


def environment_reward(completions: list[Any], env_reward: list[float], **_: Any) -> list[float]:
    """The environment's own reward for each rollout (from :class:`EpisodeRollout`'s ``env_reward``)."""
    return [float(r) for r in env_reward]


@dataclass
class _Episode:
    key: EpisodeKey
    session: Any
    messages: list[Message] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    final: Any = None
    steps: int = 0
    format_errors: int = 0
    truncated: bool = False

    @property
    def done(self) -> bool:
        return self.final is not None


class EpisodeRollout:
    """``rollout_func(prompts, trainer)`` for ``GRPOTrainer``; see the module docstring.

    ``session_factory(index)`` opens session ``index`` (an object with ``reset(seed=, agent_id=,
    **options)``, ``step(action)`` and ``close()``); ``generator(trainer)`` builds the generation
    backend once the trainer exists.
    """

    def __init__(self, *, session_factory: Callable[[int], Any], tokenizer: Any, max_steps: int, max_new_tokens: int,
                 completion_budget: int, agent_id: str, generator: Callable[[Any], Any],
                 num_generations: int = 1, learn_after_format_error: bool = True) -> None:
        self.session_factory = session_factory
        self.encoder = TurnEncoder(tokenizer)
        self.tokenizer = tokenizer
        self.max_steps, self.max_new_tokens, self.completion_budget = max_steps, max_new_tokens, completion_budget
        self.agent_id, self.make_generator, self.num_generations = agent_id, generator, num_generations
        self.learn_after_format_error = learn_after_format_error
        self.sessions: list[Any] = []
        self._generator: Any = None
        self._lock = threading.Lock()
        self.env_seconds = 0.0
        """Wall time spent waiting for the environment (resets and steps), summed over rounds."""
        self.generation_seconds = 0.0
        self.rounds = 0
        self.last_metrics: dict[str, float] = {}
        """The last round's metrics (those of the module docstring), for loops that are not TRL's."""
        self.last_episodes: list[_Episode] = []
        """The last round's episodes, final observations included."""
        self.__name__ = "episode_rollout"

    # ----- sessions --------------------------------------------------------------------------
    def open_sessions(self, count: int) -> None:
        """Open sessions until there are ``count`` (in parallel: a remote session is a handshake)."""
        missing = range(len(self.sessions), count)
        if missing:
            with ThreadPoolExecutor(max_workers=len(missing)) as pool:
                self.sessions.extend(pool.map(self.session_factory, missing))

    def close(self) -> None:
        for session in self.sessions:
            session.close()
        self.sessions = []

    # ----- one round -------------------------------------------------------------------------
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        if self._generator is None:
            self._generator = self.make_generator(trainer)
        keys = [EpisodeKey.parse(p) for p in prompts]
        self.open_sessions(len(keys))
        episodes = [_Episode(key, session) for key, session in zip(keys, self.sessions)]
        env_s = gen_s = 0.0
        with ThreadPoolExecutor(max_workers=len(episodes)) as pool:
            started = time.perf_counter()
            firsts = list(pool.map(self._reset, episodes))
            env_s += time.perf_counter() - started
            for episode, first in zip(episodes, firsts):
                episode.messages = [{"role": "system", "content": system_prompt()},
                                    {"role": "user", "content": observation_message(first)}]
                episode.prompt_ids = self.encoder.prompt_ids(episode.messages)
            while live := [e for e in episodes if not e.done]:
                budgets = [min(self.max_new_tokens, self.completion_budget - len(e.completion_ids)) for e in live]
                started = time.perf_counter()
                replies = self._generator.generate([e.prompt_ids + e.completion_ids for e in live], budgets)
                gen_s += time.perf_counter() - started
                started = time.perf_counter()
                list(pool.map(self._step, live, replies))
                env_s += time.perf_counter() - started
        with self._lock:
            self.env_seconds += env_s
            self.generation_seconds += gen_s
            self.rounds += 1
        rewards = self._rewards(episodes)
        self._log(trainer, episodes, env_s, gen_s)
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes] if self._has_logprobs else None,
            "env_mask": [e.env_mask for e in episodes],
            "env_reward": rewards,
        }

    _has_logprobs = False
    """Whether the backend gives the sampled tokens' log-probabilities (vLLM does; ``generate`` does not,
    and TRL then computes them itself)."""

    def _reset(self, episode: _Episode) -> Any:
        return episode.session.reset(seed=episode.key.seed, scenario=episode.key.scenario, split="any",
                                     max_steps=self.max_steps, agent_id=self.agent_id)

    def _step(self, episode: _Episode, reply: Generated) -> None:
        text = self.tokenizer.decode(reply.ids, skip_special_tokens=True)
        learned = self.learn_after_format_error or not episode.format_errors
        episode.completion_ids += reply.ids
        episode.env_mask += [int(learned)] * len(reply.ids)
        if reply.logprobs is not None:
            self._has_logprobs = True
            episode.logprobs += reply.logprobs
        else:
            episode.logprobs += [0.0] * len(reply.ids)
        observation = episode.session.step({"tool": "reply", "text": text})
        episode.steps += 1
        episode.format_errors += is_format_error(observation.error)
        if observation.done:
            episode.final = observation
            return
        message = observation_message(observation)
        following = self.encoder.observation_ids(episode.messages, text, reply.ids, message)
        episode.messages += [{"role": "assistant", "content": text}, {"role": "user", "content": message}]
        if len(episode.completion_ids) + len(following) >= self.completion_budget:
            # no room for another reply: the episode ends as running out of steps does (the app is
            # submitted, with the budget cost), so filling the context never pays better than submitting
            episode.truncated = True
            episode.final = episode.session.step(OUT_OF_TOKENS)
            return
        episode.completion_ids += following
        episode.env_mask += [0] * len(following)
        episode.logprobs += [0.0] * len(following)

    def _rewards(self, episodes: list[_Episode]) -> list[float]:
        rewards: list[float | None] = [e.final.reward for e in episodes]
        size = max(self.num_generations, 1)
        out = []
        for start in range(0, len(rewards), size):
            group = rewards[start:start + size]
            known = [r for r in group if r is not None]
            fill = statistics.fmean(known) if known else 0.0
            out += [float(r) if r is not None else fill for r in group]
        return out

    def _log(self, trainer: Any, episodes: list[_Episode], env_s: float, gen_s: float) -> None:
        values = episode_metrics(episodes)
        values["time/env_s"] = env_s
        values["time/generation_s"] = gen_s
        self.last_metrics = values
        self.last_episodes = episodes
        log_metrics(trainer, values)


def log_metrics(trainer: Any, values: dict[str, float]) -> None:
    """Add a round's metrics to what ``trainer`` (TRL's) logs at its next logging step, beside its own;
    nothing without a trainer (loops that are not TRL's read ``last_metrics``)."""
    metrics = getattr(trainer, "_metrics", None)
    if metrics is None:
        return
    mode = "train" if getattr(trainer.model, "training", True) else "eval"
    for name, value in values.items():
        metrics[mode][name].append(value)


def episode_metrics(episodes: list[Any]) -> dict[str, float]:
    """The round's means of the metrics listed in the module docstring."""
    scored = [e for e in episodes if e.final.reward is not None]
    components: dict[str, list[float]] = defaultdict(list)
    for episode in scored:
        for component in (episode.final.reward_breakdown or {}).get("components", []):
            components[component["name"]].append(float(component["value"]))
    steps = sum(e.steps for e in episodes)

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    resolution = [(e.final.reward_breakdown or {}).get("resolution") for e in scored]
    out = {
        "env/reward": mean([float(e.final.reward) for e in scored]),
        "env/full_fix": mean([float(r == "full") for r in resolution]),
        "env/partial": mean([float(r == "partial") for r in resolution]),
        "env/format_error_rate": sum(e.format_errors for e in episodes) / steps if steps else 0.0,
        "env/episode_steps": mean([float(e.steps) for e in episodes]),
        "env/truncated": mean([float(e.truncated) for e in episodes]),
        "env/infrastructure_errors": float(len(episodes) - len(scored)),
    }
    out.update({f"env/component/{name}": mean(values) for name, values in sorted(components.items())})
    return out
