"""End to end: the real server (uvicorn), the real client, episodes played over ``/ws`` and MCP.

Also: the episode log the server writes, ``openenv validate`` against the running server and on
the package (static level)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from envcore.cache import ScenarioCache
from envcore.env.actions import ApplyPatch, ReadFile, Submit
from envcore.env.client import A01Env
from envcore.env.environment import Runtime
from envcore.env.episode_log import EpisodeLogger, read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.env.server import create_env_app
from envcore.factory.lazy_fixes import lazy_fix_diff

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def serve_in_thread(app):
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def served(sandbox, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("log") / "episodes.jsonl"
    runtime = Runtime(sampler=CurriculumSampler(ScenarioCache.open(ROOT / "artifacts/scenarios/v2")), sandbox=sandbox,
                      logger=EpisodeLogger(log_path), source="server")
    with serve_in_thread(create_env_app(runtime, max_sessions=8)) as url:
        yield url, runtime, log_path
    runtime.logger.close()


def play(url, seed, patch_for=None, agent_id="test"):
    with A01Env(base_url=url).sync() as env:
        result = env.reset(seed=seed, agent_id=agent_id)
        scenario_id = result.observation.scenario_id
        assert result.reward == 0 and not result.done
        bundle = ScenarioCache.open(ROOT / "artifacts/scenarios/v2").load(scenario_id)
        env.step(ReadFile(path=sorted(p for p in bundle.files if p.endswith(".py"))[0]))
        if patch_for is not None:
            result = env.step(ApplyPatch(diff=patch_for(bundle)))
            assert result.observation.error is None
        result = env.step(Submit())
        state = env.state()
        return result, state, bundle


def test_oracle_no_op_and_deny_all_episodes_get_their_rewards(served):
    url, _, _ = served
    oracle, state, bundle = play(url, 11, lambda b: b.reference_fix, agent_id="oracle")
    assert oracle.done and oracle.reward >= 0.95 and oracle.observation.result["resolution"] == "full"
    assert state.phase == "submitted" and state.step_count == 3 and state.scenario_id == bundle.scenario_id
    noop, _, _ = play(url, 11, agent_id="no-op")
    assert noop.done and noop.reward <= 0
    deny, _, _ = play(url, 11, lambda b: lazy_fix_diff(b.files, b.entrypoint, "deny_all", [s.path for s in b.sites]),
                      agent_id="deny-all")
    assert deny.done and deny.reward <= 0
    assert oracle.observation.reward_breakdown["gates"] == {"app_loads": True, "legit_use_kept": True}


def test_same_seed_same_scenario_across_sessions(served):
    url, _, _ = served
    ids = []
    for _ in range(2):
        with A01Env(base_url=url).sync() as env:
            ids.append(env.reset(seed=12345, split="test").observation.scenario_id)
    assert ids[0] == ids[1]


def test_the_server_logs_one_record_per_episode(served):
    url, runtime, log_path = served
    play(url, 21, lambda b: b.reference_fix, agent_id="logged-oracle")
    records = [r for r in read_episodes(log_path) if r.agent_id == "logged-oracle"]
    assert len(records) == 1  # written when the episode ended, not again when its session closed
    record = records[0]
    assert record.outcome == "submitted" and record.reward >= 0.95 and len(record.steps) == 3
    assert record.verification["resolution"] == "full" and record.diff.startswith("diff --git")
    assert record.scenario_hash.startswith(record.scenario_id) and record.cache_version == "v2"
    assert set(record.timings_ms) == {"reset", "verify", "steps", "total"}


def test_an_abandoned_episode_is_logged_as_such(served):
    url, _, log_path = served
    with A01Env(base_url=url).sync() as env:
        env.reset(seed=5, agent_id="quitter")
        env.step(ReadFile(path="app/main.py"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        records = [r for r in read_episodes(log_path) if r.agent_id == "quitter"]
        if records:
            break
        time.sleep(0.1)
    assert records and records[0].outcome == "abandoned" and records[0].reward is None


def test_mcp_lists_the_same_tools_and_a_call_is_a_step(served):
    url, _, _ = served
    with httpx.Client(base_url=url, timeout=30) as http:
        session = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}).json()
        session_id = session["result"]["session_id"]

        def rpc(method, params, rid):
            reply = http.post("/mcp", json={"jsonrpc": "2.0", "id": rid, "method": method,
                                            "params": {**params, "session_id": session_id}}).json()
            assert "error" not in reply, reply
            return reply["result"]

        tools = rpc("tools/list", {}, 2)["tools"]
        from envcore.env.actions import TOOL_NAMES

        assert sorted(t["name"] for t in tools) == sorted(TOOL_NAMES)
        read_file = next(t for t in tools if t["name"] == "read_file")
        assert read_file["inputSchema"]["required"] == ["path"]
        # The session has no episode yet: the tool answers with an error observation, not a crash.
        first = rpc("tools/call", {"name": "list_files", "arguments": {}}, 3)
        text = json.dumps(first)
        assert "call reset first" in text
        http.post("/mcp", json={"jsonrpc": "2.0", "id": 4, "method": "openenv/session/close",
                                "params": {"session_id": session_id}})


def test_schema_publishes_the_tool_union(served):
    url, _, _ = served
    schema = httpx.get(f"{url}/schema").json()
    action = json.dumps(schema["action"])
    for tool in ("list_files", "read_file", "search_code", "http_request", "apply_patch", "edit_file", "run_tests",
                 "view_diff", "submit"):
        assert f'"{tool}"' in action
    assert "reward_breakdown" in json.dumps(schema["observation"])


def _openenv() -> str:
    return shutil.which("openenv") or str(Path(sys.executable).with_name("openenv"))


def test_openenv_validate_passes_against_the_running_server(served):
    url, _, _ = served
    out = subprocess.run([_openenv(), "validate", "--url", url, "--json", "--timeout", "20"], capture_output=True,
                         text=True, timeout=120)
    report = json.loads(out.stdout)
    assert report["passed"], [c for c in report["criteria"] if not c["passed"]]


@pytest.mark.slow  # openenv validate on the package; the running server is validated by default below
def test_openenv_validate_passes_at_the_static_level():
    out = subprocess.run([_openenv(), "validate", str(ROOT), "--level", "static", "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["verdict"] == "pass"


OPENENV_WEB = "openenv.core.env_server.web_interface"  # spelled here, not imported: the test checks the name


def _modules_after(statement: str, **env: str) -> set[str]:
    """Which of Gradio and OpenEnv's playground a fresh interpreter holds after ``statement``."""
    shown = f"print(' '.join(m for m in ('gradio', '{OPENENV_WEB}') if sys.modules.get(m)))"
    done = subprocess.run([sys.executable, "-c", f"{statement}\nimport sys\n{shown}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "GRADIO_ANALYTICS_ENABLED": "False", **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def test_the_environment_loads_without_openenvs_gradio_playground_unless_asked_for():
    # every CLI command, server and rollout worker imports the environment; Gradio costs seconds there
    built = "from envcore.env.server import create_env_app; import envcore.env.client; create_env_app()"
    assert _modules_after(built) == set()
    # asked for, nothing is marked absent (importing the playground itself would cost this test seconds)
    asked = f"import envcore.env, sys; assert '{OPENENV_WEB}' not in sys.modules"
    assert _modules_after(asked, ENABLE_WEB_INTERFACE="true") == set()
    refused = f"import envcore.env, sys; assert sys.modules['{OPENENV_WEB}'] is None"
    assert _modules_after(refused) == set()
