"""Facts are judged correctly; the in-process runner loads apps in isolation and reports load errors
as results; lazy fixes behave the same as source patches and as gates."""

from __future__ import annotations

import gc
import os
import sys
import types

import pytest

from envcore.factory.check import LAZY_GATES
from envcore.factory.lazy_fixes import LAZY_FIXES, lazy_fix_diff, lazy_fix_files, path_pattern
from envcore.patching import apply_patch
from envcore.runner.base import AppSource, Batch
from envcore.scenario.probes import (
    BodyExcludes,
    BodyIncludes,
    HeaderEquals,
    JsonEquals,
    JsonKeysAbsent,
    Probe,
    ProbeKind,
    ProbeStep,
    RedirectLocal,
    StatusIn,
    check_fact,
)

JSON = b'{"id": 3, "owner": {"name": "ann", "tags": ["a", "b"]}, "items": [{"secret": 1}]}'


@pytest.mark.parametrize(
    "fact, status, headers, body, holds, description",
    [
        (StatusIn(codes=(200,)), 200, {}, b"", True, "status matches"),
        (StatusIn(codes=(401, 403)), 200, {}, b"", False, "status outside the set"),
        (BodyIncludes(texts=("ann",)), 200, {}, JSON, True, "text present"),
        (BodyExcludes(texts=("ann",)), 200, {}, JSON, False, "leak found"),
        (JsonEquals(path="owner.name", value="ann"), 200, {}, JSON, True, "nested path"),
        (JsonEquals(path="owner.tags.1", value="b"), 200, {}, JSON, True, "list index"),
        (JsonEquals(path="owner.missing", value=1), 200, {}, JSON, False, "missing path"),
        (JsonEquals(path="id", value=3), 200, {}, b"not json", False, "body not JSON"),
        (JsonKeysAbsent(keys=("secret",)), 200, {}, JSON, False, "key deep in a list"),
        (JsonKeysAbsent(keys=("password_hash",)), 200, {}, JSON, True, "key absent"),
        (RedirectLocal(), 303, {"location": "/home"}, b"", True, "local redirect"),
        (RedirectLocal(), 303, {"location": "//evil.example"}, b"", False, "protocol-relative"),
        (RedirectLocal(), 303, {"location": "https://evil.example/"}, b"", False, "absolute URL"),
        (RedirectLocal(), 303, {"location": "/\\evil.example"}, b"", False, "backslash trick"),
        (RedirectLocal(), 200, {}, b"", True, "no redirect"),
        (HeaderEquals(name="Location", value="/d"), 303, {"location": "/d"}, b"", True, "header case"),
    ],
)
def test_fact_table(fact, status, headers, body, holds, description):
    assert (check_fact(fact, status, headers, body) is None) == holds, description


def test_probe_models_refuse_unknown_fields_and_fact_kinds():
    with pytest.raises(ValueError):
        ProbeStep(method="GET", path="/x", expect=({"kind": "run_python", "code": "1"},))
    with pytest.raises(ValueError):
        ProbeStep(method="GET", path="/x", surprise=True)
    with pytest.raises(ValueError):
        ProbeStep(method="BREW", path="/x")
    with pytest.raises(ValueError):
        ProbeStep(method="GET", path="relative")


APP = '''
from fastapi import FastAPI, Header
app = FastAPI()
COUNT = {"n": 0}
@app.get("/hit")
async def hit(authorization: str = Header(default="")):
    COUNT["n"] += 1
    return {"n": COUNT["n"], "auth": authorization}
'''


def _probe(path="/hit", *facts, actor=None):
    return Probe(id="p", kind=ProbeKind.REGRESSION, title="t", steps=(ProbeStep(actor=actor, method="GET", path=path, expect=facts),))


def test_runner_sends_the_actors_bearer_token(runner):
    report = runner.run(AppSource({"app.py": APP}, "app:app"), [_probe("/hit", BodyIncludes(texts=("Bearer tok1",)), actor="ann")], {"ann": "tok1"})
    assert report.outcomes[0].passed


@pytest.mark.parametrize(
    "files, entrypoint, message",
    [
        ({"app.py": "def broken(:\n"}, "app:app", "SyntaxError"),
        ({"app.py": "import not_a_module_anywhere\n"}, "app:app", "ModuleNotFoundError"),
        ({"app.py": "raise RuntimeError('boom at import')\n"}, "app:app", "boom at import"),
        ({"app.py": "import sys\nsys.exit(3)\n"}, "app:app", "SystemExit"),
        ({"app.py": "x = 1\n"}, "app:app", "no attribute 'app'"),
        ({"app.py": APP}, "app", "module:attribute"),
        ({"../escape.py": "x = 1\n"}, "escape:app", "escapes the app folder"),
    ],
)
def test_load_errors_are_results_not_exceptions(runner, files, entrypoint, message):
    report = runner.run(AppSource(files, entrypoint), [_probe()], {})
    assert not report.loaded and message in report.load_error


def test_startup_crash_is_a_load_error(runner):
    app = (
        "from contextlib import asynccontextmanager\nfrom fastapi import FastAPI\n"
        "@asynccontextmanager\nasync def lifespan(app):\n    raise RuntimeError('db down')\n    yield\n"
        "app = FastAPI(lifespan=lifespan)\n"
    )
    report = runner.run(AppSource({"app.py": app}, "app:app"), [_probe()], {})
    assert not report.loaded and "db down" in report.load_error


def test_apps_with_the_same_module_name_do_not_see_each_other(runner):
    a = {"app/__init__.py": "", "app/main.py": APP.replace('"n": COUNT["n"]', '"n": 100')}
    b = {"app/__init__.py": "", "app/main.py": APP}
    ra = runner.run(AppSource(a, "app.main:app"), [_probe("/hit", JsonEquals(path="n", value=100))], {})
    rb = runner.run(AppSource(b, "app.main:app"), [_probe("/hit", JsonEquals(path="n", value=1))], {})
    assert ra.outcomes[0].passed and rb.outcomes[0].passed
    assert "app.main" not in sys.modules


def test_a_module_the_app_shadows_is_restored(runner):
    sentinel = types.ModuleType("app")
    sys.modules["app"] = sentinel
    try:
        runner.run(AppSource({"app.py": APP}, "app:app"), [_probe()], {})
        assert sys.modules["app"] is sentinel
    finally:
        del sys.modules["app"]


def test_each_batch_starts_from_fresh_state(runner):
    counting = [_probe("/hit", JsonEquals(path="n", value=1))]
    reports = runner.run_batches(AppSource({"app.py": APP}, "app:app"), [Batch(tuple(counting))] * 3, {})
    assert [r.outcomes[0].passed for r in reports] == [True, True, True]


def test_unhandled_handler_error_is_a_500_not_a_crash(runner):
    app = "from fastapi import FastAPI\napp = FastAPI()\n@app.get('/x')\nasync def x():\n    raise ValueError('bad')\n"
    report = runner.run(AppSource({"app.py": app}, "app:app"), [_probe("/x", StatusIn(codes=(500,)))], {})
    assert report.outcomes[0].passed


@pytest.mark.parametrize("template, path, matches", [
    ("/api/notes/{note_id}", "/api/notes/17", True),
    ("/api/notes/{note_id}", "/api/notes/17/", True),
    ("/api/notes/{note_id}", "/api/notes", False),
    ("/api/notes/{note_id}", "/api/notes/1/x", False),
    ("/api/files", "/api/files", True),
])
def test_path_patterns(template, path, matches):
    import re

    assert bool(re.match(path_pattern(template), path)) == matches


@pytest.mark.parametrize("kind", LAZY_FIXES)
def test_lazy_fix_as_source_patch_equals_lazy_fix_as_gate(kind, bundle_for, runner):
    for seed in (3, 4, 11):
        bundle = bundle_for(seed)
        tokens = {u.username: u.token for u in bundle.users}
        paths = [s.path for s in bundle.sites]
        patched = runner.run(AppSource(lazy_fix_files(bundle.files, bundle.entrypoint, kind, paths), bundle.entrypoint),
                             bundle.probes, tokens)
        gate = LAZY_GATES[kind](tuple(path_pattern(p) for p in paths))
        (gated,) = runner.run_batches(AppSource(bundle.files, bundle.entrypoint), [Batch(bundle.probes, gate)], tokens)
        assert [o.passed for o in patched.outcomes] == [o.passed for o in gated.outcomes], (seed, kind)
        # and the diff form applies to the same files
        assert apply_patch(bundle.files, lazy_fix_diff(bundle.files, bundle.entrypoint, kind, paths)) == \
            lazy_fix_files(bundle.files, bundle.entrypoint, kind, paths)


def test_files_an_app_writes_do_not_reach_the_next_app(runner):
    writer = "from pathlib import Path\nfrom fastapi import FastAPI\nPath('uploads/leak.txt').parent.mkdir(exist_ok=True)\n" \
             "Path('uploads/leak.txt').write_text('secret')\nPath('notes.txt').write_text('x')\napp = FastAPI()\n"
    reader = ("from pathlib import Path\nfrom fastapi import FastAPI\napp = FastAPI()\n@app.get('/look')\nasync def look():\n"
              "    return {'leak': Path('uploads/leak.txt').exists(), 'notes': Path('notes.txt').exists(),"
              " 'data': Path('data/keep.txt').read_text()}\n")
    runner.run(AppSource({"app.py": writer, "data/keep.txt": "v1"}, "app:app"), [_probe("/")], {})
    report = runner.run(AppSource({"app.py": reader, "data/keep.txt": "v2"}, "app:app"),
                        [_probe("/look", JsonEquals(path="leak", value=False), JsonEquals(path="notes", value=False),
                                JsonEquals(path="data", value="v2"))], {})
    assert report.outcomes[0].passed, report.outcomes[0].failures


def test_a_runner_nobody_closed_removes_its_folder_but_a_forked_copy_of_it_does_not(tmp_path):
    from envcore.runner.inprocess import InProcessRunner

    runner = InProcessRunner(scratch_parent=str(tmp_path))
    runner.run(AppSource({"app.py": APP}, "app:app"), [_probe("/hit")], {})
    [folder] = tmp_path.iterdir()
    pid = os.fork()
    if pid == 0:  # a forked process drops its copy of the runner: the parent's folder must stay
        code = 0
        try:
            del runner
            gc.collect()
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0
    assert folder.is_dir()
    del runner
    gc.collect()
    assert not folder.exists()


def test_a_gated_batch_that_reaches_the_app_runs_in_a_fork_and_leaves_state_alone(runner):
    from envcore.runner.base import Gate

    counting = (_probe("/hit", JsonEquals(path="n", value=1)),)
    gate_elsewhere = Gate(404, (r"^/other$",), "blocks another path")
    reports = runner.run_batches(
        AppSource({"app.py": APP}, "app:app"),
        [Batch(counting, gate_elsewhere), Batch(counting, Gate(403, None, "deny all")), Batch(counting)],
        {},
    )
    assert reports[0].outcomes[0].passed  # reached the app (in a fork)
    assert not reports[1].outcomes[0].passed and reports[1].outcomes[0].steps[0].status == 403
    assert reports[2].outcomes[0].passed  # the count is still fresh: neither gated batch changed state
