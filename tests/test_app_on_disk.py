"""An app runs from its files on disk, in every runner, as ``uvicorn main:app`` run from its folder would.

Apps nobody here wrote find their parts on disk: they discover routers with ``pkgutil``, read data
and templates beside their code, load package data with ``importlib.resources``, read a ``.env`` with
python-dotenv (whose ``find_dotenv()`` starts from the calling code's file, skipping frames whose
file does not exist), and import modules inside handlers. Each test serves one small app of that kind
through every runner: the in-process runner (``--runner inprocess``), a fresh sandboxed worker per
probe, a template's worker with the app unchanged, a template's worker with a patch swapped in, and
an episode's live app; each one is a wall a person bringing their own app hit (routes lost silently,
empty settings, every signed-in request a 500).

The attacks (``test_attack_*``): a worker that rewrites or deletes its own ``.py`` files while it
serves changes nothing another probe or a later worker sees, templates included, and a patch swapped
into a template finds its own text on disk, never the template's.
"""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
import time

import pytest

from envcore.runner.base import AppSource
from envcore.runner.execute import judge, step_request
from envcore.runner.inprocess import InProcessRunner
from envcore.runner.snapshot import FolderSnapshot
from envcore.sandbox import LiveApp, Sandbox, SandboxLimits
from envcore.sandbox.runner import run_sandboxed
from envcore.scenario.probes import BodyIncludes, JsonEquals, Probe, ProbeKind, ProbeStep, StatusIn

MAIN = '''
import hashlib
import importlib
import json
import os
import pkgutil
import sys
from importlib import resources
from pathlib import Path

from dotenv import dotenv_values, load_dotenv
from fastapi import FastAPI

from app import routers
from app.envfile import find_env_file, read_env_file

load_dotenv()  # python-dotenv finds the .env from this file's folder upwards
HERE = Path(__file__).parent
app = FastAPI()
for info in pkgutil.iter_modules(routers.__path__):  # every module in routers/ adds its routes
    module = importlib.import_module(f"{routers.__name__}.{info.name}")
    if hasattr(module, "router"):
        app.include_router(module.router)


@app.get("/health")
def health():
    return {"ok": True}


@app.get("/file")
def file_info():
    exists = os.path.exists(__file__)
    text = Path(__file__).read_bytes() if exists else b""
    return {"exists": exists, "sha": hashlib.sha1(text).hexdigest(), "mark": "as shipped"}


@app.get("/where")
def where():
    root = os.path.realpath(HERE.parent)
    return {"cwd": os.path.realpath(os.getcwd()) == root, "path": os.path.realpath(sys.path[0]) == root}


@app.get("/walk")
def walk():
    found = pkgutil.walk_packages(routers.__path__, routers.__name__ + ".")
    return {"modules": sorted(info.name for info in found)}


@app.get("/resources")
def read_resources():
    return {
        "catalog": json.loads((resources.files(routers) / "catalog.json").read_text()),
        "catalog_bytes": len(pkgutil.get_data(routers.__name__, "catalog.json") or b""),
        "data": json.loads((HERE / "data" / "x.json").read_text()),
        "page": (HERE / "templates" / "page.html").read_text().strip(),
    }


@app.get("/env")
def env():
    return {
        "loaded": os.environ.get("DISK_APP_SECRET"),
        "values": dict(dotenv_values()),
        "by_hand": read_env_file(find_env_file()),
        "by_cwd": read_env_file(find_env_file(usecwd=True)),
    }


@app.get("/shout")
def shout():
    from app import helpers  # imported when a request first needs it, as many apps do

    return {"shout": helpers.shout("quiet")}


@app.post("/vandalize")
def vandalize():
    done = []
    for rel in ("app/helpers.py", "app/routers/users.py"):
        try:
            os.remove(rel)
            done.append("removed " + rel)
        except OSError:
            pass
    for path in (Path(__file__), HERE / "routers" / "items.py"):
        try:
            if path.exists():
                path.write_text("raise SystemExit('vandalized')\\n")
                done.append("rewrote " + path.name)
        except OSError:
            pass
    return {"done": done}
'''

ENVFILE = '''
import os
import sys


def find_env_file(usecwd=False):
    """Where python-dotenv's find_dotenv() finds a .env: from the folder of the first calling frame
    whose file exists (this module's own frames left out), or from the working directory, upwards."""
    if usecwd:
        path = os.getcwd()
    else:
        frame = sys._getframe()
        while frame is not None and (frame.f_code.co_filename == __file__ or not os.path.exists(frame.f_code.co_filename)):
            frame = frame.f_back
        if frame is None:
            return ""
        path = os.path.dirname(os.path.abspath(frame.f_code.co_filename))
    while True:
        candidate = os.path.join(path, ".env")
        if os.path.isfile(candidate):
            return candidate
        if os.path.dirname(path) == path:
            return ""
        path = os.path.dirname(path)


def read_env_file(path):
    values = {}
    if path:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.strip().partition("=")
                if sep and not key.startswith("#"):
                    values[key] = value
    return values
'''

ROUTER = '''
from fastapi import APIRouter

router = APIRouter()


@router.get("/{name}")
def {name}():
    return {{"{name}": ["{name}-1"]}}
'''

FILES = {
    ".env": "DISK_APP_SECRET=env-5150\n",
    "app/__init__.py": "",
    "app/main.py": textwrap.dedent(MAIN).lstrip(),
    "app/envfile.py": textwrap.dedent(ENVFILE).lstrip(),
    "app/helpers.py": "def shout(text):\n    return text.upper() + '!'\n",
    "app/routers/__init__.py": "",
    "app/routers/items.py": ROUTER.format(name="items").lstrip(),
    "app/routers/users.py": ROUTER.format(name="users").lstrip(),
    "app/routers/admin/__init__.py": ROUTER.format(name="admin").lstrip(),
    "app/routers/admin/audit.py": "LOG = []\n",
    "app/routers/catalog.json": '{"catalog": "c-7731"}',
    "app/data/x.json": '{"x": "x-4410"}',
    "app/templates/page.html": "<h1>page-2291</h1>\n",
}
ENTRY = "app.main:app"
ORIGINAL = AppSource(FILES, ENTRY)
PATCHED = AppSource(dict(FILES, **{"app/main.py": FILES["app/main.py"].replace('"as shipped"', '"patched"')}), ENTRY)
"""A patch that changes one handler's body: swapped into a template of :data:`ORIGINAL`."""
ROUTER_MODULES = ["app.routers.admin", "app.routers.admin.audit", "app.routers.items", "app.routers.users"]

RUNNERS = ("inprocess", "sandbox", "template", "swapped", "live")
"""``inprocess``: the in-process runner; ``sandbox``: a fresh worker per probe; ``template``: the
workers of a template of the app; ``swapped``: the workers of a template of :data:`ORIGINAL` serving
:data:`PATCHED`; ``live``: an episode's live app."""


def sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def get(path: str, *facts) -> ProbeStep:
    return ProbeStep(method="GET", path=path, expect=(StatusIn(codes=(200,)), *facts))


def as_probes(steps: list[ProbeStep]) -> list[Probe]:
    """One probe per step (each on the app as loaded), and one more so that a run takes a template."""
    steps = [*steps, get("/health")]
    return [Probe(id=f"p{i}", kind=ProbeKind.REGRESSION, title=step.path, steps=(step,)) for i, step in enumerate(steps)]


@pytest.fixture(scope="module")
def box():
    limits = SandboxLimits(request_timeout_s=2.0, load_timeout_s=5.0, verify_timeout_s=20.0, cpu_s=5, memory_mb=192)
    sandbox = Sandbox(limits=limits, spares=1, templates=2, template_spares=0).start()
    yield sandbox
    sandbox.close()


def serve(kind: str, box: Sandbox, steps: list[ProbeStep]) -> list[tuple[str, tuple[str, ...], str]]:
    """(path, failures, body excerpt) of each step, served by runner ``kind``; its source is
    :data:`PATCHED` for ``swapped``, else :data:`ORIGINAL`."""
    source = PATCHED if kind == "swapped" else ORIGINAL
    probes = as_probes(steps)
    if kind == "live":
        with LiveApp(box, source) as live:
            results = [judge(p.steps[0], live.request(step_request(p.steps[0], {}))) for p in probes]
        return [(p.title, r.failures, r.body_excerpt) for p, r in zip(probes, results)]
    before = dict(box.stats)
    if kind == "inprocess":
        with InProcessRunner() as runner:
            report = runner.run(source, probes, {})
    else:
        report = run_sandboxed(box, source, probes, {}, base=None if kind == "sandbox" else ORIGINAL, base_again=False)
    assert report.load_error is None, report.load_error
    if kind in ("template", "swapped"):  # the run really took the template, and swapped the patch in
        assert box.stats["from_template"] > before["from_template"] and box.stats["unswappable"] == before["unswappable"]
    return [(p.title, o.failures, o.steps[0].body_excerpt) for p, o in zip(probes, report.outcomes)]


def assert_served(kind: str, box: Sandbox, steps: list[ProbeStep]) -> None:
    failed = [result for result in serve(kind, box, steps) if result[1]]
    assert not failed, failed


@pytest.mark.parametrize("kind", RUNNERS)
def test_the_apps_file_exists_and_reads_back_its_source(kind, box):
    source = PATCHED if kind == "swapped" else ORIGINAL
    mark = "patched" if kind == "swapped" else "as shipped"
    assert_served(kind, box, [get("/file", JsonEquals(path="exists", value=True),
                                  JsonEquals(path="sha", value=sha(source.files["app/main.py"])),
                                  JsonEquals(path="mark", value=mark))])


@pytest.mark.parametrize("kind", RUNNERS)
def test_the_working_directory_and_the_first_path_entry_are_the_apps_folder_as_uvicorn_gives_them(kind, box):
    assert_served(kind, box, [get("/where", JsonEquals(path="cwd", value=True), JsonEquals(path="path", value=True))])


@pytest.mark.parametrize("kind", RUNNERS)
def test_routers_discovered_with_pkgutil_are_served(kind, box):
    assert_served(kind, box, [
        get("/items", JsonEquals(path="items.0", value="items-1")),
        get("/users", JsonEquals(path="users.0", value="users-1")),
        get("/admin", JsonEquals(path="admin.0", value="admin-1")),
        get("/walk", JsonEquals(path="modules", value=ROUTER_MODULES)),
    ])


@pytest.mark.parametrize("kind", RUNNERS)
def test_files_beside_the_code_and_package_resources_are_read(kind, box):
    assert_served(kind, box, [get("/resources", JsonEquals(path="catalog.catalog", value="c-7731"),
                                  JsonEquals(path="catalog_bytes", value=len(FILES["app/routers/catalog.json"])),
                                  JsonEquals(path="data.x", value="x-4410"),
                                  JsonEquals(path="page", value="<h1>page-2291</h1>"))])


@pytest.mark.parametrize("kind", RUNNERS)
def test_a_dotenv_beside_the_app_is_found_as_python_dotenv_finds_it(kind, box):
    assert_served(kind, box, [get("/env", JsonEquals(path="loaded", value="env-5150"),
                                  JsonEquals(path="values.DISK_APP_SECRET", value="env-5150"),
                                  JsonEquals(path="by_hand.DISK_APP_SECRET", value="env-5150"),
                                  JsonEquals(path="by_cwd.DISK_APP_SECRET", value="env-5150"))])


@pytest.mark.parametrize("kind", RUNNERS)
def test_an_import_inside_a_handler_finds_the_apps_own_module(kind, box):
    # the app's package is called ``app``, like this project's own app.py: a runner that forgets the
    # app's modules after loading it resolves the handler's import to the wrong one
    assert_served(kind, box, [get("/shout", JsonEquals(path="shout", value="QUIET!"))])


# -- attacks ----------------------------------------------------------------------------------------

VANDALIZE = ProbeStep(method="POST", path="/vandalize", expect=(BodyIncludes(texts=(
    "removed app/helpers.py", "removed app/routers/users.py", "rewrote main.py", "rewrote items.py")),))
INTACT = [get("/file", JsonEquals(path="sha", value=sha(FILES["app/main.py"]))),
          get("/walk", JsonEquals(path="modules", value=ROUTER_MODULES)),
          get("/shout", JsonEquals(path="shout", value="QUIET!"))]


@pytest.mark.parametrize("kind", ["inprocess-isolated", "sandbox", "template"])
def test_attack_a_worker_that_rewrites_or_deletes_its_own_py_files_changes_nothing_for_the_next_probe(kind, box):
    probes = as_probes([VANDALIZE, *INTACT])  # the vandal is served first
    if kind == "inprocess-isolated":
        with InProcessRunner(isolate_probes=True) as runner:
            report = runner.run(ORIGINAL, probes, {})
    else:
        report = run_sandboxed(box, ORIGINAL, probes, {}, base=ORIGINAL if kind == "template" else None,
                               base_again=False)
    assert report.load_error is None, report.load_error
    failed = [(o.probe_id, o.failures, o.steps[0].body_excerpt) for o in report.outcomes if not o.passed]
    assert not failed, failed


def test_attack_a_later_run_of_the_in_process_runner_finds_the_files_as_shipped():
    with InProcessRunner() as runner:
        first = runner.run(ORIGINAL, as_probes([VANDALIZE]), {})
        assert first.outcomes[0].passed, first.outcomes[0].failures
        again = runner.run(ORIGINAL, as_probes(INTACT), {})
    assert again.load_error is None and all(o.passed for o in again.outcomes), again.outcomes


def test_attack_a_patch_swapped_into_a_template_sees_its_own_text_and_leaves_none_behind(box):
    link = box.templates.acquire(ORIGINAL, again=False)
    assert link is not None
    try:
        def answer(source: AppSource, step: ProbeStep) -> dict:
            with box.spawn(source, link) as worker:
                worker.wait_ready(5.0)
                assert worker.swapped is True
                response = worker.request(step_request(step, {}), 2.0)
            result = judge(step, response)
            assert not result.failures, (step.path, result.failures, result.body_excerpt)
            return json.loads(response.body)

        answer(ORIGINAL, VANDALIZE)  # the template's folder, vandalized by one worker...
        patched = answer(PATCHED, get("/file", JsonEquals(path="sha", value=sha(PATCHED.files["app/main.py"]))))
        assert patched["mark"] == "patched"  # ...is whole again for the next, with the patch on disk
        answer(PATCHED, INTACT[1])
        # and the worker after the patched one reads the template's own text again
        answer(ORIGINAL, INTACT[0])
    finally:
        box.templates.release(link)


# -- putting a folder back: every worker after the first finds the app's files as shipped --------

BLOB = b"\0" * 16384 + b"tail"


def _app_folder(tmp_path):
    root = tmp_path / "app"
    (root / "data").mkdir(parents=True)
    (root / "main.py").write_text("x = 1\n")
    (root / "data" / "blob.db").write_bytes(BLOB)
    return root


def test_attack_a_file_written_back_sparse_with_the_same_bytes_is_rewritten_when_the_folder_is_put_back(tmp_path):
    """Unchanged files are not rewritten (the app's code is in the folder too, and rewriting it after
    every worker cost more than the rest of putting the folder back); a probe that writes the same
    bytes back with a hole where the zeros were changes only the blocks the file holds, which the
    next probe could read, so a file counts as unchanged only with the same bytes in as many blocks."""
    root = _app_folder(tmp_path)
    snapshot = FolderSnapshot(str(root))
    blob = root / "data" / "blob.db"
    blocks = os.stat(blob).st_blocks
    with open(blob, "r+b") as handle:  # the same bytes, the zeros now a hole
        handle.truncate(0)
        handle.seek(len(BLOB) - 4)
        handle.write(b"tail")
    if os.stat(blob).st_blocks == blocks:
        pytest.skip("this filesystem keeps no holes")
    snapshot.restore()
    assert blob.read_bytes() == BLOB and os.stat(blob).st_blocks == blocks


def test_putting_a_folder_back_moves_every_change_time_alike(tmp_path):
    """The file a probe wrote and the files it did not all get a new change time (setting their times
    is a change), so the next probe cannot tell which ones the last one wrote."""
    root = _app_folder(tmp_path)
    snapshot = FolderSnapshot(str(root))
    (root / "main.py").write_text("x = 2\n")
    paths = [root, root / "data", root / "main.py", root / "data" / "blob.db"]
    before = {path: os.stat(path).st_ctime_ns for path in paths}
    time.sleep(0.05)  # past the coarse clock file times are taken from
    snapshot.restore()
    assert (root / "main.py").read_text() == "x = 1\n"
    assert all(os.stat(path).st_ctime_ns > before[path] for path in paths), paths
