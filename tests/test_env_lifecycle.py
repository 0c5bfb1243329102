"""OpenEnv's conventions through the real server and client: the task API (list_splits, num_tasks,
get_task, reset(split=, index=)), leaked sessions freeing their slots, keepalive pings across a long
pause between steps, and a dropped connection ending its episode cleanly on both sides."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import httpx
import pytest
import uvicorn

from envcore.env.client import A01Env, EpisodeLost
from envcore.env.environment import A01Environment, ResetError, Runtime
from envcore.env.episode_log import EpisodeLogger, read_episodes
from envcore.env.sampler import CurriculumSampler
from envcore.env.server import create_env_app

ENV = "a01_repair_gym"


@contextlib.contextmanager
def serve(app, **config):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           ws="websockets-sansio", **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def runtime(sandbox, tmp_path_factory):
    from envcore.cache import ScenarioCache

    log = tmp_path_factory.mktemp("lifecycle") / "episodes.jsonl"
    return Runtime(sampler=CurriculumSampler(ScenarioCache.open()), sandbox=sandbox, logger=EpisodeLogger(log))


def test_the_task_api_describes_each_split_and_reset_plays_the_task_it_names(runtime) -> None:
    env = A01Environment(runtime)
    cache = runtime.cache
    splits = {s["name"]: s for s in env.list_splits()}
    assert set(splits) == set(cache.splits())
    assert splits["train"]["type"] == "train" and splits["val"]["type"] == "validation"
    assert splits["test"]["type"] == "test" and splits["test"]["num_tasks"] == len(cache.ids(split="test"))
    task = env.get_task("test", 5)
    assert task["id"] == cache.ids(split="test")[5] and task["index"] == 5
    hidden = cache.load(task["id"])
    text = str(task)
    assert "probes" not in task and hidden.reference_fix not in text  # public fields only
    assert [t["id"] for t in env.get_task_range("test", 3, 6)] == cache.ids(split="test")[3:6]
    assert env.reset(split="test", index=5).scenario_id == task["id"]
    with pytest.raises(IndexError):
        env.get_task("test", env.num_tasks("test"))
    for bad in ({"split": "test", "index": -1}, {"split": "test", "index": 10**6}, {"split": "test", "index": "two"},
                {"split": "test", "index": 1, "scenario": task["id"]}):
        with pytest.raises(ResetError):
            env.reset(**bad)
    env.close()


def test_the_task_api_over_http_and_the_socket(runtime) -> None:
    with serve(create_env_app(runtime, max_sessions=4)) as url:
        splits = httpx.get(f"{url}/{ENV}/splits").json()
        assert {s["name"] for s in splits} == set(runtime.cache.splits())
        count = httpx.post(f"{url}/{ENV}/num_tasks", json={"split": "external"}).json()["num_tasks"]
        assert count == len(runtime.cache.ids(split="external"))
        task = httpx.post(f"{url}/{ENV}/task", json={"split": "external", "index": 2}).json()["task"]
        assert httpx.post(f"{url}/{ENV}/task", json={"split": "external", "index": count}).status_code == 400
        refused = httpx.post(f"{url}/{ENV}/num_tasks", json={"split": "nope"})
        assert refused.status_code == 422 and "split must be one of" in refused.text
        with A01Env(base_url=url).sync() as client:
            assert client.reset(split="external", index=2).observation.scenario_id == task["id"]


def test_a_leaked_session_is_closed_after_the_timeout_and_frees_its_slot(runtime) -> None:
    """A client that opens a session and never closes it (a crashed trainer keeping its socket) must
    not hold the slot for ever; once closed, that socket cannot go on playing past the cap."""
    app = create_env_app(runtime, max_sessions=1, session_timeout_s=1.0)
    with serve(app) as url:
        leaked = A01Env(base_url=url).sync()
        leaked.connect()
        leaked.reset(seed=1, split="train")
        assert httpx.get(f"{url}/capacity").json()["available"] == 0
        deadline = time.monotonic() + 20  # OpenEnv's reaper looks every max(timeout / 4, 5 s)
        while httpx.get(f"{url}/capacity").json()["available"] == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert httpx.get(f"{url}/capacity").json()["available"] == 1
        with A01Env(base_url=url).sync() as other:  # the freed slot is usable
            assert other.reset(seed=2, split="train").observation.scenario_id
        final = leaked.step({"tool": "list_files"})  # the old socket: a clean end, not a second episode
        assert final.done and final.reward is None and "session timeout" in final.observation.error
        leaked.close()


def test_keepalive_pings_carry_an_episode_across_a_long_pause_between_steps(runtime) -> None:
    """The server pings every 0.2 s and drops a client that answers none within 0.5 s; the client
    sits idle for 3 s (a long generation) and its episode goes on."""
    app = create_env_app(runtime, max_sessions=2)
    with serve(app, ws_ping_interval=0.2, ws_ping_timeout=0.5) as url:
        with A01Env(base_url=url).sync() as client:
            client.reset(seed=3, split="train")
            time.sleep(3.0)  # the caller's thread is busy; the client's loop answers the pings
            result = client.step({"tool": "list_files"})
            assert result.observation.error is None and "app/" in result.observation.text


def test_a_dropped_connection_ends_its_episode_cleanly_on_both_sides(runtime) -> None:
    app = create_env_app(runtime, max_sessions=2)
    with serve(app) as url:
        client = A01Env(base_url=url).sync()
        client.connect()
        first = client.reset(seed=4, split="train").observation
        client.step({"tool": "list_files"})
        inner = client._async
        asyncio.run_coroutine_threadsafe(inner._ws.close(), client._loop).result(timeout=10)  # the network drops it
        with pytest.raises(EpisodeLost, match="reset"):
            client.step({"tool": "list_files"})
        again = client.reset(seed=5, split="train").observation  # reconnects by itself
        assert again.scenario_id and client.step({"tool": "submit"}).done
        client.close()
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/capacity").json()["active_sessions"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert httpx.get(f"{url}/capacity").json()["active_sessions"] == 0
    records = [r for r in read_episodes(runtime.logger.path) if r.seed in (4, 5)]
    outcomes = {r.seed: r.outcome for r in records}
    assert outcomes == {4: "abandoned", 5: "submitted"}, outcomes
    assert next(r for r in records if r.seed == 4).scenario_id == first.scenario_id
