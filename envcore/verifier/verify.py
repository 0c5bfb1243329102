"""``verify(bundle, workspace)``: grade a patched app in the sandbox.

What is graded is the workspace's *code*. Its data files are always replaced: by the shadow's
(fresh identities the agent never saw, see :mod:`envcore.factory.shadow`) when the bundle has a
draft to re-expand, else by the bundle's own. So neither editing ``data/seed.json`` (deleting the
attacker) nor special-casing the tokens the agent could read earns anything. The probes are judged
in this process; the app runs in a sandboxed worker (:mod:`envcore.sandbox`) and never sees them. Probes of a generated
scenario are sent in a fresh random order each time, one request at a time.

Only infrastructure failures are reported as such (reward ``None``); everything the app does,
including not loading, crashing or hanging, is graded as its behaviour.
"""

from __future__ import annotations

import random
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Literal, Mapping

from envcore.factory.shadow import NoShadow, is_code, regrade_files, shadow_bundle
from envcore.runner.base import AppSource, RunnerInfrastructureError
from envcore.sandbox.pool import Sandbox
from envcore.sandbox.runner import run_sandboxed
from envcore.scenario.bundle import Bundle
from envcore.verifier.report import ProbeResult, Tally, VerificationReport, probe_result, resolve, score, tally
from envcore.scenario.probes import ProbeKind

SHADOW_CACHE_SIZE = 256
_random = random.SystemRandom()
_shadows: "OrderedDict[str, Bundle | None]" = OrderedDict()
_shadows_lock = threading.Lock()


def shadow_for(bundle: Bundle) -> Bundle | None:
    """The bundle's shadow (cached per scenario), or ``None`` if it cannot have one."""
    key = bundle.scenario_id or bundle.content_hash()
    with _shadows_lock:
        if key in _shadows:
            _shadows.move_to_end(key)
            return _shadows[key]
    try:
        shadow: Bundle | None = shadow_bundle(bundle)
    except NoShadow:
        shadow = None
    with _shadows_lock:
        _shadows[key] = shadow
        while len(_shadows) > SHADOW_CACHE_SIZE:
            _shadows.popitem(last=False)
    return shadow


def graded_source(bundle: Bundle, files: Mapping[str, str], graded: Bundle) -> AppSource:
    """The app as graded: the code of ``files`` with the data files of ``graded`` (the shadow or the
    bundle itself). ``graded_source(bundle, bundle.files, graded)`` is the trusted base a patch was
    made from, whose template the sandbox forks workers from."""
    return AppSource(regrade_files({p: t for p, t in files.items() if is_code(p)}, graded), bundle.entrypoint)


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


def verify(
    bundle: Bundle,
    workspace: Mapping[str, str] | str | Path,
    *,
    sandbox: Sandbox | None = None,
    probe_set: Literal["all", "visible"] = "all",
    shadow: bool = True,
) -> VerificationReport:
    """Grade ``workspace`` (the bundle's files as patched) against the bundle's probes.

    ``probe_set="visible"`` runs only the probes the agent can see, with the original identities
    (what an episode's ``run_tests`` tool reports); it has no resolution. With ``shadow`` (the default)
    a full verification uses shadow identities whenever the bundle has a draft.
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
    graded = bundle
    if probe_set == "all" and shadow:
        graded = shadow_for(bundle) or bundle
    probes = bundle.visible_probes if probe_set == "visible" else graded.probes
    order = list(probes)
    if graded.spec is not None:
        # A fresh, unpredictable order every time: an app cannot tell an exploit from legitimate use
        # by its position (generated probes own their records, so order never decides an outcome).
        _random.shuffle(order)
    tokens = {user.username: user.token for user in graded.users}
    # The trusted app the patch was made from, with the same data: workers come from its template.
    base = graded_source(bundle, bundle.files, graded)
    try:
        run = run_sandboxed(sandbox, graded_source(bundle, files, graded), order, tokens, base=base)
    except RunnerInfrastructureError as exc:
        return VerificationReport(scenario_id=scenario_id, outcome="infrastructure_error", resolution=None,
                                  reward=None, probe_set=probe_set, infrastructure_error=str(exc),
                                  shadow=graded is not bundle)
    by_id = {o.probe_id: o for o in run.outcomes}
    results: tuple[ProbeResult, ...] = tuple(probe_result(p, by_id.get(p.id)) for p in probes)
    outcomes = list(run.outcomes)
    security, regression, trap = (tally(outcomes, k) for k in (ProbeKind.SECURITY, ProbeKind.REGRESSION, ProbeKind.TRAP))
    if not run.loaded:
        # Nothing ran: every probe counts as failed.
        security, regression, trap = (
            Tally(passed=0, total=sum(p.kind == k for p in probes))
            for k in (ProbeKind.SECURITY, ProbeKind.REGRESSION, ProbeKind.TRAP)
        )
    resolution = resolve(security, regression, trap) if probe_set == "all" else None
    return VerificationReport(
        scenario_id=scenario_id,
        outcome="graded" if run.loaded else "load_error",
        resolution=resolution,
        reward=score(resolution, security),
        probe_set=probe_set,
        security=security,
        regression=regression,
        trap=trap,
        probes=results,
        load_error=run.load_error,
        shadow=graded is not bundle,
        containment=dict(run.containment or {}),
        restarts=run.restarts,
        elapsed_ms=run.elapsed_s * 1000,
        requests=run.requests,
    )
