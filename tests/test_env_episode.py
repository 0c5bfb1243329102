"""The episode state machine: phases, budget, invalid actions, and what is (not) revealed before submit."""

from __future__ import annotations

import json

import pytest

from envcore.env.actions import A01Action, TOOL_NAMES, parse_action
from envcore.env.episode import Episode
from envcore.patching import apply_patch


@pytest.fixture(scope="module")
def bundle(shipped):
    # the first scenario in the compact single-module layout (these tests read app/main.py)
    return next(b for b in shipped if "app/main.py" in b.files)


@pytest.fixture
def episode(bundle, sandbox):
    ep = Episode(bundle, sandbox, max_steps=12)
    yield ep
    ep.close_live()


def test_phases_go_exploring_patched_submitted(episode, bundle):
    assert episode.first_observation().phase == "exploring"
    assert episode.step({"tool": "list_files"}).phase == "exploring"
    assert episode.step({"tool": "apply_patch", "diff": bundle.reference_fix}).phase == "patched"
    final = episode.step({"tool": "submit"})
    assert final.phase == "submitted" and final.done and final.reward >= 0.95
    assert episode.state().phase == "submitted"


@pytest.mark.parametrize("action, fragment", [
    ({"tool": "reset"}, "does not match any of the expected tags"),
    ({"tool": "step"}, "does not match"),
    ({"tool": "state"}, "does not match"),
    ({"tool": "verify"}, "does not match"),
    ({"tool": "read_reference_fix"}, "does not match"),
    ({}, "tool"),
    ({"tool": "read_file"}, "path"),
    ({"tool": "read_file", "path": "app/main.py", "start_line": 0}, "start_line"),
    ({"tool": "read_file", "path": "../../../etc/passwd"}, "escapes the app folder"),
    ({"tool": "read_file", "path": "/etc/passwd"}, "escapes the app folder"),
    ({"tool": "read_file", "path": "app/nothing.py"}, "no file"),
    ({"tool": "apply_patch", "diff": "not a diff"}, "does not apply"),
    ({"tool": "apply_patch", "diff": "--- a/../x.py\n+++ b/../x.py\n@@ -0,0 +1 @@\n+x\n"}, ""),
    ({"tool": "edit_file", "path": "app/main.py", "search": "no such text anywhere", "replace": ""}, "does not occur"),
    ({"tool": "http_request", "path": "/api", "as_user": "mallory"}, "no seeded user"),
    ({"tool": "http_request", "path": "api/items"}, "must start with '/'"),
    ({"tool": "http_request", "path": "/", "method": "TRACE"}, "method must be one of"),
    ({"tool": "search_code", "query": "(", "regex": True}, "invalid regular expression"),
    ({"tool": "submit", "force": True}, "Extra inputs are not permitted"),
])
def test_invalid_actions_come_back_as_errors_and_the_episode_goes_on(episode, action, fragment):
    observation = episode.step(action)
    assert observation.error and fragment in observation.error
    assert not observation.done and observation.reward == 0
    assert episode.invalid_actions == 1 and episode.files == episode.original
    assert episode.step({"tool": "list_files"}).error is None


def test_reserved_names_are_not_tools():
    assert not {"reset", "step", "state", "verify", "close"} & set(TOOL_NAMES)
    schema = json.dumps(A01Action.model_json_schema())
    assert '"submit"' in schema and '"verify"' not in schema


def test_reaching_the_budget_submits_what_is_there_with_a_cost(bundle, sandbox):
    episode = Episode(bundle, sandbox, max_steps=3)
    episode.step({"tool": "apply_patch", "diff": bundle.reference_fix})
    episode.step({"tool": "list_files"})
    final = episode.step({"tool": "view_diff"})
    assert final.done and episode.budget_exhausted and final.result["resolution"] == "full"
    assert final.reward_breakdown["components"][-1]["name"] == "budget_exhausted"
    assert 0.85 <= final.reward < 0.95
    assert "step budget" in final.text


def test_steps_after_the_end_are_refused_and_not_counted(episode):
    episode.step({"tool": "submit"})
    steps = episode.steps
    later = episode.step({"tool": "list_files"})
    assert later.done and "episode is over" in later.error and episode.steps == steps


def test_nothing_reveals_hidden_probes_before_or_after_submit(episode, bundle):
    hidden = [p for p in bundle.probes if not p.visible]
    assert hidden
    observations = [episode.first_observation(), episode.step({"tool": "run_tests"}),
                    episode.step({"tool": "apply_patch", "diff": bundle.reference_fix}),
                    episode.step({"tool": "run_tests"}), episode.step({"tool": "submit"})]
    dumped = "\n".join(o.model_dump_json() for o in observations)
    for probe in hidden:
        assert f'"{probe.id}"' not in dumped and f"] {probe.id} " not in dumped
    ran = observations[3].result["probes"]
    assert {p["probe_id"] for p in ran} == {p.id for p in bundle.visible_probes}
    assert all(o.reward == 0 and o.reward_breakdown is None for o in observations[:-1])
    assert observations[-1].reward_breakdown is not None


def test_edit_file_and_view_diff_track_the_change(episode):
    first = episode.files["app/main.py"].splitlines()[0]
    observation = episode.step({"tool": "edit_file", "path": "app/main.py", "search": first, "replace": first + "  # audited"})
    assert observation.error is None and observation.phase == "patched"
    diff = episode.step({"tool": "view_diff"}).result["diff"]
    assert "+" + first + "  # audited" in diff
    assert apply_patch(episode.original, diff) == episode.files


def test_read_file_line_ranges(episode):
    observation = episode.step({"tool": "read_file", "path": "app/main.py", "start_line": 2, "end_line": 3})
    lines = episode.files["app/main.py"].splitlines()
    assert observation.result["content"] == "\n".join(lines[1:3])
    assert observation.text.splitlines()[1].startswith("   2  ")


def test_a_catastrophic_regex_cannot_stall_the_session(episode):
    episode.files = {**episode.files, "app/big.py": "a" * 5000 + "!\n"}
    observation = episode.step({"tool": "search_code", "query": "(a+)+$", "regex": True})
    assert observation.error and "took longer" in observation.error


def test_requests_reach_the_app_as_the_named_user(episode, bundle):
    user = bundle.users[0]
    observation = episode.step({"tool": "http_request", "path": "/api/me", "as_user": user.username})
    assert observation.error is None and observation.result["status"] is not None
    anonymous = episode.step({"tool": "http_request", "path": "/api/me"})
    assert anonymous.result["status"] in (401, 403, 404)


def test_the_live_app_restarts_with_each_patch(episode, bundle):
    path = "app/main.py"
    text = episode.files[path]
    marker = '\n\n@app.get("/api/_probe_marker")\nasync def _probe_marker():\n    return {"patched": True}\n'
    assert episode.step({"tool": "http_request", "path": "/api/_probe_marker"}).result["status"] == 404
    episode.step({"tool": "edit_file", "path": path, "search": text[-40:], "replace": text[-40:] + marker})
    observation = episode.step({"tool": "http_request", "path": "/api/_probe_marker"})
    assert observation.result["status"] == 200 and '"patched":true' in observation.result["body"]


def test_a_request_shows_where_a_redirect_leads_and_every_cookie(episode):
    """An open redirect is confirmed by its Location, a session fixation by its cookies: the text the
    agent reads shows them (one line per cookie), even behind forty other headers."""
    path = "app/main.py"
    text = episode.files[path]
    route = (
        '\n\nfrom fastapi.responses import RedirectResponse as _Redirect\n\n'
        '@app.get("/api/_go")\nasync def _go(next: str = "/"):\n'
        '    response = _Redirect(next, status_code=302)\n'
        '    for i in range(40):\n        response.headers.append(f"x-pad-{i}", "x")\n'
        '    response.set_cookie("session", "abc")\n    response.set_cookie("theme", "dark")\n'
        '    return response\n')
    episode.step({"tool": "edit_file", "path": path, "search": text[-40:], "replace": text[-40:] + route})
    observation = episode.step({"tool": "http_request", "path": "/api/_go?next=https://evil.example/"})
    assert observation.result["status"] == 302
    assert observation.result["headers"]["location"] == "https://evil.example/"
    cookies = observation.result["headers"]["set-cookie"].split("\n")
    assert [c.split(";")[0] for c in cookies] == ["session=abc", "theme=dark"]
    lines = observation.text.splitlines()
    assert lines[0].endswith("-> 302")
    assert "location: https://evil.example/" in lines
    assert sum(line.startswith("set-cookie: ") for line in lines) == 2
    assert not any(line.startswith("x-pad-") for line in lines)


def test_parse_action_accepts_json_text():
    assert parse_action('{"tool": "view_diff"}').tool == "view_diff"
