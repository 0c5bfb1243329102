"""Probes against an app in sandboxed workers: the backend for untrusted code.

**Every probe runs on the app exactly as loaded.** A probe is its own sequence of requests (create a
record, then read it back), and it is served by a worker of its own: freshly forked from a trusted
process (the zygote, or the template holding the scenario's original app), given the app, and
stopped once the probe's last answer is in. So nothing an app keeps in memory, in its files or in
a database carries from one probe to the next: an app cannot count, rank or remember the grader's
requests, and neither the order of the probes nor the kind of worker can change a result. A worker
that has run the app's code never forks anything, so there is no app-controlled process whose state
later probes could inherit.

:func:`run_sandboxed` turns each probe into requests here, sends them to its worker one at a time
(the next only once the last is answered), reads each answer with a deadline and judges it here. A
:class:`~envcore.runner.base.Gate` is applied here too: gated requests never reach a worker, and a
probe whose every request stops at the gate needs none. An actor that signs in with a login request
(:mod:`envcore.runner.actors`) does so in the probe's own worker, before its first step there: each
probe's worker is a fresh app, so each probe signs in again. When a worker crashes or hangs, the request
it was serving and the rest of its probe fail; the other probes are unaffected. If the app does not
load for the first probe that needs it, nothing is graded (``load_error``). If the whole run takes
longer than its budget (``limits.verify_timeout_s`` plus ``limits.probe_allowance_s`` per probe),
*every* probe fails, whichever had been answered: which probes finish in time depends on their
order, so only the all-or-nothing rule is order-free. Probes are independent, so a verification that
is the only one running and whose workers each import the app runs two probes at once (two
workers, each with its own folder); a template's workers share the template's folder and run one
after the other.
:class:`SandboxRunner` wraps this in the :class:`~envcore.runner.base.ProbeRunner` interface so the
scenario check runs on it unchanged.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from urllib.parse import unquote

from envcore.runner.actors import Actors
from envcore.runner.base import AppSource, Batch, Gate, RunReport
from envcore.runner.diagnostics import AppError, LoadProfile
from envcore.runner.execute import ProbeExchange, assemble_outcomes
from envcore.runner.http import HttpRequest, HttpResponse, gate_body
from envcore.sandbox.pool import AppLoadFailure, Sandbox, Worker, WorkerGone
from envcore.sandbox.templates import fits
from envcore.scenario.probes import Probe


def _gate_matcher(gate: Gate):
    patterns = None if gate.path_patterns is None else [re.compile(p) for p in gate.path_patterns]
    body = gate_body(gate.status)
    answer = HttpResponse(gate.status, {"content-type": "application/json"}, body)

    def blocks(request: HttpRequest) -> HttpResponse | None:
        path = unquote(request.path.partition("?")[0])
        if patterns is None or any(p.match(path) for p in patterns):
            return answer
        return None

    return blocks


def _as_written(step) -> HttpRequest:
    """A step's method and path as the probe writes them: all a gate looks at."""
    return HttpRequest(step.method, step.path)


class _Timeout(Exception):
    """The verification ran past its deadline."""


def run_sandboxed(
    sandbox: Sandbox,
    source: AppSource,
    probes: Sequence[Probe],
    actors: Actors,
    *,
    gate: Gate | None = None,
    stop_on_failure: bool = False,
    base: AppSource | None = None,
    base_again: bool = True,
    diagnose: bool = False,
) -> RunReport:
    """Run ``probes`` against ``source``, each in a fresh worker; see the module docstring. ``base``
    (the trusted app ``source`` was patched from, with the same data files) lets the workers come
    from a template of that app, lent to this run, when the patch fits it; ``base_again`` says
    whether a later run may want the same base (then the next template of it is prepared).
    ``diagnose`` (the scenario's author's tools; grading never asks) keeps the app's tracebacks
    behind 5xx answers and the load's profile (:mod:`envcore.runner.diagnostics`)."""
    limits = sandbox.limits
    started = time.perf_counter()
    budget_s = limits.verify_timeout_s + limits.probe_allowance_s * len(probes)
    blocks = _gate_matcher(gate) if gate is not None and gate.front is None else (lambda request: None)
    run = _Run(sandbox, source, actors, blocks, deadline=time.monotonic() + budget_s,
               front=gate.front if gate is not None else None, diagnose=diagnose)
    sandbox.run_started()
    if base is not None and sandbox.templates.enabled and fits(source, base) and _needs_app(probes, blocks) > 1:
        run.template = sandbox.templates.acquire(base, again=base_again)  # one import for the whole run instead of one per probe
    answers: list[list[HttpResponse] | None] = [None] * len(probes)
    judged = len(probes)
    try:
        # The first probe that needs the app settles the run: whether the app loads at all, and
        # whether the patch swaps into the template (and how). With ``stop_on_failure`` every probe
        # runs in order, one after the other, and the first failure ends the run.
        index = 0
        while index < len(probes) and judged == len(probes):
            answers[index] = run.serve(probes[index])
            index += 1
            if run.load_error is not None:
                return RunReport(load_error=run.load_error, elapsed_s=time.perf_counter() - started,
                                 containment=run.containment, load_profile=run.load_profile)
            if stop_on_failure and not _passed(probes[index - 1], answers[index - 1]):
                judged = index
            elif run.loaded_once and not stop_on_failure:
                break
        if judged == len(probes):
            run.serve_all(probes, range(index, len(probes)), answers)
    except _Timeout:
        reason = f"not answered in time: checking this app took longer than {budget_s:g} s"
        answers = [[HttpResponse(None, error=reason) for _ in probe.steps] for probe in probes]
        judged = len(probes)
    finally:
        run.close()
        sandbox.run_ended()
    responses = [answer for index in range(judged) for answer in answers[index]]  # type: ignore[union-attr]
    outcomes, _ = assemble_outcomes(list(probes[:judged]), responses)
    order = {probe.id: index for index, probe in enumerate(probes)}  # (two lanes finish in any order)
    return RunReport(
        load_error=None,
        outcomes=tuple(outcomes),
        elapsed_s=time.perf_counter() - started,
        requests=run.sent,
        stopped_early=judged < len(probes),
        containment=run.containment,
        restarts=run.crashed,
        app_errors=tuple(sorted(run.app_errors, key=lambda e: order.get(e.probe_id, len(order)))),
        load_profile=run.load_profile,
    )


def answer_sandboxed(sandbox: Sandbox, source: AppSource, probe: Probe, actors: Actors, *,
                     base: AppSource | None = None) -> list[HttpResponse]:
    """The raw answers to one probe's requests, from a fresh worker of ``source`` (from a template of
    ``base`` when the patch fits it), with no judging: a replay, not a grading. An app that does not
    load, or a run past its budget, answers every request with ``status=None`` and the reason; a step
    whose actor could not sign in is answered with ``not_sent`` and why."""
    limits = sandbox.limits
    run = _Run(sandbox, source, actors, lambda request: None,
               deadline=time.monotonic() + limits.verify_timeout_s + limits.probe_allowance_s)
    sandbox.run_started()
    try:
        if base is not None and sandbox.templates.enabled and fits(source, base):
            run.template = sandbox.templates.acquire(base, again=True)
        return run.serve(probe)
    except _Timeout:
        return [HttpResponse(None, error="not answered in time") for _ in probe.steps]
    finally:
        run.close()
        sandbox.run_ended()


def _passed(probe: Probe, answers: list[HttpResponse] | None) -> bool:
    outcomes, _ = assemble_outcomes([probe], list(answers or []))
    return outcomes[0].passed


class _Run:
    """The state one verification shares between its probes: the template lent to it, the swap plan
    its first worker made, whether the app loaded, and the counters of the report. Probes after the
    first may run in two lanes at once (:meth:`serve_all`); each still has a worker of its own, so
    neither their order nor their overlap can change an answer."""

    def __init__(self, sandbox: Sandbox, source: AppSource, actors: Actors, blocks, *,
                 deadline: float, front=None, diagnose: bool = False) -> None:
        self.sandbox, self.source, self.actors, self.blocks = sandbox, source, actors, blocks
        self.front = front
        """A :class:`~envcore.runner.base.Front` factory: each worker (one probe) gets a fresh one."""
        self.deadline = deadline
        self.template = None
        self.plan = None
        self.containment: dict | None = None
        self.loaded_once = False
        self.load_error: str | None = None
        self.sent = 0
        self.crashed = 0
        self.diagnose = diagnose
        self.app_errors: list[AppError] = []
        self.load_profile: LoadProfile | None = None
        """With ``diagnose``: the profile of the load that failed the run, or else of its slowest
        slow load. A load that fails once the app has loaded for another probe is kept with that
        probe instead (:meth:`_lost_load`)."""
        self._lock = threading.Lock()

    def serve(self, probe: Probe, *, lane: int = 0) -> list[HttpResponse]:
        """One probe's answers, from a worker of its own (none if the gate answers every request).
        Only lane 0 uses the run's template (a template's workers run one at a time)."""
        limits = self.sandbox.limits
        ProbeExchange(probe.steps, self.actors)  # an unknown actor raises here, before any worker
        answers: list[HttpResponse | None] = [self.blocks(_as_written(step)) for step in probe.steps]
        if all(a is not None for a in answers):
            return answers  # type: ignore[return-value]
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _Timeout
        template = self.template if lane == 0 else None
        try:
            worker = self.sandbox.spawn(self.source, template, self.plan if template is not None else None,
                                        diagnose=self.diagnose)
            containment = worker.wait_ready(min(limits.load_timeout_s, left))
        except (AppLoadFailure, WorkerGone) as exc:
            if not self.loaded_once:
                self.load_error = str(exc)
                self.load_profile = getattr(exc, "profile", None)
                return [a or HttpResponse(None, error=str(exc)) for a in answers]
            self._lost_load(probe, answers, exc)
            return [a or HttpResponse(None, error=f"the app did not load for this check: {exc}") for a in answers]
        with self._lock:
            self.loaded_once = True
            self.containment = containment
            slowest = self.load_profile
            if worker.load_profile is not None and (slowest is None or worker.load_profile.seconds > slowest.seconds):
                self.load_profile = worker.load_profile
            if template is not None and self.plan is None and worker.swap_plan is not None:
                self.plan = worker.swap_plan  # the run's later workers apply it instead of planning again
            if template is not None and worker.swapped is False and self.template is template:
                # The patch is more than body changes: the rest load afresh, directly.
                self.template = None
                self.sandbox.templates.release(template)
        # the probe's requests as this worker must get them: {app_root} is its own folder, and its
        # actors sign in to it (a login the gate stops fails as the app's own refusal would)
        exchange = ProbeExchange(probe.steps, self.actors, worker.workspace, preset=answers,
                                 gate=self.blocks, probe_id=probe.id)
        with worker:
            asked, gone = _serve_probe(worker, exchange, self.deadline, limits.request_timeout_s,
                                       self.front() if self.front is not None else None)
        answers = list(exchange.answers)
        with self._lock:
            self.sent += asked
            self.crashed += gone
            self.app_errors += exchange.app_errors
            if lane:
                self.sandbox.stats["second_lane"] += 1
        return answers  # type: ignore[return-value]

    def _lost_load(self, probe: Probe, answers: list[HttpResponse | None], exc: Exception) -> None:
        """With ``diagnose``: keep a load that failed for ``probe`` after the app loaded for another
        (a load past its deadline on a busy machine, say) next to that probe, with the profile of
        this very load (:attr:`AppError.load_failed`), not the profile of one that worked."""
        if not self.diagnose:
            return
        step = next((s for s, a in zip(probe.steps, answers) if a is None), probe.steps[0])
        error = AppError(probe.id, step.method, step.path, step.actor, None, str(exc), load_failed=True,
                         profile=getattr(exc, "profile", None))
        with self._lock:
            self.app_errors.append(error)

    def serve_all(self, probes: Sequence[Probe], indices: range, answers: list) -> None:
        """Serve the probes at ``indices`` into ``answers``. A run whose workers each import the app
        uses two lanes at once when the sandbox has a second to give (see
        :attr:`~envcore.sandbox.pool.Sandbox.probe_lanes`), each lane taking the next probe as it
        frees up; otherwise the probes run one after the other."""
        pending = list(indices)
        # A run with a template stays in one lane: a second lane's workers would import the app
        # each (a template's worker costs a third of that), and measured slower, not faster.
        if self.template is not None or len(pending) < 3 or not self.sandbox.second_lane_free():
            for index in pending:
                answers[index] = self.serve(probes[index])
            return
        queue_lock = threading.Lock()
        failure: list[BaseException] = []

        def lane(number: int) -> None:
            while not failure:
                with queue_lock:
                    if not pending:
                        return
                    index = pending.pop(0)
                try:
                    answers[index] = self.serve(probes[index], lane=number)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                    failure.append(exc)
                    return

        try:
            helper = self.sandbox.lane_pool.submit(lane, 1)
        except RuntimeError:  # the sandbox is closing: one lane
            helper = None
        try:
            lane(0)
        finally:
            if helper is not None:
                helper.result()
        if failure:
            raise failure[0]

    def close(self) -> None:
        if self.template is not None:
            self.sandbox.templates.release(self.template)
            self.template = None


def _needs_app(probes: Sequence[Probe], blocks) -> int:
    """How many of ``probes`` have a request the gate lets through to the app."""
    return sum(1 for probe in probes if any(blocks(_as_written(step)) is None for step in probe.steps))


def _serve_probe(worker: Worker, exchange: ProbeExchange, deadline: float, request_timeout_s: float,
                 front=None) -> tuple[int, int]:
    """Send one probe's requests that the gate let through (its actors' logins included), in order,
    one at a time, answering ``exchange`` (a ``front`` may answer a request itself, and sees every
    answer the app gives). Returns (requests sent, 1 if the worker crashed or hung: the rest of the
    probe then fails)."""
    asked = 0
    while (request := exchange.next_request()) is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Timeout
        if front is not None and (answer := front.answer(request)) is not None:
            exchange.answer(answer)
            continue
        asked += 1
        try:
            # One request at a time: a worker never holds a request it has not been asked yet.
            response = worker.request(request, min(request_timeout_s, left))
            if front is not None:
                front.observe(request, response)
            exchange.answer(response)
        except WorkerGone as exc:
            if time.monotonic() >= deadline:
                raise _Timeout from None
            exchange.answer(HttpResponse(None, error=str(exc)))
            exchange.abandon("not sent: the app stopped during an earlier step")
            return asked, 1
    return asked, 0


class SandboxRunner:
    """The :class:`~envcore.runner.base.ProbeRunner` for untrusted apps: every probe in a fresh worker."""

    name = "sandbox"

    def __init__(self, sandbox: Sandbox | None = None, *, diagnostics: bool = False) -> None:
        from envcore.sandbox.default import default_sandbox

        self.sandbox = sandbox or default_sandbox()
        self.diagnostics = diagnostics
        """Keep the app's tracebacks behind 5xx answers and profile its loads, for the scenario's
        author (:mod:`envcore.runner.diagnostics`); grading never builds a runner with it."""

    def run(
        self,
        source: AppSource,
        probes: Sequence[Probe],
        actors: Actors,
        *,
        stop_on_failure: bool = False,
    ) -> RunReport:
        return run_sandboxed(self.sandbox, source, probes, actors, stop_on_failure=stop_on_failure,
                             diagnose=self.diagnostics)

    def run_batches(self, source: AppSource, batches: Sequence[Batch], actors: Actors) -> list[RunReport]:
        """Each batch's probes on pristine workers (a probe whose every request stops at its gate needs
        none). Once the app fails to load for one batch, every later batch reports that failure, as
        when the in-process runner loads once for them all: loading it again would only wait again
        (a load that times out costs the whole load deadline)."""
        reports: list[RunReport] = []
        for batch in batches:
            failed = next((r for r in reports if not r.loaded), None)
            reports.append(failed if failed is not None else run_sandboxed(
                self.sandbox, source, batch.probes, actors, gate=batch.gate, stop_on_failure=batch.stop_on_failure,
                diagnose=self.diagnostics))
        return reports
