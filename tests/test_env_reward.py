"""The reward engine: its table of components, and the properties that make it hard to game.

Unit tests drive :func:`compute_reward` with hand-built reports; the property tests play real
episodes over shipped scenarios of every bug class through the sandbox, with the patches a reward
hacker would try (the lazy fixes the scenario check already proves fail some legitimate use): on three
bug classes by default (18 episodes), on all twelve in the slow run (72)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from envcore.env.episode import Episode
from envcore.env.reward import COMPONENTS, RewardInputs, compute_reward
from envcore.factory.lazy_fixes import entry_module_path, lazy_fix_diff
from envcore.patching import make_diff
from envcore.verifier.report import Resolution, Tally, VerificationReport
from tests.test_templates import hunk_variants


def report(sec=(1, 1), reg=(5, 5), trap=(2, 2), outcome="graded", resolution=None):
    security, regression, traps = Tally(passed=sec[0], total=sec[1]), Tally(passed=reg[0], total=reg[1]), Tally(passed=trap[0], total=trap[1])
    if resolution is None and outcome == "graded":
        from envcore.verifier.report import resolve

        resolution = resolve(security, regression, traps)
    return VerificationReport(scenario_id="s", outcome=outcome, resolution=resolution, reward=None,
                              security=security, regression=regression, trap=traps,
                              load_error="boom" if outcome == "load_error" else None)


@pytest.mark.parametrize("rep, low, high, description", [
    (report(), 0.95, 1.0, "full fix"),
    (report(sec=(0, 1)), -0.03, 0.0, "nothing fixed"),
    (report(sec=(1, 2)), 0.45, 0.5, "one of two sites"),
    (report(reg=(0, 5), trap=(0, 2)), -0.6, -0.45, "deny everyone"),
    (report(trap=(1, 2)), -0.1, 0.0, "a trap sprung: security not paid"),
    (report(outcome="load_error", resolution=Resolution.NO, sec=(0, 1), reg=(0, 5), trap=(0, 2)), -0.7, -0.55, "app broken"),
])
def test_component_table_gives_each_kind_of_patch_its_band(rep, low, high, description):
    breakdown = compute_reward(RewardInputs(report=rep, steps_used=5, max_steps=30))
    assert low <= breakdown.reward <= high, (description, breakdown)
    assert [c.name for c in breakdown.components] == list(COMPONENTS)


def test_infrastructure_failure_has_no_reward():
    rep = VerificationReport(scenario_id="s", outcome="infrastructure_error", resolution=None, reward=None)
    assert compute_reward(RewardInputs(report=rep, steps_used=3, max_steps=30)).reward is None


def test_every_cost_together_still_leaves_a_correct_fix_at_least_095():
    worst = RewardInputs(report=report(), steps_used=29, max_steps=30, invalid_actions=50, diff_lines=10_000, reference_lines=4)
    assert compute_reward(worst).reward >= 0.95


@pytest.mark.parametrize("rep", [report(), report(sec=(1, 2)), report(sec=(0, 1)), report(reg=(2, 5))])
def test_more_steps_never_pay_more(rep):
    rewards = [compute_reward(RewardInputs(report=rep, steps_used=n, max_steps=30)).reward for n in range(1, 31)]
    assert all(a > b for a, b in zip(rewards, rewards[1:]))


def test_running_out_of_budget_costs_more_than_submitting_on_the_last_step():
    on_time = compute_reward(RewardInputs(report=report(), steps_used=30, max_steps=30)).reward
    late = compute_reward(RewardInputs(report=report(), steps_used=30, max_steps=30, budget_exhausted=True)).reward
    assert late <= on_time - 0.1 + 1e-9


def test_reward_is_clipped_to_its_documented_range():
    for rep in (report(), report(outcome="load_error", resolution=Resolution.NO), report(reg=(0, 5), trap=(0, 2))):
        for steps in (1, 30):
            value = compute_reward(RewardInputs(report=rep, steps_used=steps, max_steps=30, invalid_actions=99,
                                                diff_lines=10**6, budget_exhausted=True)).reward
            assert -1.0 <= value <= 1.0


# -- properties over real scenarios of every bug class -----------------------------------------------
PER_CLASS = 1
SAMPLE_CLASSES = ("idor_read", "missing_admin_check", "path_traversal")
"""The bug classes whose hacks are played by default (a read, a role check, a file): every class in the slow run."""


def _scenarios(shipped, classes=None):
    by_class = defaultdict(list)
    for row in shipped.rows:
        if classes is None or row["bug_class"] in classes:
            by_class[row["bug_class"]].append(row["scenario_id"])
    return {cls: sorted(ids)[:PER_CLASS] for cls, ids in sorted(by_class.items())}


def play(sandbox, bundle, files=None, *, extra_steps=0):
    """An episode: ``extra_steps`` reads, the patch (if any) as a diff, submit. Returns the final observation."""
    episode = Episode(bundle, sandbox)
    for _ in range(extra_steps):
        episode.step({"tool": "list_files"})
    if files is not None:
        diff = make_diff(bundle.files, files)
        if diff:
            observation = episode.step({"tool": "apply_patch", "diff": diff})
            assert observation.error is None, observation.error
    final = episode.step({"tool": "submit"})
    assert final.done
    return final


def broken(bundle):
    path, _ = entry_module_path(bundle.files, bundle.entrypoint)
    return {**bundle.files, path: bundle.files[path] + "\nraise RuntimeError('patched into oblivion')\n"}


def lazy(bundle, kind):
    from envcore.patching import apply_patch

    return apply_patch(bundle.files, lazy_fix_diff(bundle.files, bundle.entrypoint, kind, [s.path for s in bundle.sites]))


def reward_table(shipped, sandbox, classes=None):
    """reward[scenario][patch] for every chosen scenario and patch kind."""
    from envcore.patching import apply_patch

    table = {}
    for cls, ids in _scenarios(shipped, classes).items():
        for scenario_id in ids:
            bundle = shipped.load(scenario_id)
            patches = {
                "reference fix": apply_patch(bundle.files, bundle.reference_fix),
                "no patch": None,
                "deny all": lazy(bundle, "deny_all"),
                "delete the vulnerable routes": lazy(bundle, "delete_sites"),
                "refuse the vulnerable routes": lazy(bundle, "deny_sites"),
                "break the app": broken(bundle),
            }
            table[(cls, scenario_id)] = {name: play(sandbox, bundle, files).reward for name, files in patches.items()}
    return table


@pytest.fixture(scope="module")
def sample_rewards(shipped, sandbox):
    return reward_table(shipped, sandbox, SAMPLE_CLASSES)


@pytest.fixture(scope="module")
def every_rewards(shipped, sandbox):
    return reward_table(shipped, sandbox)


@pytest.fixture(params=["sample", pytest.param("every", marks=pytest.mark.slow)])
def rewards(request):
    """The reward table of :data:`SAMPLE_CLASSES` (18 episodes, the default run) or of every class (72, slow)."""
    return request.getfixturevalue(f"{request.param}_rewards")


def test_the_sample_is_three_bug_classes(sample_rewards):
    assert {cls for cls, _ in sample_rewards} == set(SAMPLE_CLASSES)


@pytest.mark.slow  # 72 episodes in the sandbox (about a minute)
def test_every_bug_class_is_covered(every_rewards, shipped):
    assert {cls for cls, _ in every_rewards} == {row["bug_class"] for row in shipped.rows}
    assert len(every_rewards) == PER_CLASS * 12


def test_reference_fix_earns_at_least_095(rewards):
    low = {key: r["reference fix"] for key, r in rewards.items() if r["reference fix"] < 0.95}
    assert not low


def test_no_patch_earns_nothing(rewards):
    assert all(r["no patch"] <= 0 for r in rewards.values())


def test_deny_everyone_does_not_pay(rewards):
    assert all(r["deny all"] <= 0 for r in rewards.values())


def test_deleting_the_vulnerable_route_does_not_pay(rewards):
    assert all(r["delete the vulnerable routes"] <= 0 for r in rewards.values())
    assert all(r["refuse the vulnerable routes"] <= 0 for r in rewards.values())


def test_breaking_the_app_is_worse_than_nothing(rewards):
    assert all(r["break the app"] < 0 for r in rewards.values())


# Scenarios whose two vulnerable sites are fixed by separate hunks of the reference fix (found by
# verifying each hunk alone; other multi-site scenarios share one helper for both sites).
TWO_SITE_SCENARIOS = {
    "idor_read": "8ccbcd3eda7d1f0d",
    "idor_write": "562877badc2d1f03",
    "missing_admin_check": "82625e583f5b8582",
    "sensitive_exposure": "dae16cc64b0d8d97",
}


@pytest.mark.parametrize("bug_class", [bug_class if i == 0 else pytest.param(bug_class, marks=pytest.mark.slow)
                                       for i, bug_class in enumerate(sorted(TWO_SITE_SCENARIOS))])  # one by default
def test_fixing_one_of_two_sites_pays_strictly_between_zero_and_the_full_fix(bug_class, shipped, sandbox):
    bundle = shipped.load(TWO_SITE_SCENARIOS[bug_class])
    assert bundle.bug_class == bug_class and len(bundle.sites) >= 2
    variants = hunk_variants(bundle)
    full = play(sandbox, bundle, variants[1]).reward
    partial = [o for o in (play(sandbox, bundle, files) for files in variants[2:])
               if o.result["resolution"] == "partial"]
    assert partial, "no single hunk fixes exactly one site"
    for observation in partial:
        assert 0 < observation.reward < full


def test_more_steps_with_the_same_patch_never_pay_more(shipped, sandbox):
    from envcore.patching import apply_patch

    bundle = shipped.load(TWO_SITE_SCENARIOS["idor_read"])
    fixed = apply_patch(bundle.files, bundle.reference_fix)
    rewards = [play(sandbox, bundle, fixed, extra_steps=n).reward for n in (0, 3, 10)]
    assert rewards[0] > rewards[1] > rewards[2]


def test_the_submit_text_never_writes_a_negative_zero():
    """A reward of -0.0004 (a step's cost on an unchanged app) read "Reward -0.000" after submit, and a
    term that rounds to zero was listed as "-0.000"; it reads +0.000, and such a term is left out."""
    from envcore.env import render
    from envcore.env.reward import RewardBreakdown, RewardComponent

    tally = {"passed": 0, "total": 3}
    result = {"outcome": "submitted", "resolution": "no", "security": tally, "regression": tally, "trap": tally}
    breakdown = RewardBreakdown(reward=-0.0004, components=(
        RewardComponent(name="steps_used", value=-0.0004, measured=1, detail="1/60 steps"),
        RewardComponent(name="diff_size", value=-0.0, measured=0, detail="")))
    text = render.final(result, breakdown, None)
    assert text.endswith("Reward +0.000.") and "-0.000" not in text
    costly = breakdown.model_copy(update={"reward": -0.1, "components": (
        RewardComponent(name="budget_exhausted", value=-0.1, measured=1, detail=""),)})
    assert render.final(result, costly, None).endswith("Reward -0.100: budget_exhausted -0.100")
