"""Demonstrations: verified, full-fix episodes as chats, the data the SFT stage learns from.

A demonstration is one episode rendered exactly as a language-model agent sees it when it plays
(:class:`~envcore.agents.llm.LLMAgent`'s conversation: the system prompt, the reset observation,
then one assistant turn per reply and one user turn per observation, from
:mod:`envcore.agents.prompts`), ending with the agent's ``submit``. Nothing is rendered from a log's
copy of an observation: **every demonstration is played again** in a fresh environment episode (same
scenario, seed and step budget), its assistant turns sent as replies, so the observations are the
environment's own and the grade is the grader's own, now. A log that claims a fix it did not make, a
reply cut short in the log or a scenario that changed since cannot enter the data.

Sources:

* ``expert``: :class:`~envcore.agents.expert.ExpertAgent` on train scenarios (reads, reproduces the
  exploit as the attacker, edits, runs the visible tests, submits); its tool calls become assistant
  turns as JSON, the format the system prompt asks for;
* **episode logs** (``docs/episode-log.md``): human play in the Space, evaluation runs of any agent
  (an OpenAI-compatible teacher model, for instance). A reply (``{"tool": "reply"}``) is kept as the
  model wrote it; a tool call (a person's, a scripted agent's) becomes its JSON.

A demonstration is kept only if (in this order; the manifest counts each reason):

1. its scenario is in the cache, with the same content hash (``unknown_scenario``);
2. that scenario is in the **train** split: test, val and every held-out slice are never learned
   from, whatever a log says (``not_train``);
3. its replay ended with a **full** fix (``not_full``);
4. it is not a duplicate: same scenario and the same assistant turns as one already kept
   (``duplicate``).

Output: ``demos.jsonl`` (one :class:`Demonstration` per line, sorted by scenario then source) and
``manifest.json`` (the cache, the sources with what each offered and why any was dropped, the totals,
and the SHA-256 of ``demos.jsonl``).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from envcore.agents.base import Action, Agent
from envcore.agents.llm import LLMAgent
from envcore.agents.prompts import Message
from envcore.env.actions import A01Observation

DEMO_FORMAT = 1
"""Bump when the meaning of a :class:`Demonstration` field changes."""
TRAIN_SPLIT = "train"
DROP_REASONS = ("unknown_scenario", "not_train", "not_full", "duplicate")


class Demonstration(BaseModel):
    """One verified full-fix episode as the chat an agent sees (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    demo_id: str
    """The first 16 hex digits of the SHA-256 of the scenario id and the assistant turns."""
    scenario_id: str
    scenario_hash: str
    bug_class: str
    tier: int
    split: str
    source: str
    """``expert`` or the log file it came from."""
    agent_id: str
    """Who played it first (``expert``, ``human:<session>``, a model name)."""
    seed: int
    max_steps: int
    messages: list[Message]
    reward: float
    resolution: str
    steps: int


def assistant_turns(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant"]


def demo_id(scenario_id: str, messages: list[Message]) -> str:
    digest = hashlib.sha256(json.dumps([scenario_id, assistant_turns(messages)], ensure_ascii=False).encode())
    return digest.hexdigest()[:16]


# ----- playing a demonstration --------------------------------------------------------------------
class ReplyAgent(LLMAgent):
    """A language-model agent whose replies come from ``reply(observation)`` instead of a model: its
    conversation is the one any :class:`~envcore.agents.llm.LLMAgent` keeps, turn for turn."""

    def __init__(self, reply: Callable[[A01Observation], str], *, name: str = "demo") -> None:
        super().__init__(max_chars=10**9, name=name)
        self.reply = reply
        self._latest: A01Observation | None = None

    def act(self, observation: A01Observation) -> Action:
        self._latest = observation
        return super().act(observation)

    def complete(self, messages: list[Message]) -> str:
        assert self._latest is not None
        return self.reply(self._latest)


def tool_call_text(action: Action) -> str:
    """How a tool call is written as an assistant turn: its JSON, as the system prompt asks."""
    return json.dumps(action, ensure_ascii=False)


def scripted_replies(agent: Agent) -> Callable[[A01Observation], str]:
    """Replies that are ``agent``'s tool calls (begun on the first observation it is shown)."""
    started = False

    def reply(observation: A01Observation) -> str:
        nonlocal started
        if not started:
            agent.begin(observation, seed=0)
            started = True
        return tool_call_text(agent.act(observation))

    return reply


def recorded_replies(texts: list[str]) -> Callable[[A01Observation], str]:
    """The replies of a log, in order; past its end, a submit (the replay then ends either way)."""
    queue = list(texts)

    def reply(observation: A01Observation) -> str:
        return queue.pop(0) if queue else tool_call_text({"tool": "submit"})

    return reply


@dataclass
class Played:
    messages: list[Message]
    final: A01Observation
    steps: int

    @property
    def resolution(self) -> str | None:
        return (self.final.reward_breakdown or {}).get("resolution")


def play(env: Any, reply: Callable[[A01Observation], str], *, scenario: str, seed: int, max_steps: int,
         agent_id: str) -> Played:
    """Play one episode of ``reply`` on ``scenario``; the chat is the agent's own conversation."""
    from envcore.agents.play import play_episode

    agent = ReplyAgent(reply)
    steps = 0

    def count(*_: Any) -> None:
        nonlocal steps
        steps += 1

    final = play_episode(env, agent, seed=seed, agent_id=agent_id, on_step=count, scenario=scenario, split="any",
                         max_steps=max_steps)
    return Played([dict(m) for m in agent.conversation.messages], final, steps)


# ----- candidates -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """An episode offered as a demonstration: who, which scenario, and the replies to play."""

    source: str
    agent_id: str
    scenario_id: str
    scenario_hash: str | None
    seed: int
    max_steps: int
    replies: tuple[str, ...] | None = None
    """The assistant turns, in order; ``None``: the expert plays."""


def expert_candidates(cache: Any, scenario_ids: Iterable[str], *, max_steps: int) -> list[Candidate]:
    return [Candidate("expert", "expert", sid, None, 0, max_steps) for sid in scenario_ids]


def reply_text(action: dict[str, Any]) -> str:
    """A logged action as the assistant turn that produced it."""
    if action.get("tool") == "reply" and isinstance(action.get("text"), str):
        return action["text"]
    return tool_call_text(action)


def log_candidates(path: str | Path) -> list[Candidate]:
    """Every episode of an episode log (``.jsonl`` or ``.jsonl.gz``), as played."""
    from envcore.env.episode_log import read_episodes

    out = []
    for record in read_episodes(Path(path)):
        replies = tuple(reply_text(step.action) for step in record.steps)
        out.append(Candidate(str(path), record.agent_id, record.scenario_id, record.scenario_hash,
                             record.seed or 0, record.max_steps, replies))
    return out


# ----- collecting -----------------------------------------------------------------------------------
@dataclass
class SourceCount:
    offered: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"offered": self.offered, "kept": self.kept,
                "dropped": {reason: self.dropped.get(reason, 0) for reason in DROP_REASONS}}


@dataclass
class Collection:
    demos: list[Demonstration]
    sources: dict[str, SourceCount]


def collect(cache: Any, candidates: list[Candidate], *, env_factory: Callable[[], Any], parallel: int = 1,
            progress: Callable[[int, int], None] | None = None) -> Collection:
    """Filter, replay and keep ``candidates`` by the rules of the module docstring."""
    sources: dict[str, SourceCount] = {}
    for c in candidates:
        sources.setdefault(c.source, SourceCount()).offered += 1
    playable: list[tuple[Candidate, dict[str, Any]]] = []
    known = set(cache.ids())
    for c in candidates:
        row = cache.row(c.scenario_id) if c.scenario_id in known else None
        if row is None or (c.scenario_hash and c.scenario_hash != row.get("sha256")):
            sources[c.source].dropped["unknown_scenario"] += 1
        elif row.get("split") != TRAIN_SPLIT:
            sources[c.source].dropped["not_train"] += 1
        else:
            playable.append((c, row))

    local = threading.local()
    envs: list[Any] = []
    lock = threading.Lock()
    done = 0

    def environment() -> Any:
        if getattr(local, "env", None) is None:
            local.env = env_factory()
            with lock:
                envs.append(local.env)
        return local.env

    def run(item: tuple[Candidate, dict[str, Any]]) -> tuple[Candidate, dict[str, Any], Played]:
        nonlocal done
        c, row = item
        if c.replies is None:
            from envcore.agents.expert import ExpertAgent

            reply = scripted_replies(ExpertAgent(cache))
        else:
            reply = recorded_replies(list(c.replies))
        played = play(environment(), reply, scenario=c.scenario_id, seed=c.seed, max_steps=c.max_steps,
                      agent_id=f"{c.agent_id}@demo")
        with lock:
            done += 1
            if progress:
                progress(done, len(playable))
        return c, row, played

    try:
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            results = list(pool.map(run, playable))
    finally:
        for env in envs:
            env.close()

    demos: dict[str, Demonstration] = {}
    for c, row, played in results:
        count = sources[c.source]
        if played.resolution != "full" or played.final.reward is None:
            count.dropped["not_full"] += 1
            continue
        key = demo_id(c.scenario_id, played.messages)
        if key in demos:
            count.dropped["duplicate"] += 1
            continue
        count.kept += 1
        demos[key] = Demonstration(
            demo_id=key, scenario_id=c.scenario_id, scenario_hash=row["sha256"], bug_class=row["bug_class"],
            tier=int(row["tier"]), split=row["split"], source=c.source, agent_id=c.agent_id, seed=c.seed,
            max_steps=c.max_steps, messages=played.messages, reward=float(played.final.reward),
            resolution=played.resolution or "", steps=played.steps)
    ordered = sorted(demos.values(), key=lambda d: (d.scenario_id, d.source, d.demo_id))
    return Collection(ordered, sources)


def write(collection: Collection, out: str | Path, *, cache: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``demos.jsonl`` and ``manifest.json`` into ``out``; return the manifest."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(d.model_dump_json() + "\n" for d in collection.demos)
    (out / "demos.jsonl").write_text(lines)
    demos = collection.demos
    manifest = {
        "format": DEMO_FORMAT,
        "cache": {"root": cache.root.name, "version": cache.manifest.get("version")},
        "splits": [TRAIN_SPLIT],
        "demonstrations": len(demos),
        "scenarios": len({d.scenario_id for d in demos}),
        "by_source": dict(sorted(Counter(d.source for d in demos).items())),
        "by_bug_class": dict(sorted(Counter(d.bug_class for d in demos).items())),
        "by_tier": {str(t): n for t, n in sorted(Counter(d.tier for d in demos).items())},
        "sources": {name: count.as_dict() for name, count in sorted(collection.sources.items())},
        "sha256": hashlib.sha256(lines.encode()).hexdigest(),
    } | (extra or {})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_demos(folder_or_file: str | Path) -> Iterator[Demonstration]:
    """The demonstrations of a folder written by :func:`write` (or of its ``demos.jsonl``)."""
    path = Path(folder_or_file)
    if path.is_dir():
        path = path / "demos.jsonl"
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield Demonstration.model_validate_json(line)


def combine(parts: Iterable[str | Path], out: str | Path) -> dict[str, Any]:
    """One demonstrations folder from several written by :func:`write` from the same cache (a large set
    made in parts, each part kept on disk as soon as it is done): ``demos.jsonl`` in the usual order,
    duplicates across parts dropped, and a manifest whose counts and seconds are the parts' sums."""
    parts = [Path(p) for p in parts]
    manifests = [json.loads((p / "manifest.json").read_text()) for p in parts]
    caches = {json.dumps(m["cache"], sort_keys=True) for m in manifests}
    if len(caches) > 1:
        raise ValueError(f"the parts come from different caches: {sorted(caches)}")
    demos: dict[str, Demonstration] = {}
    duplicates = 0
    for part in parts:
        for demo in read_demos(part):
            if demo.demo_id in demos:
                duplicates += 1
                continue
            demos[demo.demo_id] = demo
    ordered = sorted(demos.values(), key=lambda d: (d.scenario_id, d.source, d.demo_id))
    sources: dict[str, SourceCount] = {}
    for manifest in manifests:
        for name, count in manifest["sources"].items():
            total = sources.setdefault(name, SourceCount())
            total.offered += count["offered"]
            total.kept += count["kept"]
            total.dropped.update(count["dropped"])
    if duplicates:  # played in two parts: kept once
        first = next(iter(sources.values()))
        first.dropped["duplicate"] += duplicates
        first.kept -= duplicates
    cache = type("Cache", (), {"root": Path(manifests[0]["cache"]["root"]),
                               "manifest": {"version": manifests[0]["cache"].get("version")}})()
    return write(Collection(ordered, sources), out, cache=cache, extra={
        "parts": [str(p) for p in parts], "seconds": round(sum(float(m.get("seconds", 0)) for m in manifests), 1)})
