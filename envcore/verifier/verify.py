"""``verify(bundle, workspace)``: grade a patched app in the sandbox.

What is graded is the workspace as the patch made it, code and data files alike
(:mod:`envcore.scenario.patch_scope`, the one definition of what a patch may change), on a
**shadow** of the bundle's data when the bundle declares identities (fresh identities drawn for this
grading alone, see :mod:`envcore.verifier.shadow`), else on its own. Where the shadow rewrites a
file the patch changed, the lines the patch left as they were are the shadow's and the lines it
wrote keep what they say: so neither special-casing the tokens, names or ids the agent could read
(in code or in a data file) nor pinning them in the data earns anything, and nothing one grading
reveals is of any use to the next. The probes are judged in this process; the
app runs in sandboxed workers (:mod:`envcore.sandbox`), one per probe, and never sees them. Probes are
sent in a fresh random order each time, one request at a time.

Nothing produced under shadow data leaves this module: a shadow grading's report is written with the
bundle's own probes and identities (what the agent knows), keeps only the status code of each
answer and the grader's own reasons (never the app's words), and a load error under the shadow is
reported from loading the app on the data the agent sees (or, if it loads there, without its text).

Only infrastructure failures are reported as such (reward ``None``); everything the app does,
including not loading, crashing or hanging, is graded as its behaviour.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal, Mapping

from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.sandbox.pool import AppLoadFailure, Sandbox, WorkerGone
from envcore.sandbox.runner import run_sandboxed
from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import ProbeOutcome
from envcore.verifier.disclosure import in_grader_words, reason_in_words
from envcore.verifier.report import (
    ProbeResult,
    VerificationReport,
    expected_steps,
    graded_report,
    probe_result,
    tallies,
    with_traps,
)
from envcore.verifier.shadow import Substitution, apply_substitution, draw_substitution, regrade_files

_random = random.SystemRandom()

SHADOW_LOAD_ERROR = ("the app did not load with the data it is graded on (fresh users and records of the same shape "
                     "as the ones it was given); its error is not shown, since it could reveal them")


def graded_source(bundle: Bundle, files: Mapping[str, str], graded: Bundle) -> AppSource:
    """The app as graded: ``files`` (the bundle's, patched or not) on the data of ``graded`` (a shadow
    or the bundle itself), see :func:`~envcore.verifier.shadow.regrade_files`.
    ``graded_source(bundle, bundle.files, graded)`` is the trusted base a patch was made from, a
    template of which the sandbox may lend the run."""
    return AppSource(regrade_files(files, graded, bundle), bundle.entrypoint)


def read_workspace(workspace: Mapping[str, str] | str | Path) -> dict[str, str]:
    """Files of a workspace given as a mapping or as a folder (read as UTF-8 text)."""
    if isinstance(workspace, Mapping):
        return dict(workspace)
    root = Path(workspace)
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8", errors="replace")
    return files


class GradingData:
    """The data one grading runs on: the bundle itself, or a shadow of it with its substitution.
    Drawn once per grading (:func:`grading_data`); an episode may draw it early, so that the sandbox
    can prepare the template its grading will use."""

    def __init__(self, bundle: Bundle, substitution: Substitution | None = None) -> None:
        self.bundle = bundle
        self.substitution = substitution if substitution is not None and substitution.mapping else None
        self.graded = apply_substitution(bundle, self.substitution) if self.substitution else bundle

    @property
    def shadow(self) -> bool:
        return self.substitution is not None

    def base(self) -> AppSource:
        """The trusted app a patch is made from, with this grading's data."""
        return graded_source(self.bundle, self.bundle.files, self.graded)


def grading_data(bundle: Bundle, *, shadow: bool = True, rng: random.Random | None = None) -> GradingData:
    """Fresh shadow data for one grading of ``bundle`` (its own data when it declares no identities,
    or without ``shadow``)."""
    return GradingData(bundle, draw_substitution(bundle, rng) if shadow else None)


def verify(
    bundle: Bundle,
    workspace: Mapping[str, str] | str | Path,
    *,
    sandbox: Sandbox | None = None,
    probe_set: Literal["all", "visible"] = "all",
    shadow: bool | GradingData = True,
) -> VerificationReport:
    """Grade ``workspace`` (the bundle's files as patched) against the bundle's probes.

    ``probe_set="visible"`` runs only the probes the agent can see, on the data it sees (what an
    episode's ``run_tests`` tool reports); it has no resolution. A full verification runs on fresh
    shadow data (``shadow=True``), on data drawn beforehand (a :class:`GradingData`), or on the
    bundle's own (``shadow=False``).
    """
    scenario_id = bundle.scenario_id or bundle.content_hash()[:16]
    if sandbox is None:
        from envcore.sandbox import default_sandbox

        try:
            sandbox = default_sandbox()
        except RunnerInfrastructureError as exc:  # e.g. not Linux: say so in the report, never crash a rollout
            return VerificationReport(scenario_id=scenario_id, outcome="infrastructure_error", resolution=None,
                                      reward=None, probe_set=probe_set, infrastructure_error=str(exc))
    files = read_workspace(workspace)
    sandbox.trust(bundle.files)
    if isinstance(shadow, GradingData):
        data = shadow
    else:
        data = grading_data(bundle, shadow=shadow and probe_set == "all")
    graded = data.graded
    probes = [p for p in graded.probes if p.visible] if probe_set == "visible" else list(graded.probes)
    # A fresh, unpredictable order every time: an app cannot tell an exploit from legitimate use by
    # its position (every probe runs on a freshly loaded app, so order never decides an outcome).
    _random.shuffle(probes)
    actors = actors_of(graded.users)  # the shadow's users sign in with the shadow's credentials
    try:
        # A shadow is drawn for one grading: its template is never wanted again, so none is prepared.
        run = run_sandboxed(sandbox, graded_source(bundle, files, graded), probes, actors, base=data.base(),
                            base_again=not data.shadow)
        load_error = run.load_error
        if load_error is not None and data.shadow:
            load_error = _visible_load_error(sandbox, bundle, files)
    except RunnerInfrastructureError as exc:
        return VerificationReport(scenario_id=scenario_id, outcome="infrastructure_error", resolution=None,
                                  reward=None, probe_set=probe_set, infrastructure_error=str(exc), shadow=data.shadow)
    shown = [p for p in bundle.probes if p.visible] if probe_set == "visible" else list(bundle.probes)
    by_id = {o.probe_id: o for o in run.outcomes}
    if data.substitution is None:
        results = tuple(probe_result(p, by_id.get(p.id)) for p in shown)
    else:
        back = data.substitution.inverse()
        results = tuple(_shadow_result(p, by_id.get(p.id), back) for p in shown)
    if probe_set == "all":  # what the app answered under grading leaves the grader in its words only
        results = tuple(in_grader_words(r) for r in results)
    return graded_report(
        scenario_id,
        tallies(run.outcomes, shown, loaded=run.loaded),
        loaded=run.loaded,
        probe_set=probe_set,
        probes=with_traps(results, bundle),
        load_error=load_error,
        shadow=data.shadow,
        containment=dict(run.containment or {}),
        restarts=run.restarts,
        elapsed_ms=run.elapsed_s * 1000,
        requests=run.requests,
    )


def _visible_load_error(sandbox: Sandbox, bundle: Bundle, files: Mapping[str, str]) -> str:
    """Why the patched app does not load, from loading it on the data the agent sees (its error
    under the shadow could name shadow identities); if it loads there, a fixed sentence."""
    try:
        worker = sandbox.spawn(graded_source(bundle, files, bundle))
        try:
            worker.wait_ready(sandbox.limits.load_timeout_s)
        finally:
            worker.close()
    except (AppLoadFailure, WorkerGone) as exc:
        return str(exc)
    return SHADOW_LOAD_ERROR


def _shadow_result(probe, outcome: ProbeOutcome | None, back: Substitution) -> ProbeResult:
    """A shadow grading's result for ``probe`` (the bundle's own), in terms the agent knows."""
    if outcome is None:
        return probe_result(probe, None)
    got = tuple(str(step.status) if step.status is not None else "no response" for step in outcome.steps)
    failures = tuple(back.text(reason_in_words(reason)) for reason in outcome.failures)
    return ProbeResult.model_construct(probe_id=probe.id, kind=probe.kind, visible=probe.visible,
                                       passed=outcome.passed, expected=expected_steps(probe), got=got,
                                       failures=failures)
