"""Turn probes into requests and responses into verdicts, whatever moves the bytes.

Every backend (in-process here, a sandboxed worker, a pytest subprocess) only moves bytes; this
module builds each request from its probe step (signed as its actor, :mod:`envcore.runner.actors`),
walks a probe's requests with :class:`ProbeExchange` (an actor that signs in with a login request
does so first, on the same app instance), evaluates the step's facts on the response in the
grading process, and assembles :class:`ProbeOutcome` values.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from envcore.runner.actors import Actors, ActorSession
from envcore.runner.diagnostics import AppError, failed_answer
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


def _signed_step(step: ProbeStep, session: ActorSession, app_root: str | None) -> HttpRequest:
    path, query, headers, body, form = step.path, step.query, step.headers, step.json_body, step.form
    if app_root is not None:
        path, query, headers, body, form = (_rooted(v, app_root) for v in (path, dict(query), dict(headers), body, form))
    request = HttpRequest.build(step.method, path, query=query, headers=headers, json_body=body, form=form)
    return session.sign(request, step.actor)


def step_request(step: ProbeStep, actors: Actors, app_root: str | None = None) -> HttpRequest:
    """The request of one probe step, signed as ``step.actor``, with :data:`APP_ROOT` replaced by
    ``app_root`` where given. For an actor whose requests need no login; one that signs in with a
    login request raises :class:`~envcore.runner.actors.LoginRequired` (its requests depend on the
    app's answer: walk the probe with :class:`ProbeExchange`)."""
    return _signed_step(step, ActorSession(actors), app_root)


class ProbeExchange:
    """One probe's requests to one app instance, in order, each step's actor signing in first where
    its credentials say so (once per exchange: an exchange is one app instance).

    The backend asks :meth:`next_request` what to send and hands what came back to :meth:`answer`;
    once :meth:`next_request` says ``None``, :attr:`responses` holds one response per step. A step
    whose actor's login failed is not sent: its response carries the reason in ``not_sent``.
    ``preset`` answers steps that must not reach the app (a gate's answer), and ``gate`` answers a
    login request the same way (both judged on the step's path as written, ``{app_root}`` unfilled).
    An answer that carries the app's traceback (diagnostics, see :mod:`envcore.runner.diagnostics`)
    with a 5xx status or none is kept in :attr:`app_errors`, with the request it answered.
    """

    def __init__(self, steps: Sequence[ProbeStep], actors: Actors, app_root: str | None = None, *,
                 preset: Sequence[HttpResponse | None] | None = None,
                 gate: Callable[[HttpRequest], HttpResponse | None] | None = None, probe_id: str = "") -> None:
        self.steps = tuple(steps)
        self.session = ActorSession(actors)
        for step in self.steps:  # an unknown actor is the caller's mistake: raised before anything is sent
            if step.actor is not None:
                self.session.credentials(step.actor)
        self.app_root = app_root
        self.gate = gate
        self.responses: list[HttpResponse | None] = list(preset) if preset is not None else [None] * len(self.steps)
        self._signing_in: str | None = None
        """The actor whose login request is out (``None``: a step's request is)."""
        self.probe_id = probe_id
        self.app_errors: list[AppError] = []
        self._sent: HttpRequest | None = None

    def _next_step(self) -> int | None:
        return next((i for i, response in enumerate(self.responses) if response is None), None)

    def next_request(self) -> HttpRequest | None:
        """The next request to send (a login or a step), or ``None`` when every step is answered."""
        while (index := self._next_step()) is not None:
            actor = self.steps[index].actor
            if self.session.needs_login(actor):
                assert actor is not None
                login = self.session.login_request(actor)
                gated = self.gate(login) if self.gate is not None else None
                if gated is not None:
                    self.session.record_login(actor, gated)
                    continue
                self._signing_in = actor
                self._sent = login
                return login
            failure = self.session.login_failure(actor)
            if failure is not None:
                self.responses[index] = HttpResponse(None, error=failure, not_sent=failure)
                continue
            self._signing_in = None
            self._sent = _signed_step(self.steps[index], self.session, self.app_root)
            return self._sent
        return None

    def answer(self, response: HttpResponse) -> None:
        """What came back for the request :meth:`next_request` gave last."""
        if response.traceback is not None and self._sent is not None and (
                failed_answer(response.status) or response.error is not None):  # (raised after answering)
            index = self._next_step()
            actor = self._signing_in if self._signing_in is not None else (
                self.steps[index].actor if index is not None else None)
            self.app_errors.append(AppError(self.probe_id, self._sent.method, self._sent.path, actor,
                                            response.status, response.traceback, login=self._signing_in is not None))
        if self._signing_in is not None:
            self.session.record_login(self._signing_in, response)
            self._signing_in = None
            return
        index = self._next_step()
        if index is not None:
            self.responses[index] = response

    def abandon(self, reason: str) -> None:
        """Answer every step not sent yet with ``reason`` (the app stopped): a step whose actor's
        login failed keeps that reason."""
        for index, response in enumerate(self.responses):
            if response is None:
                failure = self.session.login_failure(self.steps[index].actor)
                self.responses[index] = (HttpResponse(None, error=failure, not_sent=failure) if failure
                                         else HttpResponse(None, error=reason))

    @property
    def answers(self) -> list[HttpResponse]:
        """One response per step (call once :meth:`next_request` has said ``None``)."""
        return [r if r is not None else HttpResponse(None, error="not sent") for r in self.responses]


def judge(step: ProbeStep, response: HttpResponse) -> StepResult:
    excerpt = response.body[:EXCERPT_CHARS].decode("utf-8", "replace")
    if response.not_sent is not None:
        return StepResult(status=None, body_excerpt="", failures=(response.not_sent,))
    if response.status is None:
        return StepResult(status=None, body_excerpt=excerpt, failures=(f"no response ({response.error})",))
    failures = []
    for fact in step.expect:
        reason = check_fact(fact, response.status, response.headers, response.body)
        if reason is not None:
            failures.append(reason)
    return StepResult(status=response.status, body_excerpt=excerpt, failures=tuple(failures))


def probe_outcome(probe: Probe, responses: Sequence[HttpResponse]) -> ProbeOutcome:
    """``probe`` judged on ``responses``, one per step (as its :class:`ProbeExchange` answers them)."""
    results = tuple(judge(step, response) for step, response in zip(probe.steps, responses, strict=True))
    return ProbeOutcome(probe_id=probe.id, kind=probe.kind, visible=probe.visible,
                        passed=all(not r.failures for r in results), steps=results)


def assemble_outcomes(
    probes: Sequence[Probe], responses: Sequence[HttpResponse], *, stop_on_failure: bool = False
) -> tuple[list[ProbeOutcome], bool]:
    """Judge ``responses`` (one per step: every probe's steps in order, probe after probe, as each
    probe's :class:`ProbeExchange` answers them); return (outcomes, stopped early).

    With ``stop_on_failure`` the outcomes end at the first failed probe, exactly as if the run had
    stopped there (a backend that sends every request up front still reports the same result)."""
    outcomes: list[ProbeOutcome] = []
    index = 0
    for probe in probes:
        outcome = probe_outcome(probe, responses[index:index + len(probe.steps)])
        index += len(probe.steps)
        outcomes.append(outcome)
        if stop_on_failure and not outcome.passed:
            return outcomes, len(outcomes) < len(probes)
    return outcomes, False


async def run_probes(
    send: Send,
    probes: Sequence[Probe],
    actors: Actors,
    *,
    stop_on_failure: bool = False,
    app_root: str | None = None,
    app_errors: list[AppError] | None = None,
) -> tuple[list[ProbeOutcome], int, bool]:
    """Run ``probes`` in order; return (outcomes, requests sent, stopped early). Each probe's actors
    that sign in with a login request do so at the start of that probe (logins count as sent).
    The app's tracebacks the answers carried (diagnostics) are added to ``app_errors``."""
    outcomes: list[ProbeOutcome] = []
    sent = 0
    for probe in probes:
        exchange = ProbeExchange(probe.steps, actors, app_root, probe_id=probe.id)
        while (request := exchange.next_request()) is not None:
            exchange.answer(await send(request))
            sent += 1
        if app_errors is not None:
            app_errors += exchange.app_errors
        outcome = probe_outcome(probe, exchange.answers)
        outcomes.append(outcome)
        if stop_on_failure and not outcome.passed:
            return outcomes, sent, len(outcomes) < len(probes)
    return outcomes, sent, False
