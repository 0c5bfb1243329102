"""A startup that fails reads like an import that fails: one line, the exception and the app's own
file and line, in every runner and in the template that would have run it. Never the interpreter's
traceback, whose frames name the sandbox's folders (its process id and random workspace names) and
the installation's files: an agent's ``load_error`` is one line, and nothing about the machine."""

from __future__ import annotations

import re

import pytest

from envcore.runner.base import AppSource
from envcore.runner.inprocess import InProcessRunner
from envcore.sandbox import Sandbox, SandboxLimits, SandboxRunner, supported_platform
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep, StatusIn

MAIN = '''from contextlib import asynccontextmanager
import json
from pathlib import Path

from fastapi import FastAPI

from seed import load_users


@asynccontextmanager
async def lifespan(app):
    app.state.users = load_users(Path(__file__).with_name("seed.json"))
    yield


app = FastAPI(lifespan=lifespan)


@app.get("/health")
def health():
    return {"ok": True}
'''
SEED = '''import json


def load_users(path):
    data = json.loads(path.read_text())
    return {row["id"]: row for row in data["users"]}
'''
FILES = {"main.py": MAIN, "seed.py": SEED, "seed.json": "{}"}
"""A seed the app cannot read: ``KeyError: 'users'`` raised in seed.py line 6, while the app starts."""
ONE_LINE = re.compile(r"^startup failed: KeyError at seed\.py:6: 'users'$")


HEALTH = Probe(id="health", kind=ProbeKind.REGRESSION, title="the app answers",
               steps=(ProbeStep(method="GET", path="/health", expect=(StatusIn(codes=(200,)),)),))


def _load_error(runner) -> str:
    report = runner.run(AppSource(FILES, "main:app"), [HEALTH], {})
    assert report.load_error, report
    return report.load_error


def test_a_failing_startup_is_one_line_with_the_apps_file_and_line_in_process():
    runner = InProcessRunner()
    try:
        error = _load_error(runner)
    finally:
        runner.close()
    assert ONE_LINE.match(error), error


@pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only")
@pytest.mark.parametrize("templates", [0, 2], ids=["fresh-workers", "templates"])
def test_attack_a_failing_startup_names_no_sandbox_folder_and_no_installed_file(templates):
    with Sandbox(limits=SandboxLimits(), spares=0, templates=templates, template_spares=0, warm_up=False) as box:
        error = _load_error(SandboxRunner(box))
    assert ONE_LINE.match(error), error
    assert "/dev/shm" not in error and "site-packages" not in error and "Traceback" not in error
