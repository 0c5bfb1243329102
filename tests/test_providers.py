"""Scale-out through envcore.agents.providers: replicas started, checked, spread over and stopped.

The plain-process provider runs by default (two real ``python app.py`` servers, real WebSocket
clients); the docker provider runs where an engine and the image exist (``A01_TEST_IMAGE``, default
``a01-repair-gym:local``) and says why it skipped otherwise; uv where ``uv`` is on PATH.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from envcore.agents import providers
from envcore.agents.baselines import NoopAgent
from envcore.agents.providers import (
    HARDENED_RUN_FLAGS,
    Balancer,
    ProviderError,
    ProviderSpec,
    Replicas,
    check_same_cache,
    image_problem,
    labelled_containers,
    spec_problem,
)
from envcore.agents.rollouts import EpisodeSpec, remote_sessions, run_rollouts
from envcore.cli import main as cli_main
from envcore.env.episode_log import read_episodes
from envcore.training.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("A01_TEST_IMAGE", providers.IMAGE)


def tree(pids: list[int]) -> list[int]:
    """``pids`` and every process under them."""
    import psutil

    found = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            found += [pid, *(child.pid for child in process.children(recursive=True))]
        except psutil.NoSuchProcess:
            pass
    return found


def alive(pids: list[int]) -> list[int]:
    import psutil

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [pid for pid in pids if running(pid)]


def specs(cache, n: int, split: str = "test") -> list[EpisodeSpec]:
    return [EpisodeSpec.of(i, scenario=s) for i, s in enumerate(sorted(cache.ids(split=split))[:n])]


class RecordingBalancer(Balancer):
    made: list[Balancer] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        RecordingBalancer.made.append(self)


# --- which combinations run ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind, replicas, image, urls, expected", [
    ("local", None, None, (), None),
    ("docker", 4, "a01-repair-gym:local", (), None),
    ("url", None, None, ("http://a", "http://b"), None),
    ("docker", 2, None, (), "needs an image"),
    ("swarm", None, None, (), "needs an image"),
    ("uv", 0, None, (), "between 1 and 64"),
    ("process", 65, None, (), "between 1 and 64"),
    ("url", None, None, (), "needs the servers' URLs"),
    ("docker", 2, "x", ("http://a",), "provider docker starts its own servers"),
    ("local", None, None, ("http://a",), "provider local plays in process"),
    ("uv", 2, "x", (), "an image is for providers docker and swarm"),
    ("local", 3, None, (), "replicas are for providers"),
    ("url", 2, None, ("http://a",), "url plays on the servers listed"),
    ("kubernetes", 2, "x", (), "unknown provider 'kubernetes'"),
])
def test_spec_problems(kind, replicas, image, urls, expected):
    problem = spec_problem(kind, replicas=replicas, image=image, urls=urls)
    assert problem is None if expected is None else expected in problem


@pytest.mark.parametrize("overrides, expected", [
    ({"environment.provider": "docker", "environment.replicas": 4}, "needs an image"),
    ({"environment.provider": "process", "environment.replicas": 0}, "between 1 and 64"),
    ({"environment.provider": "uv", "environment.urls": ["http://127.0.0.1:1"]}, "starts its own servers"),
    ({"environment.provider": "url"}, "needs the servers' URLs"),
    ({"environment.image": "a01-repair-gym:local"}, "an image is for providers docker and swarm, not local"),
    ({"environment.provider": "kubernetes"}, "environment.provider: Input should be"),
])
def test_config_refuses_bad_environment_sections_naming_the_field(overrides, expected):
    with pytest.raises(ConfigError, match="environment") as caught:
        load_config(ROOT / "configs" / "train-tiny.yaml", overrides)
    assert expected in str(caught.value)


def test_config_environment_defaults_keep_old_configs_meaning():
    local = load_config(ROOT / "configs" / "train-tiny.yaml")
    assert local.environment.kind == "local" and local.environment.server_urls == []
    remote = load_config(ROOT / "configs" / "train-tiny.yaml", {"environment.urls": ["http://h:1/"]})
    assert remote.environment.kind == "url" and remote.environment.server_urls == ["http://h:1"]
    started = load_config(ROOT / "configs" / "train-tiny.yaml",
                          {"environment.provider": "docker", "environment.image": "img", "environment.replicas": 2})
    serving = started.environment.serving(["http://127.0.0.1:5", "http://127.0.0.1:6"])
    assert serving.server_urls == ["http://127.0.0.1:5", "http://127.0.0.1:6"]
    assert "127.0.0.1" not in str(serving.model_dump())  # the saved configuration stays the one written


@pytest.mark.parametrize("argv, expected", [
    (["--provider", "docker", "--replicas", "2"], "needs an image"),
    (["--provider", "process", "--replicas", "0"], "between 1 and 64"),
    (["--provider", "uv", "--url", "http://127.0.0.1:1"], "starts its own servers"),
    (["--replicas", "3"], "replicas are for providers"),
])
def test_eval_refuses_bad_provider_options_before_anything_starts(argv, expected, tmp_path):
    with pytest.raises(SystemExit) as stopped:
        cli_main(["eval", "--agent", "noop", "--out", str(tmp_path / "out"), *argv])
    assert expected in str(stopped.value)
    assert not (tmp_path / "out").exists()


def test_docker_runs_replicas_with_the_flags_the_container_check_verifies():
    spec = importlib.util.spec_from_file_location("container_check", ROOT / "deploy" / "container_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert list(HARDENED_RUN_FLAGS) == check.HARDENED


# --- least-loaded -------------------------------------------------------------------------------------


def fake_servers(answers: dict[str, object]) -> httpx.Client:
    """``GET <url>/capacity`` per host: a (max, active) pair, 404 (no such route) or 'dead'."""

    def handle(request: httpx.Request) -> httpx.Response:
        answer = answers[request.url.host]
        if answer == "dead":
            raise httpx.ConnectError("connection refused", request=request)
        if answer == 404:
            return httpx.Response(404, json={"detail": "Not Found"})
        most, active = answer
        return httpx.Response(200, json={"max_sessions": most, "active_sessions": active,
                                         "available": most - active})

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_balancer_fills_idle_servers_in_turn_counting_sessions_the_servers_have_not_seen_yet():
    balancer = Balancer(["http://a", "http://b"], client=fake_servers({"a": (4, 0), "b": (4, 0)}))
    assert [balancer.acquire() for _ in range(4)] == [0, 1, 0, 1]
    balancer.release(1)
    assert balancer.acquire() == 1


def test_balancer_sends_sessions_where_most_are_free_other_clients_included():
    balancer = Balancer(["http://a", "http://b", "http://c"],
                        client=fake_servers({"a": (8, 7), "b": (4, 1), "c": (16, 12)}))
    assert balancer.acquire() == 2  # 4 free there, 1 on a, 3 on b
    assert balancer.opened == [0, 0, 1]


def test_balancer_passes_over_a_dead_server_and_says_when_none_answers():
    balancer = Balancer(["http://a", "http://b"], client=fake_servers({"a": "dead", "b": (4, 3)}))
    assert balancer.acquire() == 1
    dead = Balancer(["http://a"], client=fake_servers({"a": "dead"}))
    with pytest.raises(ProviderError, match="no server answers"):
        dead.acquire()


def test_balancer_without_capacity_routes_goes_round_robin():
    balancer = Balancer(["http://a", "http://b"], client=fake_servers({"a": 404, "b": (4, 0)}))
    assert [balancer.acquire() for _ in range(3)] == [0, 1, 0]


# --- real servers: the plain-process provider -----------------------------------------------------


def test_two_process_replicas_play_spread_over_both_then_ctrl_c_stops_them_and_their_sandboxes(shipped, tmp_path,
                                                                                               monkeypatch):
    with pytest.raises(KeyboardInterrupt):
        with Replicas(ProviderSpec.of("process", replicas=2, sessions=2), cache=shipped) as servers:
            urls = servers.urls
            assert len(urls) == 2 and all(httpx.get(f"{u}/health").status_code == 200 for u in urls)
            # two sessions open at once land on different servers, as the servers themselves count them
            open_session = remote_sessions(urls, None, "test")
            first, second = open_session(0), open_session(1)
            try:
                time.sleep(0.3)  # a server registers a session just after the handshake
                assert [httpx.get(f"{u}/capacity").json()["active_sessions"] for u in urls] == [1, 1]
            finally:
                first.close()
                second.close()
            # whole episodes through run_rollouts, spread over both
            RecordingBalancer.made.clear()
            monkeypatch.setattr(providers, "Balancer", RecordingBalancer)
            log = tmp_path / "episodes.jsonl"
            result = run_rollouts(NoopAgent, specs(shipped, 4), log=log, parallel=2, urls=urls, agent_id="noop")
            assert result.played == 4 and not result.failed
            assert RecordingBalancer.made[0].opened == [1, 1]
            records = list(read_episodes(log))
            assert len(records) == 4 and all(r.reward is not None and r.outcome == "submitted" for r in records)
            # each serves the local cache; a cache that differs in one scenario is named
            assert check_same_cache(urls[0], shipped) == len(shipped.rows)
            rows = [dict(row) for row in shipped.rows]
            rows[0]["sha256"] = "0" * 64
            with pytest.raises(ProviderError, match="serves another scenario cache than /elsewhere/v9"):
                check_same_cache(urls[1], SimpleNamespace(rows=rows, root=Path("/elsewhere/v9")))
            started = tree(servers.pids())  # the servers, their sandboxes' zygotes and workers
            assert len(started) > 2
            raise KeyboardInterrupt
    assert alive(started) == [] and servers.urls is None


def test_a_replica_that_cannot_start_stops_the_ones_that_did(monkeypatch):
    real, made = providers._ProcessReplica.start, []

    def start(self):
        if made:
            raise RuntimeError("no room for a second server")
        made.append(self)
        return real(self)

    monkeypatch.setattr(providers._ProcessReplica, "start", start)
    servers = Replicas(ProviderSpec.of("process", replicas=2, sessions=1))
    with pytest.raises(ProviderError, match="replica 2 did not start: no room"):
        with servers:
            pytest.fail("the block runs only when every replica is up")
    assert made[0].provider.process is None and servers.pids() == []


def test_a_server_that_exits_at_start_is_reported_with_its_log(monkeypatch):
    monkeypatch.setenv("A01_MAX_STEPS", "many")
    with pytest.raises(ProviderError, match="exited with status 2") as caught:
        with Replicas(ProviderSpec.of("process", replicas=1, sessions=1, start_timeout_s=60)):
            pass
    assert "A01_MAX_STEPS" in str(caught.value)


@pytest.mark.slow  # Ctrl-C's stop runs by default above
def test_sigterm_stops_the_servers_of_the_process_it_ends(tmp_path):
    script = ("import sys, time\n"
              "from envcore.agents.providers import ProviderSpec, Replicas\n"
              "with Replicas(ProviderSpec.of('process', replicas=1, sessions=1)) as servers:\n"
              "    print(servers.pids()[0], flush=True)\n"
              "    time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        server = int(child.stdout.readline())
        assert alive([server]) == [server]
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while alive([server]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive([server]) == []
    finally:
        child.kill()
        child.wait()


# --- containers and uv, where they exist --------------------------------------------------------------


def test_docker_replicas_run_hardened_play_and_leave_no_container(shipped, tmp_path, monkeypatch):
    problem = image_problem(IMAGE)
    if problem:
        pytest.skip(f"provider docker: {problem}")
    RecordingBalancer.made.clear()
    monkeypatch.setattr(providers, "Balancer", RecordingBalancer)
    with pytest.raises(RuntimeError, match="stop here"):
        with Replicas(ProviderSpec.of("docker", replicas=2, image=IMAGE, sessions=2), cache=shipped) as servers:
            label = servers.label
            containers = labelled_containers(label)
            assert len(containers) == 2
            inspected = subprocess.run(["docker", "inspect", "--format", "{{.HostConfig.ReadonlyRootfs}} "
                                        "{{.HostConfig.CapDrop}} {{.Config.User}}", *containers],
                                       capture_output=True, text=True, check=True).stdout.split("\n")
            assert all(line.startswith("true [ALL] user") for line in inspected if line)
            result = run_rollouts(NoopAgent, specs(shipped, 2), log=tmp_path / "e.jsonl", parallel=2,
                                  urls=servers.urls, agent_id="noop")
            assert result.played == 2 and not result.failed
            assert RecordingBalancer.made[0].opened == [1, 1]
            raise RuntimeError("stop here")
    assert labelled_containers(label) == []


@pytest.mark.skipif(shutil.which("uv") is None, reason="provider uv: no uv on PATH (pip install uv)")
def test_uv_replica_serves_episodes_from_the_checkout(shipped, tmp_path):
    with Replicas(ProviderSpec.of("uv", replicas=1, sessions=1), cache=shipped) as servers:
        started = tree(servers.pids())
        result = run_rollouts(NoopAgent, specs(shipped, 1), log=tmp_path / "e.jsonl", urls=servers.urls,
                              agent_id="noop")
        assert result.played == 1 and not result.failed
    deadline = time.monotonic() + 10
    while alive(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(started) == []
