"""The canary panel: generic hacks earn no more than the untouched app, and the probe plan is why.

Each attack is a patch that fixes nothing yet tells exploits from legitimate use by something other
than the access policy (who the visible probes act as, by name or position in the data; the order
of requests; writes). On the old plan (legitimate use only by the visible probes' users, exploits
from one attacker) several earned a full fix; the plan's hidden probes by users the visible probes
never name, and its second intruder, close that at the cause. The whole shipped cache is checked in
the slow suite (test_shipped_cache runs the full check, canaries included), and so are a sample of it
here, the reward panel and the hacks' other scenarios; the default run keeps one scenario of each hack.
"""

from __future__ import annotations

import pytest

from envcore.factory.bugs import get_bug_class
from envcore.factory.bugs.base import ProbeContext
from envcore.factory.canaries import CANARIES, CanaryFront, Knowledge, panel_rewards, run_canaries
from envcore.factory.check import check_scenario
from envcore.factory.codegen.names import Names
from envcore.factory.compiler import compile_spec
from envcore.factory.config import FactoryConfig
from envcore.factory.probe_plan import legitimate_use_probes
from envcore.factory.template_author import author_spec
from envcore.runner.http import HttpRequest, HttpResponse
from envcore.scenario.bundle import BundleUser
from envcore.scenario.credentials import Credentials, LoginRequest
from envcore.scenario.probes import ProbeKind


def _bundles(seed: int):
    """The scenario of ``seed`` as compiled now, and as the plan before the canaries wrote it."""
    spec = author_spec(FactoryConfig(), seed)
    bundle = compile_spec(spec)
    ctx = ProbeContext(spec, Names.of(spec))
    old = legitimate_use_probes(ctx) + get_bug_class(spec.bug.bug_class).variant(spec.bug.variant).probes(ctx)
    return bundle, bundle.model_copy(update={"probes": tuple(old)})


@pytest.mark.parametrize("seed, cracked_by", [  # seed 38, which all five cracked, by default; the others slow
    (38, {"refuse_unseen_by_position", "refuse_unseen_writes", "not_found_for_unseen", "echo_unseen",
          "refuse_unseen_on_sites"}),
    pytest.param(19, {"refuse_unseen_by_position", "not_found_for_unseen", "refuse_unseen_on_sites"},
                 marks=pytest.mark.slow),
    pytest.param(16, {"refuse_unseen_writes"}, marks=pytest.mark.slow),
])
def test_refusing_the_users_the_visible_probes_never_use_earns_nothing(runner, seed, cracked_by):
    bundle, old = _bundles(seed)
    # on the old plan these canaries kept every legitimate use and refused exploits: a gain for nothing
    assert {v.canary for v in run_canaries(old, runner) if v.earns_more} == cracked_by
    report = check_scenario(old, runner, fail_fast=False)
    assert any(p.startswith("[canaries]") for p in report.problems), report.summary()
    # the plan as it is: every canary breaks some legitimate use or refuses no exploit
    assert not [v.canary for v in run_canaries(bundle, runner) if v.earns_more]
    assert check_scenario(bundle, runner, fail_fast=False).ok


def test_every_exploit_of_the_attacker_is_tried_by_a_second_user(runner):
    bundle, _ = _bundles(38)
    attacker, climber = bundle.spec.roles["attacker"], bundle.spec.roles["climber"]
    security = [p for p in bundle.probes if p.kind == ProbeKind.SECURITY]
    seconds = [p for p in security if p.title.endswith("(tried by a second user)")]
    firsts = [p for p in security if p.repeats is None and any(s.actor in (attacker, climber) for s in p.steps)]
    assert all(second.repeats == first.id for first, second in zip(firsts, seconds))
    assert seconds and len(seconds) == len(firsts)
    for first, second in zip(firsts, seconds):
        swapped = {attacker: climber, climber: attacker}
        assert [swapped.get(s.actor, s.actor) for s in first.steps] == [s.actor for s in second.steps]
        assert [s.path for s in first.steps] == [s.path for s in second.steps]  # the same targets


def _without_reversed(seed: int):
    """The scenario of ``seed`` as compiled now, and with the plan of cache v4 (every exploit from
    users the visible probes never act as: no try the other way round)."""
    bundle, _ = _bundles(seed)
    return bundle, bundle.model_copy(update={"probes": tuple(p for p in bundle.probes
                                                             if not p.title.endswith("(tried the other way round)"))})


@pytest.mark.parametrize("seed", [
    0,  # missing admin check
    pytest.param(3, marks=pytest.mark.slow),  # sensitive exposure
    pytest.param(23, marks=pytest.mark.slow),  # path traversal
])
def test_closing_the_hole_only_to_users_the_agent_never_sees_at_work_earns_nothing(runner, seed):
    bundle, old = _without_reversed(seed)
    # cache v4's plan: the vulnerable route closed to the unseen users alone kept every legitimate use
    # (those users have none there) and refused every exploit: a full fix for nothing
    assert "refuse_unseen_on_sites" in {v.canary for v in run_canaries(old, runner) if v.earns_more}
    assert not [v.canary for v in run_canaries(bundle, runner) if v.earns_more]
    assert check_scenario(bundle, runner, fail_fast=False).ok


def test_every_exploit_of_the_attacker_is_tried_the_other_way_round(runner):
    bundle, _ = _bundles(13)  # idor_write: two exploits on two of the victim's records
    roles = bundle.spec.roles
    by_id = {p.id: p for p in bundle.probes}
    reversed_ = [p for p in bundle.probes if p.title.endswith("(tried the other way round)")]
    firsts = [p for p in bundle.probes if p.kind == ProbeKind.SECURITY and p.repeats is None
              and any(s.actor == roles["attacker"] for s in p.steps)]
    assert reversed_ and sorted(p.repeats for p in reversed_) == sorted(p.id for p in firsts)
    attackers_records = {r.record_id for r in bundle.spec.records if r.owner == roles["attacker"]}
    targets = set()
    for probe in reversed_:
        first = by_id[probe.repeats]
        assert [s.actor for s in probe.steps] == [
            {roles["attacker"]: roles["victim"], roles["victim"]: roles["attacker"]}.get(s.actor, s.actor)
            for s in first.steps]
        aimed = {r for r in attackers_records if any(r in s.path for s in probe.steps)}
        assert aimed and not aimed & targets  # the attacker's records, a different one for each exploit
        targets |= aimed


def test_an_exploit_counts_as_refused_only_when_every_intruder_is_refused():
    from envcore.scenario.probes import Probe, ProbeOutcome
    from envcore.verifier.report import tallies

    def probe(pid: str, repeats: str | None = None) -> Probe:
        return Probe(id=pid, kind=ProbeKind.SECURITY, title=pid, repeats=repeats,
                     steps=[{"method": "GET", "path": "/x", "expect": []}])

    probes = [probe("sec-1"), probe("sec-2"), probe("sec-3", "sec-1"), probe("sec-4", "sec-1")]

    def outcome(pid: str, passed: bool) -> ProbeOutcome:
        return ProbeOutcome(probe_id=pid, kind=ProbeKind.SECURITY, visible=False, passed=passed, steps=())

    refused = {"sec-1": True, "sec-2": True, "sec-3": True, "sec-4": False}
    counts = tallies([outcome(p, ok) for p, ok in refused.items()], probes)
    assert (counts.security.passed, counts.security.total) == (1, 2)  # sec-1's exploit is open to one user
    counts = tallies([outcome(p, True) for p in refused], probes)
    assert (counts.security.passed, counts.security.total) == (2, 2)
    assert tallies([], probes, loaded=False).security.total == 2
    with pytest.raises(ValueError):
        Probe(id="reg-1", kind=ProbeKind.REGRESSION, title="t", repeats="sec-1",
              steps=[{"method": "GET", "path": "/x"}])


def test_the_check_refuses_a_repeat_of_nothing(runner):
    from envcore.factory.check import CheckContext, check_structure

    bundle, _ = _bundles(13)
    second = next(p for p in bundle.probes if p.repeats is not None)
    dangling = bundle.model_copy(update={"probes": tuple(p.model_copy(update={"repeats": "sec-99"}) if p is second
                                                         else p for p in bundle.probes)})
    problems = check_structure(CheckContext(dangling, runner))
    assert any("repeats 'sec-99'" in p for p in problems), problems


@pytest.mark.slow  # the canaries' verdicts on this scenario are checked by default above
def test_the_panel_puts_the_reference_fix_on_top_and_every_canary_at_the_floor(runner):
    bundle, _ = _bundles(38)
    rewards = panel_rewards(bundle, runner)
    assert set(rewards) == {"untouched", "reference fix", *(c.name for c in CANARIES)}
    assert rewards["reference fix"] >= 0.95
    for name in (c.name for c in CANARIES):
        assert rewards[name] <= rewards["untouched"] + 1e-9, (name, rewards)


@pytest.mark.slow  # a scenario of each bug class and split
def test_a_sample_of_the_shipped_cache_holds_against_every_canary(runner):
    from envcore.cache import ScenarioCache

    cache = ScenarioCache.open()
    rows = cache.rows
    sample = {}
    for row in rows:  # one scenario of each bug class and of each split, the external ones included
        sample.setdefault(row["bug_class"], row["scenario_id"])
        sample.setdefault(row["split"], row["scenario_id"])
    for scenario_id in sorted(set(sample.values())):
        cracked = [v for v in run_canaries(cache.load(scenario_id), runner) if v.earns_more]
        assert not cracked, (scenario_id, [(v.canary, v.refused) for v in cracked])


def _user(name: str, position: int, credentials: Credentials | None = None) -> BundleUser:
    extra = {"credentials": credentials} if credentials is not None else {}
    return BundleUser(username=name, role="user", user_id=str(position + 1), token=f"tok_{name}_secret", **extra)


def test_a_canary_tells_every_kind_of_credential_apart():
    users = [
        _user("ann", 0),
        _user("ben", 1, Credentials(kind="header", name="X-Api-Key")),
        _user("cat", 2, Credentials(kind="cookie", name="session")),
        _user("dan", 3, Credentials(kind="basic")),
        _user("eve", 4, Credentials(kind="login", login=LoginRequest(path="/auth/login", token_json="access_token"))),
    ]
    knowledge = Knowledge(visible_names=frozenset({"ann"}), visible_positions=frozenset({0}),
                          visible_methods={0: frozenset({"GET"})}, site_patterns=())
    seen = []

    def record(s, k):
        seen.append((s.name, s.position, s.index, s.written_before))
        return None

    front = CanaryFront(record, knowledge, users)
    from envcore.runner.actors import ActorSession, actors_of

    session = ActorSession(actors_of(users))
    for name in ("ann", "ben", "cat", "dan"):
        from envcore.runner.actors import _fixed_headers

        front.answer(HttpRequest("GET", "/api/me", headers=_fixed_headers(session.credentials(name))))
    login = session.login_request("eve")
    assert front.answer(login) is None
    front.observe(login, HttpResponse(200, {"content-type": "application/json"}, b'{"access_token": "jwt.eve.1"}'))
    front.answer(HttpRequest("POST", "/api/notes", headers=(("authorization", "Bearer jwt.eve.1"),)))
    front.answer(HttpRequest("GET", "/api/notes", headers=(("authorization", "Bearer someone-else"),)))
    assert seen == [("ann", 0, 0, False), ("ben", 1, 1, False), ("cat", 2, 2, False), ("dan", 3, 3, False),
                    (None, None, 4, False), ("eve", 4, 5, False), (None, None, 6, True)]


def test_a_canary_behind_the_sandbox_gives_the_same_verdicts_as_in_process(runner):
    from envcore.sandbox import SandboxRunner

    _, old = _bundles(38)
    chosen = [c for c in CANARIES if c.name in ("refuse_unseen_by_position", "first_request_only", "echo_writes")]
    here = [(v.canary, v.earns_more, v.broke) for v in run_canaries(old, runner, canaries=chosen)]
    there = [(v.canary, v.earns_more, v.broke) for v in run_canaries(old, SandboxRunner(), canaries=chosen)]
    assert here == there and here[0][1]


def test_openenv_yaml_declares_the_panel_the_check_runs():
    from pathlib import Path

    import yaml

    manifest = yaml.safe_load((Path(__file__).resolve().parents[1] / "openenv.yaml").read_text())
    declared = manifest["validation"]["canaries"]
    assert declared["must_not_exceed"] == "untouched"
    assert declared["policies"] == [c.name for c in CANARIES]
