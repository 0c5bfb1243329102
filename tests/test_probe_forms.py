"""Probe steps that post a form: an app whose pages post HTML forms can be probed as a browser uses it.

A probe step could only send a JSON body, so a form route (``Form(...)``, what an HTML page posts)
could not be probed at all, and a fix that broke the page went unnoticed.
"""

from __future__ import annotations

import textwrap

import pytest
from pydantic import ValidationError

from envcore.runner.base import AppSource
from envcore.runner.inprocess import InProcessRunner
from envcore.sandbox import SandboxRunner
from envcore.scenario.bundle import Bundle
from envcore.scenario.probes import BodyIncludes, Probe, ProbeKind, ProbeStep, StatusIn

FORM_APP = textwrap.dedent('''
    from fastapi import FastAPI, Form, Header, HTTPException

    app = FastAPI()
    TOKENS = {"tok_ann_5531": "ann.moss"}
    NAMES = {"ann.moss": "Ann"}


    @app.post("/profile")
    def update_profile(display_name: str = Form(...), authorization: str | None = Header(default=None)):
        user = TOKENS.get((authorization or "").removeprefix("Bearer "))
        if user is None:
            raise HTTPException(status_code=401, detail="sign in")
        NAMES[user] = display_name
        return {"user": user, "display_name": NAMES[user]}
''').lstrip()

STEP = ProbeStep(actor="ann.moss", method="POST", path="/profile", form={"display_name": "Ann M. & co"},
                 expect=(StatusIn(codes=(200,)), BodyIncludes(texts=("Ann M. & co",))))


@pytest.fixture(params=["sandbox", "inprocess"])
def runner(request, sandbox):
    if request.param == "sandbox":
        return SandboxRunner(sandbox)
    inprocess = InProcessRunner()
    request.addfinalizer(inprocess.close)
    return inprocess


def test_a_form_step_posts_the_form_in_every_runner(runner):
    from envcore.scenario.credentials import Credentials

    probe = Probe(id="reg-form", kind=ProbeKind.REGRESSION, title="ann renames herself on the profile page", steps=(STEP,))
    report = runner.run(AppSource({"main.py": FORM_APP}, "main:app"), [probe],
                        {"ann.moss": Credentials(secret="tok_ann_5531")})
    [outcome] = report.outcomes
    assert outcome.passed, [(s.status, s.failures, s.body_excerpt) for s in outcome.steps]


def test_a_step_sends_a_form_or_a_json_body_not_both():
    with pytest.raises(ValidationError, match="json_body or form, not both"):
        ProbeStep(method="POST", path="/profile", form={"a": "b"}, json_body={"a": "b"})


def test_a_step_without_a_form_dumps_as_before_so_every_bundle_keeps_its_hash(shipped):
    assert "form" not in ProbeStep(method="GET", path="/x").model_dump(mode="json")
    assert STEP.model_dump(mode="json")["form"] == {"display_name": "Ann M. & co"}
    bundle = next(iter(shipped))
    assert Bundle.model_validate_json(bundle.canonical_json()).content_hash()[:16] == bundle.scenario_id


def test_the_shadow_replaces_a_users_values_in_a_form():
    from envcore.verifier.shadow import Substitution, _shadow_probe

    probe = Probe(id="reg-form", kind=ProbeKind.REGRESSION, title="t", steps=(
        STEP.model_copy(update={"form": {"display_name": "ann.moss-7731", "kind": "x"}}),))
    shadowed = _shadow_probe(probe, Substitution({"ann.moss": "qbe.xkrt", "ann.moss-7731": "qbe.xkrt-2290"}))
    assert shadowed.steps[0].form == {"display_name": "qbe.xkrt-2290", "kind": "x"}
    assert shadowed.steps[0].actor == "qbe.xkrt" and shadowed.id == "reg-form"


def test_an_agent_posts_a_form_with_http_request(cached_episode):
    """The agent's own requests can post a form too, as a person testing an HTML page would."""
    observation = cached_episode.step({"tool": "http_request", "method": "POST", "path": "/api/health",
                                       "form": {"a": "b"}})
    assert observation.error is None, observation.error
    refused = cached_episode.step({"tool": "http_request", "method": "POST", "path": "/x", "form": {"a": "b"},
                                   "json_body": {"a": "b"}})
    assert refused.error and "json_body or form, not both" in refused.error


def test_the_http_request_tool_schema_offers_the_form():
    from envcore.env.tools import tool_schemas

    schema = next(s for s in tool_schemas() if s["function"]["name"] == "http_request")["function"]
    assert "form" in schema["parameters"]["properties"]
