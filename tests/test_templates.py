"""Templates and hot swapping: a patch whose change is confined to function bodies is loaded into a
fork of the original app, and must behave exactly as a fresh import of the patched files would;
anything else falls back to a fresh load. Attacks specific to templates are named ``test_attack_*``."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from envcore.patching import apply_patch, parse_patch, make_diff
from envcore.runner.base import AppSource
from envcore.runner.http import HttpRequest
from envcore.sandbox import Sandbox, SandboxLimits
from envcore.sandbox.templates import fits
from envcore.verifier import verify

from tests.test_verifier import one_per_class

STORE = '''import json
import os
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "items.json"
ITEMS = json.loads(DATA.read_text())


def get_item(i):
    return ITEMS.get(str(i))


def make_guard(role):
    def guard():
        return role
    return guard
'''

MAIN = '''import os
from fastapi import FastAPI

from .store import DATA, get_item, make_guard

app = FastAPI()
GUARD = make_guard("user")
COUNTER = {"n": 0}


@app.get("/item/{i}")
def item(i: int):
    return {"item": get_item(i)}


@app.get("/guard")
def guard():
    return {"guard": GUARD()}


@app.get("/count")
def count():
    COUNTER["n"] += 1
    return dict(COUNTER)
'''

BASE_FILES = {
    "tapp/__init__.py": "",
    "tapp/store.py": STORE,
    "tapp/main.py": MAIN,
    "data/items.json": '{"1": "one"}',
}
ENTRY = "tapp.main:app"
BASE = AppSource(BASE_FILES, ENTRY)


def patched(**changes: tuple[str, str]) -> dict[str, str]:
    """The base files with, per file (``tapp_main=(old, new)``), one exact replacement."""
    files = dict(BASE_FILES)
    for key, (old, new) in changes.items():
        path = key.replace("_", "/", 1) + ".py"
        assert old in files[path], (path, old)
        files[path] = files[path].replace(old, new, 1)
    return files


class Reply:
    def __init__(self, response) -> None:
        self.status, self.error, self.body = response.status, response.error, response.body

    def json(self):
        return json.loads(self.body)


def get(worker, path: str) -> Reply:
    return Reply(worker.request(HttpRequest("GET", path), 2.0))


def load(sandbox: Sandbox, files: dict[str, str]):
    worker = sandbox.spawn(AppSource(files, ENTRY), BASE)
    worker.wait_ready(5.0)
    return worker


@pytest.fixture(scope="module")
def box():
    limits = SandboxLimits(request_timeout_s=1.0, load_timeout_s=3.0, verify_timeout_s=8.0, cpu_s=5, memory_mb=192)
    sandbox = Sandbox(limits=limits, spares=0, templates=4, template_spares=1, template_after=1).start()
    yield sandbox
    sandbox.close()


# -- what is swapped, what loads afresh -----------------------------------------------------------
def test_unchanged_app_is_served_from_its_template(box):
    with load(box, BASE_FILES) as worker:
        assert worker.template is not None and worker.swapped is True
        assert get(worker, "/item/1").json() == {"item": "one"}
        assert worker.containment.get("workspace") == "read-only" and worker.containment.get("seccomp") is True


def test_body_change_is_swapped_in_and_served(box):
    files = patched(tapp_main=('return {"item": get_item(i)}', 'return {"item": get_item(i), "patched": True}'))
    with load(box, files) as worker:
        assert worker.swapped is True and worker.load_timings_ms.get("swapped_files") == 1
        assert get(worker, "/item/1").json() == {"item": "one", "patched": True}


def test_dropping_an_unused_import_is_swapped_in(box):
    files = patched(tapp_main=("import os\n", ""))
    with load(box, files) as worker:
        assert worker.swapped is True
        assert get(worker, "/item/1").status == 200


def test_new_import_used_in_a_body_is_run(box):
    files = patched(tapp_main=("import os\n", "import os\nimport hashlib\n"))
    files["tapp/main.py"] = files["tapp/main.py"].replace(
        'return {"guard": GUARD()}', 'return {"guard": hashlib.sha1(GUARD().encode()).hexdigest()[:6]}')
    with load(box, files) as worker:
        assert worker.swapped is True
        assert get(worker, "/guard").json() == {"guard": "12dea9"}


def test_route_change_loads_afresh(box):
    files = patched(tapp_main=('@app.get("/item/{i}")', '@app.get("/items/{i}")'))
    with load(box, files) as worker:
        assert worker.swapped is False and "import" in (worker.unswappable_reason or "")
        assert get(worker, "/items/1").json() == {"item": "one"}
        assert get(worker, "/item/1").status == 404


def test_factory_that_ran_at_import_is_not_swapped(box):
    # GUARD was built by make_guard at import: swapping make_guard's body would leave GUARD old.
    files = patched(tapp_store=("        return role\n", "        return role + '!'\n"))
    with load(box, files) as worker:
        assert worker.swapped is False and "ran while the app was imported" in worker.unswappable_reason
        assert get(worker, "/guard").json() == {"guard": "user!"}


def test_turning_a_function_into_a_generator_loads_afresh(box):
    files = patched(tapp_store=("    return ITEMS.get(str(i))\n", "    yield ITEMS.get(str(i))\n"))
    with load(box, files) as worker:
        assert worker.swapped is False and "kind" in worker.unswappable_reason


def test_dropped_name_another_module_imports_loads_afresh_and_fails_like_a_fresh_import(box):
    files = patched(tapp_store=("from pathlib import Path\n", "import pathlib\n"))
    files["tapp/store.py"] = files["tapp/store.py"].replace("Path(__file__)", "pathlib.Path(__file__)")
    with load(box, files) as worker:
        assert worker.swapped is False  # the module-level DATA line changed: not a body change
    files = dict(BASE_FILES, **{"tapp/main.py": MAIN.replace("from .store import DATA,", "from .store import DATA, os as store_os,")})
    base = AppSource(files, ENTRY)
    dropped = dict(files, **{"tapp/store.py": STORE.replace("import os\n", "")})
    worker = box.spawn(AppSource(dropped, ENTRY), base)
    with pytest.raises(Exception, match="ImportError|cannot import name"):
        worker.wait_ready(5.0)
    assert box.stats["unswappable"] >= 1


def test_added_file_is_not_served_from_the_template(box):
    files = dict(BASE_FILES, **{"tapp/extra.py": "X = 1\n"})
    assert not fits(AppSource(files, ENTRY), BASE)
    with load(box, files) as worker:
        assert worker.template is None and worker.swapped is None


def test_changed_data_file_is_not_served_from_the_template(box):
    files = dict(BASE_FILES, **{"data/items.json": '{"1": "uno"}'})
    with load(box, files) as worker:
        assert worker.template is None
        assert get(worker, "/item/1").json() == {"item": "uno"}


def test_syntax_error_loads_afresh_and_is_the_apps_load_error(box):
    files = patched(tapp_main=('return {"item": get_item(i)}', 'return {"item": get_item(i)'))
    worker = box.spawn(AppSource(files, ENTRY), BASE)
    with pytest.raises(Exception, match="SyntaxError|never closed"):
        worker.wait_ready(5.0)


def test_each_worker_starts_from_the_template_state(box):
    with load(box, BASE_FILES) as first:
        assert get(first, "/count").json() == {"n": 1}
        assert get(first, "/count").json() == {"n": 2}
    with load(box, BASE_FILES) as second:
        assert get(second, "/count").json() == {"n": 1}


# -- attacks --------------------------------------------------------------------------------------
def test_attack_writing_the_templates_data_files_is_refused(box):
    files = patched(tapp_main=('return {"item": get_item(i)}',
                               'DATA.write_text(\'{"1": "owned"}\')\n    return {"item": get_item(i)}'))
    with load(box, files) as worker:
        assert worker.swapped is True
        response = get(worker, "/item/1")
        assert response.status == 500 or response.error
    with load(box, BASE_FILES) as clean:
        assert get(clean, "/item/1").json() == {"item": "one"}
    with open(os.path.join(box.templates._links[next(iter(box.templates._links))].workspace, "data/items.json")) as f:
        assert "owned" not in f.read()


def test_attack_template_worker_cannot_fork_or_open_sockets(box):
    files = patched(tapp_main=('return {"item": get_item(i)}',
                               'import socket\n    try:\n        os.fork()\n    except Exception as e:\n        fork = type(e).__name__\n'
                               '    try:\n        socket.socket()\n    except Exception as e:\n        sock = type(e).__name__\n'
                               '    return {"fork": fork, "socket": sock}'))
    with load(box, files) as worker:
        assert worker.swapped is True
        body = get(worker, "/item/1").json()
        assert body["fork"] and body["socket"]


def test_attack_state_left_by_one_rollout_does_not_reach_the_next(box):
    files = patched(tapp_main=('return {"item": get_item(i)}', 'ITEMS_ALIAS = __import__("tapp.store").store.ITEMS\n'
                               '    ITEMS_ALIAS["1"] = "poisoned"\n    return {"item": get_item(i)}'))
    with load(box, files) as worker:
        assert get(worker, "/item/1").json() == {"item": "poisoned"}
    with load(box, BASE_FILES) as clean:
        assert get(clean, "/item/1").json() == {"item": "one"}


# -- lifecycle ------------------------------------------------------------------------------------
def test_template_that_died_is_rebuilt():
    with Sandbox(spares=0, templates=2, template_spares=0, template_after=1) as sandbox:
        with load(sandbox, BASE_FILES):
            pass
        link = next(iter(sandbox.templates._links.values()))
        os.kill(link.pid, signal.SIGKILL)
        time.sleep(0.1)
        with load(sandbox, BASE_FILES) as worker:
            assert worker.swapped is True
            assert get(worker, "/item/1").json() == {"item": "one"}
        assert sandbox.templates.stats["built"] == 2


def test_least_recently_used_template_is_evicted_but_not_while_in_use():
    other = AppSource(dict(BASE_FILES, **{"data/items.json": '{"1": "eins"}'}), ENTRY)
    with Sandbox(spares=0, templates=1, template_spares=0, template_after=1) as sandbox:
        held = load(sandbox, BASE_FILES)
        worker = sandbox.spawn(other, other)
        worker.wait_ready(5.0)
        assert get(worker, "/item/1").json() == {"item": "eins"}
        assert get(held, "/item/1").json() == {"item": "one"}  # its template was kept: a worker was out
        worker.close()
        held.close()
        with load(sandbox, BASE_FILES):
            pass
        assert sandbox.templates.stats["evicted"] >= 1 and len(sandbox.templates._links) == 1


def test_base_that_does_not_load_falls_back_to_fresh_workers():
    broken = AppSource(dict(BASE_FILES, **{"tapp/main.py": MAIN + "\nraise RuntimeError('broken base')\n"}), ENTRY)
    with Sandbox(spares=0, templates=2, template_spares=0, template_after=1) as sandbox:
        worker = sandbox.spawn(broken, broken)
        with pytest.raises(Exception, match="broken base"):
            worker.wait_ready(5.0)
        assert worker.template is None and sandbox.templates.stats["failed"] == 1


# -- grading through a template is grading a fresh import -----------------------------------------
def hunk_variants(bundle):
    """The bundle's files as shipped, fully fixed, and with each hunk of the fix alone (the partial
    patches an agent makes on its way)."""
    fixed = apply_patch(bundle.files, bundle.reference_fix)
    variants = [dict(bundle.files), fixed]
    patches = parse_patch(bundle.reference_fix)
    hunks = [(fp, h) for fp in patches for h in fp.hunks]
    if len(hunks) > 1:
        for fp, hunk in hunks:
            single = make_diff({fp.path: bundle.files[fp.path]}, {fp.path: _apply_one(bundle.files[fp.path], hunk)})
            variants.append(apply_patch(bundle.files, single))
    return variants


def _apply_one(text: str, hunk) -> str:
    old, new = list(hunk.old_lines), list(hunk.new_lines)
    lines = text.splitlines(keepends=True)
    for start in range(len(lines)):
        if lines[start:start + len(old)] == old:
            return "".join(lines[:start] + new + lines[start + len(old):])
    raise AssertionError("hunk does not apply")


@pytest.fixture(scope="module")
def fresh_box():
    limits = SandboxLimits(request_timeout_s=1.0, load_timeout_s=3.0, verify_timeout_s=8.0, cpu_s=5, memory_mb=192)
    sandbox = Sandbox(limits=limits, spares=1, templates=0).start()
    yield sandbox
    sandbox.close()


def test_template_grading_matches_fresh_loading_for_every_bug_class(box, fresh_box, shipped):
    swapped_before = box.stats["swapped"]
    compared = 0
    for scenario_id in one_per_class(shipped).values():
        bundle = shipped.load(scenario_id)
        for files in hunk_variants(bundle):
            with_template = verify(bundle, files, sandbox=box)
            fresh = verify(bundle, files, sandbox=fresh_box)
            assert with_template.outcome == fresh.outcome, scenario_id
            assert with_template.resolution == fresh.resolution, scenario_id
            assert {p.probe_id: p.passed for p in with_template.probes} == {p.probe_id: p.passed for p in fresh.probes}
            compared += 1
    assert compared >= 24
    assert box.stats["swapped"] - swapped_before >= compared // 2  # most of these were swapped, not reloaded
