"""A template serves one request that only library code answers before it forks its workers: the
first-use work of the request path done once. It must reach nothing of the app's own, and leave the
app exactly as imported and started. Attacks are named ``test_attack_*``."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Mount

from envcore.runner.base import AppSource
from envcore.runner.http import HttpRequest
from envcore.runner.request_warmup import WARMUP_PATH, WarmUpBroke, warm_up, why_not
from envcore.sandbox import Sandbox, SandboxLimits


def plain_app() -> FastAPI:
    app = FastAPI()

    @app.get("/items/{item_id}")
    def item(item_id: int):
        return {"id": item_id}

    return app


def no_calls(into: set):
    return lambda: None


def test_a_plain_app_is_warmed_and_left_as_it_was():
    app = plain_app()
    before = dict(vars(app)), dict(vars(app.router))
    assert why_not(app) is None
    assert warm_up(app, no_calls) is None
    assert (dict(vars(app)), dict(vars(app.router))) == before  # the stack it built is dropped again


def test_library_middleware_that_keeps_no_state_does_not_rule_it_out():
    app = plain_app()
    app.add_middleware(CORSMiddleware, allow_origins=["*"])
    assert why_not(app) is None


@pytest.mark.parametrize("change, reason", [
    (lambda app: app.middleware("http")(_passthrough), "middleware"),
    (lambda app: app.add_exception_handler(404, _not_found), "handles"),
    (lambda app: app.add_exception_handler(Exception, _not_found), "handles"),
    (lambda app: app.get("/{anything:path}")(lambda anything: {"caught": anything}), "route matches"),
    (lambda app: app.router.routes.append(Mount("/", app=_asgi)), "route matches"),
    (lambda app: setattr(app.router, "default", _asgi), "404 is the app's own"),
])
def test_anything_of_the_apps_that_could_answer_rules_the_warm_up_out(change, reason):
    app = plain_app()
    change(app)
    assert reason in (why_not(app) or "")
    assert warm_up(app, no_calls) is not None  # not sent


def test_attack_app_code_that_runs_anyway_refuses_the_template():
    """Whatever the checks miss is caught while the request is served: a call into the app's files."""
    def record(into: set):
        into.add(("app.py", "sneaky"))
        return lambda: None

    with pytest.raises(WarmUpBroke, match="ran the app's own code"):
        warm_up(plain_app(), record)


async def _passthrough(request: Request, call_next):
    return await call_next(request)


async def _not_found(request: Request, exc: Exception):
    return JSONResponse({"seen": True}, status_code=404)


async def _asgi(scope, receive, send):
    raise AssertionError("never called by the checks")


COUNTING = '''from fastapi import FastAPI, Request

app = FastAPI()
SEEN = []


@app.middleware("http")
async def count(request: Request, call_next):
    SEEN.append(request.url.path)
    return await call_next(request)


@app.exception_handler(404)
async def not_found(request, exc):
    from fastapi.responses import JSONResponse
    SEEN.append("404 handler")
    return JSONResponse({"detail": "Not Found"}, status_code=404)


@app.get("/seen")
def seen():
    return {"seen": SEEN}
'''


def test_attack_an_app_that_counts_every_request_sees_none_before_its_probes():
    """An app that records every request it gets (in middleware and in its 404 handler) is not
    warmed: its workers see exactly the requests of their own probe, as a fresh worker does."""
    limits = SandboxLimits(request_timeout_s=2.0, load_timeout_s=5.0, cpu_s=5, memory_mb=192)
    with Sandbox(limits=limits, spares=0, templates=2, template_spares=0) as sandbox:
        base = AppSource({"app.py": COUNTING}, "app:app")
        link = sandbox.templates.acquire(base)
        assert link is not None and link.info.get("warmed") is False and "middleware" in link.info.get("not_warmed")
        try:
            with sandbox.spawn(base, link) as worker:
                worker.wait_ready(5.0)
                answer = worker.request(HttpRequest("GET", "/seen"), 2.0)
        finally:
            sandbox.templates.release(link)
        assert json.loads(answer.body) == {"seen": ["/seen"]}


def test_a_warmed_templates_workers_answer_as_fresh_workers_do():
    files = {"app.py": '''from fastapi import FastAPI

app = FastAPI()
HITS = {"n": 0}


@app.get("/hit")
def hit():
    HITS["n"] += 1
    return HITS
'''}
    base = AppSource(files, "app:app")
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        link = sandbox.templates.acquire(base)
        assert link is not None and link.info.get("warmed") is True
        answers = []
        try:
            for _ in range(2):
                with sandbox.spawn(base, link) as worker:
                    worker.wait_ready(5.0)
                    answers.append([json.loads(worker.request(HttpRequest(m, p), 2.0).body)
                                    for m, p in (("GET", "/hit"), ("GET", WARMUP_PATH), ("GET", "/hit"))])
        finally:
            sandbox.templates.release(link)
        with sandbox.spawn(base) as fresh:
            fresh.wait_ready(5.0)
            expected = [json.loads(fresh.request(HttpRequest(m, p), 2.0).body)
                        for m, p in (("GET", "/hit"), ("GET", WARMUP_PATH), ("GET", "/hit"))]
        assert answers == [expected, expected] and expected[0] == {"n": 1}


def _counting_probes():
    """Three probes, each passing only if the app saw its request and nothing before it."""
    from envcore.scenario.probes import BodyIncludes, Probe, ProbeKind, ProbeStep

    step = ProbeStep(method="GET", path="/seen", expect=(BodyIncludes(texts=('{"seen":["/seen"]}',)),))
    return [Probe(id=f"p{i}", kind=ProbeKind.REGRESSION, title="t", steps=(step,)) for i in range(3)]


def test_the_in_process_runner_warms_up_before_its_forks_and_every_probe_sees_the_app_as_loaded(monkeypatch):
    """The factory's check forks the loaded app once per probe too: the same warm-up runs there, and
    an app whose code would run for it is loaded again and served without one."""
    import envcore.runner.request_warmup as warmup
    from envcore.runner.base import Batch
    from envcore.runner.inprocess import InProcessRunner

    source = AppSource({"app.py": COUNTING}, "app:app")
    sent = []
    real = warmup.warm_up
    monkeypatch.setattr(warmup, "warm_up", lambda app, record: sent.append(real(app, record)) or sent[-1])
    with InProcessRunner(isolate_probes=True) as runner:
        report = runner.run_batches(source, [Batch(tuple(_counting_probes()), None, False)], {})[0]
        assert [o.passed for o in report.outcomes] == [True] * 3
        assert sent and "middleware" in sent[0]  # ruled out: the app counts requests
        # the checks fooled (as an app the rules miss would): the call recorder catches it and the
        # app is loaded again, with no warm-up
        monkeypatch.setattr(warmup, "why_not", lambda app: None)
        again = runner.run_batches(source, [Batch(tuple(_counting_probes()), None, False)], {})[0]
        assert [o.passed for o in again.outcomes] == [True] * 3
