"""Templates and hot swapping: a patch whose change is confined to function bodies is loaded into a
fork of the original app, and must behave exactly as a fresh import of the patched files would;
anything else falls back to a fresh load. A template is lent to one run at a time, and its folder is
put back after every worker. Attacks specific to templates are named ``test_attack_*``."""

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
from envcore.sandbox.templates import fits, owned_by
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


LENT: dict[int, object] = {}
"""The template of BASE lent to each test sandbox (what a run holds for its whole length)."""


def lent(sandbox: Sandbox):
    link = LENT.get(id(sandbox))
    if link is None or not link.alive:
        link = LENT[id(sandbox)] = sandbox.templates.acquire(BASE)
    return link


def load(sandbox: Sandbox, files: dict[str, str]):
    """A worker for ``files``: from the lent template when they fit BASE (as a run decides), else fresh."""
    source = AppSource(files, ENTRY)
    worker = sandbox.spawn(source, lent(sandbox) if fits(source, BASE) else None)
    worker.wait_ready(5.0)
    return worker


@pytest.fixture(scope="module")
def box():
    limits = SandboxLimits(request_timeout_s=1.0, load_timeout_s=3.0, verify_timeout_s=8.0, cpu_s=5, memory_mb=192)
    sandbox = Sandbox(limits=limits, spares=0, templates=4, template_spares=1).start()
    yield sandbox
    sandbox.close()


# -- what is swapped, what loads afresh -----------------------------------------------------------
def test_unchanged_app_is_served_from_its_template(box):
    with load(box, BASE_FILES) as worker:
        assert worker.template is not None and worker.swapped is True
        assert get(worker, "/item/1").json() == {"item": "one"}
        assert worker.containment.get("workspace", "").startswith("template's") and worker.containment.get("seccomp")


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
    link = box.templates.acquire(base)
    try:
        worker = box.spawn(AppSource(dropped, ENTRY), link)
        with pytest.raises(Exception, match="ImportError|cannot import name"):
            worker.wait_ready(5.0)
    finally:
        box.templates.release(link)
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
    worker = box.spawn(AppSource(files, ENTRY), lent(box))
    with pytest.raises(Exception, match="SyntaxError|never closed"):
        worker.wait_ready(5.0)


def test_each_worker_starts_from_the_template_state(box):
    with load(box, BASE_FILES) as first:
        assert get(first, "/count").json() == {"n": 1}
        assert get(first, "/count").json() == {"n": 2}
    with load(box, BASE_FILES) as second:
        assert get(second, "/count").json() == {"n": 1}


# -- attacks --------------------------------------------------------------------------------------
def test_attack_writing_the_templates_data_files_does_not_reach_the_next_worker(box):
    files = patched(tapp_main=('return {"item": get_item(i)}',
                               'DATA.write_text(\'{"1": "owned"}\')\n    return {"item": get_item(i)}'))
    with load(box, files) as worker:
        assert worker.swapped is True
        assert get(worker, "/item/1").json() == {"item": "one"}  # it may write its own files, as a fresh worker may
        with open(os.path.join(worker.template.workspace, "data/items.json")) as f:
            assert "owned" in f.read()
    with load(box, files) as second:
        with open(os.path.join(second.template.workspace, "data/items.json")) as f:
            assert "owned" not in f.read()  # put back before the next worker was handed the folder
    removing = patched(tapp_main=('return {"item": get_item(i)}',
                                  'DATA.unlink()\n    os.rmdir(DATA.parent)\n    return {"item": get_item(i)}'))
    with load(box, removing) as worker:
        assert get(worker, "/item/1").status == 200
        assert not os.path.exists(os.path.join(worker.template.workspace, "data"))
    with load(box, BASE_FILES) as clean:
        with open(os.path.join(clean.template.workspace, "data/items.json")) as f:
            assert f.read() == '{"1": "one"}'


def test_attack_creating_files_in_the_templates_folder_is_refused(box):
    files = patched(tapp_main=('return {"item": get_item(i)}',
                               'try:\n        open(DATA.parent / "note.txt", "w").write("x")\n        made = True\n'
                               '    except OSError:\n        made = False\n    return {"made": made}'))
    with load(box, files) as worker:
        assert get(worker, "/item/1").json() == {"made": False}
        assert os.listdir(os.path.join(worker.template.workspace, "data")) == ["items.json"]


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
def test_worker_of_a_template_that_died_is_loaded_afresh():
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        link = sandbox.templates.acquire(BASE)
        os.kill(link.pid, signal.SIGKILL)
        time.sleep(0.1)
        worker = sandbox.spawn(AppSource(BASE_FILES, ENTRY), link)
        worker.wait_ready(5.0)
        with worker:
            assert worker.template is None
            assert get(worker, "/item/1").json() == {"item": "one"}
        sandbox.templates.release(link)
        assert sandbox.templates.stats["built"] == 1


def test_templates_are_lent_one_run_at_a_time_and_bounded():
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        first, second = sandbox.templates.acquire(BASE), sandbox.templates.acquire(BASE)
        assert first is not None and second is not None and first is not second
        assert sandbox.templates.acquire(BASE) is None  # two alive: a third run loads afresh
        sandbox.templates.release(first)
        assert not first.alive
        third = sandbox.templates.acquire(BASE)
        assert third is not None
        for link in (second, third):
            sandbox.templates.release(link)


def _wait_until_prepared(sandbox, timeout_s: float = 30.0) -> None:
    """Until a template built in the background is ready (or ``timeout_s`` has passed)."""
    deadline = time.monotonic() + timeout_s
    while not sandbox.templates._prepared and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.slow  # a sandbox of its own, for a template's reuse only; what templates serve runs by default
def test_a_prepared_template_is_taken_by_the_next_run():
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        sandbox.prepare(BASE)
        _wait_until_prepared(sandbox)
        link = sandbox.templates.acquire(BASE)
        assert link is not None and sandbox.templates.stats["prepared_used"] == 1
        sandbox.templates.release(link)
        _wait_until_prepared(sandbox)
        again = sandbox.templates.acquire(BASE)  # the next run of that base finds the next one ready
        assert again is not None and sandbox.templates.stats["prepared_used"] == 2
        sandbox.templates.release(again)


@pytest.mark.slow  # a sandbox of its own, as above
def test_a_base_drawn_for_one_grading_prepares_no_next_template():
    """A shadow's base never comes back: taking its prepared template builds no other."""
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        sandbox.prepare(BASE)
        _wait_until_prepared(sandbox)
        link = sandbox.templates.acquire(BASE, again=False)
        assert link is not None and sandbox.templates.stats["prepared_used"] == 1
        time.sleep(0.3)
        assert sandbox.templates.stats["built"] == 1 and not sandbox.templates._preparing
        sandbox.templates.release(link)


def test_an_episodes_test_runs_share_one_template_kept_for_that_episode_alone():
    """An episode's test runs all patch the same base: one template serves them all (its process
    runs no app code after its import, its folder is put back after every worker), and it is never
    lent to another episode's runs, nor to a run of no episode."""
    with Sandbox(spares=0, templates=4, template_spares=0) as sandbox:
        with owned_by("episode-a"):
            sandbox.prepare(BASE)  # as a reset does
        _wait_until_prepared(sandbox)
        with owned_by("episode-a"):
            first = sandbox.templates.acquire(BASE)
            sandbox.templates.release(first)
            again = sandbox.templates.acquire(BASE)
        assert again is first and first.alive and sandbox.templates.stats["built"] == 1
        sandbox.templates.release(again)
        with owned_by("episode-b"):
            other = sandbox.templates.acquire(BASE)
        anyone = sandbox.templates.acquire(BASE)
        assert other is not first and anyone is not first and anyone is not other
        for link in (other, anyone):
            sandbox.templates.release(link)
        assert other.alive and not anyone.alive  # kept for episode b; a run of no episode's served that run only
        sandbox.templates.drop("episode-a")
        assert not first.alive and other.alive
        sandbox.templates.drop("episode-b")
        assert not other.alive


def test_attack_a_test_run_leaves_nothing_for_the_same_episodes_next_test_run(box):
    """The kept template's next run starts where its first did: whatever a worker wrote is put back."""
    files = patched(tapp_main=('return {"item": get_item(i)}',
                               'DATA.write_text(\'{"1": "owned"}\')\n    return {"item": get_item(i)}'))
    source = AppSource(files, ENTRY)
    with owned_by("episode-c"):
        for _ in range(2):
            link = box.templates.acquire(BASE)
            with box.spawn(source, link) as worker:
                worker.wait_ready(5.0)
                assert get(worker, "/item/1").json() == {"item": "one"}  # read at import: as shipped
            with box.spawn(AppSource(BASE_FILES, ENTRY), link) as worker:
                worker.wait_ready(5.0)
                assert json.loads(get(worker, "/item/1").body) == {"item": "one"}
            box.templates.release(link)
    box.templates.drop("episode-c")


@pytest.mark.slow  # a sandbox of its own, as above
def test_an_episode_builds_one_template_for_all_its_test_runs():
    from envcore.cache import ScenarioCache
    from envcore.env.episode import Episode

    cache = ScenarioCache.open(None)
    bundle = cache.load(cache.ids(split="train")[0])
    with Sandbox(spares=0, templates=4, template_spares=0) as sandbox:
        episode = Episode(bundle, sandbox, max_steps=10)
        reports = [episode.step({"tool": "run_tests"}) for _ in range(3)]
        assert len({json.dumps(r.result, sort_keys=True) for r in reports}) == 1
        assert sandbox.templates.stats["built"] == 1
        episode.close_live()
        assert not sandbox.templates._prepared  # dropped with its episode


def test_base_that_does_not_load_falls_back_to_fresh_workers():
    broken = AppSource(dict(BASE_FILES, **{"tapp/main.py": MAIN + "\nraise RuntimeError('broken base')\n"}), ENTRY)
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        assert sandbox.templates.acquire(broken) is None
        assert sandbox.templates.stats["failed"] == 1
        assert sandbox.templates.acquire(broken) is None and sandbox.templates.stats["built"] == 0
        worker = sandbox.spawn(broken)
        with pytest.raises(Exception, match="broken base"):
            worker.wait_ready(5.0)


def test_a_base_whose_import_leaves_a_file_outside_its_folder_open_is_not_used_as_a_template():
    leaky = AppSource(dict(BASE_FILES, **{"tapp/store.py": STORE + "\nimport os as _os\nLOG = open(_os.__file__)\n"}),
                      ENTRY)
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        assert sandbox.templates.acquire(leaky) is None
        assert sandbox.templates.stats["refused"] == 1


@pytest.mark.slow  # the refusal of a file outside its folder runs by default
def test_a_base_whose_import_leaves_a_file_of_its_own_folder_open_is_a_template():
    """A SQLite database connected to at import is the common case: the file is the template's own,
    put back with its folder after every worker (its shared offset and flags too)."""
    holding = AppSource(dict(BASE_FILES, **{"tapp/store.py": STORE + "\nLOG = open(DATA)\n"}), ENTRY)
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        link = sandbox.templates.acquire(holding)
        assert link is not None and sandbox.templates.stats["refused"] == 0
        sandbox.templates.release(link)


def test_a_base_with_a_star_import_is_a_template_and_a_patch_of_that_module_loads_afresh():
    """Real apps use ``from .models import *``; a module the swap cannot reason about is left out of
    swapping (a patch of it loads afresh) instead of taking the template, and every grading of the
    app, down with it."""
    starry = dict(BASE_FILES, **{"tapp/names.py": "from .store import *  # noqa: F403\n\nLABEL = 'items'\n",
                                 "tapp/main.py": MAIN.replace("from .store import", "from .names import LABEL\nfrom .store import")})
    base = AppSource(starry, ENTRY)
    with Sandbox(spares=0, templates=2, template_spares=0) as sandbox:
        link = sandbox.templates.acquire(base)
        assert link is not None and sandbox.templates.stats["refused"] == 0
        body = dict(starry, **{"tapp/main.py": starry["tapp/main.py"].replace('"item": get_item(i)', '"item": get_item(i) or "none"')})
        with sandbox.spawn(AppSource(body, ENTRY), link) as worker:
            worker.wait_ready(5.0)
            assert worker.swapped is True and get(worker, "/item/9").json() == {"item": "none"}
        star_patch = dict(starry, **{"tapp/names.py": starry["tapp/names.py"].replace("'items'", "'things'")})
        with sandbox.spawn(AppSource(star_patch, ENTRY), link) as worker:
            worker.wait_ready(5.0)
            assert worker.swapped is not True and get(worker, "/item/1").json() == {"item": "one"}
        sandbox.templates.release(link)


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


@pytest.mark.slow  # every bug class; the default run compares templates and fresh loading in test_sandbox_isolation
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


# -- one plan per run --------------------------------------------------------------------------
def test_a_runs_later_workers_apply_the_plan_its_first_worker_made(box):
    files = patched(tapp_main=('return {"item": get_item(i)}', 'return {"item": get_item(i), "planned": True}'))
    source = AppSource(files, ENTRY)
    first = box.spawn(source, lent(box))
    first.wait_ready(5.0)
    with first:
        assert first.swapped is True and first.swap_plan is not None  # it planned, and said so before serving
        plan = first.swap_plan
    second = box.spawn(source, lent(box), plan)
    second.wait_ready(5.0)
    with second:
        assert second.swapped is True and second.swap_plan is None  # it applied the plan it was handed
        assert get(second, "/item/1").json() == {"item": "one", "planned": True}


def test_attack_a_plan_that_does_not_fit_the_template_loads_afresh(box):
    files = patched(tapp_main=('return {"item": get_item(i)}', 'return {"item": get_item(i), "planned": True}'))
    bogus = ([{"path": "tapp/main.py", "swaps": [["no_such_function", 0, 3]], "dropped": [], "imports": []}], b"xyz")
    worker = box.spawn(AppSource(files, ENTRY), lent(box), bogus)
    worker.wait_ready(5.0)
    with worker:
        assert worker.template is None and worker.swapped is False
        assert get(worker, "/item/1").json() == {"item": "one", "planned": True}
