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
probe whose every request stops at the gate needs none. When a worker crashes or hangs, the request
it was serving and the rest of its probe fail; the other probes are unaffected. If the app does not
load for the first probe that needs it, nothing is graded (``load_error``). If the whole run takes
longer than its budget (``limits.verify_timeout_s`` plus ``limits.probe_allowance_s`` per probe),
*every* probe fails, whichever had been answered: which probes finish in time depends on their
order, so only the all-or-nothing rule is order-free.
:class:`SandboxRunner` wraps this in the :class:`~envcore.runner.base.ProbeRunner` interface so the
scenario check runs on it unchanged.
"""

from __future__ import annotations

import re
import time
from typing import Mapping, Sequence
from urllib.parse import unquote

from envcore.runner.base import AppSource, Batch, Gate, RunReport
from envcore.runner.execute import assemble_outcomes, step_request
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


class _Timeout(Exception):
    """The verification ran past its deadline."""


def run_sandboxed(
    sandbox: Sandbox,
    source: AppSource,
    probes: Sequence[Probe],
    tokens: Mapping[str, str],
    *,
    gate: Gate | None = None,
    stop_on_failure: bool = False,
    base: AppSource | None = None,
) -> RunReport:
    """Run ``probes`` against ``source``, each in a fresh worker; see the module docstring. ``base``
    (the trusted app ``source`` was patched from, with the same data files) lets the workers come
    from a template of that app, lent to this run, when the patch fits it."""
    limits = sandbox.limits
    started = time.perf_counter()
    budget_s = limits.verify_timeout_s + limits.probe_allowance_s * len(probes)
    deadline = time.monotonic() + budget_s
    blocks = _gate_matcher(gate) if gate is not None else (lambda request: None)
    template, plan = None, None
    if base is not None and sandbox.templates.enabled and fits(source, base) and _needs_app(probes, tokens, blocks) > 1:
        template = sandbox.templates.acquire(base)  # one import for the whole run instead of one per probe
    responses: list[HttpResponse] = []
    judged: list[Probe] = []
    containment: dict | None = None
    loaded_once = False
    crashed = 0
    sent = 0
    try:
        for probe in probes:
            requests = [step_request(step, tokens) for step in probe.steps]
            answers: list[HttpResponse | None] = [blocks(r) for r in requests]
            if any(a is None for a in answers):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Timeout
                try:
                    worker = sandbox.spawn(source, template, plan)
                    containment = worker.wait_ready(min(limits.load_timeout_s, left))
                except (AppLoadFailure, WorkerGone) as exc:
                    if not loaded_once:
                        return RunReport(load_error=str(exc), elapsed_s=time.perf_counter() - started,
                                         containment=containment)
                    answers = [a or HttpResponse(None, error=f"the app did not load for this check: {exc}")
                               for a in answers]
                else:
                    loaded_once = True
                    # the probe's requests as this worker must get them: {app_root} is its own folder
                    requests = [step_request(step, tokens, worker.workspace) for step in probe.steps]
                    if plan is None and worker.swap_plan is not None:
                        plan = worker.swap_plan  # the run's later workers apply it instead of planning again
                    if template is not None and worker.swapped is False:
                        # The patch is more than body changes: the rest load afresh, directly.
                        sandbox.templates.release(template)
                        template = None
                    with worker:
                        asked, gone = _serve_probe(worker, requests, answers, deadline, limits.request_timeout_s)
                    sent += asked
                    crashed += gone
            responses.extend(answers)  # type: ignore[arg-type]
            judged.append(probe)
            if stop_on_failure:
                outcomes, _ = assemble_outcomes(judged[-1:], answers)  # type: ignore[arg-type]
                if not outcomes[0].passed:
                    break
    except _Timeout:
        reason = f"not answered in time: checking this app took longer than {budget_s:g} s"
        responses = [HttpResponse(None, error=reason) for probe in probes for _ in probe.steps]
        judged = list(probes)
    finally:
        if template is not None:
            sandbox.templates.release(template)
    outcomes, _ = assemble_outcomes(judged, responses)
    return RunReport(
        load_error=None,
        outcomes=tuple(outcomes),
        elapsed_s=time.perf_counter() - started,
        requests=sent,
        stopped_early=len(judged) < len(probes),
        containment=containment,
        restarts=crashed,
    )


def _needs_app(probes: Sequence[Probe], tokens: Mapping[str, str], blocks) -> int:
    """How many of ``probes`` have a request the gate lets through to the app."""
    return sum(1 for probe in probes if any(blocks(step_request(step, tokens)) is None for step in probe.steps))


def _serve_probe(worker: Worker, requests: list[HttpRequest], answers: list[HttpResponse | None], deadline: float,
                 request_timeout_s: float) -> tuple[int, int]:
    """Send one probe's requests that the gate let through, in order, one at a time; fill in
    ``answers``. Returns (requests sent, 1 if the worker crashed or hung: the rest of the probe then
    fails)."""
    asked = 0
    for index, request in enumerate(requests):
        if answers[index] is not None:
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Timeout
        asked += 1
        try:
            # One request at a time: a worker never holds a request it has not been asked yet.
            answers[index] = worker.request(request, min(request_timeout_s, left))
        except WorkerGone as exc:
            if time.monotonic() >= deadline:
                raise _Timeout from None
            answers[index] = HttpResponse(None, error=str(exc))
            for rest in range(index + 1, len(requests)):
                if answers[rest] is None:
                    answers[rest] = HttpResponse(None, error="not sent: the app stopped during an earlier step")
            return asked, 1
    return asked, 0


class SandboxRunner:
    """The :class:`~envcore.runner.base.ProbeRunner` for untrusted apps: every probe in a fresh worker."""

    name = "sandbox"

    def __init__(self, sandbox: Sandbox | None = None) -> None:
        from envcore.sandbox import default_sandbox

        self.sandbox = sandbox or default_sandbox()

    def run(
        self,
        source: AppSource,
        probes: Sequence[Probe],
        tokens: Mapping[str, str],
        *,
        stop_on_failure: bool = False,
    ) -> RunReport:
        return run_sandboxed(self.sandbox, source, probes, tokens, stop_on_failure=stop_on_failure)

    def run_batches(self, source: AppSource, batches: Sequence[Batch], tokens: Mapping[str, str]) -> list[RunReport]:
        """Each batch's probes on pristine workers (a probe whose every request stops at its gate needs none)."""
        return [
            run_sandboxed(self.sandbox, source, batch.probes, tokens, gate=batch.gate,
                          stop_on_failure=batch.stop_on_failure)
            for batch in batches
        ]
