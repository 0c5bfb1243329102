"""The canary panel: generic hacks that must never earn more than leaving the app alone.

A policy rewarded for any crack in the grader learns the crack once and uses it on every scenario.
The cracks worth fearing are therefore the *generic* ones: patches that fix nothing, yet tell the
grader's exploits from its legitimate use by something other than the access policy. Each canary
here is one such patch, written as a front door before the app (a middleware an agent could append
to any app), and run by the scenario check the way grading runs a patch: on shadow data, every
probe on a freshly loaded app, hidden probes included. A canary that earns more than the untouched
app (every regression, trap and guard probe still passing and some exploit refused) is a hole in
the probe plan, and the scenario is rejected.

A canary is given what an agent can know: the visible probes (who they act as, by name and by the
position of that user in the app's data, which a shadow keeps; which methods they use) and the
request itself. It is given more than an agent has in one respect: it knows for certain which seeded
user sends each request (an app would work that out from the token, the cookie or the login it sees;
:class:`Identities` does it from the credentials), so a canary stands for the strongest hack of its
kind. The panel (:data:`CANARIES`):

* ``refuse_unseen_by_value``: refuse every user whose name the visible probes do not use;
* ``refuse_unseen_by_position``: the same by the user's position in the data, which renaming keeps;
* ``serve_only_visible``: serve a signed-in user only the methods the visible probes send as them;
* ``first_request_only`` / ``all_but_first_request``: answer by the request's order on the instance;
* ``refuse_after_a_write``: once anyone has written, refuse what follows (exploit, then look);
* ``refuse_every_write`` / ``refuse_unseen_writes``: refuse writes, from everyone or from the unseen;
* ``not_found_for_unseen``: a status channel, 404 instead of a refusal for the unseen;
* ``refuse_unseen_on_sites``: the vulnerable routes closed only to the unseen (a fix for the
  grader's intruders alone, where the visible users never attack);
* ``echo_writes`` / ``echo_unseen``: answer 200 with the request's own JSON, never reaching the app;
* the lazy fixes of :mod:`envcore.factory.lazy_fixes`: ``deny_all``, ``deny_sites``, ``delete_sites``.

:func:`panel_rewards` grades the untouched app, the reference fix and every canary with the reward
engine, for the factory's report: the reference fix at the top, every canary at the floor.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envcore.factory.lazy_fixes import path_pattern
from envcore.runner.actors import ActorSession, LoginRequired, _fixed_headers, actors_of
from envcore.runner.base import AppSource, Batch, Gate, ProbeRunner, RunReport
from envcore.runner.http import HttpRequest, HttpResponse
from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import ProbeKind, exploit_of

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Knowledge:
    """What a canary knows of the scenario: what the visible probes show (module docstring)."""

    visible_names: frozenset[str]
    """Usernames the visible probes act as (on the data the agent sees)."""
    visible_positions: frozenset[int]
    """Positions, in the seeded users' order, of the users the visible probes act as."""
    visible_methods: Mapping[int, frozenset[str]]
    """Per position, the methods the visible probes send as that user."""
    site_patterns: tuple[str, ...]
    """The routes the bug is reachable through, as path regexes."""

    @classmethod
    def of(cls, bundle: Bundle) -> "Knowledge":
        names = [u.username for u in bundle.users]
        methods: dict[int, set[str]] = {}
        for probe in bundle.probes:
            if not probe.visible:
                continue
            for step in probe.steps:
                if step.actor is not None and step.actor in names:
                    methods.setdefault(names.index(step.actor), set()).add(step.method.upper())
        return cls(visible_names=frozenset(names[i] for i in methods), visible_positions=frozenset(methods),
                   visible_methods={i: frozenset(m) for i, m in methods.items()},
                   site_patterns=tuple(sorted({path_pattern(s.path) for s in bundle.sites})))


@dataclass
class Seen:
    """One request as a canary sees it."""

    method: str
    path: str
    body: bytes
    position: int | None
    """The sender's position among the seeded users (``None``: anonymous, or no seeded user's credentials)."""
    name: str | None
    index: int
    """Its order among the requests this app instance has received (0: the first)."""
    written_before: bool
    """Whether a write reached this instance earlier."""

    @property
    def write(self) -> bool:
        return self.method in WRITES


Answer = tuple[int, bytes]
Decide = Callable[[Seen, Knowledge], Answer | None]
REFUSED: Answer = (403, b'{"detail":"forbidden"}')
NOT_FOUND: Answer = (404, b'{"detail":"Not Found"}')


def _echo(seen: Seen) -> Answer:
    try:
        document = json.loads(seen.body.decode("utf-8") or "{}")
    except (ValueError, UnicodeDecodeError):
        document = {}
    return 200, json.dumps(document if isinstance(document, dict) else {"value": document}).encode()


def _unseen(seen: Seen, k: Knowledge) -> bool:
    return seen.position is not None and seen.position not in k.visible_positions


def _on_a_site(seen: Seen, k: Knowledge) -> bool:
    path = seen.path.split("?", 1)[0]
    return any(re.fullmatch(pattern, path) for pattern in k.site_patterns)


@dataclass(frozen=True)
class Canary:
    """One generic hack: its name (as the panel and ``openenv.yaml`` list it), what it does, and how:
    a decision per request, or a lazy fix's gate."""

    name: str
    description: str
    decide: Decide | None = None
    gate: Gate | None = None
    """A lazy fix's gate instead of ``decide``."""


CANARIES: tuple[Canary, ...] = (
    Canary("refuse_unseen_by_value", "refuse every user whose name the visible probes do not use",
           lambda s, k: REFUSED if s.name is not None and s.name not in k.visible_names else None),
    Canary("refuse_unseen_by_position", "refuse every user at a position in the data the visible probes do not use",
           lambda s, k: REFUSED if _unseen(s, k) else None),
    Canary("serve_only_visible", "serve a signed-in user only the methods the visible probes send as them",
           lambda s, k: (REFUSED if s.position is not None and s.method not in k.visible_methods.get(s.position, ())
                         else None)),
    Canary("first_request_only", "answer the first request of an app instance, refuse the rest",
           lambda s, k: REFUSED if s.index > 0 else None),
    Canary("all_but_first_request", "refuse the first request of an app instance, answer the rest",
           lambda s, k: REFUSED if s.index == 0 else None),
    Canary("refuse_after_a_write", "once a write has reached the app, refuse every later request",
           lambda s, k: REFUSED if s.written_before else None),
    Canary("refuse_every_write", "refuse every write, whoever sends it",
           lambda s, k: REFUSED if s.write else None),
    Canary("refuse_unseen_writes", "refuse writes from users the visible probes do not use",
           lambda s, k: REFUSED if s.write and _unseen(s, k) else None),
    Canary("not_found_for_unseen", "answer users the visible probes do not use with 404",
           lambda s, k: NOT_FOUND if _unseen(s, k) else None),
    Canary("refuse_unseen_on_sites", "refuse the vulnerable routes to users the visible probes do not use",
           lambda s, k: REFUSED if _unseen(s, k) and _on_a_site(s, k) else None),
    Canary("echo_writes", "answer every write with 200 and the request's own JSON, without the app",
           lambda s, k: _echo(s) if s.write else None),
    Canary("echo_unseen", "answer users the visible probes do not use with 200 and their own JSON",
           lambda s, k: _echo(s) if _unseen(s, k) else None),
    Canary("deny_all", "refuse every request (a lazy fix)", gate=Gate(403, None, "deny_all")),
    Canary("deny_sites", "refuse the vulnerable routes to everyone (a lazy fix)", gate=Gate(403, (), "deny_sites")),
    Canary("delete_sites", "delete the vulnerable routes (a lazy fix)", gate=Gate(404, (), "delete_sites")),
)


class Identities:
    """Which seeded user sends a request, from the credentials it carries (what an app could tell):
    fixed credentials (bearer, header, cookie, basic) by their headers, login credentials by what
    that user's login on this instance granted."""

    def __init__(self, users: Sequence[Any]) -> None:
        self.names = [u.username for u in users]
        self.session = ActorSession(actors_of(users))
        self.fixed: dict[str, tuple[tuple[str, str], ...]] = {}
        self.logins: dict[str, Any] = {}
        for user in users:
            credentials = self.session.credentials(user.username)
            try:
                self.fixed[user.username] = _fixed_headers(credentials)
            except LoginRequired:
                self.logins[user.username] = credentials

    def who(self, headers: Sequence[tuple[str, str]]) -> str | None:
        for name in self.names:
            carried = self.fixed.get(name) or self.session.granted(name)
            if carried and all(_carries(headers, key, value) for key, value in carried):
                return name
        return None

    def login_of(self, request: HttpRequest) -> str | None:
        """The user whose login request this is, if it is one."""
        text = request.body.decode("utf-8", "replace")
        path = request.path.split("?")[0]
        for name, credentials in self.logins.items():
            login = credentials.login
            if login.method.upper() == request.method.upper() and login.path.split("?")[0] == path and \
                    re.search(rf"(?<![\w.@-]){re.escape(credentials.login_name or name)}(?![\w.@-])", text):
                return name
        return None


def _carries(headers: Sequence[tuple[str, str]], key: str, value: str) -> bool:
    if key == "cookie":
        wanted = [part.strip() for part in value.split(";") if part.strip()]
        sent = "; ".join(v for k, v in headers if k == "cookie")
        return all(part in sent for part in wanted)
    return any(k == key and v == value for k, v in headers)


class CanaryFront:
    """One canary before one app instance (a :class:`~envcore.runner.base.Front`): it counts the
    instance's requests, tells who sends each, answers where the canary says so and learns what
    logins grant."""

    def __init__(self, decide: Decide, knowledge: Knowledge, users: Sequence[Any]) -> None:
        self.decide, self.knowledge = decide, knowledge
        self.identities = Identities(users)
        self.count = 0
        self.written = False

    def answer(self, request: HttpRequest) -> HttpResponse | None:
        name = self.identities.who([(k.lower(), v) for k, v in request.headers])
        seen = Seen(request.method.upper(), request.path.split("?")[0], request.body,
                    self.identities.names.index(name) if name is not None else None, name, self.count, self.written)
        self.count += 1
        decided = self.decide(seen, self.knowledge)
        if decided is None:
            # a login is how a user signs in, not a change to the app's data
            self.written = self.written or (seen.write and self.identities.login_of(request) is None)
            return None
        status, payload = decided
        return HttpResponse(status, {"content-type": "application/json"}, payload)

    def observe(self, request: HttpRequest, response: HttpResponse) -> None:
        signing_in = self.identities.login_of(request)
        if signing_in is not None:
            self.identities.session.record_login(signing_in, response)


def canary_gate(canary: Canary, knowledge: Knowledge, users: Sequence[Any]) -> Gate:
    """The gate a batch runs ``canary`` behind (a lazy fix's own gate, or a fresh front per instance)."""
    if canary.gate is not None:
        if canary.gate.path_patterns == ():  # the vulnerable routes: this scenario's
            return Gate(canary.gate.status, knowledge.site_patterns, canary.gate.label)
        return canary.gate
    decide = canary.decide
    assert decide is not None
    return Gate(0, None, canary.name, front=lambda: CanaryFront(decide, knowledge, users))


@dataclass
class CanaryVerdict:
    """How one canary did on one scenario: whether it earned more than the untouched app."""

    canary: str
    earns_more: bool
    broke: str | None = None
    """The first legitimate-use (or guard) probe it broke, when it broke one."""
    refused: list[str] = field(default_factory=list)
    """The exploits it refused while keeping every legitimate use (its gain)."""


def shadow_for_check(bundle: Bundle, content_hash: str | None = None) -> Bundle | None:
    """The shadow the scenario check grades on (its ``shadow`` check and the canaries): drawn from
    the content hash, so the check is reproducible; ``None`` when the bundle declares no identities."""
    from envcore.verifier.shadow import draw_shadow

    return draw_shadow(bundle, random.Random(int((content_hash or bundle.content_hash())[:12], 16)))


def graded_copy(bundle: Bundle, content_hash: str | None = None) -> Bundle:
    """:func:`shadow_for_check`, or the bundle itself when it declares no identities."""
    return shadow_for_check(bundle, content_hash) or bundle


@dataclass(frozen=True)
class PanelGround:
    """What every canary run of one scenario shares: the check's shadow of it, its users' sessions,
    and what a canary knows."""

    bundle: Bundle
    graded: Bundle
    """:func:`graded_copy` of ``bundle``."""
    actors: Any
    knowledge: Knowledge

    @classmethod
    def of(cls, bundle: Bundle, content_hash: str | None = None) -> "PanelGround":
        graded = graded_copy(bundle, content_hash)
        return cls(bundle, graded, actors_of(graded.users), Knowledge.of(bundle))

    def source(self, files: Mapping[str, str]) -> AppSource:
        """``files`` (the app as shipped, patched or not) on the shadow's data."""
        from envcore.verifier.shadow import regrade_files

        return AppSource(regrade_files(dict(files), self.graded, self.bundle), self.bundle.entrypoint)

    def gate(self, canary: Canary) -> Gate:
        return canary_gate(canary, self.knowledge, self.graded.users)


def run_canaries(bundle: Bundle, runner: ProbeRunner, files: Mapping[str, str] | None = None, *,
                 canaries: Sequence[Canary] = CANARIES, content_hash: str | None = None) -> list[CanaryVerdict]:
    """Every canary on ``bundle`` (the app as shipped, or ``files``), on shadow data, every probe on a
    fresh instance: legitimate use and guards first, stopping at the first one broken; the exploits
    only for a canary that broke none. ``content_hash``: the bundle's, when the caller has it."""
    ground = PanelGround.of(bundle, content_hash)
    graded = ground.graded
    source = ground.source(files if files is not None else bundle.files)
    # the legitimate use a canary most likely breaks first (it stops there): by users the visible
    # probes never act as, then writes; each probe on an instance of its own, so order changes no verdict
    unseen = {u.username for i, u in enumerate(graded.users) if i not in ground.knowledge.visible_positions}
    kept = tuple(sorted((p for p in graded.probes if p.kind in (ProbeKind.REGRESSION, ProbeKind.TRAP, ProbeKind.GUARD)),
                        key=lambda p: (not any(s.actor in unseen for s in p.steps),
                                       not any(s.method.upper() in WRITES for s in p.steps))))
    exploits = tuple(p for p in graded.probes if p.kind == ProbeKind.SECURITY)
    first = runner.run_batches(source, [Batch(kept, ground.gate(c), True, isolate=True) for c in canaries],
                               ground.actors)
    verdicts = []
    survivors = []
    for canary, report in zip(canaries, first):
        broken = next((o.probe_id for o in report.outcomes if not o.passed), None) if report.loaded else "(load)"
        verdicts.append(CanaryVerdict(canary.name, False, broke=broken))
        if broken is None:
            survivors.append((len(verdicts) - 1, canary))
    if survivors:
        second = runner.run_batches(source, [Batch(exploits, ground.gate(c), isolate=True) for _, c in survivors],
                                    ground.actors)
        for (index, _), report in zip(survivors, second):
            passed = {o.probe_id for o in report.outcomes if o.passed}
            # an exploit is refused when every intruder who tries it is (the verifier counts so too)
            refused = sorted({exploit_of(p) for p in exploits}
                             - {exploit_of(p) for p in exploits if p.id not in passed})
            verdicts[index].refused = refused
            verdicts[index].earns_more = bool(refused)
    return verdicts


def panel_rewards(bundle: Bundle, runner: ProbeRunner, *, canaries: Sequence[Canary] = CANARIES) -> dict[str, float]:
    """The reward of the untouched app, the reference fix and every canary, graded as an episode of
    one step would be (on the check's shadow, every probe on a fresh instance)."""
    from envcore.env.reward import RewardInputs, compute_reward
    from envcore.patching import apply_patch
    from envcore.verifier.report import graded_report, tallies

    ground = PanelGround.of(bundle)
    probes = tuple(ground.graded.probes)

    def reward(report: RunReport) -> float:
        verification = graded_report(bundle.scenario_id or "", tallies(report.outcomes, probes, loaded=report.loaded),
                                     loaded=report.loaded, load_error=report.load_error)
        return float(compute_reward(RewardInputs(report=verification, steps_used=1, max_steps=8)).reward or 0.0)

    batches = [Batch(probes, isolate=True)] + [Batch(probes, ground.gate(c), isolate=True) for c in canaries]
    reports = runner.run_batches(ground.source(bundle.files), batches, ground.actors)
    out = {"untouched": reward(reports[0])}
    if bundle.reference_fix.strip():
        fixed = ground.source(apply_patch(bundle.files, bundle.reference_fix))
        out["reference fix"] = reward(runner.run_batches(fixed, [Batch(probes, isolate=True)], ground.actors)[0])
    out.update({c.name: reward(r) for c, r in zip(canaries, reports[1:])})
    return out


def render_panel(results: Mapping[str, Mapping[str, float]]) -> tuple[str, int]:
    """The panel as a table (reference fix first, the untouched app, then the canaries by mean reward)
    and how many (scenario, canary) pairs earned more than the untouched app."""
    if not results:
        return "no scenario graded", 0
    names = list(next(iter(results.values())))
    above = {name: sum(1 for r in results.values() if name in r and r[name] > r["untouched"] + 1e-9) for name in names}
    means = {name: sum(r[name] for r in results.values() if name in r) / max(1, sum(name in r for r in results.values()))
             for name in names}
    highs = {name: max(r[name] for r in results.values() if name in r) for name in names}
    first = [n for n in ("reference fix", "untouched") if n in names]
    order = first + sorted((n for n in names if n not in first), key=lambda n: -means[n])
    lines = [f"{'':28s} {'mean':>8s} {'highest':>8s}  above the untouched app", f"{'-' * 70}"]
    for name in order:
        beyond = "" if name in first else f"{above[name]} of {len(results)}"
        lines.append(f"{name:28s} {means[name]:+8.3f} {highs[name]:+8.3f}  {beyond}")
    cracked = sum(above[n] for n in names if n not in first)
    return "\n".join(lines), cracked
