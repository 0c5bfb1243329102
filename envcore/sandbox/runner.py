"""Probes against an app in a sandboxed worker: the backend for untrusted code.

:func:`run_sandboxed` turns probes into requests in the parent, sends them to a worker one at a time
(the next only once the last is answered, so the app never sees a request before it must answer it),
reads each answer with a deadline, and judges it in the parent. A :class:`~envcore.runner.base.Gate` is applied in the
parent too: gated requests never reach the worker. When the worker crashes or hangs, the request
it was serving fails, a fresh worker (pristine state, as after a server restart) takes the rest, up
to ``limits.max_restarts`` times; past that, or past the verification's deadline, the remaining
requests fail unsent. :class:`SandboxRunner` wraps this in the
:class:`~envcore.runner.base.ProbeRunner` interface so the scenario check runs on it unchanged.
"""

from __future__ import annotations

import re
import time
from typing import Mapping, Sequence
from urllib.parse import unquote

from envcore.runner.base import AppSource, Batch, Gate, RunReport
from envcore.runner.execute import assemble_outcomes, plan_requests
from envcore.runner.http import HttpRequest, HttpResponse, gate_body
from envcore.sandbox.pool import AppLoadFailure, Sandbox, WorkerGone
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
    """Run ``probes`` against ``source`` in a fresh worker; see the module docstring. ``base`` (the
    trusted app ``source`` was patched from) lets the worker come from that app's template."""
    limits = sandbox.limits
    started = time.perf_counter()
    deadline = time.monotonic() + limits.verify_timeout_s
    requests = plan_requests(probes, tokens)
    responses: list[HttpResponse | None] = [None] * len(requests)
    blocks = _gate_matcher(gate) if gate is not None else (lambda request: None)
    pending: list[int] = []
    for i, request in enumerate(requests):
        answer = blocks(request)
        if answer is not None:
            responses[i] = answer
        else:
            pending.append(i)
    containment: dict | None = None
    restarts = 0
    worker = None
    try:
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                _fail_rest(responses, pending, f"not sent: the verification exceeded {limits.verify_timeout_s:g} s")
                break
            if worker is None:
                try:
                    worker = sandbox.spawn(source, base)
                    containment = worker.wait_ready(min(limits.load_timeout_s, left))
                except (AppLoadFailure, WorkerGone) as exc:
                    if worker is not None:
                        worker.close()
                    worker = None
                    if restarts == 0:
                        return RunReport(load_error=str(exc), elapsed_s=time.perf_counter() - started,
                                         containment=containment)
                    _fail_rest(responses, pending, f"not sent: the restarted app did not load ({exc})")
                    break
            index = pending[0]
            try:
                # One request at a time: a worker never holds a request it has not been asked yet, so
                # it cannot look ahead at the rest of the probes (e.g. to refuse only the last ones).
                responses[index] = worker.request(requests[index], min(limits.request_timeout_s,
                                                                      deadline - time.monotonic()))
                pending.pop(0)
            except WorkerGone as exc:
                responses[index] = HttpResponse(None, error=str(exc))
                pending.pop(0)
                worker.close()
                worker = None
                restarts += 1
                if restarts > limits.max_restarts and pending:
                    _fail_rest(responses, pending, f"not sent: the app crashed or hung {restarts} times")
                    break
    finally:
        if worker is not None:
            worker.close()
    outcomes, stopped = assemble_outcomes(probes, responses, stop_on_failure=stop_on_failure)  # type: ignore[arg-type]
    return RunReport(
        load_error=None,
        outcomes=tuple(outcomes),
        elapsed_s=time.perf_counter() - started,
        requests=len(requests),
        stopped_early=stopped,
        containment=containment,
        restarts=restarts,
    )


def _fail_rest(responses: list[HttpResponse | None], pending: list[int], reason: str) -> None:
    for index in pending:
        responses[index] = HttpResponse(None, error=reason)
    pending.clear()


class SandboxRunner:
    """The :class:`~envcore.runner.base.ProbeRunner` for untrusted apps: every run in a fresh worker."""

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
        """One fresh worker per batch (a batch whose every request stops at its gate needs none)."""
        return [
            run_sandboxed(self.sandbox, source, batch.probes, tokens, gate=batch.gate,
                          stop_on_failure=batch.stop_on_failure)
            for batch in batches
        ]
