"""The probe-runner interface every backend implements, and the values it returns.

A runner takes an app (files + entrypoint), a list of declarative probes and the seeded users'
credentials (:mod:`envcore.runner.actors`), loads the app once, runs the probes in order and returns
one :class:`ProbeOutcome` per probe. Grading facts are evaluated by :func:`envcore.scenario.probes.check_fact` in the caller's process;
a backend only has to move requests in and responses out.

An app that fails to load (syntax error, import error, startup crash) is an ordinary result
(``load_error`` set, no outcomes): it is the app's fault. Only a failure of the runner itself raises
:class:`RunnerInfrastructureError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from envcore.runner.actors import Actors
from envcore.runner.diagnostics import AppError, LoadProfile
from envcore.runner.http import HttpRequest, HttpResponse
from envcore.scenario.probes import Probe, ProbeOutcome


class RunnerInfrastructureError(RuntimeError):
    """The runner could not do its job (not the app's fault); graded as reward ``None``."""


@dataclass(frozen=True)
class AppSource:
    """An app as files. ``entrypoint`` is ``module.path:attribute`` relative to the root."""

    files: Mapping[str, str]
    entrypoint: str


@dataclass(frozen=True)
class RunReport:
    """What one run of probes against one app produced."""

    load_error: str | None
    outcomes: tuple[ProbeOutcome, ...] = ()
    elapsed_s: float = 0.0
    requests: int = 0
    stopped_early: bool = False
    containment: Mapping[str, object] | None = None
    """The isolation layers the app ran under (sandboxed backends only)."""
    restarts: int = 0
    """Times the app's process was replaced after crashing or hanging (sandboxed backends only)."""
    app_errors: tuple[AppError, ...] = ()
    """The app's tracebacks behind 5xx answers, in probe order (runners built with ``diagnostics``)."""
    load_profile: LoadProfile | None = None
    """Where the load's time went, when it failed or was slow (runners built with ``diagnostics``)."""

    @property
    def loaded(self) -> bool:
        return self.load_error is None

    def passed(self, probe_id: str) -> bool | None:
        for outcome in self.outcomes:
            if outcome.probe_id == probe_id:
                return outcome.passed
        return None


class Front(Protocol):
    """A front door with a memory, one per app instance: it may answer a request itself (the
    request then never reaches the app) and sees every answer the app gives."""

    def answer(self, request: HttpRequest) -> HttpResponse | None: ...

    def observe(self, request: HttpRequest, response: HttpResponse) -> None: ...


@dataclass(frozen=True)
class Gate:
    """A declarative front door put before the app for one batch: requests whose path matches one
    of ``path_patterns`` (regexes; ``None`` means every path) are answered with ``status`` and never
    reach the app. The scenario check models lazy fixes (deny all, deny or delete the vulnerable
    routes) as gates so that they can share one loaded app.

    With ``front`` (a factory) the door decides request by request instead: every app instance
    gets a fresh :class:`Front` (the scenario check's canaries, :mod:`envcore.factory.canaries`), and
    ``status`` and ``path_patterns`` are not used."""

    status: int
    path_patterns: tuple[str, ...] | None = None
    label: str = ""
    front: Callable[[], Front] | None = None


@dataclass(frozen=True)
class Batch:
    """Probes to run, in order, against a freshly loaded copy of the app; with ``isolate`` each
    probe gets an instance of its own, as in grading, whatever the runner does by default."""

    probes: tuple[Probe, ...]
    gate: Gate | None = None
    stop_on_failure: bool = False
    isolate: bool = False


class ProbeRunner(Protocol):
    """A backend that runs declarative probes against an app."""

    name: str

    def run(
        self,
        source: AppSource,
        probes: Sequence[Probe],
        actors: Actors,
        *,
        stop_on_failure: bool = False,
    ) -> RunReport:
        """Load ``source`` once, run ``probes`` in order, return their outcomes.

        ``actors`` maps usernames to their credentials (a plain string: a bearer token). With
        ``stop_on_failure`` the run ends at the first failed probe (the scenario check uses this to
        reject lazy fixes quickly).
        """
        ...

    def run_batches(self, source: AppSource, batches: Sequence[Batch], actors: Actors) -> list[RunReport]:
        """Load ``source`` once and run each batch on its own pristine copy of the app's state.

        Equivalent to one :meth:`run` per batch (with the batch's gate in front of the app), only
        cheaper: a backend may load once and fork per batch.
        """
        ...
