"""The feedback loop: failure categories (synthetic records and the shipped baseline runs),
edge-of-ability sampling weights, the factory job, and a cache refresh whose distribution moves
the way the job asked."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from envcore.cache import ScenarioCache
from envcore.env.episode_log import EpisodeRecord, StepEntry
from envcore.env.sampler import CurriculumSampler, SamplingWeights
from envcore.factory.jobs import FactoryJob
from envcore.feedback.analysis import analyze, find_logs, render_report
from envcore.feedback.categories import CATEGORIES, categorize, episode_facts
from envcore.feedback.plan import PlanError, choose_agent, edge_weight, factory_job, sampling_weights
from envcore.feedback.refresh import RefreshError, parent_config, refresh

ROOT = Path(__file__).resolve().parents[1]
TWO_SITES = "42d7dabf29622c16"  # idor_write, tier 3: sites update and delete; all four traps


@pytest.fixture(scope="module")
def cache():
    # the cache the shipped evals in artifacts/evals/v2 were run on (the refresh below names it as parent)
    return ScenarioCache.open(ROOT / "artifacts" / "scenarios" / "v2")


@pytest.fixture(scope="module")
def shipped_analysis(cache):
    return analyze(find_logs(ROOT / "artifacts" / "evals" / "v2"), cache)


def _record(*, resolution="no", loads=1.0, broken=0.0, refused=0.0, exhausted=0.0, diff="", steps=2, format_errors=0,
            probes=None, reward=0.0, outcome="submitted", scenario=TWO_SITES, agent="agent-a", bug_class="idor_write",
            tier=3, load_error=None, guards=None):
    components = [{"name": "app_loads", "value": 0.0, "measured": loads, "detail": ""},
                  {"name": "legit_use_broken", "value": -broken / 2, "measured": broken, "detail": ""},
                  {"name": "security_blocked", "value": refused, "measured": refused, "detail": ""},
                  {"name": "budget_exhausted", "value": -0.1 * exhausted, "measured": exhausted, "detail": ""}]
    if guards is not None:  # only a scenario with guard probes has this term
        components.append({"name": "guards_broken", "value": -guards / 2, "measured": guards, "detail": ""})
    entries = [StepEntry(step=i + 1, action={"tool": "reply", "text": "x"}, elapsed_ms=1.0,
                         observation={"error": "format error: no JSON action" if i < format_errors else None})
               for i in range(steps)]
    verification = {"probes": probes, "load_error": load_error} if probes is not None or load_error else None
    return EpisodeRecord(episode_id=f"e{id(entries)}", agent_id=agent, scenario_id=scenario, scenario_hash="h",
                         bug_class=bug_class, tier=tier, started_at=0, ended_at=1, outcome=outcome, max_steps=10,
                         steps=entries, diff=diff, verification=verification, reward=reward,
                         reward_breakdown={"resolution": resolution, "components": components})


FIX_FILE = "app.py"  # the one file TWO_SITES's reference fix changes
DIFF = f"--- a/{FIX_FILE}\n+++ b/{FIX_FILE}\n@@ -1,1 +1,1 @@\n-a\n+b\n"
OTHER_DIFF = "--- a/app/config.py\n+++ b/app/config.py\n@@ -1,1 +1,1 @@\n-a\n+b\n"


def _category(record, cache):
    category, detail = categorize(episode_facts(record, cache.load(record.scenario_id)))
    return category.name, detail


# ----- categories -----------------------------------------------------------------------------------
def test_every_category_has_its_case_and_the_table_order_decides(cache):
    cases = {
        "infrastructure": _record(reward=None, outcome="infrastructure_error"),
        "solved": _record(resolution="full", refused=1.0, diff=DIFF, reward=0.99),
        "app_broken": _record(loads=0.0, broken=0.0, diff=DIFF, exhausted=1.0, load_error="SyntaxError: bad"),
        "guard_broken": _record(broken=0.3, refused=1.0, diff=DIFF, guards=0.5),
        "over_restriction": _record(broken=0.3, refused=1.0, diff=DIFF),
        "partial_fix": _record(resolution="partial", refused=0.5, diff=DIFF),
        "format_errors": _record(steps=4, format_errors=2),
        "budget_exhausted": _record(exhausted=1.0, outcome="budget_exhausted", diff=DIFF, steps=10),
        "no_patch": _record(),
        "wrong_site": _record(diff=OTHER_DIFF),
    }
    for expected, record in cases.items():
        assert _category(record, cache)[0] == expected, expected
    assert {c.name for c in CATEGORIES} == {*cases, "other"}
    assert _category(cases["app_broken"], cache)[1] == "SyntaxError: bad"
    assert f"+++ b/{FIX_FILE}\n" in cache.load(TWO_SITES).reference_fix
    assert f"the fix is in {FIX_FILE}" in _category(cases["wrong_site"], cache)[1]


def test_a_partial_fix_names_the_site_left_open_and_over_restriction_the_trap_sprung(cache):
    bundle = cache.load(TWO_SITES)
    by_site = {p.id: p.sites for p in bundle.probes if p.kind.value == "security"}
    closed = next(pid for pid, sites in by_site.items() if sites == ("update",))
    still = next(pid for pid, sites in by_site.items() if sites == ("delete",))
    probes = [{"probe_id": closed, "passed": True}, {"probe_id": still, "passed": False}]
    name, detail = _category(_record(resolution="partial", refused=0.5, diff=DIFF, probes=probes), cache)
    assert name == "partial_fix" and detail == "still open: delete (closed: update)"
    admin_trap = next(p for p in bundle.probes if p.trap == "admin_access")
    probes = [{"probe_id": admin_trap.id, "passed": False}, {"probe_id": "reg-1", "passed": False}]
    name, detail = _category(_record(broken=0.1, refused=1.0, diff=DIFF, probes=probes), cache)
    assert name == "over_restriction" and detail == "trap sprung: admin_access; 1 regression probe(s) fail"


def test_the_shipped_baselines_fall_where_they_should(shipped_analysis):
    agents = shipped_analysis["by"]["agent"]
    assert "oracle" not in agents  # validation runs are left out
    assert agents["noop"]["counts"]["no_patch"] == 258
    assert agents["deny_all"]["counts"]["over_restriction"] == 258
    assert agents["llm:tiny-random-llm"]["counts"]["format_errors"] == 258
    summary = json.loads((ROOT / "artifacts/evals/v2/heuristic/summary.json").read_text())
    assert agents["heuristic"]["counts"]["solved"] == round(summary["overall"]["full_fix"]["mean"] * 258)
    assert shipped_analysis["overall"]["counts"]["other"] == 0
    assert shipped_analysis["trap_springs"]["deny_all"]["admin_access"] > 0
    for name, examples in shipped_analysis["examples"].items():
        assert 1 <= len(examples) <= 3 and all(e["scenario_id"] and e["log"] for e in examples)
    report = render_report(shipped_analysis)
    assert "## By bug class" in report and "over-restriction" in report


def test_the_shipped_analysis_is_the_one_the_command_writes(shipped_analysis):
    shipped = json.loads((ROOT / "artifacts/feedback/baselines/analysis.json").read_text())
    assert shipped["overall"] == shipped_analysis["overall"] and shipped["by"] == shipped_analysis["by"]


# ----- weights ------------------------------------------------------------------------------------
def test_edge_slices_are_up_weighted_and_solved_or_hopeless_ones_down():
    edge = edge_weight({"graded": 20, "full": 10, "partial": 0})
    solved = edge_weight({"graded": 20, "full": 20, "partial": 0})
    hopeless = edge_weight({"graded": 20, "full": 0, "partial": 0})
    unknown = edge_weight({"graded": 2, "full": 0, "partial": 0})
    assert edge > 0.95 and solved < 0.35 and hopeless < 0.35 and unknown == 1.0
    assert 0.1 <= min(solved, hopeless)  # never removed from the draw
    partly = edge_weight({"graded": 20, "full": 0, "partial": 20})  # partial fixes count half: near the edge
    assert partly > 0.9


def test_the_weights_file_is_what_the_sampler_reads_and_it_shifts_the_draw(shipped_analysis, cache, tmp_path):
    weights = sampling_weights(shipped_analysis, "heuristic", source="analysis.json")
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(weights))
    loaded = SamplingWeights.load(path)
    solve = shipped_analysis["solve_by_agent"]["heuristic"]["bug_class"]
    hopeless = [k for k, v in solve.items() if v["full"] == 0]
    edge = max(solve, key=lambda k: loaded.by_bug_class[k])
    assert hopeless and all(loaded.by_bug_class[k] < loaded.by_bug_class[edge] / 2 for k in hopeless)
    plain, weighted = CurriculumSampler(cache), CurriculumSampler(cache, loaded)
    draws = {name: Counter(s.choose(seed=i, split="train")[0].bug_class for i in range(400))
             for name, s in (("plain", plain), ("weighted", weighted))}
    assert draws["weighted"][edge] > draws["plain"][edge]
    assert sum(draws["weighted"][k] for k in hopeless) < sum(draws["plain"][k] for k in hopeless)


def test_a_plan_needs_an_agent_that_played(shipped_analysis):
    with pytest.raises(PlanError, match="name the one"):
        choose_agent(shipped_analysis, None)
    with pytest.raises(PlanError, match="not in the analysis"):
        choose_agent(shipped_analysis, "gpt-9")
    assert choose_agent(shipped_analysis, "heuristic") == "heuristic"


# ----- the job and the refresh ----------------------------------------------------------------------
def test_the_job_asks_for_more_of_what_the_agent_fails_at(shipped_analysis, cache):
    base, _ = parent_config(cache)
    job = factory_job(shipped_analysis, "heuristic", base, parent="v2", source="analysis.json")
    FactoryJob.model_validate(job)
    merged = base.merged(job["config"])
    solve = shipped_analysis["solve_by_agent"]["heuristic"]["bug_class"]
    never = [k for k, v in solve.items() if v["full"] == 0]
    best = max(solve, key=lambda k: solve[k]["full"] / solve[k]["graded"])
    assert all(merged.bug_classes[k] > merged.bug_classes[best] for k in never)
    # the heuristic is weakest at tier 3: harder scenarios
    assert merged.traps.second_site > base.traps.second_site and merged.decoy_rate > base.decoy_rate
    springs = factory_job({**shipped_analysis, "trap_springs": {"heuristic": {"public_route": 9}}}, "heuristic", base,
                          parent="v2", source=None)
    assert springs["config"]["traps"]["public_route"] > job["config"]["traps"]["public_route"]
    assert "public_route" in springs["reason"]


@pytest.fixture(scope="module")
def refreshed(shipped_analysis, cache, tmp_path_factory):
    folder = tmp_path_factory.mktemp("refresh")
    base, _ = parent_config(cache)
    job = factory_job(shipped_analysis, "heuristic", base, parent="v2", source="artifacts/feedback/baselines/analysis.json")
    (folder / "job.yaml").write_text(yaml.safe_dump(job))
    before = (cache.root / "manifest.json").read_bytes()
    manifest = refresh(cache.root, folder / "job.yaml", folder / "v3", n=60, workers=2)
    return {"folder": folder, "manifest": manifest, "job": job, "parent_manifest": before}


@pytest.mark.slow  # a refresh builds 60 scenarios (over a minute); planning the job is tested by default above
def test_a_refresh_writes_a_valid_new_version_with_its_lineage(refreshed, cache):
    v3 = ScenarioCache.open(refreshed["folder"] / "v3")
    lineage = v3.manifest["lineage"]
    assert lineage["parent"] == "v2" and lineage["parent_scenarios"] == len(cache)
    assert lineage["job_config"] == refreshed["job"]["config"] and lineage["analysis"].endswith("analysis.json")
    assert lineage["added"] + lineage["rejected"] == 60 and lineage["added"] >= 55
    assert len(v3) == len(cache) + lineage["added"]
    new = [r for r in v3.rows if r["scenario_id"] not in set(cache.ids())]
    assert {r["split"] for r in new} == {"train"}  # held-out splits stay the parent's
    assert sorted(v3.ids(split="test")) == sorted(cache.ids(split="test"))
    for row in new[:10]:
        assert v3.load(row["scenario_id"]).scenario_id == row["scenario_id"]  # hash-verified load
    assert (cache.root / "manifest.json").read_bytes() == refreshed["parent_manifest"]  # the parent is untouched
    assert len(ScenarioCache.open(cache.root)) == 1000  # and still loads


@pytest.mark.slow  # the same refresh
def test_the_refreshed_distribution_moved_the_way_the_job_asked(refreshed, cache):
    v3 = ScenarioCache.open(refreshed["folder"] / "v3")
    new = [r for r in v3.rows if r["scenario_id"] not in set(cache.ids())]
    old = [r for r in cache.rows if r["split"] == "train"]
    weights = refreshed["job"]["config"]["bug_classes"]
    boosted = {k for k, w in weights.items() if w >= 2.5}
    share = lambda rows, test: sum(1 for r in rows if test(r)) / len(rows)  # noqa: E731
    assert share(new, lambda r: r["bug_class"] in boosted) > share(old, lambda r: r["bug_class"] in boosted) + 0.1
    assert share(new, lambda r: r["tier"] == 3) > share(old, lambda r: r["tier"] == 3) + 0.15


@pytest.mark.slow  # the same refresh
def test_a_refresh_never_writes_over_a_version(refreshed):
    with pytest.raises(RefreshError, match="never over one"):
        refresh(None, refreshed["folder"] / "job.yaml", refreshed["folder"] / "v3", n=1)


def test_the_commands_run_the_loop_and_refuse_bad_input(tmp_path, capsys):
    from envcore.cli import main

    logs = ROOT / "artifacts" / "evals" / "v2" / "noop"
    assert main(["feedback", "analyze", "--logs", str(logs), "--out", str(tmp_path / "a")]) == 0
    analysis = json.loads((tmp_path / "a" / "analysis.json").read_text())
    assert analysis["overall"]["counts"]["no_patch"] == 258 and (tmp_path / "a" / "report.md").exists()
    assert main(["feedback", "plan", "--analysis", str(tmp_path / "a" / "analysis.json"), "--out", str(tmp_path / "p")]) == 0
    weights = SamplingWeights.load(tmp_path / "p" / "weights.json")  # the one agent is chosen
    assert all(w < 0.35 for w in weights.by_bug_class.values())  # noop never solves: every slice hopeless
    FactoryJob.load(tmp_path / "p" / "job.yaml")
    with pytest.raises(SystemExit, match="does not exist"):
        main(["feedback", "analyze", "--logs", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="not in the analysis"):
        main(["feedback", "plan", "--analysis", str(tmp_path / "a" / "analysis.json"), "--agent", "x", "--out", str(tmp_path / "y")])


@pytest.mark.slow  # a build; test_cli's build with a job runs by default
def test_factory_build_takes_the_planned_job(tmp_path):
    from envcore.cli import main

    job = ROOT / "artifacts" / "feedback" / "baselines" / "heuristic" / "job.yaml"
    assert main(["factory", "build", "--n", "4", "--seed", "7000", "--job", str(job), "--out", str(tmp_path / "c"),
                 "--workers", "1"]) == 0
    built = ScenarioCache.open(tmp_path / "c")
    assert built.manifest["lineage"]["analysis"] == "artifacts/feedback/baselines/analysis.json"
    assert built.manifest["lineage"]["parent"] == "v2" and len(built) >= 3
