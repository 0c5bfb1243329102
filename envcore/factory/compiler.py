"""Compile a ScenarioSpec into a Bundle: source files, probes, task, reference fix, tier.

The vulnerable app is the spec rendered with the variant's flaws; the secure app is the same spec
rendered without them; the reference fix is their diff. Probes are regression and trap probes for
legitimate use plus the variant's security probes, in that order (the runner keeps the order).
Difficulty is measured on the compiled result and mapped to a tier; the task statement gets vaguer
as the tier rises.
"""

from __future__ import annotations

from envcore.factory.bugs import get_bug_class
from envcore.factory.bugs.base import BugClass, ProbeContext, Variant
from envcore.factory.codegen import Names, RenderedApp, render_app
from envcore.factory.codegen.auth import user_credentials
from envcore.factory.identities import shadow_values
from envcore.factory.probe_plan import plan_probes
from envcore.patching import changed_lines, make_diff
from envcore.scenario.bundle import Bundle, BundleMetrics, BundleUser
from envcore.scenario.spec import ScenarioSpec, UserSpec
from envcore.version import GENERATOR_VERSION

# Difficulty score weights: each is what one unit of the feature adds. Tier cut points were chosen so
# the default config yields roughly equal thirds (see `python -m envcore factory stats`).
SCORE_WEIGHTS = {
    "package_layout": 0.6,
    "lines_per_100": 0.25,
    "extra_site": 0.8,
    "trap": 0.3,
    "subtle": 0.9,
    "decoy": 0.15,
    "helper_fix": 0.4,
}
TIER_CUTS = (2.45, 3.2)


def difficulty_score(metrics: dict, *, package: bool, helper_fix: bool) -> float:
    w = SCORE_WEIGHTS
    score = (
        w["package_layout"] * package
        + w["lines_per_100"] * metrics["source_lines"] / 100
        + w["extra_site"] * (metrics["sites"] - 1)
        + w["trap"] * metrics["traps"]
        + w["subtle"] * metrics["subtle_variant"]
        + w["decoy"] * metrics["decoy_routes"]
        + w["helper_fix"] * helper_fix
    )
    return round(score, 3)


def tier_of(score: float) -> int:
    return 1 + sum(score >= cut for cut in TIER_CUTS)


def task_statement(spec: ScenarioSpec, bug: BugClass, variant: Variant, tier: int) -> str:
    service = spec.domain.service
    close = "Fix it so the app follows its access policy, without breaking legitimate use."
    if tier == 1:
        where = " and ".join(f"`{s.method} {s.path}`" for s in spec.bug.sites)
        return f"Security report for the {service}: {bug.symptom}. The problem is reachable through {where}. {close}"
    if tier == 2:
        return f"Security report for the {service}: {bug.symptom}. Find the cause. {close}"
    return (
        f"Audit the {service} against its access policy and fix any broken access control you find. "
        "Legitimate use, as the policy describes it, must keep working."
    )


def bundle_user(spec: ScenarioSpec, user: UserSpec) -> BundleUser:
    """A seeded user as the runtime needs it, with the credentials the app's auth style accepts."""
    token, credentials = user_credentials(spec.style.auth, user)
    extra = {"credentials": credentials} if credentials is not None else {}
    return BundleUser(username=user.username, role=user.role.value, tenant=user.tenant, user_id=user.user_id,
                      token=token, **extra)


def render_pair(spec: ScenarioSpec) -> tuple[RenderedApp, RenderedApp, Variant, BugClass]:
    bug = get_bug_class(spec.bug.bug_class)
    variant = bug.variant(spec.bug.variant)
    return render_app(spec, variant.mutations), render_app(spec, {}), variant, bug


def compile_spec(spec: ScenarioSpec) -> Bundle:
    vulnerable, secure, variant, bug = render_pair(spec)
    names = Names.of(spec)
    ctx = ProbeContext(spec, names)
    probes = plan_probes(ctx, variant).all()
    fix = make_diff(vulnerable.files, secure.files)
    fix_files, fix_lines = changed_lines(fix)
    source_lines = sum(text.count("\n") for path, text in vulnerable.files.items() if path.endswith(".py"))
    metrics = {
        "files": sum(1 for p in vulnerable.files if p.endswith(".py")),
        "source_lines": source_lines,
        "routes": len(vulnerable.routes),
        "sites": spec.difficulty.sites,
        "traps": spec.difficulty.traps,
        "fix_lines": fix_lines,
        "fix_files": fix_files,
        "subtle_variant": spec.difficulty.subtle_variant,
        "decoy_routes": spec.difficulty.decoy_routes,
    }
    helper_fix = any(key.startswith(("policy.", "auth.")) for key in variant.mutations)
    score = difficulty_score(metrics, package=spec.style.layout != "single_file", helper_fix=helper_fix)
    tier = tier_of(score)
    bundle = Bundle(
        generator=GENERATOR_VERSION,
        title=f"{spec.domain.service}: {bug.title.lower()} ({variant.name.replace('_', ' ')})",
        domain=spec.domain.name,
        bug_class=bug.name,
        cwe=bug.cwe,
        variant=variant.name,
        code_style=spec.style.label,
        tier=tier,
        entrypoint=vulnerable.entrypoint,
        files=vulnerable.files,
        users=tuple(bundle_user(spec, u) for u in spec.users),
        task=task_statement(spec, bug, variant, tier),
        policy_text=spec.policy.text,
        probes=tuple(probes),
        reference_fix=fix,
        sites=spec.bug.sites,
        traps=spec.traps,
        metrics=BundleMetrics(**metrics, score=score),
        spec=spec,
        shadow_values=shadow_values(spec),
    )
    return bundle.with_id()
