"""The OpenEnv environment: sessions of :class:`~envcore.env.episode.Episode` behind ``/ws`` and MCP.

:class:`Runtime` holds what every session of one server shares: the scenario cache and its
curriculum sampler, the sandbox, the episode logger and the defaults. :class:`A01Environment` is
OpenEnv's ``Environment`` (one instance per WebSocket session, ``SUPPORTS_CONCURRENT_SESSIONS``): it
draws a scenario on ``reset``, forwards each typed action to its episode, exposes the same tools over
MCP (through the same episode, so a tool call over MCP counts as a step like any other), and writes
one episode-log record when an episode ends, or is abandoned by a new reset or a closed session.

Reset options (``reset(seed=..., split=..., tier=..., bug_class=..., domain=..., scenario=...,
agent_id=..., max_steps=...)``) are validated; a reset that cannot be satisfied raises :class:`ResetError` (a
``ValueError``) with the reason, which OpenEnv returns to a ``/ws`` client as an error message and
:func:`~envcore.env.server.create_env_app` turns into a 422 on ``POST /reset``. Infrastructure trouble never
escapes as an exception from ``step``: it is an observation with ``error`` (and, at submit, reward
``None``).
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import RootModel

from envcore.cache import CacheError, ScenarioCache
from envcore.env.actions import A01Observation, A01State, _Tool
from envcore.env.episode import DEFAULT_MAX_STEPS, Episode
from envcore.env.episode_log import EpisodeLogger, EpisodeRecord, Outcome
from envcore.env.sampler import DEFAULT_SPLIT, CurriculumSampler, NoScenario, SamplingWeights
from envcore.env.tools import build_mcp_server
from envcore.sandbox.pool import DEFAULT_MAX_WORKERS, Sandbox
from envcore.settings import SettingError, positive_int
from envcore.verifier.disclosure import disclose, disclosure_for
from envcore.version import PACKAGE_VERSION

MAX_STEPS_LIMIT = 200

CLOSED = ("this session was closed (idle for longer than the server's session timeout, A01_SESSION_TIMEOUT_S, "
          "or shut down); its episode ended without a reward and is logged as abandoned. Open a new session.")

SPLIT_TYPES = {"train": "train", "val": "validation"}
"""OpenEnv's split types; every other split (``test``, ``test_styles``, ``external``, ``private``) is a test split."""
TASK_FIELDS = ("title", "bug_class", "tier", "domain", "code_style", "cwe", "sha256")
"""What a task description carries (all public in ``/scenarios`` too)."""


class ResetError(ValueError):
    """Reset options that cannot be satisfied (wrong type, out of range, no matching scenario); the
    message says why. Bad options never escape as any other exception type."""


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int_option(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise ResetError(f"{name} must be an integer, not {_shown(value)}") from None


@dataclass
class Runtime:
    """What every session of one server shares. Build with :meth:`from_environ` or directly."""

    sampler: CurriculumSampler
    sandbox: Sandbox | None = None
    """``None``: the process-wide default sandbox, started on first use."""
    logger: EpisodeLogger | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    source: str = "server"
    """Written into every episode record (``server``, ``training``, ``evaluation``, ``human`` ...)."""

    @classmethod
    def from_environ(cls, **overrides: Any) -> "Runtime":
        """From ``A01_CACHE`` (cache folder; default the newest shipped one), ``A01_WEIGHTS`` (sampling
        weights file), ``A01_EPISODE_LOG`` (JSONL path; unset: no log) and ``A01_MAX_STEPS``; a
        variable that cannot be used is a :class:`~envcore.settings.SettingError` naming it."""
        try:
            cache = ScenarioCache.open(os.environ.get("A01_CACHE") or None)
        except CacheError as exc:
            raise SettingError(f"A01_CACHE: {exc}") from None
        weights_path = os.environ.get("A01_WEIGHTS")
        try:
            weights = SamplingWeights.load(weights_path) if weights_path else None
        except ValueError as exc:
            raise SettingError(f"A01_WEIGHTS: {exc}") from None
        log_path = os.environ.get("A01_EPISODE_LOG")
        try:
            logger = EpisodeLogger(log_path) if log_path else None
        except OSError as exc:
            raise SettingError(f"A01_EPISODE_LOG: cannot write {log_path!r} ({exc.strerror})") from None
        values: dict[str, Any] = {
            "sampler": CurriculumSampler(cache, weights),
            "logger": logger,
            "max_steps": positive_int("A01_MAX_STEPS", DEFAULT_MAX_STEPS),
        }
        values.update(overrides)
        return cls(**values)

    sessions: int | None = None
    """Episodes this runtime serves at once (set by the server). Its sandbox is then sized for them:
    each episode holds up to two workers (its live app and a test run or verification), so a
    sandbox with fewer slots would make episodes wait for each other and then fail."""

    sandbox_workers: int | None = None
    """The sandbox's worker pool, when set (``A01_SANDBOX_WORKERS``); otherwise sized from ``sessions``."""

    parent: "Runtime | None" = None
    """Another runtime of the same process whose sandbox this one uses (the Space's play sessions
    share the server's sandbox, sized for both, instead of starting a second pool)."""

    def get_sandbox(self) -> Sandbox:
        if self.sandbox is None and self.parent is not None:
            self.sandbox = self.parent.get_sandbox()
        with _sandbox_lock:  # sessions start at once: one sandbox (one zygote) for all of them
            return self._get_sandbox()

    def _get_sandbox(self) -> Sandbox:
        if self.sandbox is None:
            from envcore.sandbox import default_sandbox

            needed = self.sandbox_workers or (workers_for(self.sessions) if self.sessions else 0)
            if self.sandbox_workers or needed > DEFAULT_MAX_WORKERS:
                self.sandbox = Sandbox(max_workers=needed).start()
                atexit.register(self.sandbox.close)
            else:
                self.sandbox = default_sandbox()
        return self.sandbox

    @property
    def cache(self) -> ScenarioCache:
        return self.sampler.cache


_sandbox_lock = threading.Lock()


def workers_for(sessions: int) -> int:
    """Sandbox workers that ``sessions`` concurrent episodes can hold at once, with room for spares."""
    return 2 * sessions + 4


_default_runtime: Runtime | None = None
_default_lock = threading.Lock()


def default_runtime() -> Runtime:
    global _default_runtime
    with _default_lock:
        if _default_runtime is None:
            _default_runtime = Runtime.from_environ()
        return _default_runtime


class A01Environment(MCPEnvironment):
    """The A01 repair gym as an OpenEnv environment; see the module docstring."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, runtime: Runtime | None = None) -> None:
        super().__init__(build_mcp_server(self._call_tool))
        self.runtime = runtime or default_runtime()
        self.episode: Episode | None = None
        self._episode_meta: dict[str, Any] = {}
        self._reset_ms = 0.0
        self._lock = threading.RLock()
        self.closed = False
        """Set by :meth:`close` (the server counts the sessions still open)."""

    # ----- OpenEnv API -------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, *, split: str | None = DEFAULT_SPLIT,
              tier: int | None = None, bug_class: str | None = None, domain: str | None = None,
              scenario: str | None = None, agent_id: str | None = None, max_steps: int | None = None,
              index: int | None = None, **unknown: Any) -> A01Observation:
        """Start an episode. ``split`` ``None`` or ``"any"`` draws from every split; ``index`` picks
        the split's task at that position (OpenEnv's task API: :meth:`get_task` describes it)."""
        started = time.perf_counter()
        if self.closed:
            raise ResetError(CLOSED)
        if unknown:
            raise ResetError(f"unknown reset options: {_shown(sorted(unknown))}; known: seed, episode_id, split, "
                             "index, tier, bug_class, domain, scenario, agent_id, max_steps")
        split = None if split in (None, "any") else split
        splits = self.runtime.cache.splits()
        if split is not None and split not in splits:
            raise ResetError(f"split must be one of {', '.join(splits)} or 'any', not {_shown(split)}")
        if index is not None:
            if scenario is not None:
                raise ResetError("give either index (with split) or scenario, not both")
            if split is None:
                raise ResetError("index needs a split: the position of a task within it (see get_task)")
            try:
                ids = self._task_ids(split)
                scenario = ids[self._task_index(split, ids, index)]
            except IndexError as exc:
                raise ResetError(str(exc)) from None
        for name, value in (("episode_id", episode_id), ("bug_class", bug_class), ("domain", domain),
                            ("scenario", scenario), ("agent_id", agent_id)):
            if value is not None and (not isinstance(value, str) or _LONE_SURROGATE.search(value)):
                raise ResetError(f"{name} must be a string (of valid Unicode), not {_shown(value)}")
        if tier is not None:
            tier = _int_option("tier", tier)
            if tier not in (1, 2, 3):
                raise ResetError(f"tier must be 1, 2 or 3, not {tier!r}")
        budget = self.runtime.max_steps if max_steps is None else _int_option("max_steps", max_steps)
        if not 1 <= budget <= MAX_STEPS_LIMIT:
            raise ResetError(f"max_steps must be between 1 and {MAX_STEPS_LIMIT}")
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise ResetError("seed must be a non-negative integer")
        with self._lock:
            try:
                bundle, used_seed = self.runtime.sampler.choose(seed=seed, split=split, tier=tier, bug_class=bug_class,
                                                                domain=domain, scenario=scenario)
            except NoScenario as exc:  # the current episode (if any) goes on, not abandoned
                raise ResetError(str(exc)) from None
            self._finish("abandoned")
            self.episode = Episode(bundle, self.runtime.get_sandbox(), max_steps=budget,
                                   episode_id=episode_id or uuid.uuid4().hex, agent_id=agent_id or "unknown",
                                   seed=used_seed)
            row = self.runtime.sampler.row(bundle.scenario_id)
            self._episode_meta = {"split": row.get("split"), "sha256": row.get("sha256") or bundle.content_hash()}
            self._reset_ms = (time.perf_counter() - started) * 1000
            return self.episode.first_observation()

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
        if isinstance(action, RootModel):
            action = action.root
        return super().step(action, timeout_s=timeout_s, **kwargs)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> A01Observation:
        with self._lock:
            if self.closed:  # a socket that outlived its session (the idle reaper closed it): the episode is over
                return A01Observation(done=True, reward=None, error=CLOSED, text=f"Error: {CLOSED}")
            if self.episode is None:
                return A01Observation(error="no episode: call reset first", text="Error: no episode: call reset first")
            if not isinstance(action, (_Tool, dict)):
                action = action.model_dump() if hasattr(action, "model_dump") else {"tool": str(action)}
            was_done = self.episode.done
            observation = self.episode.step(action)
            if observation.done and not was_done:
                outcome = self.episode.outcome
                assert outcome is not None  # done
                self._finish(outcome)
            return observation

    def _call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """An MCP tool call: the same step as over ``/ws``; returns the observation as a dict."""
        observation = self._step_impl({"tool": tool, **arguments})
        return observation.model_dump(mode="json")

    @property
    def state(self) -> A01State:
        episode = self.episode
        return episode.state() if episode is not None else A01State()

    def get_metadata(self) -> EnvironmentMetadata:
        return _metadata()

    # ----- OpenEnv's task API (discovery only: a task is chosen with reset(split=, index=)) ------
    def list_splits(self) -> list[dict[str, Any]]:
        """Every split of the cache: its name, OpenEnv's type (train, validation or test) and size."""
        return [{"name": name, "type": SPLIT_TYPES.get(name, "test"), "num_tasks": len(self._task_ids(name))}
                for name in self.runtime.cache.splits()]

    def num_tasks(self, split: str) -> int:
        return len(self._task_ids(self._known_split(split)))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """The public description of the split's task at ``index`` (what ``/scenarios`` shows: never
        its probes or fix). ``IndexError`` outside the split."""
        ids = self._task_ids(self._known_split(split))
        return self._task(split, self._task_index(split, ids, index), ids)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        ids = self._task_ids(self._known_split(split))
        return [self._task(split, i, ids) for i in range(*slice(start, stop).indices(len(ids)))]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return self.get_task_range(split)

    def _known_split(self, split: Any) -> str:
        if not isinstance(split, str) or split not in self.runtime.cache.splits():
            raise ResetError(f"split must be one of {', '.join(self.runtime.cache.splits())}, not {_shown(split)}")
        return split

    def _task_ids(self, split: str) -> list[str]:
        return self.runtime.cache.ids(split=split)

    def _task_index(self, split: str, ids: list[str], index: Any) -> int:
        number = _int_option("index", index)
        size = len(ids)
        if not 0 <= number < size:
            raise IndexError(f"index must be between 0 and {size - 1} for the {split} split, not {number}")
        return number

    def _task(self, split: str, index: int, ids: list[str]) -> dict[str, Any]:
        row = self.runtime.cache.row(ids[index])
        public = {k: row.get(k) for k in TASK_FIELDS if k in row}
        return {"id": row["scenario_id"], "index": index, "split": split} | public

    def close(self) -> None:
        with self._lock:
            self._finish("abandoned")
            self.closed = True
        super().close()

    # ----- episode records ---------------------------------------------------------------------
    def _finish(self, outcome: Outcome) -> None:
        """Log the current episode once (when it ends, or is left unfinished) and let go of its app."""
        episode = self.episode
        if episode is None or episode.logged:
            return
        if outcome == "abandoned" and episode.done:
            return
        episode.logged = True
        episode.close_live()
        if episode.report is not None and episode.report.outcome == "infrastructure_error":
            outcome = "infrastructure_error"
        if self.runtime.logger is not None:
            self.runtime.logger.write(self.record(outcome))

    @property
    def disclosure(self) -> str:
        """How much of the hidden suite this episode's scenario may show (``full`` or ``words``)."""
        return disclosure_for(self._episode_meta.get("split"))

    def disclosed_report(self) -> dict[str, Any] | None:
        """The episode's verification as it may be stored or shown: a test-split scenario's hidden
        probes in words only (see :mod:`envcore.verifier.disclosure`)."""
        episode = self.episode
        if episode is None or episode.report is None:
            return None
        shown = disclose(episode.report, episode.bundle, self.disclosure)  # type: ignore[arg-type]
        return shown.model_dump(mode="json")

    def record(self, outcome: Outcome) -> EpisodeRecord:
        episode = self.episode
        assert episode is not None
        ended = episode.ended_at or time.time()
        return EpisodeRecord(
            episode_id=episode.episode_id, agent_id=episode.agent_id, source=self.runtime.source,
            scenario_id=episode.bundle.scenario_id, scenario_hash=self._episode_meta.get("sha256", ""),
            cache_version=self.runtime.cache.root.name, bug_class=episode.bundle.bug_class, tier=episode.bundle.tier,
            split=self._episode_meta.get("split"), seed=episode.seed, started_at=episode.started_at, ended_at=ended,
            outcome=outcome, max_steps=episode.max_steps,
            steps=list(episode.records),
            diff=episode.diff(),
            verification=self.disclosed_report(),
            reward=episode.breakdown.reward if episode.breakdown is not None else None,
            reward_breakdown=episode.breakdown.model_dump(mode="json") if episode.breakdown is not None else None,
            timings_ms={"reset": round(self._reset_ms, 3), "verify": round(episode.verify_ms, 3),
                        "steps": round(sum(r.elapsed_ms for r in episode.records), 3),
                        "total": round((ended - episode.started_at) * 1000, 3)},
            hints=list(episode.hints),
        )


@functools.cache
def _metadata() -> EnvironmentMetadata:
    """Read once per process: OpenEnv builds an environment for every plain-HTTP request."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    return EnvironmentMetadata(
        name="a01_repair_gym",
        description="Find and repair Broken Access Control (OWASP A01) bugs in generated FastAPI apps.",
        readme_content=readme.read_text() if readme.exists() else None,
        version=PACKAGE_VERSION,
    )
