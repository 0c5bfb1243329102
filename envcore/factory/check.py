"""The scenario check: prove a bundle is a valid benchmark item before it is cached.

Like Gymnasium's ``check_env``, it is a list of small ``check_*`` functions. Each returns the
problems it found as plain sentences; :func:`check_scenario` runs them all and returns a
:class:`CheckReport`. A bundle is valid only when every check passes:

* **actors**: every probe acts as a seeded user or anonymously (nothing else runs otherwise);
* **structure**: probe ids unique, security probes hidden (a repeat naming a first try), at least one
  visible probe, every trap backed by a trap probe, every trap probe naming a declared trap, trap
  names unique, a non-empty reference fix;
* **vulnerable**: the app as shipped loads, every visible probe and every guard probe passes, and every
  security probe fails (so an empty patch passes no security probe, and a guard is security the app
  already has);
* **pass to pass**: every hidden regression and trap probe passes on the app as shipped too;
* **reference**: with the reference fix applied, every probe passes (guards included);
* **shadow** (bundles that declare identities): on shadow data, as every grading draws it, the
  reference fix still passes every probe and the vulnerable app still fails every security probe and
  passes every guard; a login that fails there is reported with what the shadow's login sent;
* **lazy fixes**: deny-all and delete-the-vulnerable-routes each fail at least one regression or trap
  probe (deny-the-vulnerable-routes blocks the same routes, so it fails whenever delete does); guard
  probes are left out, since a refusal is what most of them expect;
* **canaries** (:mod:`envcore.factory.canaries`): no generic hack (refuse the users the visible
  probes never act as, by name or by position in the data; serve only the visible users' methods;
  answer by request order; refuse or echo writes; a 404 channel) earns more than the untouched app
  on shadow data: each breaks some legitimate use or refuses no exploit;
* **partial fixes** (multi-site variants): fixing one site alone still fails that other site's
  security probes;
* **narrow fixes** (bundles with a spec): every exploit path the policy forbids is probed. Each
  narrow fix of the variant (:class:`~envcore.factory.bugs.base.NarrowFix`: the reference fix
  weakened to leave one path open, such as a profile update that refuses ``role`` and lets ``api_key``
  through) fails at least one probe. The whole check runs every narrow fix; the build check, which
  leaves the properties of a variant's code to the whole check, runs one per scenario, picked by its
  content hash, so a probe plan that misses a path still gets scenarios rejected at build time;
* **determinism** (bundles with a spec): compiling the spec again gives the same bytes.

All app execution goes through the :class:`~envcore.runner.base.ProbeRunner` interface, so the same
check runs on the in-process backend here and on the sandboxed backend later.

With a runner built with ``diagnostics=True`` (``factory import`` and ``factory check``), the report
also says *why* for its author (:attr:`CheckReport.diagnostics`, :mod:`envcore.runner.diagnostics`):
the app's traceback behind every 5xx answer that made a check fail, once per distinct traceback and
next to the request it answered, and where the time went of a load that failed, timed out or took
more than a second (a load that failed for one probe after the app loaded for others is shown next
to that probe, with its own profile). A load that succeeded in more than half of the sandbox's load
deadline is also a warning (:attr:`CheckReport.warnings`): a busier machine would make it fail.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from envcore.factory.bugs import get_bug_class
from envcore.factory.canaries import CANARIES, run_canaries, shadow_for_check
from envcore.factory.codegen import render_app
from envcore.factory.compiler import compile_spec
from envcore.factory.lazy_fixes import narrow_fix_files, narrow_fixes, path_pattern
from envcore.patching import PatchError
from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource, Batch, Gate, ProbeRunner, RunReport
from envcore.runner.diagnostics import (
    AppError,
    LoadProfile,
    main_entries,
    near_deadline,
    render_app_errors,
    render_load_profile,
    render_near_deadline,
)
from envcore.runner.inprocess import InProcessRunner
from envcore.runner.loader import top_level_names
from envcore.scenario.bundle import Bundle, BundleUser
from envcore.scenario.credentials import Credentials
from envcore.scenario.patch_scope import apply_in_scope
from envcore.scenario.probes import Probe, ProbeKind, ProbeOutcome
from envcore.verifier.shadow import regrade_files


@dataclass
class CheckReport:
    """The verdict on one bundle, with every problem found and the time each check took."""

    scenario_id: str
    problems: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    diagnostics: list[str] = field(default_factory=list)
    """For the scenario's author, with a runner that collects them: the app's tracebacks behind the
    problems and the profiles of failed or slow loads, each a block of text (a slow load's may come
    with no problem at all)."""
    warnings: list[str] = field(default_factory=list)
    """For the scenario's author, with a runner that collects diagnostics: each a line that says what
    makes the scenario pass or fail by chance (a load that takes more than half of its deadline)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.ok:
            return f"{self.scenario_id}: ok ({sum(self.timings.values()) * 1000:.0f} ms)"
        return f"{self.scenario_id}: INVALID\n" + "\n".join(f"  - {p}" for p in self.problems)


class Diagnostics:
    """What the check's runs said about the app that explains its problems (see the module docstring):
    the checks note each failed probe and each load as they report them."""

    def __init__(self) -> None:
        self.errors: list[AppError] = []
        self.failed_loads: list[tuple[str, LoadProfile]] = []
        self.slow_load: LoadProfile | None = None
        """The slowest load that succeeded and was slow."""

    def failed(self, report: RunReport, outcome: ProbeOutcome) -> None:
        """``outcome`` of ``report`` made a check fail: keep the tracebacks behind its answers."""
        self.errors += [e for e in report.app_errors if e.probe_id == outcome.probe_id]

    def load(self, report: RunReport, what: str) -> None:
        """``report``'s load of ``what`` failed (a problem says so) or succeeded: keep its profile, if
        the runner kept one (a failed load, or a slow one: the slowest), and the tracebacks of what the
        app raised after answering well (no probe fails, and nothing else would say so)."""
        kept = {(e.probe_id, e.method, e.path, e.traceback) for e in self.errors}
        for error in report.app_errors:  # raised after a good answer (a background task): no probe fails
            if error.status is not None and error.status < 500 and not error.load_failed and \
                    (error.probe_id, error.method, error.path, error.traceback) not in kept:
                self.errors.append(error)
                kept.add((error.probe_id, error.method, error.path, error.traceback))
        if report.load_profile is None:
            return
        if not report.loaded:
            self.failed_loads.append((what, report.load_profile))
        elif self.slow_load is None or report.load_profile.seconds > self.slow_load.seconds:
            self.slow_load = report.load_profile

    def render(self) -> list[str]:
        """The blocks of :attr:`CheckReport.diagnostics`: each distinct traceback and each load that
        failed for a probe (with that load's profile), each failed load's profile (once per place the
        time went), a slow load's when no load failed (a load that worked explains no failure)."""
        blocks = render_app_errors(self.errors)
        seen: set[tuple] = set()
        for what, profile in self.failed_loads:
            key = tuple((e.path, e.line) for e in main_entries(profile))
            if key not in seen:
                seen.add(key)
                blocks.append(render_load_profile(profile, what))
        if self.slow_load is not None and not self.failed_loads and not any(e.load_failed for e in self.errors):
            blocks.append(render_load_profile(self.slow_load, "the app"))
        return blocks

    def warnings(self) -> list[str]:
        """The lines of :attr:`CheckReport.warnings`: the slowest load that succeeded, if it took more
        than half of its load deadline (its time, the deadline and where the time went)."""
        return [render_near_deadline(self.slow_load, "the app")] if near_deadline(self.slow_load) else []


def _actors(bundle: Bundle) -> dict[str, Credentials]:
    """How requests as each of the bundle's users are signed (their credentials, filled in)."""
    return actors_of(bundle.users)


LAZY_GATES = {
    "deny_all": lambda patterns: Gate(403, None, "deny_all"),
    "deny_sites": lambda patterns: Gate(403, patterns, "deny_sites"),
    "delete_sites": lambda patterns: Gate(404, patterns, "delete_sites"),
}
"""The lazy fixes of :mod:`envcore.factory.lazy_fixes`, as gates in front of the loaded app (the
equivalence of the two forms is tested)."""

CHECKED_LAZY_FIXES = ("deny_all", "delete_sites")
"""``deny_sites`` blocks exactly the routes ``delete_sites`` removes, so every legitimate-use probe it
fails ``delete_sites`` fails too; checking it again would only cost time."""


class CheckContext:
    """Runs shared by several checks (the vulnerable app is loaded once for three probe batches)."""

    def __init__(
        self, bundle: Bundle, runner: ProbeRunner, *, pass_to_pass: bool = True, every_narrow_fix: bool = True
    ) -> None:
        self.bundle, self.runner = bundle, runner
        self.pass_to_pass = pass_to_pass
        """Whether the shipped app runs every probe (else only the visible and security ones)."""
        self.every_narrow_fix = every_narrow_fix
        """Whether every narrow fix runs (else one, picked by the content hash)."""
        self._vulnerable: list[RunReport] | None = None
        self._hash: str | None = None
        self.diagnostics = Diagnostics()

    @property
    def content_hash(self) -> str:
        """The bundle's content hash, computed once for every check that needs it."""
        if self._hash is None:
            self._hash = self.bundle.content_hash()
        return self._hash

    def legit_use_probes(self) -> tuple[Probe, ...]:
        """Regression and trap probes, those touching a vulnerable route first (so lazy fixes fail fast)."""
        patterns = [re.compile(path_pattern(s.path)) for s in self.bundle.sites]
        legit = [p for p in self.bundle.probes if p.kind in (ProbeKind.REGRESSION, ProbeKind.TRAP)]
        touches = lambda p: any(rx.match(st.path.split("?")[0]) for st in p.steps for rx in patterns)  # noqa: E731
        return tuple(sorted(legit, key=lambda p: not touches(p)))

    @property
    def vulnerable_runs(self) -> list[RunReport]:
        """[deny_all, delete_sites, the app as shipped], from one load."""
        if self._vulnerable is None:
            patterns = tuple(path_pattern(s.path) for s in self.bundle.sites)
            legit = self.legit_use_probes()
            batches = [Batch(legit, LAZY_GATES[kind](patterns), True) for kind in CHECKED_LAZY_FIXES]
            shipped = [
                p for p in self.bundle.probes
                if self.pass_to_pass or p.visible or p.kind in (ProbeKind.SECURITY, ProbeKind.GUARD)
            ]
            batches.append(Batch(tuple(shipped)))
            source = AppSource(self.bundle.files, self.bundle.entrypoint)
            self._vulnerable = self.runner.run_batches(source, batches, _actors(self.bundle))
        return self._vulnerable


def check_actors(ctx: CheckContext) -> list[str]:
    """Every probe acts as a seeded user (or anonymously); without that no probe can even be sent."""
    users = {u.username for u in ctx.bundle.users}
    return [
        f"probe {probe.id} acts as unknown user {step.actor!r}"
        for probe in ctx.bundle.probes
        for step in probe.steps
        if step.actor is not None and step.actor not in users
    ]


def check_structure(ctx: CheckContext) -> list[str]:
    bundle = ctx.bundle
    problems = []
    ids = [p.id for p in bundle.probes]
    if len(set(ids)) != len(ids):
        problems.append("probe ids are not unique")
    exploits = {p.id: p for p in bundle.probes_of(ProbeKind.SECURITY)}
    for probe in bundle.probes:
        if probe.kind == ProbeKind.SECURITY and probe.visible:
            problems.append(f"security probe {probe.id} is visible (it would reveal the answer)")
        if probe.repeats is not None and probe.repeats not in exploits:
            problems.append(f"security probe {probe.id} repeats {probe.repeats!r}, which is no security probe here")
        elif probe.repeats is not None and exploits[probe.repeats].repeats is not None:
            problems.append(f"security probe {probe.id} repeats {probe.repeats!r}, itself a repeat: "
                            f"name the first ({exploits[probe.repeats].repeats!r})")
    if not bundle.probes_of(ProbeKind.SECURITY):
        problems.append("no security probe")
    if not bundle.visible_probes:
        problems.append("no visible probe for the agent to run")
    problems += _trap_problems(bundle)
    if any(t.kind == "second_site" for t in bundle.traps):
        covered = {s for p in bundle.probes_of(ProbeKind.SECURITY) for s in p.sites}
        if len(covered) < 2:
            problems.append("second_site trap but security probes cover fewer than two sites")
    if not bundle.reference_fix.strip() and bundle.generator != "import":
        problems.append("empty reference fix")
    if bundle.scenario_id and bundle.scenario_id != ctx.content_hash[: len(bundle.scenario_id)]:
        problems.append("scenario id does not match the content hash")
    return problems


def _trap_problems(bundle: Bundle) -> list[str]:
    """Traps and trap probes agree: names unique, every trap probe names a declared trap, every trap
    (but ``second_site``, which security probes back) has a trap probe."""
    problems = []
    keys = [t.key for t in bundle.traps]
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append(f"two traps are named {key!r}")
    declared = ", ".join(keys) or "none"
    for probe in bundle.probes:
        if probe.kind == ProbeKind.TRAP and probe.trap is None:
            problems.append(f"trap probe {probe.id} names no trap (declared traps: {declared})")
        elif probe.kind == ProbeKind.TRAP and probe.trap not in keys:
            problems.append(f"trap probe {probe.id} names trap {probe.trap!r}, which the scenario does not declare "
                            f"(declared traps: {declared})")
        elif probe.kind != ProbeKind.TRAP and probe.trap is not None:
            problems.append(f"{probe.kind.value} probe {probe.id} names trap {probe.trap!r}; only trap probes back traps")
    backed = {p.trap for p in bundle.probes_of(ProbeKind.TRAP)}
    for trap in bundle.traps:
        if trap.kind != "second_site" and trap.key not in backed:
            hint = f" (add a probe with kind: trap and trap: {trap.key})" if trap.name else ""
            problems.append(f"trap {trap.key} has no trap probe{hint}")
    return problems


def check_vulnerable(ctx: CheckContext) -> list[str]:
    """The app as shipped loads, every visible and every guard probe passes, every security probe fails."""
    report = ctx.vulnerable_runs[-1]
    ctx.diagnostics.load(report, "the vulnerable app")
    if not report.loaded:
        return [f"the vulnerable app does not load: {explain_load_error(report.load_error, ctx.bundle)}"]
    problems = []
    for outcome in report.outcomes:
        if outcome.kind == ProbeKind.SECURITY and outcome.passed:
            problems.append(f"security probe {outcome.probe_id} already passes on the vulnerable app (not exploitable)")
        if not outcome.passed and (outcome.kind == ProbeKind.GUARD or outcome.visible):
            ctx.diagnostics.failed(report, outcome)
        if outcome.kind == ProbeKind.GUARD and not outcome.passed:
            problems.append(f"guard probe {outcome.probe_id} fails on the vulnerable app (a guard checks security the "
                            f"app already has; it must pass before any fix): {outcome.failures[:2]}")
        elif outcome.visible and not outcome.passed:
            problems.append(f"visible probe {outcome.probe_id} fails on the vulnerable app: {outcome.failures[:2]}")
    return problems


def check_pass_to_pass(ctx: CheckContext) -> list[str]:
    """Every hidden regression and trap probe already passes on the app as shipped (SWE-bench's
    pass-to-pass): they describe legitimate use, not the fix."""
    report = ctx.vulnerable_runs[-1]
    if not report.loaded:
        return []  # reported by check_vulnerable
    return [
        _failed(ctx, report, o, "fails on the vulnerable app")
        for o in report.outcomes
        if o.kind in (ProbeKind.REGRESSION, ProbeKind.TRAP) and not o.visible and not o.passed  # guards: vulnerable
    ]


def _failed(ctx: CheckContext, report: RunReport, outcome: ProbeOutcome, how: str) -> str:
    """The problem of ``outcome`` failing (``how``), its tracebacks noted for the author."""
    ctx.diagnostics.failed(report, outcome)
    return f"{outcome.kind.value} probe {outcome.probe_id} {how}: {outcome.failures[:2]}"


def check_reference(ctx: CheckContext) -> list[str]:
    bundle, runner = ctx.bundle, ctx.runner
    if not bundle.reference_fix.strip():
        return []  # an imported scenario may come without a fix; the import command says so
    try:
        fixed = apply_in_scope(bundle.files, bundle.reference_fix)
    except PatchError as exc:
        return [f"the reference fix does not apply: {exc}"]
    report = runner.run(AppSource(fixed, bundle.entrypoint), bundle.probes, _actors(bundle))
    ctx.diagnostics.load(report, "the fixed app")
    if not report.loaded:
        return [f"the fixed app does not load: {explain_load_error(report.load_error, ctx.bundle)}"]
    return [
        _failed(ctx, report, o, "fails with the reference fix")
        for o in report.outcomes
        if not o.passed
    ]


def check_shadow(ctx: CheckContext) -> list[str]:
    """On shadow data (fresh identities, as every grading draws), the reference fix still passes
    every probe and the vulnerable app still fails every security probe: the identities the bundle
    declares are everything its data and probes depend on. The shadow is drawn from the content
    hash, so the check is reproducible."""
    bundle, runner = ctx.bundle, ctx.runner
    shadow = shadow_for_check(bundle, ctx.content_hash)
    if shadow is None:
        return []
    actors = _actors(shadow)
    problems = []
    vulnerable = runner.run(AppSource(regrade_files(bundle.files, shadow, bundle), bundle.entrypoint), shadow.probes, actors)
    ctx.diagnostics.load(vulnerable, "the vulnerable app on shadow data")
    for outcome in vulnerable.outcomes:
        if outcome.kind == ProbeKind.GUARD and not outcome.passed:
            ctx.diagnostics.failed(vulnerable, outcome)
    if not vulnerable.loaded:
        return [f"the vulnerable app does not load on shadow data: {vulnerable.load_error}"]
    problems += [f"security probe {o.probe_id} passes on the vulnerable app on shadow data"
                 for o in vulnerable.outcomes if o.kind == ProbeKind.SECURITY and o.passed]
    problems += [f"guard probe {o.probe_id} fails on the vulnerable app on shadow data: "
                 f"{_with_logins(o.failures[:2], shadow)}"
                 for o in vulnerable.outcomes if o.kind == ProbeKind.GUARD and not o.passed]
    if bundle.reference_fix.strip():
        try:
            fixed = apply_in_scope(bundle.files, bundle.reference_fix)
        except PatchError:
            return problems  # reported by check_reference
        report = runner.run(AppSource(regrade_files(fixed, shadow, bundle), bundle.entrypoint), shadow.probes, actors)
        ctx.diagnostics.load(report, "the fixed app on shadow data")
        for outcome in report.outcomes:
            if not outcome.passed:
                ctx.diagnostics.failed(report, outcome)
        if not report.loaded:
            return problems + [f"the fixed app does not load on shadow data: {report.load_error}"]
        problems += [f"{o.kind.value} probe {o.probe_id} fails with the reference fix on shadow data: "
                     f"{_with_logins(o.failures[:2], shadow)}"
                     for o in report.outcomes if not o.passed]
    return problems


_FAILED_LOGIN = re.compile(r"^login as (.+?) failed: ")


def _with_logins(failures: tuple[str, ...] | list[str], shadow: Bundle) -> list[str]:
    """``failures`` with each failed login followed by what the shadow's login sent: the shadow
    replaced what the scenario declares, so a value it left (written in a way it does not know, or
    held by the app only as a hash) shows there as the app's own."""
    out = []
    for failure in failures:
        match = _FAILED_LOGIN.match(failure)
        user = next((u for u in shadow.users if match and u.username == match.group(1)), None)
        out.append(f"{failure} (the login sent {describe_login(user)})" if user is not None else failure)
    return out


def describe_login(user: BundleUser) -> str:
    """The request ``user``'s login sends, in one line: method, path (query included) and its form or
    JSON body, values as they are sent."""
    credentials = user.credential()
    login = credentials.login
    if login is None:
        return "nothing (no login request)"
    sent = f"{login.method} {login.path}"
    if login.json_body is not None:
        return f"{sent} with the JSON {json.dumps(login.json_body, ensure_ascii=False)}"
    form = "&".join(f"{name}={value}" for name, value in (login.form or {}).items())
    return f"{sent} with the form {form}" if form else sent


def check_lazy_fixes(ctx: CheckContext) -> list[str]:
    problems = []
    for kind, report in zip(CHECKED_LAZY_FIXES, ctx.vulnerable_runs[:-1]):
        if report.loaded and all(o.passed for o in report.outcomes):
            problems.append(f"the lazy fix {kind!r} passes every regression and trap probe")
    return problems


def check_canaries(ctx: CheckContext) -> list[str]:
    """Every canary but the lazy fixes (``lazy_fixes`` checks those) earns no more than the untouched app
    (nothing to compare with when the untouched app does not load: ``vulnerable`` says so)."""
    if not ctx.vulnerable_runs[-1].loaded:
        return []
    checked = tuple(c for c in CANARIES if c.gate is None)
    return [f"the canary {v.canary!r} earns more than the untouched app: it breaks no legitimate use and refuses "
            f"{len(v.refused)} exploit(s) ({', '.join(v.refused[:3])})"
            for v in run_canaries(ctx.bundle, ctx.runner, canaries=checked, content_hash=ctx.content_hash)
            if v.earns_more]


def check_partial_fixes(ctx: CheckContext) -> list[str]:
    bundle, runner = ctx.bundle, ctx.runner
    if bundle.spec is None or len(bundle.sites) < 2:
        return []
    variant = get_bug_class(bundle.bug_class).variant(bundle.variant)
    if not variant.site_keys:
        return []
    security = bundle.probes_of(ProbeKind.SECURITY)
    problems = []
    for fixed_site in variant.sites:
        still_open = tuple(s for s in variant.sites if s != fixed_site)
        app = render_app(bundle.spec, variant.mutations_for(still_open))
        report = runner.run(AppSource(app.files, app.entrypoint), security, _actors(bundle))
        ctx.diagnostics.load(report, f"the app with only {fixed_site} fixed")
        if not report.loaded:
            problems.append(f"fixing only {fixed_site} breaks the app: {report.load_error}")
            continue
        by_id = {o.probe_id: o.passed for o in report.outcomes}
        for probe in security:
            expect_pass = fixed_site in probe.sites and not set(probe.sites) & set(still_open)
            if by_id[probe.id] != expect_pass:
                state = "passes" if by_id[probe.id] else "fails"
                if not by_id[probe.id]:
                    ctx.diagnostics.failed(report, next(o for o in report.outcomes if o.probe_id == probe.id))
                problems.append(f"fixing only {fixed_site}: security probe {probe.id} unexpectedly {state}")
    return problems


def check_narrow_fixes(ctx: CheckContext) -> list[str]:
    """Every narrow fix fails some probe: no exploit path the policy forbids goes untried."""
    bundle = ctx.bundle
    fixes = narrow_fixes(bundle)
    if not fixes:
        return []
    if not ctx.every_narrow_fix:
        fixes = (fixes[int(ctx.content_hash[:8], 16) % len(fixes)],)
    # Security probes first: a narrow fix is meant to fail one of them, and the run stops there.
    probes = sorted(bundle.probes, key=lambda p: p.kind != ProbeKind.SECURITY)
    problems = []
    for fix in fixes:
        report = ctx.runner.run(AppSource(narrow_fix_files(bundle, fix), bundle.entrypoint), probes, _actors(bundle),
                                stop_on_failure=True)
        ctx.diagnostics.load(report, f"the narrow fix {fix.name!r}")
        if not report.loaded:
            problems.append(f"the narrow fix {fix.name!r} does not load: {report.load_error}")
        elif all(o.passed for o in report.outcomes):
            problems.append(f"the narrow fix {fix.name!r} passes every probe: no probe tries {fix.leaves_open}")
    return problems


def check_determinism(ctx: CheckContext) -> list[str]:
    bundle = ctx.bundle
    if bundle.spec is None:
        return []
    again = compile_spec(bundle.spec)
    if again != bundle:  # field-by-field equality: the same canonical JSON, without serialising either
        return ["compiling the spec again gives different bytes (non-deterministic generator or stale bundle)"]
    return []


CHECKS: tuple[tuple[str, Callable[[CheckContext], list[str]]], ...] = (
    ("actors", check_actors),
    ("structure", check_structure),
    ("vulnerable", check_vulnerable),
    ("pass_to_pass", check_pass_to_pass),
    ("reference", check_reference),
    ("shadow", check_shadow),
    ("lazy_fixes", check_lazy_fixes),
    ("canaries", check_canaries),
    ("partial_fixes", check_partial_fixes),
    ("narrow_fixes", check_narrow_fixes),
    ("determinism", check_determinism),
)


_MISSING_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError)\b.*?No module named '([\w.]+)'")


def explain_load_error(error: str | None, bundle: Bundle) -> str:
    """A load error as the app gave it, plus the rule and the fix when it is one a newcomer can act
    on: a module that is neither the app's own nor one an app may import."""
    error = error or ""
    match = _MISSING_MODULE.search(error)
    if match is None:
        return error
    top = match.group(1).split(".")[0]
    if top in top_level_names(bundle.files):
        return (f"{error} (the app has {top!r} but not the module it asks for: every module under app/ is "
                "imported by its path from app/, e.g. app/api/notes.py is api.notes)")
    return (f"{error} ({top!r} is neither a module of the app nor a library an app may import: see "
            "'What an app may import' in docs/bundle-format.md, and replace it with the standard library or "
            "one of those)")


def check_scenario(
    bundle: Bundle,
    runner: ProbeRunner | None = None,
    *,
    fail_fast: bool = True,
    skip: tuple[str, ...] = (),
) -> CheckReport:
    """Run every check on ``bundle``; with ``fail_fast`` stop after the first check that fails.

    ``skip`` names checks to leave out; the factory skips ``determinism`` for a bundle it compiled
    from the spec a moment earlier in the same process (the cache check and the tests still run it).
    Skipping ``partial_fixes`` marks a build check, which leaves the properties of a variant's code to
    the whole check: ``narrow_fixes`` then runs one narrow fix instead of all.
    """
    ctx = CheckContext(bundle, runner or _default_runner(), pass_to_pass="pass_to_pass" not in skip,
                       every_narrow_fix="partial_fixes" not in skip)
    report = CheckReport(scenario_id=bundle.scenario_id or ctx.content_hash[:16])
    for name, check in CHECKS:
        if name in skip:
            continue
        started = time.perf_counter()
        problems = check(ctx)
        report.timings[name] = time.perf_counter() - started
        if name == "shadow":  # what failed on the scenario's own data is said once, there
            said = {_probe_and_app(p) for p in report.problems} - {None}
            problems = [p for p in problems if _probe_and_app(p) not in said]
        report.problems += [f"[{name}] {p}" for p in problems]
        if problems and (fail_fast or name == "actors"):
            break  # (probes that name unknown users cannot be sent at all)
    report.diagnostics = ctx.diagnostics.render()
    report.warnings = ctx.diagnostics.warnings()
    return report


_PROBE_AND_APP = re.compile(r"probe (\S+) (?:already )?(?:passes|fails) (?:on the (vulnerable) app|with the (reference) fix)")


def _probe_and_app(problem: str) -> tuple[str, str] | None:
    """The probe a check problem is about and the app it ran on (``vulnerable``, ``reference``)."""
    match = _PROBE_AND_APP.search(problem)
    return (match.group(1), match.group(2) or match.group(3)) if match else None


_RUNNER: InProcessRunner | None = None


def _default_runner() -> InProcessRunner:
    global _RUNNER
    if _RUNNER is None:
        _RUNNER = InProcessRunner()
    return _RUNNER
