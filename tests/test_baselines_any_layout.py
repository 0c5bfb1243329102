"""The scripted baselines and the lazy fixes land their patches whatever the app's layout.

A baseline that finds nothing to patch in an app it was not written for scores like the untouched
app and says nothing about the benchmark: deny-all scored about 0 on the external split (against
-0.50 on generated apps) because it looked for ``app = FastAPI(`` at the start of a line and wrote a
diff that assumed every file ends with a line break. So, for every brought-in app (each scenario
folder of ``scenarios/external/``, loaded the way ``factory import`` loads it, and
``examples/byo/*``):

* deny-all's patch applies, the app still loads, every request of every probe is refused (401, 403
  or 404) and its reward is negative, as on generated apps;
* the heuristic and random baselines end every episode by submitting, inside the step budget, with
  every action they send accepted (a file read, a patch that applies);
* the lazy fixes (deny-all, deny-the-routes, delete-the-routes), written into the module the
  entrypoint names, leave the app loading and refuse what they say they refuse.

The table of small layouts below (an app made in a factory function of another module, an
annotated or aliased construction, an entrypoint that is an ASGI wrapper, a file without a final
line break, one longer than a read shows, an empty package ``__init__``...) runs the same agent and the same lazy fixes on each,
in process and fast. One folder per upstream project runs by default, the others in the slow run.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from envcore.agents.baselines import BASELINES, DenyAllAgent, RandomAgent
from envcore.agents.heuristic import HeuristicAgent
from envcore.env.episode import Episode
from envcore.factory.byo import load_bundle_dir
from envcore.factory.lazy_fixes import LAZY_FIXES, lazy_fix_diff, lazy_fix_files, path_pattern
from envcore.patching import apply_patch
from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = sorted(p for p in (ROOT / "scenarios" / "external").iterdir() if (p / "scenario.yaml").is_file())
BYO = sorted(p for p in (ROOT / "examples" / "byo").iterdir() if (p / "scenario.yaml").is_file())
REFUSALS = frozenset({401, 403, 404})


def _folders() -> list:
    """Every brought-in app: the first scenario of each upstream project and every example by
    default, the rest of the external split in the slow run."""
    seen: set[str] = set()
    params = []
    for folder in EXTERNAL:
        project = folder.name.split("-")[0]
        params.append(pytest.param(folder, id=folder.name, marks=() if project not in seen else pytest.mark.slow))
        seen.add(project)
    return params + [pytest.param(folder, id=f"byo-{folder.name}") for folder in BYO]


FOLDERS = _folders()


@functools.cache
def bundle_of(folder: Path):
    return load_bundle_dir(folder)


def play(bundle, agent, sandbox, *, seed: int = 0, max_steps: int = 30):
    """One episode of ``agent`` on ``bundle``; the episode and every observation it got."""
    episode = Episode(bundle, sandbox, max_steps=max_steps)
    observation = episode.first_observation()
    agent.begin(observation, seed=seed)
    seen = [observation]
    try:
        while not observation.done:
            observation = episode.step(agent.act(observation))
            seen.append(observation)
    finally:
        episode.close_live()
    return episode, seen


def until_submit(bundle, agent, sandbox, *, seed: int = 0, max_steps: int = 30):
    """The episode and the observations of ``agent``'s actions on ``bundle`` up to (not including) its
    submit: what it did to the app, without paying for the grading."""
    episode = Episode(bundle, sandbox, max_steps=max_steps)
    observation = episode.first_observation()
    agent.begin(observation, seed=seed)
    seen = []
    try:
        while not observation.done:
            action = agent.act(observation)
            if action["tool"] == "submit":
                break
            observation = episode.step(action)
            seen.append(observation)
    finally:
        episode.close_live()
    return episode, seen


def refused(observations) -> list[str]:
    """The errors of the actions the environment refused."""
    return [f"{o.tool}: {o.error}" for o in observations if o.error]


def every_request(probes) -> list[Probe]:
    """Each request of each probe as a probe of its own that expects nothing (so every one is sent)."""
    return [Probe(id=f"{probe.id}#{i}", kind=ProbeKind.REGRESSION, title=probe.title,
                  steps=(step.model_copy(update={"expect": ()}),))
            for probe in probes for i, step in enumerate(probe.steps)]


def statuses(runner, files, entrypoint, probes, users) -> dict[str, int | None]:
    report = runner.run(AppSource(dict(files), entrypoint), every_request(probes), actors_of(users))
    assert report.loaded, report.load_error
    return {o.probe_id: o.steps[0].status if o.steps else None for o in report.outcomes}


# -- deny-all on every brought-in app ---------------------------------------------------------------

@pytest.mark.parametrize("folder", FOLDERS)
def test_deny_all_refuses_every_request_of_a_brought_in_app(folder, sandbox, runner):
    bundle = bundle_of(folder)
    episode, seen = play(bundle, DenyAllAgent(), sandbox)
    assert not refused(seen), refused(seen)
    assert episode.diff(), "deny-all found nowhere to refuse everyone"
    final = seen[-1]
    assert not episode.budget_exhausted and final.result["outcome"] == "graded", final.result
    got = statuses(runner, episode.files, bundle.entrypoint, bundle.probes, bundle.users)
    let_through = {probe: status for probe, status in got.items() if status not in REFUSALS}
    assert not let_through, let_through
    assert final.reward is not None and final.reward < 0, final.reward_breakdown


# -- the other scripted baselines -------------------------------------------------------------------

@pytest.mark.parametrize("folder", FOLDERS)
def test_the_heuristic_reviews_a_brought_in_app_and_submits_inside_its_budget(folder, sandbox):
    episode, seen = play(bundle_of(folder), HeuristicAgent(), sandbox)
    assert not refused(seen), refused(seen)
    assert not episode.budget_exhausted and seen[-1].tool == "submit"
    assert seen[-1].result["outcome"] == "graded", seen[-1].result


@pytest.mark.parametrize("folder", FOLDERS)
def test_random_lands_every_patch_it_sends_in_a_brought_in_app(folder, sandbox):
    patches = 0
    for seed in range(40):  # until two patches were sent (random patches now and then)
        episode, seen = until_submit(bundle_of(folder), RandomAgent(), sandbox, seed=seed)
        assert not refused(seen), (seed, refused(seen))
        patches += sum(1 for o in seen if o.tool == "apply_patch")
        if patches >= 2:
            break
    assert patches >= 2, "random sent fewer than two patches: the test proves nothing"


def test_the_heuristics_search_for_what_to_read_is_one_valid_query():
    from envcore.agents.heuristic import _WORTH_READING
    from envcore.env.actions import parse_action

    parse_action({"tool": "search_code", "query": _WORTH_READING, "regex": True})  # within the tool's limits


@pytest.mark.parametrize("folder", FOLDERS)
def test_noop_leaves_a_brought_in_app_as_it_is(folder, sandbox):
    episode, seen = play(bundle_of(folder), BASELINES["noop"](), sandbox)
    assert not episode.diff() and len(seen) == 2 and seen[-1].reward <= 0


# -- the lazy fixes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", FOLDERS)
@pytest.mark.parametrize("kind", LAZY_FIXES)
def test_a_lazy_fix_lands_in_a_brought_in_app(folder, kind, runner):
    import re

    bundle = bundle_of(folder)
    sites = [s.path for s in bundle.sites]
    files = lazy_fix_files(bundle.files, bundle.entrypoint, kind, sites)
    assert apply_patch(bundle.files, lazy_fix_diff(bundle.files, bundle.entrypoint, kind, sites)) == files
    got = statuses(runner, files, bundle.entrypoint, bundle.probes, bundle.users)
    steps = {f"{p.id}#{i}": step for p in bundle.probes for i, step in enumerate(p.steps)}
    for probe_id, status in got.items():
        on_a_site = any(re.match(path_pattern(s), steps[probe_id].path) for s in sites)
        if kind == "deny_all" or on_a_site:
            assert status == (404 if kind == "delete_sites" else 403), (probe_id, status)


# -- small layouts, in process ----------------------------------------------------------------------

ROUTES = '''\
from fastapi import APIRouter, Depends, Header, HTTPException


def current_user(x_user: str | None = Header(default=None)):
    if x_user is None:
        raise HTTPException(401, "sign in")
    return x_user


router = APIRouter(prefix="/api/items", tags=["items"])


@router.get("/{item_id}")
async def read_item(item_id: int, user: str = Depends(current_user)):
    return {"id": item_id, "owner": user}


@router.get("")
def list_items():
    return []
'''

SETTINGS = '''\
class Settings:
    title = "Items"
    docs_url = None


settings = Settings()
'''

LAYOUTS = {
    "app made in a factory function of another module": ({
        "src/__init__.py": "",
        "src/api/__init__.py": "",
        "src/api/items.py": ROUTES,
        "src/config.py": SETTINGS,
        "src/factory.py": "from fastapi import FastAPI\n\nfrom src.api.items import router\nfrom src.config import settings\n\n\n"
                          "def create_app() -> FastAPI:\n    application = FastAPI(\n        title=settings.title,\n"
                          "        docs_url=settings.docs_url,\n    )\n    application.include_router(router)\n"
                          "    return application\n",
        "src/server.py": "from src.factory import create_app\n\napp = create_app()\n",
    }, "src.server:app", ""),
    "annotated construction, no final line break": ({
        "main.py": "import fastapi\n\nfrom items import router\n\napp: fastapi.FastAPI = fastapi.FastAPI(title='x')\n"
                   "app.include_router(router)",
        "items.py": ROUTES,
    }, "main:app", ""),
    "aliased class, returned from a function": ({
        "service/__init__.py": "from fastapi import FastAPI as Api\n\nfrom service.items import router\n\n\n"
                               "def build():\n    return Api(title='x')\n\n\napi = build()\napi.include_router(router)\n",
        "service/items.py": ROUTES,
    }, "service:api", ""),
    "entrypoint is an ASGI wrapper around the app": ({
        "web/main.py": "from fastapi import FastAPI\nfrom starlette.middleware.cors import CORSMiddleware\n\n"
                       "from web.items import router\n\ninner = FastAPI()\ninner.include_router(router)\n"
                       "app = CORSMiddleware(inner, allow_origins=['*'])\n",
        "web/__init__.py": "",
        "web/items.py": ROUTES,
    }, "web.main:app", ""),
    "a subclass of FastAPI, made in another module": ({
        "core/base.py": "from fastapi import FastAPI\n\n\nclass ItemsApp(FastAPI):\n    audited = True\n",
        "core/__init__.py": "",
        "core/app.py": "from core.base import ItemsApp\nfrom core.items import router\n\napplication = ItemsApp()\n"
                       "application.include_router(router)\n",
        "core/items.py": ROUTES,
    }, "core.app:application", ""),
    "construction after more lines than one read shows": ({
        "main.py": "".join(f"LIMIT_{i} = {i}\n" for i in range(2500)) + "from fastapi import FastAPI\n\n"
                   "from items import router\n\napp = FastAPI()\napp.include_router(router)\n",
        "items.py": ROUTES,
    }, "main:app", ""),
    "a plain Starlette app mounting the API": ({
        "asgi.py": "from fastapi import FastAPI\nfrom starlette.applications import Starlette\nfrom starlette.routing import Mount\n\n"
                   "from items import router\n\napi = FastAPI()\napi.include_router(router)\n"
                   "app = Starlette(routes=[Mount('/v1', app=api)])\n",
        "items.py": ROUTES,
    }, "asgi:app", "/v1"),
}
"""Each layout: its files, its entrypoint and where it serves the items API."""
LAYOUT_REQUESTS = ("/api/items/1", "/api/items", "/docs", "/openapi.json", "/nowhere")


def _layout_bundle(files: dict[str, str], entrypoint: str):
    """The byo example with its app replaced by ``files`` (an episode needs users and a task)."""
    bundle = bundle_of(BYO[0])
    return bundle.model_copy(update={"files": files, "entrypoint": entrypoint})


def _layout_statuses(runner, files, entrypoint, prefix) -> dict[str, int | None]:
    """What the app answers a signed-in user at each of :data:`LAYOUT_REQUESTS` (under ``prefix``)."""
    probes = [Probe(id=path, kind=ProbeKind.REGRESSION, title=path,
                    steps=(ProbeStep(method="GET", path=prefix + path, headers={"x-user": "ann"}),))
              for path in LAYOUT_REQUESTS]
    report = runner.run(AppSource(dict(files), entrypoint), probes, {})
    assert report.loaded, report.load_error
    return {o.probe_id: o.steps[0].status for o in report.outcomes}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_layouts_serve_their_routes_unpatched(layout, runner):
    files, entrypoint, prefix = LAYOUTS[layout]
    got = _layout_statuses(runner, files, entrypoint, prefix)
    assert got["/api/items/1"] == got["/api/items"] == 200, got  # the control: a refusal below is the patch's doing


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_deny_all_refuses_every_request_in_any_layout(layout, runner, sandbox):
    files, entrypoint, prefix = LAYOUTS[layout]
    episode, seen = until_submit(_layout_bundle(files, entrypoint), DenyAllAgent(), sandbox)
    assert not refused(seen), refused(seen)
    got = _layout_statuses(runner, episode.files, entrypoint, prefix)
    assert set(got.values()) <= REFUSALS, got


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("kind", LAZY_FIXES)
def test_a_lazy_fix_lands_in_any_layout(layout, kind, runner):
    files, entrypoint, prefix = LAYOUTS[layout]
    sites = [prefix + "/api/items/{item_id}"]
    patched = lazy_fix_files(files, entrypoint, kind, sites)
    assert apply_patch(files, lazy_fix_diff(files, entrypoint, kind, sites)) == patched
    got = _layout_statuses(runner, patched, entrypoint, prefix)
    if kind == "deny_all":
        assert set(got.values()) == {403}, got
    else:
        assert got["/api/items/1"] == (404 if kind == "delete_sites" else 403), got
        assert got["/api/items"] == 200, got


def test_reading_an_empty_file_shows_no_lines_and_a_read_says_how_the_file_ends(sandbox):
    from envcore.agents.base import file_text

    files = {"pkg/__init__.py": "", "pkg/main.py": "from fastapi import FastAPI\napp = FastAPI()",
             "pkg/items.py": ROUTES}
    episode = Episode(_layout_bundle(files, "pkg.main:app"), sandbox)
    for path, text in files.items():
        observation = episode.step({"tool": "read_file", "path": path})
        assert observation.error is None, observation.error
        assert file_text(observation) == text
    assert "empty file" in episode.step({"tool": "read_file", "path": "pkg/__init__.py"}).text
