"""Answer keys on the page: a held-out (test) scenario's reference fix never reaches a visitor.

A test-split scenario is the benchmark: its hidden suite is told in words (``disclosure_for``) and its
reference fix is the answer key. Each test is named after the way it leaked: the debrief card after a
submit, a hint that quotes the lines the fix changes, Watch replaying the oracle's run (whose one step
applies the reference fix). A training scenario keeps all of them, which the same tests check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envcore.cache import ScenarioCache
from envcore.env.environment import Runtime
from envcore.env.sampler import CurriculumSampler
from envcore.patching import parse_patch
from envcore.server.sessions import SessionHub
from envcore.verifier.disclosure import disclosure_for
from ui import artifact_sets, teaching_view, watch_tab

ROOT = Path(__file__).resolve().parents[1]
CACHE = ScenarioCache.open()
HELD_OUT = CACHE.ids(split="test")[0]
TRAINING = CACHE.ids(split="train")[0]


def removed_lines(scenario_id: str) -> list[str]:
    """The lines the scenario's reference fix removes or changes (long enough to be telling)."""
    bundle = CACHE.load(scenario_id)
    lines = [line[:-1] if line.endswith("\n") else line
             for patch in parse_patch(bundle.reference_fix) for hunk in patch.hunks
             for line in hunk.old_lines if line not in hunk.new_lines]
    return [line.strip() for line in lines if len(line.strip()) >= 12]


def added_lines(scenario_id: str) -> list[str]:
    bundle = CACHE.load(scenario_id)
    lines = [line for patch in parse_patch(bundle.reference_fix) for hunk in patch.hunks
             for line in hunk.new_lines if line not in hunk.old_lines]
    return [line.strip() for line in lines if len(line.strip()) >= 12]


@pytest.fixture(scope="module")
def hub(sandbox):
    server = Runtime(sampler=CurriculumSampler(CACHE), sandbox=sandbox)
    human = Runtime(sampler=server.sampler, source="human", max_steps=40, parent=server)
    hub = SessionHub(human, ttl_s=600, max_sessions=4, sweep_every_s=0)
    yield hub
    hub.shutdown()


def played(hub: SessionHub, scenario: str) -> tuple[str, list[dict], dict]:
    """A session that took every hint and submitted the app untouched: (id, hints, debrief)."""
    sid = hub.open()
    hub.reset(sid, scenario=scenario, agent_id="human:answer-keys")
    for _ in range(3):
        hub.take_hint(sid)
    hints = hub.hints(sid)
    hub.step(sid, {"tool": "submit"})
    return sid, hints, hub.debrief(sid)


def test_the_debrief_of_a_held_out_scenario_shows_no_reference_fix(hub):
    sid, _, debrief = played(hub, HELD_OUT)
    assert debrief["disclosure"] == "words" and debrief["reference_fix"] is None
    card = teaching_view.reference_fix_html(debrief) + teaching_view.debrief_markdown(debrief)
    assert not any(line in card for line in added_lines(HELD_OUT))
    assert "held-out" in card
    hub.close(sid)
    sid, _, debrief = played(hub, TRAINING)
    assert debrief["disclosure"] == "full" and debrief["reference_fix"] == CACHE.load(TRAINING).reference_fix
    hub.close(sid)


def test_no_hint_of_a_held_out_scenario_quotes_a_line_its_reference_fix_changes(hub):
    sid, hints, _ = played(hub, HELD_OUT)
    text = "\n".join(h["text"] for h in hints)
    assert removed_lines(HELD_OUT) and not any(line in text for line in removed_lines(HELD_OUT)), text
    assert not any(line in text for line in added_lines(HELD_OUT))
    assert [h["cost"] for h in hints] == [0.10, 0.05, 0.25]  # the hint that says less costs less
    hub.close(sid)
    sid, hints, _ = played(hub, TRAINING)
    text = "\n".join(h["text"] for h in hints)
    assert any(line in text for line in removed_lines(TRAINING))  # a training scenario's hint does quote them
    assert [h["cost"] for h in hints] == [0.10, 0.15, 0.25]
    hub.close(sid)


def test_watch_shows_the_oracles_held_out_runs_as_outcomes_only(hub):
    sets = [s for s in artifact_sets.discover(ROOT / "artifacts") if s.kind == "validation"]
    assert sets, "the shipped artifacts hold the oracle's runs"
    seen = 0
    for rollout_set in sets:
        for record in artifact_sets.load_records(rollout_set):
            if disclosure_for(record.split) != "words":
                continue
            seen += 1
            assert record.steps == [] and record.diff == "", (rollout_set.name, record.scenario_id)
            outputs = watch_tab.side_outputs("left", record, 0, rollout_set.name)
            assert "outcome only" in outputs["left_title"] and "not shown" in outputs["left_diff"]
            fixed = [line for line in added_lines(record.scenario_id)] if record.scenario_id in CACHE.ids() else []
            assert not any(line in " ".join(map(str, outputs.values())) for line in fixed)
    assert seen, "the oracle was evaluated on held-out scenarios"
