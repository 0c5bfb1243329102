"""Turn probes into requests and responses into verdicts, whatever moves the bytes.

Every backend (in-process here, a sandboxed worker later) supplies only a ``send`` coroutine; this
module builds each request from its probe step, evaluates the step's facts on the response in the
grading process, and assembles :class:`ProbeOutcome` values.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Mapping, Sequence

from envcore.runner.http import HttpRequest, HttpResponse
from envcore.scenario.probes import Probe, ProbeOutcome, ProbeStep, StepResult, check_fact

Send = Callable[[HttpRequest], Awaitable[HttpResponse]]
EXCERPT_CHARS = 300
APP_ROOT = "{app_root}"
"""In a step's path, query values, header values and JSON strings: the absolute folder the app runs
in, filled in by whoever sends the request (every sandboxed worker has a folder of its own), so a
probe can name the app's own files by an absolute path, as an attacker who knows the deployment would."""


def _rooted(value, app_root: str):
    if isinstance(value, str):
        return value.replace(APP_ROOT, app_root)
    if isinstance(value, list):
        return [_rooted(v, app_root) for v in value]
    if isinstance(value, dict):
        return {k: _rooted(v, app_root) for k, v in value.items()}
    return value


def step_request(step: ProbeStep, tokens: Mapping[str, str], app_root: str | None = None) -> HttpRequest:
    """The request of one probe step, as ``step.actor`` (its token as a bearer token), with
    :data:`APP_ROOT` replaced by ``app_root`` where given."""
    token = None
    if step.actor is not None:
        if step.actor not in tokens:
            raise KeyError(f"probe actor {step.actor!r} is not a seeded user")
        token = tokens[step.actor]
    path, query, headers, body = step.path, step.query, step.headers, step.json_body
    if app_root is not None:
        path, query, headers, body = (_rooted(v, app_root) for v in (path, dict(query), dict(headers), body))
    return HttpRequest.build(step.method, path, query=query, headers=headers, token=token, json_body=body)


def judge(step: ProbeStep, response: HttpResponse) -> StepResult:
    excerpt = response.body[:EXCERPT_CHARS].decode("utf-8", "replace")
    if response.status is None:
        return StepResult(status=None, body_excerpt=excerpt, failures=(f"no response ({response.error})",))
    failures = []
    for fact in step.expect:
        reason = check_fact(fact, response.status, response.headers, response.body)
        if reason is not None:
            failures.append(reason)
    return StepResult(status=response.status, body_excerpt=excerpt, failures=tuple(failures))


def plan_requests(probes: Sequence[Probe], tokens: Mapping[str, str], app_root: str | None = None) -> list[HttpRequest]:
    """Every step of every probe as a request, in the order they are sent."""
    return [step_request(step, tokens, app_root) for probe in probes for step in probe.steps]


def assemble_outcomes(
    probes: Sequence[Probe], responses: Sequence[HttpResponse], *, stop_on_failure: bool = False
) -> tuple[list[ProbeOutcome], bool]:
    """Judge ``responses`` (one per step, in :func:`plan_requests` order); return (outcomes, stopped early).

    With ``stop_on_failure`` the outcomes end at the first failed probe, exactly as if the run had
    stopped there (a backend that sends every request up front still reports the same result)."""
    outcomes: list[ProbeOutcome] = []
    index = 0
    for probe in probes:
        results = tuple(judge(step, responses[index + i]) for i, step in enumerate(probe.steps))
        index += len(probe.steps)
        passed = all(not r.failures for r in results)
        outcomes.append(ProbeOutcome(probe_id=probe.id, kind=probe.kind, visible=probe.visible, passed=passed, steps=results))
        if stop_on_failure and not passed:
            return outcomes, len(outcomes) < len(probes)
    return outcomes, False


async def run_probes(
    send: Send,
    probes: Sequence[Probe],
    tokens: Mapping[str, str],
    *,
    stop_on_failure: bool = False,
    app_root: str | None = None,
) -> tuple[list[ProbeOutcome], int, bool]:
    """Run ``probes`` in order; return (outcomes, requests sent, stopped early)."""
    outcomes: list[ProbeOutcome] = []
    sent = 0
    for probe in probes:
        results = []
        for step in probe.steps:
            response = await send(step_request(step, tokens, app_root))
            sent += 1
            results.append(judge(step, response))
        passed = all(not r.failures for r in results)
        outcomes.append(
            ProbeOutcome(probe_id=probe.id, kind=probe.kind, visible=probe.visible, passed=passed, steps=tuple(results))
        )
        if stop_on_failure and not passed:
            return outcomes, sent, len(outcomes) < len(probes)
    return outcomes, sent, False
