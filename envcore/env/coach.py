"""The coach of a person playing by hand: a checklist ticked from their own steps, and the exploit
replayed before and after their patch once they submit.

**What counts as the exploit.** A request is an exploit when the app as shipped serves it and the
app as its reference fix leaves it does not: replayed on a fresh copy of each (so nothing the player
did earlier in the episode, such as a record they created or deleted, decides it), the shipped app
answers below 400 where the fixed one refuses (400-499), or both answer and the shipped one breaks a
fact the scenario's security probes check (a secret in the body, a sensitive key, an off-site
redirect, a field set) that the fixed one keeps. So any user, any record and any spelling of the
attack counts, not only the hidden probe's own request, and the owner reading their own record never
does. A request the fixed app serves is legitimate use.

**The checklist** (:meth:`Coach.checklist`), in the order a reviewer works:

1. *Reproduce the exploit*: a request, before any patch, that is an exploit and that the live app
   answered as the shipped app does.
2. *Patch the app*: the files differ from the shipped app.
3. *See the exploit refused*: after the latest patch, an exploit the live app refused as the fixed
   app does, or the visible security tests passing.
4. *Check legitimate use still works*: after the latest patch, a legitimate request the live app
   still served, or every visible regression and trap test passing.

Items 3 and 4 belong to one version of the code: a new patch un-ticks them until they are checked
again. Replays cost two sandbox runs per distinct request (cached for the episode); only play
sessions have a coach, so agents pay nothing. What the coach says is about the player's own
requests; the hidden suite's requests are shown only in the debrief of a scenario whose disclosure
is ``full``.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from envcore.patching import PatchError, apply_patch
from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.runner.http import HttpResponse
from envcore.sandbox.runner import answer_sandboxed, run_sandboxed
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep, StatusIn, check_fact, describe_fact
from envcore.verifier.verify import graded_source

if TYPE_CHECKING:
    from envcore.env.episode import Episode

_JUDGES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="coach-judge")
_REPLAYS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="coach-replay")
"""A judgement (on ``_JUDGES``) replays on the fixed app on ``_REPLAYS`` meanwhile; a pool of its own,
so judgements waiting on their replays can never take every thread the replays need."""
MAX_PENDING = 3
"""Requests one coach may have waiting to be judged; more are skipped (not ticked, never queued)."""

CHECKLIST = (
    ("exploit_reproduced", "Reproduce the exploit (a request the app should refuse, before you patch)"),
    ("patched", "Patch the app"),
    ("exploit_refused", "See the exploit refused after your latest patch"),
    ("legit_kept", "Check that legitimate use still works after your latest patch"),
)
"""The checklist's items, in order: (key, what to do)."""


def _served(response: HttpResponse) -> bool:
    return response.status is not None and response.status < 400


def _refused(response: HttpResponse) -> bool:
    return response.status is not None and 400 <= response.status < 500


@dataclass(frozen=True)
class Judgement:
    """One request, replayed on fresh copies of the app as shipped and as the reference fix leaves it."""

    exploit: bool
    legitimate: bool
    """The fixed app serves it (and it is not an exploit)."""
    shipped: HttpResponse
    fixed: HttpResponse
    facts: tuple[Any, ...] = ()
    """The security facts the shipped app broke and the fixed app kept (for an exploit served by both)."""

    def refused_by(self, response: HttpResponse) -> bool:
        """Whether ``response`` (from the player's patched app) keeps this exploit back as the fix does."""
        if response.status is None:
            return False
        if _refused(self.fixed):
            return _refused(response)
        return all(check_fact(f, response.status, response.headers, response.body) is None for f in self.facts)


@dataclass
class Tick:
    """Evidence for a checklist item: the step that ticked it and what it showed."""

    step: int
    note: str
    version: int = 0
    """The code version (patches applied so far) it was seen on."""


class Coach:
    """The checklist of one play episode; see the module docstring. Thread-safe."""

    def __init__(self, episode: Episode) -> None:
        self.episode = episode
        self.version = 0
        """Patches applied so far (a new patch un-ticks what was checked on the code before it)."""
        self.ticks: dict[str, Tick] = {}
        self._judged: dict[str, Judgement | None] = {}
        self._fixed_source: AppSource | None = None
        self._facts = _security_facts(episode.bundle.probes)
        self._lock = threading.Lock()
        self._pending: list[Future[None]] = []
        self.closed = False
        self.skipped = 0
        """Requests not judged because :data:`MAX_PENDING` were still being judged."""

    # ----- sources ------------------------------------------------------------------------------
    def _fixed(self) -> AppSource | None:
        if self._fixed_source is None:
            bundle = self.episode.bundle
            try:
                files = apply_patch(dict(bundle.files), bundle.reference_fix)
            except PatchError:
                return None
            self._fixed_source = graded_source(bundle, files, bundle)
        return self._fixed_source

    def _replay(self, source: AppSource, step: ProbeStep) -> HttpResponse:
        probe = Probe(id="replay", kind=ProbeKind.REGRESSION, title="a replayed request", steps=(step,))
        try:
            # a fresh worker, not one from the episode's template: a template serves one run, and the
            # player's next test run is waiting for the one prepared for it; the request's user signs
            # in to that worker first where its credentials are a login
            return answer_sandboxed(self.episode.sandbox, source, probe, self.episode.actors)[0]
        except (RunnerInfrastructureError, KeyError, OSError) as exc:
            return HttpResponse(None, error=str(exc))

    def close(self) -> None:
        """The episode is over or gone: requests still queued are not replayed."""
        self.closed = True

    def judge(self, action: dict[str, Any]) -> Judgement | None:
        """``action`` (an ``http_request``) replayed on both apps; ``None`` if either gave no answer
        (the coach then says nothing about it)."""
        key = json.dumps([action.get("method", "GET"), action.get("path"), action.get("as_user"),
                          action.get("headers") or {}, action.get("json_body"), action.get("form")], sort_keys=True,
                         default=str)
        if key in self._judged or self.closed:
            return self._judged.get(key)
        fixed_source = self._fixed()
        step = _step_of(action)
        judgement = None
        if fixed_source is not None and step is not None:
            # both at once: a replay waits mostly on its worker, and the sandbox has slots for two
            other = _REPLAYS.submit(self._replay, fixed_source, step)
            shipped, fixed = self._replay(self.episode.base, step), other.result()
            if shipped.status is not None and fixed.status is not None:
                judgement = _judgement(shipped, fixed, self._facts)
        self._judged[key] = judgement
        return judgement

    # ----- observing the player's steps ---------------------------------------------------------
    def observe(self, action: dict[str, Any], observation: Any) -> None:
        """Tick what the step ``action`` (as sent) with its ``observation`` shows."""
        if observation.error:
            return
        with self._lock:
            tool = observation.tool
            step = self.episode.steps
            if tool in ("apply_patch", "edit_file"):
                self.version += 1
            elif tool == "http_request" and (observation.result or {}).get("status") is not None:
                # judged in the background: the response is shown at once, the checklist a moment later;
                # a player firing requests faster than they are judged has the extra ones skipped, so
                # one page can never queue work in front of everyone else's
                self._pending = [f for f in self._pending if not f.done()]
                if self.closed or len(self._pending) >= MAX_PENDING:
                    self.skipped += 1
                    return
                self._pending.append(_JUDGES.submit(self._observe_request, dict(action), dict(observation.result),
                                                  step, self.version, self.patched))
            elif tool == "run_tests":
                self._observe_tests(observation.result or {}, step)

    def _tick(self, key: str, step: int, note: str, version: int | None = None) -> None:
        version = self.version if version is None else version
        if key not in self.ticks or self.ticks[key].version < version:
            self.ticks[key] = Tick(step, note, version)

    def _observe_request(self, action: dict[str, Any], result: dict[str, Any], step: int, version: int,
                         patched: bool) -> None:
        """Judge a request of the code at ``version`` (``patched`` or not) and tick what it shows."""
        live = HttpResponse(int(result["status"]), {str(k).lower(): str(v) for k, v in (result.get("headers") or {}).items()},
                            str(result.get("body") or "").encode())
        judgement = self.judge(action)
        if judgement is None:
            return
        said = _request_words(action)
        with self._lock:
            if not patched:
                if judgement.exploit and live.status == judgement.shipped.status:
                    self._tick("exploit_reproduced", step, f"{said} was answered {live.status}; "
                                                           f"the fixed app answers {judgement.fixed.status}", version)
            elif judgement.exploit and judgement.refused_by(live):
                self._tick("exploit_refused", step, f"{said} is now answered {live.status}", version)
            elif judgement.legitimate and _served(live):
                self._tick("legit_kept", step, f"{said} is still answered {live.status}", version)

    def _observe_tests(self, result: dict[str, Any], step: int) -> None:
        if not self.patched or not result.get("loaded"):
            return
        probes = result.get("probes") or []
        legit = [p for p in probes if p.get("kind") in ("regression", "trap")]
        security = [p for p in probes if p.get("kind") == "security"]
        if legit and all(p.get("passed") for p in legit):
            self._tick("legit_kept", step, f"the visible tests of legitimate use pass ({len(legit)} of {len(legit)})")
        if security and all(p.get("passed") for p in security):
            self._tick("exploit_refused", step, f"the visible security tests pass ({len(security)} of {len(security)})")

    # ----- what the page shows ------------------------------------------------------------------
    @property
    def patched(self) -> bool:
        return self.episode.files != self.episode.original

    def settle(self, timeout_s: float | None = None) -> bool:
        """Wait (at most ``timeout_s``) for the requests still being judged; whether none is left."""
        with self._lock:
            pending = list(self._pending)
        done, not_done = wait(pending, timeout=timeout_s)
        with self._lock:
            self._pending = [f for f in self._pending if f not in done]
        return not not_done

    def checklist(self, wait_s: float | None = 0.0) -> list[dict[str, Any]]:
        """The items in order: ``key``, ``label``, ``done``, ``note`` (the evidence, or why not yet),
        after waiting up to ``wait_s`` for requests still being judged (``None``: until they are);
        ``pending`` says whether some still are."""
        settled = self.settle(wait_s)
        with self._lock:
            items = []
            for key, label in CHECKLIST:
                tick = self.ticks.get(key)
                if key == "patched":
                    changed = sum(1 for p in set(self.episode.files) | set(self.episode.original)
                                  if self.episode.files.get(p) != self.episode.original.get(p))
                    done, note = self.patched, f"{changed} file(s) changed" if self.patched else ""
                elif key == "exploit_reproduced":
                    done, note = tick is not None, f"step {tick.step}: {tick.note}" if tick else ""
                else:
                    done = tick is not None and tick.version == self.version and self.patched
                    note = (f"step {tick.step}: {tick.note}" if done else
                            "seen before your latest patch: check again" if tick is not None and self.patched else "")
                items.append({"key": key, "label": label, "done": done, "note": note, "pending": not settled})
            return items

    def exploit_replays(self) -> list[dict[str, Any]]:
        """Each security probe run on a fresh copy of the app as shipped and of the player's final
        files: ``probe`` (the :class:`Probe`), ``before`` and ``after`` (its outcome, with each step's
        status and body excerpt; ``passed`` means the exploit was refused). Empty when the runs fail."""
        episode = self.episode
        probes = [p for p in episode.bundle.probes if p.kind == ProbeKind.SECURITY]
        if not probes:
            return []
        final = graded_source(episode.bundle, episode.files, episode.bundle)
        shipped = _REPLAYS.submit(run_sandboxed, episode.sandbox, episode.base, probes, episode.actors,
                                  base=episode.base)  # both at once
        try:
            after = run_sandboxed(episode.sandbox, final, probes, episode.actors, base=episode.base)
            before = shipped.result()
        except RunnerInfrastructureError:
            return []
        outcome_before = {o.probe_id: o for o in before.outcomes}
        outcome_after = {o.probe_id: o for o in after.outcomes}
        return [{"probe": p, "before": outcome_before.get(p.id), "after": outcome_after.get(p.id),
                 "after_load_error": after.load_error} for p in probes]


def _security_facts(probes: tuple[Probe, ...]) -> tuple[Any, ...]:
    """The facts (other than a status) the security probes check, each once."""
    facts: dict[str, Any] = {}
    for probe in probes:
        if probe.kind != ProbeKind.SECURITY:
            continue
        for step in probe.steps:
            for fact in step.expect:
                if not isinstance(fact, StatusIn):
                    facts.setdefault(describe_fact(fact) + repr(fact), fact)
    return tuple(facts.values())


def _judgement(shipped: HttpResponse, fixed: HttpResponse, facts: tuple[Any, ...]) -> Judgement:
    if _served(shipped) and _refused(fixed):
        return Judgement(True, False, shipped, fixed)
    if _served(shipped) and _served(fixed):
        assert shipped.status is not None and fixed.status is not None
        broken = tuple(f for f in facts if check_fact(f, shipped.status, shipped.headers, shipped.body) is not None
                       and check_fact(f, fixed.status, fixed.headers, fixed.body) is None)
        if broken:
            return Judgement(True, False, shipped, fixed, broken)
        return Judgement(False, True, shipped, fixed)
    return Judgement(False, False, shipped, fixed)


def _step_of(action: dict[str, Any]) -> ProbeStep | None:
    path, _, query = str(action.get("path") or "").partition("?")
    try:
        return ProbeStep(actor=action.get("as_user"), method=str(action.get("method") or "GET"), path=path,
                         query=dict(parse_qsl(query, keep_blank_values=True)),
                         headers={str(k): str(v) for k, v in (action.get("headers") or {}).items()},
                         json_body=action.get("json_body"),
                         form={str(k): str(v) for k, v in action["form"].items()} if action.get("form") else None)
    except ValueError:
        return None


def _request_words(action: dict[str, Any]) -> str:
    who = f" as {action['as_user']}" if action.get("as_user") else " anonymously"
    return f"{action.get('method', 'GET')} {action.get('path')}{who}"
