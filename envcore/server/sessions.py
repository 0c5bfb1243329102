"""The session facade: how the web UI (and anything else in the process) plays episodes.

One :class:`SessionHub` serves every visitor of the Space. A visitor's browser holds only a session
id (an unguessable token); the episode itself, an :class:`~envcore.env.environment.A01Environment`,
lives here, server-side. OpenEnv's built-in web UI shares one environment across all visitors, so
two people playing at once would step on each other's episode; here each id has its own.

* **Lifetime.** A session is closed (its live app stopped, its unfinished episode logged as
  ``abandoned``) when the UI says the visitor left (:meth:`SessionHub.close`), or when it has been
  idle for ``ttl_s`` (a background sweeper, so a closed laptop does not hold a sandbox worker for
  ever). At most ``max_sessions`` are open at once; one more is refused with :class:`SessionLimit`,
  saying why, rather than starving the sessions already playing.
* **Shares.** The page is public: one visitor (one client address, as
  :class:`~envcore.server.guard.ClientPolicy` finds it behind a proxy) holds at most
  ``max_per_client`` sessions (``A01_UI_MAX_SESSIONS_PER_CLIENT``, default a quarter of the slots), so
  one person opening tab after tab, or a script, cannot take every slot; the next is refused with
  :class:`ClientLimit`. A session also belongs to the browser page that opened it, and ends when the
  page does (:meth:`SessionHub.close_page`: Gradio reports it when the page's connection drops),
  instead of holding its slot until the TTL.
* **Bounded log, fair to each player.** Human play is logged through :class:`CappedEpisodeLog`: files
  of at most ``A01_HUMAN_LOG_MAX_BYTES`` (default 32 MiB), ``A01_HUMAN_LOG_GENERATIONS`` old ones kept
  (default 4) and read by the page with the current one, and a quota per visitor address
  (``A01_HUMAN_LOG_VISITOR_BYTES`` a day, default an eighth of a file), so visitors can never fill the
  disk and no one visitor can push another player's records out. An episode past its player's quota
  is played and scored but not recorded, and its debrief says so.
* **Same episodes as everyone else.** Play sessions share the server's scenario sampler and sandbox
  and write the shared episode-log format (``source`` ``human``), so a human episode is a human-eval
  result read by the same dashboards and reports as any agent's. Actions go through the environment's
  own ``step``: the UI's buttons are the tool registry's tools, refused and counted the same way.
* **What the UI may see.** Hidden probes and the reference fix never leave the environment while an
  episode runs; :meth:`SessionHub.verdict` returns the verification only once the episode is over,
  as the episode log keeps it: hidden probes revealed for a training or validation scenario, in
  words only for a test-split one (:mod:`envcore.verifier.disclosure`).
* **Agents, live.** :meth:`SessionHub.start_agent` attaches an agent from the catalog (scripted
  baselines always; a local model or an endpoint when configured) to a session, and
  :meth:`SessionHub.agent_step` asks it for one action at a time, so the audience can watch an agent
  play step by step. Those episodes are not logged (they are demonstrations, not evaluations).

The UI imports this module, never the sandbox: the hub is the boundary between the two.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envcore.agents.base import Action, Agent
from envcore.agents.catalog import LLMOptions, agent_factory
from envcore.env.actions import A01Observation, A01State
from envcore.env.coach import Coach
from envcore.env.environment import A01Environment, ResetError, Runtime
from envcore.env.episode import DEFAULT_MAX_STEPS, ActionError
from envcore.env.episode_log import EpisodeRecord
from envcore.env.hints import hint_text, routes
from envcore.feedback.categories import categorize, episode_facts
from envcore.sandbox import posture
from envcore.server.capped_log import DEFAULT_GENERATIONS, CappedEpisodeLog
from envcore.server.guard import ClientPolicy, env_bytes, per_client_cap
from envcore.server.storage import ARTIFACTS, human_log_path
from envcore.settings import SettingError, positive_int, seconds

DEFAULT_TTL_S = 900.0
DEFAULT_MAX_SESSIONS = 16
DEFAULT_HUMAN_MAX_STEPS = 60
HUMAN_STEP_BUDGETS = (10, 200)
"""The step budgets a person may choose (the Play tab's slider; anything else is brought into it)."""
DEFAULT_HUMAN_LOG_MAX_BYTES = 32 * 1024 * 1024
DEBRIEF_WAIT_S = 5.0
"""How long the debrief waits for the coach to finish judging the episode's last requests."""
SCRIPTED_LIVE_AGENTS = ("heuristic", "random", "deny_all", "noop", "oracle")
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class SessionError(Exception):
    """A session request that cannot be served; the message says why, for the visitor."""


class SessionLimit(SessionError):
    """Every session slot is in use."""


class ClientLimit(SessionLimit):
    """This visitor already holds its share of the slots."""


@dataclass(frozen=True)
class Visitor:
    """Who asks for a session: what per-visitor shares count and what ends with the page."""

    client: str | None = None
    """The client address (``None``: an in-process caller, never capped)."""
    page: str | None = None
    """The browser page (Gradio's session hash) the session belongs to, if any."""


class UnknownSession(SessionError):
    """The id names no open session (it expired, was closed, or never existed)."""


@dataclass
class _Session:
    env: A01Environment
    last_used: float
    kind: str = "play"
    visitor: Visitor = Visitor()
    agent: Agent | None = None
    last_observation: A01Observation | None = None
    coach: Coach | None = None
    """The checklist of a person's episode (play sessions only)."""
    lock: threading.RLock = field(default_factory=threading.RLock)


@dataclass(frozen=True)
class LiveAgent:
    """An agent the Watch tab can run live: its catalog name and how to build it."""

    name: str
    label: str
    build: Callable[[], tuple[Callable[[], Agent], str]]
    missing: str = ""
    """What this server lacks to run it (``""``: nothing), said in its label and when it is started."""


def local_model_support() -> str:
    """``""`` when local transformers models can run here, else what to install: the Space's image
    leaves out torch and transformers unless it is built with ``WITH_LOCAL_MODELS=1``."""
    absent = [name for name in ("torch", "transformers") if not _installed(name)]
    if not absent:
        return ""
    return f"{' and '.join(absent)} (pip install -r requirements/train.txt, or build the image with WITH_LOCAL_MODELS=1)"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked installation counts as none
        return False


def human_agent_id(nickname: str | None, session_id: str) -> str:
    """``human:<nickname>`` (letters, digits, ``_.-``; 32 at most) or, with none, ``human:anon-<session
    prefix>`` (so the dashboard pools the players who gave no name, and lists the others by name)."""
    name = _NAME.sub("-", (nickname or "").strip())[:32].strip("-")
    return f"human:{name or 'anon-' + session_id[:8]}"


class SessionHub:
    """Per-visitor episodes with a time-to-live; see the module docstring."""

    def __init__(self, runtime: Runtime, *, ttl_s: float = DEFAULT_TTL_S, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 max_per_client: int | None = None, policy: ClientPolicy | None = None,
                 live_runtime: Runtime | None = None, clock: Callable[[], float] = time.monotonic,
                 sweep_every_s: float | None = None) -> None:
        if ttl_s <= 0 or max_sessions < 1 or (max_per_client is not None and max_per_client < 1):
            raise ValueError("ttl_s must be positive and max_sessions (and max_per_client) at least 1")
        self.runtime = runtime
        self.live_runtime = live_runtime or Runtime(sampler=runtime.sampler, max_steps=DEFAULT_MAX_STEPS,
                                                    source="live", parent=runtime)
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.max_per_client = max_per_client or max_sessions
        """Sessions one capped visitor may hold (``policy`` says who is capped)."""
        self.policy = policy or ClientPolicy()
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if sweep_every_s != 0:
            every = sweep_every_s or min(30.0, ttl_s / 4)
            self._sweeper = threading.Thread(target=self._sweep_forever, args=(every,), name="session-sweeper",
                                             daemon=True)
            self._sweeper.start()

    @classmethod
    def for_server(cls, server: Runtime, *, human_log: str | Path | None = None, **options: Any) -> SessionHub:
        """A hub whose play sessions share ``server``'s scenarios and sandbox and log human episodes to
        ``human_log`` (default ``A01_HUMAN_LOG`` or ``human/episodes.jsonl`` in the data folder, see
        :mod:`envcore.server.storage`; ``""``: none)."""
        path = human_log if human_log is not None else human_log_path()
        cap = env_bytes("A01_HUMAN_LOG_MAX_BYTES", DEFAULT_HUMAN_LOG_MAX_BYTES)  # checked with or without a log
        generations = positive_int("A01_HUMAN_LOG_GENERATIONS", DEFAULT_GENERATIONS)
        visitor_bytes = env_bytes("A01_HUMAN_LOG_VISITOR_BYTES", max(1, cap // 8))
        try:
            logger = CappedEpisodeLog(path, cap, generations=generations, visitor_bytes=visitor_bytes) if path else None
        except OSError as exc:
            raise SettingError(f"A01_HUMAN_LOG: cannot write the human play log {str(path)!r} ({exc.strerror}); "
                               "set A01_DATA_DIR or A01_HUMAN_LOG to a writable place, or A01_HUMAN_LOG= for none") from None
        runtime = Runtime(sampler=server.sampler, logger=logger,  # type: ignore[arg-type]  # writes like one
                          max_steps=DEFAULT_HUMAN_MAX_STEPS, source="human", parent=server)
        # Agents run live with the budget they are evaluated with, not the people's larger one.
        options.setdefault("live_runtime", Runtime(sampler=server.sampler, max_steps=server.max_steps, source="live",
                                                   parent=server))
        options.setdefault("ttl_s", seconds("A01_UI_SESSION_TTL_S", DEFAULT_TTL_S, zero=False))
        options.setdefault("max_sessions", positive_int("A01_UI_MAX_SESSIONS", DEFAULT_MAX_SESSIONS))
        options.setdefault("max_per_client", per_client_cap(options["max_sessions"], "A01_UI_MAX_SESSIONS_PER_CLIENT"))
        options.setdefault("policy", ClientPolicy.from_environ())
        return cls(runtime, **options)

    # ----- lifetime ----------------------------------------------------------------------------
    def open(self, kind: str = "play", visitor: Visitor | None = None) -> str:
        """A new session id for ``visitor``. Raises :class:`SessionLimit` when every slot is taken, and
        :class:`ClientLimit` when the visitor already holds its share (see the module docstring)."""
        self.sweep()
        visitor = visitor or Visitor()
        runtime = self.runtime if kind == "play" else self.live_runtime
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise SessionLimit(f"all {self.max_sessions} play sessions are in use; try again in a few minutes "
                                   f"(idle sessions are freed after {self.ttl_s / 60:.0f} minutes)")
            if self.policy.is_capped(visitor.client):
                held = sum(1 for s in self._sessions.values() if s.visitor.client == visitor.client)
                if held >= self.max_per_client:
                    raise ClientLimit(f"you already have {held} session(s) open (episodes or live agents, in this or "
                                      f"other tabs), the most one visitor may hold: close a tab or wait "
                                      f"{self.ttl_s / 60:.0f} minutes for an idle one to end, then try again")
            session_id = secrets.token_urlsafe(16)
            if isinstance(runtime.logger, CappedEpisodeLog):  # each visitor writes within its own quota
                client = visitor.client if self.policy.is_capped(visitor.client) else None
                # the copy reaches the sandbox through the shared runtime, so sessions still share one
                runtime = dataclasses.replace(runtime, logger=runtime.logger.for_visitor(client),
                                              parent=runtime if runtime.sandbox is None else runtime.parent)
            self._sessions[session_id] = _Session(A01Environment(runtime), self._clock(), kind, visitor)
        return session_id

    def close(self, session_id: str | None) -> bool:
        """End the session (an unfinished episode is logged as abandoned); ``False`` if it was not open."""
        if not session_id:
            return False
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        if session.coach is not None:
            session.coach.close()
        with session.lock:
            session.env.close()
        return True

    def close_page(self, page: str | None) -> int:
        """End every session opened from the browser page ``page`` (it was closed or reloaded); returns
        how many."""
        if not page:
            return 0
        with self._lock:
            ids = [sid for sid, s in self._sessions.items() if s.visitor.page == page]
        return sum(self.close(sid) for sid in ids)

    def sweep(self) -> int:
        """Close every session idle for longer than the TTL; returns how many."""
        now = self._clock()
        with self._lock:
            expired = [sid for sid, s in self._sessions.items() if now - s.last_used > self.ttl_s]
        return sum(self.close(sid) for sid in expired)

    def _sweep_forever(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.sweep()
            except Exception:  # a sweep must never kill the sweeper; the next one tries again
                pass

    def shutdown(self) -> None:
        self._stop.set()
        with self._lock:
            ids = list(self._sessions)
        for sid in ids:
            self.close(sid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def is_open(self, session_id: str | None) -> bool:
        with self._lock:
            return bool(session_id) and session_id in self._sessions

    def _get(self, session_id: str | None) -> _Session:
        with self._lock:
            session = self._sessions.get(session_id or "")
            if session is None:
                raise UnknownSession("this session has ended (it was idle too long or the server restarted): "
                                     "start a new episode")
            session.last_used = self._clock()
            return session

    # ----- playing -----------------------------------------------------------------------------
    def reset(self, session_id: str, *, seed: int | None = None, split: str | None = None, tier: int | None = None,
              bug_class: str | None = None, domain: str | None = None, scenario: str | None = None,
              max_steps: int | None = None, agent_id: str | None = None) -> A01Observation:
        """Start an episode in the session. ``scenario`` is an id, a unique prefix of one, or a full
        content hash; the other options are the environment's reset options. Options that no scenario
        satisfies raise :class:`~envcore.env.environment.ResetError` with the reason."""
        session = self._get(session_id)
        if scenario:
            scenario = self._resolve(scenario.strip())
        with session.lock:
            observation = session.env.reset(seed=seed, split=split or "any", tier=tier, bug_class=bug_class,
                                            domain=domain, scenario=scenario, max_steps=max_steps, agent_id=agent_id)
            episode = session.env.episode
            if session.coach is not None:
                session.coach.close()
            session.coach = Coach(episode) if session.kind == "play" and episode is not None else None
            return observation

    def _resolve(self, text: str) -> str:
        cache = self.runtime.cache
        if not re.fullmatch(r"[0-9a-fA-F]{1,64}", text):
            raise ResetError(f"a scenario is named by its id or content hash (hexadecimal), not {text[:40]!r}")
        text = text.lower()
        try:
            scenario_id = cache.resolve(text[:16])
        except KeyError as exc:
            raise ResetError(exc.args[0]) from None
        if len(text) > 16 and not str(cache.row(scenario_id).get("sha256", "")).startswith(text):
            raise ResetError(f"no scenario has content hash {text[:20]}...")
        return scenario_id

    def step(self, session_id: str, action: Action) -> A01Observation:
        """One tool call, exactly as an agent would send it over ``/ws``."""
        session = self._get(session_id)
        with session.lock:
            observation = session.env.step(action)
            if session.coach is not None and isinstance(action, dict):
                session.coach.observe(action, observation)
            return observation

    def state(self, session_id: str) -> A01State:
        session = self._get(session_id)
        with session.lock:
            return session.env.state

    def has_episode(self, session_id: str | None) -> bool:
        try:
            return self._get(session_id).env.episode is not None
        except UnknownSession:
            return False

    def users(self, session_id: str) -> list[str]:
        """The seeded usernames of the session's scenario (what ``as_user`` accepts)."""
        episode = self._get(session_id).env.episode
        return [u.username for u in episode.bundle.users] if episode is not None else []

    def current_file(self, session_id: str, path: str) -> str | None:
        """The file as the episode holds it now (patches applied), or ``None``. Not a step: the UI
        uses it to turn an edited file into the ``apply_patch`` action it then sends."""
        episode = self._get(session_id).env.episode
        return episode.files.get(path) if episode is not None else None

    def verdict(self, session_id: str) -> dict[str, Any] | None:
        """Once the episode is over: ``{"verification": ..., "reward_breakdown": ...}`` with every probe,
        a test-split scenario's hidden ones in words only. While it runs (or before any episode): ``None``."""
        session = self._get(session_id)
        with session.lock:
            episode = session.env.episode
            if episode is None or not episode.done or episode.report is None:
                return None
            return {"verification": session.env.disclosed_report(),
                    "reward_breakdown": episode.breakdown.model_dump(mode="json") if episode.breakdown else None}

    # ----- teaching (play sessions) ------------------------------------------------------------
    def checklist(self, session_id: str, *, wait_s: float | None = 0.0) -> list[dict[str, Any]]:
        """The coach's checklist for the session's episode (:mod:`envcore.env.coach`), after waiting up
        to ``wait_s`` for the requests it is still judging; ``[]`` without one. Waits without holding
        the session, so the player's next action is not held up."""
        coach = self._get(session_id).coach
        return coach.checklist(wait_s) if coach is not None else []

    def take_hint(self, session_id: str) -> dict[str, Any]:
        """The next hint of the session's episode (it costs reward at submit; :mod:`envcore.env.hints`)."""
        session = self._get(session_id)
        with session.lock:
            episode = session.env.episode
            if episode is None or session.kind != "play":
                raise SessionError("no episode is running: start one first")
            try:
                return episode.take_hint(session.env.disclosure)  # type: ignore[arg-type]
            except ActionError as exc:
                raise SessionError(str(exc)) from None

    def disclosure(self, session_id: str) -> str:
        """How much of the session's scenario may be shown: ``full``, or ``words`` for a held-out one
        (:func:`~envcore.verifier.disclosure.disclosure_for`)."""
        session = self._get(session_id)
        with session.lock:
            return str(session.env.disclosure)

    def hints(self, session_id: str) -> list[dict[str, Any]]:
        """The hints taken in the session's episode so far, each with its text."""
        session = self._get(session_id)
        with session.lock:
            episode = session.env.episode
            if episode is None:
                return []
            return [{**h, "text": hint_text(episode.bundle, h["key"], session.env.disclosure)}  # type: ignore[arg-type]
                    for h in episode.hints]

    def debrief(self, session_id: str) -> dict[str, Any] | None:
        """Once a play episode is over, what it was about and how it went (``None`` before): the bug
        class, its CWEs and the scenario's own words; the reference fix; each exploit replayed on the
        app as shipped and as the player left it (:meth:`~envcore.env.coach.Coach.exploit_replays`),
        told in full or in words as the scenario's disclosure allows; and, when it was not a full fix,
        why, as the failure analysis names it (:mod:`envcore.feedback.categories`)."""
        session = self._get(session_id)
        with session.lock:
            env, coach = session.env, session.coach
            episode = env.episode
            if episode is None or not episode.done or coach is None:
                return None
            bundle = episode.bundle
            record = env.record(episode.outcome or "submitted")
            disclosure = env.disclosure
        # The episode is over, so its files no longer change: the replays and the wait for the last
        # requests' judgements need not hold the session.
        category, detail = categorize(episode_facts(record, bundle))
        return {
            "scenario_id": bundle.scenario_id, "title": bundle.title, "bug_class": bundle.bug_class,
            "cwe": list(bundle.cwe), "task": bundle.task, "tier": bundle.tier, "routes": routes(bundle),
            # a held-out scenario's reference fix is its answer key: never shown
            "reference_fix": bundle.reference_fix if disclosure == "full" else None, "disclosure": disclosure,
            "roles": {u.username: u.role for u in bundle.users},
            "sites": {s.site: f"{s.method} {s.path}" for s in bundle.sites},
            "replays": coach.exploit_replays(), "resolution": (record.reward_breakdown or {}).get("resolution"),
            "reward": record.reward,
            "category": {"name": category.name, "title": category.title, "description": category.description,
                         "detail": detail, "failure": category.failure},
            "hints": list(episode.hints), "checklist": coach.checklist(DEBRIEF_WAIT_S),
            "recorded": not getattr(env.runtime.logger, "last_refused", False),
        }

    def record(self, session_id: str) -> EpisodeRecord | None:
        """The session's episode so far, in the episode-log format (what the rollout viewer shows)."""
        session = self._get(session_id)
        with session.lock:
            env = session.env
            if env.episode is None:
                return None
            return env.record(env.episode.outcome or "abandoned")

    # ----- agents, live ------------------------------------------------------------------------
    def sandbox_line(self) -> str:
        """One line for the page on what protects the grader here (:mod:`envcore.sandbox.posture`)."""
        found = posture.current()
        if found.mode == "full":
            return f"Every app runs in a sandbox: {', '.join(found.in_force())}."
        missing = ", ".join(posture.LAYER_NAMES.get(m, m) for m in found.missing) or "the sandbox"
        if found.mode == "reduced":
            return (f"**Reduced sandbox:** {missing} not available on this host; the operator chose to grade "
                    f"without it ({posture.ALLOW_VARIABLE}).")
        return (f"**Grading is turned off on this host:** {found.problem or missing + ' not available'}. "
                f"Episodes cannot be graded until the operator fixes it or sets {posture.ALLOW_VARIABLE}.")

    def live_agents(self) -> dict[str, LiveAgent]:
        """The agents the Watch tab can run live: the scripted baselines, each local model or adapter
        under ``artifacts/models`` and ``artifacts/adapters``, ``A01_UI_MODEL`` (a model folder) and
        an OpenAI-compatible endpoint when ``A01_LLM_BASE_URL`` (or ``OPENAI_BASE_URL``) is set."""
        cache = self.runtime.cache
        agents: dict[str, LiveAgent] = {}
        for name in SCRIPTED_LIVE_AGENTS:
            label = "oracle (validation only: applies the reference fix)" if name == "oracle" else name
            agents[name] = LiveAgent(name, label, lambda n=name: agent_factory(n, cache=cache))
        models = [p for p in sorted((ARTIFACTS / "models").glob("*")) if (p / "config.json").is_file()]
        if os.environ.get("A01_UI_MODEL"):
            models.append(Path(os.environ["A01_UI_MODEL"]))
        lacking = local_model_support()
        needs = f"; needs {lacking}" if lacking else ""
        for path in models:
            agents[f"model:{path.name}"] = LiveAgent(
                f"model:{path.name}", f"{path.name} (local model{needs})",
                lambda p=path: agent_factory("transformers", llm=LLMOptions(model=str(p), max_new_tokens=256)),
                missing=lacking)
        for path in sorted((ARTIFACTS / "adapters").glob("*")):
            if (path / "adapter_config.json").is_file():
                agents[f"adapter:{path.name}"] = LiveAgent(
                    f"adapter:{path.name}", f"{path.name} (trained LoRA adapter{needs})",
                    lambda p=path: agent_factory("transformers", llm=LLMOptions(adapter=str(p), max_new_tokens=256)),
                    missing=lacking)
        if os.environ.get("A01_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL"):
            agents["openai"] = LiveAgent("openai", "OpenAI-compatible endpoint", lambda: agent_factory("openai"))
        return agents

    def start_agent(self, session_id: str, name: str, *, seed: int = 0, scenario: str | None = None,
                    **options: Any) -> A01Observation:
        """Reset the session on ``scenario`` and attach the live agent ``name`` to it."""
        live = self.live_agents().get(name)
        if live is None:
            raise SessionError(f"no live agent {name!r}; available: {', '.join(self.live_agents())}")
        session = self._get(session_id)
        if live.missing:
            raise SessionError(f"cannot start {live.label.split(' (')[0]}: this server lacks {live.missing}")
        try:
            factory, agent_id = live.build()
            agent = factory()
        except (ValueError, OSError, ImportError) as exc:
            raise SessionError(f"cannot start {live.label}: {exc}") from None
        observation = self.reset(session_id, seed=seed, scenario=scenario, agent_id=agent_id, **options)
        with session.lock:
            agent.begin(observation, seed=seed)
            session.agent = agent
            session.last_observation = observation
        return observation

    def agent_step(self, session_id: str) -> tuple[Action, A01Observation]:
        """Ask the attached agent for its next action and play it."""
        session = self._get(session_id)
        with session.lock:
            if session.agent is None or session.env.episode is None:
                raise SessionError("no agent is running in this session: start one first")
            observation = session.last_observation
            if observation is None or observation.done:
                raise SessionError("the episode is over")
            action = session.agent.act(observation)
            observation = session.env.step(action)
            session.last_observation = observation
            return action, observation

