"""Where the environment's servers come from: in process, N replicas started through OpenEnv's
providers, or servers given by URL; and which of them each new session goes to.

The rollout runner (:func:`~envcore.agents.rollouts.run_rollouts`), ``python -m envcore eval`` and
training (``environment:`` in the config) play episodes either in process or over WebSocket sessions
with servers. This module gives them those servers from one description, a :class:`ProviderSpec`:

=========  ====================================================================================
kind       what runs the replicas
=========  ====================================================================================
local      nothing: episodes run in process (the default)
docker     OpenEnv's ``LocalDockerProvider``: N containers of ``image``, each on its own port
swarm      OpenEnv's ``DockerSwarmProvider``: one Swarm service of N replicas behind one port
uv         OpenEnv's ``UVProvider``: N ``uv run ... uvicorn app:app`` processes from the checkout
process    N ``python app.py`` processes from the checkout (OpenEnv's ``RuntimeProvider``
           contract, no uv needed): what tests and machines without uv or Docker use
url        running servers, e.g. Spaces deployed with ``openenv push --count N``
=========  ====================================================================================

:class:`Replicas` is the context manager around them: it starts the replicas, waits until each is
healthy (``/health`` answers 200; a 503 is the sandbox refusing to grade and stops the start at
once, with the server's reason), checks that each serves the local scenario cache (every scenario it
lists is in the local cache with the same content), and stops every one on exit, whether the block
ends, raises, is interrupted (Ctrl-C) or the process gets SIGTERM; a start that fails half-way stops
what it had started. Containers carry a label naming their set, and stopping removes every container
with that label, so one whose ``docker stop`` timed out is not left behind.

**Spreading sessions**: :class:`Balancer` sends each new session to the least-loaded replica, by the
servers' own ``GET /capacity``: the most free sessions, where a replica's load is the larger of the
sessions it reports open and the sessions this run has opened on it (a session just opened may not
be counted by the server yet). Ties go to the replica this run gave fewest sessions, then to the
first listed, so equal idle servers fill round-robin; other clients' sessions count, and a replica
that does not answer is passed over (a retried episode lands on a live one). A server without
``/capacity`` is ranked by this run's sessions alone (round-robin). A Swarm service is one URL:
there Swarm's routing mesh spreads the connections over its replicas, round-robin per connection.

The replicas run the server as the Space does but serve the API alone (``A01_UI=0``: no page, a
faster start and less memory), with room for their share of the run's sessions, all of which may
come from this one client (``A01_MAX_SESSIONS_PER_CLIENT``).

What OpenEnv 0.10's providers do not fit is worked around in thin adapters here, each saying why:
``LocalDockerProvider`` publishes the container's port 8000 on every interface and drops extra
``docker run`` options, so the image (which listens on 7860 and runs hardened) is started by an
override that keeps the provider's stop and wait; ``UVProvider`` runs ``uvicorn app:app`` with the
working directory and output of the caller, and this project declares its dependencies in
``requirements/``, not ``pyproject.toml``; ``DockerSwarmProvider`` publishes port 8000 of the
container and waits for one replica only (and Swarm's routing mesh needs the kernel's IPVS). ``KubernetesProvider`` is a placeholder in OpenEnv 0.10
and is not offered. docs/scale-out.md says how to use each kind and what it needs.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from envcore.procs import terminate

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("local", "docker", "swarm", "uv", "process", "url")
STARTED = ("docker", "swarm", "uv", "process")
"""Kinds whose replicas this module starts (and stops)."""
IMAGE = "a01-repair-gym:local"
"""The image tag docs/scale-out.md builds (``docker build ... -t a01-repair-gym:local .``)."""
IMAGE_PORT = 7860
"""The port the image's server listens on (``PORT`` in the Dockerfile)."""
APP_DIR = "/home/user/app"
"""The checkout's place inside the image."""
HARDENED_RUN_FLAGS = ("--read-only", "--tmpfs", "/tmp:size=512m,mode=1777", "--shm-size=64m", "--cap-drop", "ALL",
                      "--security-opt", "no-new-privileges", "--memory", "4g", "--pids-limit", "512")
"""The ``docker run`` flags docs/deploy.md recommends (deploy/container_check.py verifies the image
under the same; a test keeps the two lists equal)."""
LABEL = "a01.replicas"
"""Docker label on every container and service a :class:`Replicas` starts; its value names the set."""
FORWARDED_SETTINGS = ("A01_ALLOW_REDUCED_SANDBOX", "A01_MAX_STEPS", "A01_SESSION_TIMEOUT_S", "A01_SANDBOX_WORKERS")
"""Server settings passed on to containers when set here (processes inherit the whole environment)."""


class ProviderError(RuntimeError):
    """The servers cannot be started, reached or trusted; the message says what to change."""


def spec_problem(kind: str, *, replicas: int | None, image: str | None, urls: Sequence[str]) -> str | None:
    """Why this combination cannot run, or ``None``: shared by the command line and the training
    config, so both refuse the same things in the same words (``replicas`` ``None``: not given)."""
    if kind not in KINDS:
        return f"unknown provider {kind!r}; choose from {', '.join(KINDS)}"
    if replicas is not None and not 1 <= replicas <= 64:
        return f"replicas must be between 1 and 64, not {replicas}"
    if kind == "url" and not urls:
        return "provider url needs the servers' URLs (--url, or environment.urls)"
    if urls and kind != "url":
        return (f"server URLs are for provider url; provider {kind} " +
                ("plays in process" if kind == "local" else "starts its own servers"))
    if kind in ("docker", "swarm") and not image:
        return (f"provider {kind} needs an image (--image, or environment.image), e.g. {IMAGE} built with "
                f"`docker build -t {IMAGE} .`")
    if image and kind not in ("docker", "swarm"):
        return f"an image is for providers docker and swarm, not {kind}"
    if replicas not in (None, 1) and kind in ("local", "url"):
        return (f"replicas are for providers {', '.join(STARTED)}; " +
                ("local plays in process" if kind == "local" else "url plays on the servers listed, one replica each"))
    return None


@dataclass(frozen=True)
class ProviderSpec:
    """Which servers a run plays on (see the module docstring)."""

    kind: str = "local"
    replicas: int = 1
    """Replicas to start (kinds docker, swarm, uv, process); for ``url``, one per URL."""
    image: str | None = None
    """The container image (docker, swarm)."""
    urls: tuple[str, ...] = ()
    """The servers (url)."""
    sessions: int = 4
    """Sessions the run opens at once, in all: each replica is started with room for its share."""
    cache_dir: str | None = None
    """The scenario cache the run was given explicitly; the replicas are told to serve it (a container
    gets it mounted read-only when it lies outside the checkout). ``None``: the servers' default."""
    start_timeout_s: float = 180.0
    """How long a replica may take to become healthy (a sleeping Space takes a minute or two)."""

    @classmethod
    def of(cls, kind: str | None = None, *, replicas: int | None = None, image: str | None = None,
           urls: Sequence[str] = (), **rest: Any) -> "ProviderSpec":
        """The spec, ``kind`` defaulting to ``url`` with URLs and ``local`` without; raises
        :class:`ProviderError` with :func:`spec_problem`'s reason."""
        kind = kind or ("url" if urls else "local")
        problem = spec_problem(kind, replicas=replicas, image=image, urls=urls)
        if problem:
            raise ProviderError(problem)
        urls = tuple(u.rstrip("/") for u in urls)
        return cls(kind, len(urls) if kind == "url" else replicas or 1, image, urls, **rest)

    @property
    def starts(self) -> bool:
        return self.kind in STARTED

    def per_replica_sessions(self) -> int:
        """The sessions each started replica takes: its share of the run's, plus two for an episode
        retried in a fresh session while the broken one is still being closed."""
        return math.ceil(self.sessions / max(self.replicas, 1)) + 2

    def describe(self) -> str:
        if self.kind == "local":
            return "in process"
        if self.kind == "url":
            return f"{len(self.urls)} server(s) by URL"
        what = f" of {self.image}" if self.image else ""
        return f"{self.replicas} {self.kind} replica(s){what}"


# --- spreading sessions ------------------------------------------------------------------------------


class Balancer:
    """The least-loaded of ``urls`` for each new session (see the module docstring); thread-safe."""

    def __init__(self, urls: Sequence[str], *, timeout_s: float = 10.0, client: Any = None) -> None:
        if not urls:
            raise ValueError("a balancer needs at least one URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.opened = [0] * len(self.urls)
        """Sessions handed out per replica (all time)."""
        self._open = [0] * len(self.urls)
        self._lock = threading.Lock()
        self._timeout_s = timeout_s
        self._client = client

    def _capacity(self, http: Any, index: int) -> dict[str, int] | None | str:
        """The replica's ``/capacity``; ``None`` when it has none (not an A01 server, or an older one);
        a string saying why when it does not answer at all."""
        import httpx

        try:
            reply = http.get(f"{self.urls[index]}/capacity")
        except httpx.HTTPError as exc:
            return f"{self.urls[index]}: {type(exc).__name__}: {exc}"
        try:
            reply.raise_for_status()
            data = reply.json()
            return {"max": int(data["max_sessions"]), "active": int(data["active_sessions"])}
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None

    def acquire(self) -> int:
        """Choose the replica for a new session and count it as open there (call :meth:`release` when
        the session ends); raises :class:`ProviderError` when no replica answers."""
        import httpx

        with self._lock:
            http = self._client or httpx.Client(timeout=self._timeout_s)
            try:
                answers = [self._capacity(http, i) for i in range(len(self.urls))]
            finally:
                if self._client is None:
                    http.close()
            live = [i for i, a in enumerate(answers) if not isinstance(a, str)]
            if not live:
                raise ProviderError("no server answers: " + "; ".join(str(a) for a in answers))
            known = [i for i in live if answers[i] is not None]
            if len(known) == len(live):
                def key(i: int) -> tuple[int, int, int]:
                    answer = answers[i]
                    assert isinstance(answer, dict)
                    load = max(answer["active"], self._open[i])  # ours may not be counted by the server yet
                    return (-(answer["max"] - load), self._open[i], i)
            else:  # a server without /capacity: this run's own sessions are all there is to go by
                def key(i: int) -> tuple[int, int, int]:
                    return (0, self._open[i], i)
            chosen = min(live, key=key)
            self._open[chosen] += 1
            self.opened[chosen] += 1
            return chosen

    def release(self, index: int) -> None:
        with self._lock:
            self._open[index] = max(self._open[index] - 1, 0)


# --- checks ------------------------------------------------------------------------------------------


def check_same_cache(url: str, cache: Any) -> int:
    """Every scenario the server at ``url`` lists is in ``cache`` with the same content (episode keys,
    the oracle's fixes and the summaries read the local cache); returns how many it lists."""
    from envcore.agents.served import EvaluationError, catalogue, not_held

    try:
        served = catalogue(url, split=None)
    except EvaluationError as exc:
        raise ProviderError(str(exc)) from None
    if not served:
        raise ProviderError(f"{url} serves no scenarios")
    differ = not_held(cache, served)
    if differ:
        raise ProviderError(
            f"{url} serves another scenario cache than {cache.root}: {len(differ)} of its {len(served)} scenarios are "
            f"not in it as served (e.g. {differ[0]}); point --cache / environment.cache at a copy of the cache the "
            "servers serve, or rebuild the image from this checkout")
    return len(served)


def health_refusal(url: str) -> str | None:
    """The server's reason when ``/health`` answers 503 (the sandbox refuses to grade: final, no use
    waiting), else ``None``."""
    import httpx

    try:
        reply = httpx.get(f"{url}/health", timeout=5)
    except httpx.HTTPError:
        return None
    if reply.status_code != 503:
        return None
    try:
        sandbox = reply.json()["sandbox"]
        reason = sandbox.get("problem") or f"missing {', '.join(sandbox.get('missing') or []) or 'sandbox layers'}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not the sandbox's answer (a Space still starting answers 503 too): keep waiting
    return (f"{url}/health answers 503, grading refused: {reason} (docs/deploy.md: A01_ALLOW_REDUCED_SANDBOX "
            "when the platform cannot give that layer)")


# --- the replicas: thin adapters over OpenEnv's providers ---------------------------------------------


def _tail(path: str | Path | None, size: int = 1500) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text(errors="replace")[-size:].strip()
    except OSError:
        return ""


def _docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def engine_problem() -> str | None:
    """``None`` when a Docker engine answers, else why not (the benchmark and tests skip with it)."""
    try:
        done = _docker("info", "--format", "{{.ServerVersion}}", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no docker command ({exc})"
    if done.returncode != 0 or not done.stdout.strip():
        return f"no Docker engine answers ({(done.stderr or done.stdout).strip()[:200]})"
    return None


def image_problem(image: str) -> str | None:
    """``None`` when ``image`` is in the local engine, else why it cannot be used."""
    problem = engine_problem()
    if problem:
        return problem
    if _docker("image", "inspect", image).returncode != 0:
        return (f"no image {image} in the local engine; build it with `docker build -t {image} .` "
                "(docs/scale-out.md)")
    return None


def unavailable(kind: str, image: str | None = None) -> str | None:
    """Why provider ``kind`` cannot run on this machine (no engine, no image, Swarm not active, no uv),
    or ``None``."""
    if kind in ("docker", "swarm"):
        problem = image_problem(image or IMAGE)
        if problem is None and kind == "swarm":
            state = _docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()
            if state != "active":
                return f"Docker Swarm is {state or 'not active'} here (docker swarm init)"
        return problem
    if kind == "uv" and shutil.which("uv") is None:
        return "no uv on PATH (pip install uv)"
    return None


class _Replica:
    """One replica's lifecycle, as :class:`Replicas` drives it."""

    url: str = ""

    def start(self) -> str:
        raise NotImplementedError

    def wait_for_ready(self, timeout_s: float) -> None:
        """OpenEnv's wait; raises TimeoutError (not ready yet) or RuntimeError (it has stopped)."""
        raise NotImplementedError

    def gone(self) -> str | None:
        """Why the replica has stopped by itself, or ``None`` while it runs."""
        return None

    def log(self) -> str:
        return ""

    def stop(self) -> None:
        raise NotImplementedError


def _hardened_docker_provider() -> Any:
    from openenv.core.containers.runtime import LocalDockerProvider

    class HardenedDockerProvider(LocalDockerProvider):
        """``LocalDockerProvider`` for this image. Its ``start_container`` is replaced because in
        OpenEnv 0.10 it publishes the container's port 8000 (this image listens on 7860) on every
        interface, drops the ``docker run`` options it documents as ``**kwargs`` (so neither the
        hardened flags nor a label could be given) and names containers by image and millisecond;
        this one runs ``docker run`` the same way with those, and sets the provider's own fields, so
        its ``wait_for_ready`` and ``stop_container`` work unchanged."""

        def start_container(self, image: str, port: int | None = None, env_vars: dict[str, str] | None = None,
                            **kwargs: Any) -> str:
            port = port or self._find_available_port()
            self._container_name = kwargs["name"]
            command = ["docker", "run", "-d", "--name", self._container_name, "--label", kwargs["label"],
                       "-p", f"127.0.0.1:{port}:{IMAGE_PORT}", *kwargs.get("flags", ())]
            for mount in kwargs.get("mounts", ()):
                command += ["-v", mount]
            for key, value in (env_vars or {}).items():
                command += ["-e", f"{key}={value}"]
            done = subprocess.run([*command, image], capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"docker run {image} failed: {(done.stderr or done.stdout).strip()[-800:]}")
            self._container_id = done.stdout.strip()
            return f"http://127.0.0.1:{port}"

        def stop_container(self) -> None:
            name = self._container_name
            try:
                super().stop_container()
            except subprocess.TimeoutExpired:  # upstream waits 10 s for a `docker stop` that may take longer
                pass
            finally:
                if name:  # upstream skips `docker rm` when `docker stop` fails
                    _docker("rm", "-f", name)

    return HardenedDockerProvider()


class _DockerReplica(_Replica):
    def __init__(self, image: str, env: dict[str, str], *, name: str, label: str, mounts: list[str]) -> None:
        self.provider = _hardened_docker_provider()
        self.image, self.env, self.name, self.label, self.mounts = image, env, name, label, mounts

    def start(self) -> str:
        self.url = self.provider.start_container(self.image, env_vars=self.env, name=self.name, label=self.label,
                                                 flags=HARDENED_RUN_FLAGS, mounts=self.mounts)
        return self.url

    def wait_for_ready(self, timeout_s: float) -> None:
        self.provider.wait_for_ready(self.url, timeout_s=timeout_s)

    def gone(self) -> str | None:
        state = _docker("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", self.name).stdout.split()
        if state and state[0] in ("exited", "dead"):
            return f"container {self.name} exited with status {state[1]}"
        return None

    def log(self) -> str:
        done = _docker("logs", "--tail", "30", self.name)
        return (done.stdout + done.stderr).strip()[-1500:]

    def stop(self) -> None:
        self.provider.stop_container()


class _SwarmReplicas(_Replica):
    """A Swarm service of N replicas behind one published port. ``DockerSwarmProvider`` publishes the
    container's port 8000, so the server is told to listen there (``PORT``); its wait returns when one
    replica answers, so this also waits until Swarm counts all N running (tasks with a HEALTHCHECK
    count once healthy)."""

    def __init__(self, image: str, env: dict[str, str], replicas: int, *, label: str) -> None:
        from openenv.core.containers.runtime import DockerSwarmProvider

        try:  # never `docker swarm init` behind the operator's back: it changes the engine for everyone on it
            self.provider = DockerSwarmProvider(auto_init_swarm=False)
        except RuntimeError as exc:
            raise ProviderError(f"provider swarm: {exc}; run `docker swarm init` first (docs/scale-out.md)") from None
        self.image, self.env, self.replicas, self.label = image, env, replicas, label

    def start(self) -> str:
        self.url = self.provider.start_container(
            self.image, env_vars={**self.env, "PORT": "8000"}, replicas=self.replicas, memory_limit="4g",
            labels={LABEL: self.label.split("=", 1)[1]}).replace("localhost", "127.0.0.1")
        return self.url

    def wait_for_ready(self, timeout_s: float) -> None:
        self.provider.wait_for_ready(self.url, timeout_s=timeout_s)
        running = _docker("service", "ls", "--filter", f"label={self.label}", "--format", "{{.Replicas}}").stdout
        if running.strip().split(" ")[0] != f"{self.replicas}/{self.replicas}":
            raise TimeoutError(f"Swarm runs {running.strip() or 'no'} replicas of {self.replicas}")

    def log(self) -> str:
        tasks = _docker("service", "ps", "--filter", "desired-state=running", "--format",
                        "{{.Name}} {{.CurrentState}} {{.Error}}", self.provider._service_name or "-").stdout.strip()
        if tasks and all(" Running " in f" {line} " for line in tasks.splitlines()):
            tasks += ("\nevery replica runs, yet the published port does not answer: Swarm's routing mesh needs the "
                      "kernel's IPVS (the ip_vs module); without it use provider docker")
        return tasks

    def stop(self) -> None:
        self.provider.stop_container()


def _process_provider_class() -> Any:
    from openenv.core.containers.runtime import RuntimeProvider

    class ProcessProvider(RuntimeProvider):
        """``python app.py`` from the checkout in a session of its own (a Ctrl-C meant for the caller
        does not reach it half-way): ``UVProvider``'s lifecycle (start, wait for ``/health``, terminate
        then kill) without uv, with the server's output in a file (a pipe nobody reads would stall it)
        and its sandbox's processes stopped with it."""

        def __init__(self, *, root: Path = ROOT, python: str = sys.executable) -> None:
            self.root, self.python = root, python
            self.process: subprocess.Popen | None = None
            self.log_path: str | None = None
            self.base_url: str | None = None

        def start(self, port: int | None = None, env_vars: dict[str, str] | None = None, **_: Any) -> str:
            port = port or _free_port()
            env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **(env_vars or {}), "PORT": str(port),
                   "HOST": "127.0.0.1"}
            log = tempfile.NamedTemporaryFile(prefix="a01-replica-", suffix=".log", delete=False)
            self.log_path = log.name
            self.process = subprocess.Popen([self.python, str(self.root / "app.py")], cwd=self.root, env=env,
                                            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
            log.close()
            self.base_url = f"http://127.0.0.1:{port}"
            return self.base_url

        def wait_for_ready(self, timeout_s: float = 60.0) -> None:
            import httpx

            deadline = time.monotonic() + timeout_s
            while True:
                if self.process is None or self.process.poll() is not None:
                    code = None if self.process is None else self.process.returncode
                    raise RuntimeError(f"python app.py exited with status {code}")
                try:
                    if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{self.base_url} did not become ready within {timeout_s:.1f} s")
                time.sleep(0.2)

        def stop(self) -> None:
            process, self.process = self.process, None
            if process is not None:
                _stop_tree(process)
            if self.log_path:
                Path(self.log_path).unlink(missing_ok=True)
                self.log_path = None

    return ProcessProvider


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid``, from /proc (the sandbox's workers run in sessions of their own, so
    neither the server's process group nor its session holds them all)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _stop_tree(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM to the server, which stops its sandbox; once it is gone, whatever ran under it is given a
    few seconds to follow and then killed, so stopping returns with nothing of it left."""
    below = _descendants(process.pid) if sys.platform.startswith("linux") else []
    terminate(process, timeout_s)
    _outlive(below)


def _outlive(pids: list[int], grace_s: float = 5.0) -> None:
    """Give ``pids`` (what ran under a stopped server) ``grace_s`` to exit by themselves, then kill the rest."""
    deadline = time.monotonic() + grace_s
    while (left := [pid for pid in pids if _running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class _ProcessReplica(_Replica):
    def __init__(self, env: dict[str, str]) -> None:
        self.provider = _process_provider_class()()
        self.env = env

    def start(self) -> str:
        self.url = self.provider.start(env_vars=self.env)
        return self.url

    def wait_for_ready(self, timeout_s: float) -> None:
        self.provider.wait_for_ready(timeout_s)

    def gone(self) -> str | None:
        process = self.provider.process
        if process is not None and process.poll() is not None:
            return f"python app.py exited with status {process.returncode}"
        return None

    def log(self) -> str:
        return _tail(self.provider.log_path)

    @property
    def pid(self) -> int | None:
        return None if self.provider.process is None else self.provider.process.pid

    def stop(self) -> None:
        self.provider.stop()


@contextmanager
def _output_to(path: str) -> Iterator[None]:
    """Point this process's stdout and stderr at ``path`` while a child is spawned: ``UVProvider`` starts
    the server with the caller's output, where its log (and a traceback per closed WebSocket) would run
    into the caller's report."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


class _UvReplica(_Replica):
    """``UVProvider`` on the checkout: ``uv run --isolated --project <checkout> -- uvicorn app:app``.
    ``pyproject.toml`` declares no dependencies (they are pinned in ``requirements/``), so uv's
    isolated environment holds none and ``uvicorn`` is this interpreter's (its folder first on
    ``PATH``); ``PYTHONPATH`` makes ``app`` the checkout's whatever the working directory, and
    uvicorn's ``UVICORN_*`` variables give it the settings ``python app.py`` passes in code (WebSocket
    implementation and frame limit, no proxy headers)."""

    def __init__(self, env: dict[str, str], *, timeout_s: float) -> None:
        from openenv.core.containers.runtime import UVProvider

        from envcore.server.guard import DEFAULT_MAX_WS_MESSAGE_BYTES, env_bytes

        bin_dir = str(Path(sys.executable).parent)
        env = {**env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT),
               "GRADIO_ANALYTICS_ENABLED": "False", "UVICORN_WS": "websockets-sansio",
               "UVICORN_PROXY_HEADERS": "false", "UVICORN_ACCESS_LOG": "false", "UVICORN_LOG_LEVEL": "warning",
               "UVICORN_WS_MAX_SIZE": str(env_bytes("A01_MAX_WS_MESSAGE_BYTES", DEFAULT_MAX_WS_MESSAGE_BYTES))}
        try:
            self.provider = UVProvider(project_path=str(ROOT), app="app:app", host="127.0.0.1", env_vars=env,
                                       context_timeout_s=timeout_s)
        except RuntimeError as exc:
            raise ProviderError(f"provider uv: {exc}") from None
        log = tempfile.NamedTemporaryFile(prefix="a01-replica-uv-", suffix=".log", delete=False)
        log.close()
        self.log_path = log.name

    def start(self) -> str:
        with _output_to(self.log_path):
            self.url = self.provider.start()
        return self.url

    def wait_for_ready(self, timeout_s: float) -> None:
        self.provider.wait_for_ready(timeout_s)

    def gone(self) -> str | None:
        process = self.provider._process  # UVProvider keeps its Popen private; read only to say why it stopped
        if process is not None and process.poll() is not None:
            return f"uv run exited with status {process.returncode}"
        return None

    def log(self) -> str:
        return _tail(self.log_path)

    @property
    def pid(self) -> int | None:
        process = self.provider._process
        return None if process is None else process.pid

    def stop(self) -> None:
        process = self.provider._process
        below = _descendants(process.pid) if process is not None and sys.platform.startswith("linux") else []
        try:
            self.provider.stop()  # SIGTERM to uv, which passes it on to uvicorn
        finally:
            Path(self.log_path).unlink(missing_ok=True)
            _outlive(below)


class _UrlReplica(_Replica):
    """A server someone else runs: nothing to start or stop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.refused: str | None = None

    def start(self) -> str:
        return self.url

    def wait_for_ready(self, timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=min(10.0, max(timeout_s, 1.0))).status_code == 200:
                    return
            except httpx.ConnectError as exc:  # nothing listens there (a sleeping Space still answers)
                self.refused = f"does not answer ({exc})"
                raise TimeoutError(self.refused) from None
            except httpx.HTTPError:
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.url}/health did not answer 200")
            time.sleep(0.5)

    def gone(self) -> str | None:
        return self.refused

    def stop(self) -> None:
        pass


@dataclass(eq=False)
class Replicas:
    """The servers of one run, started, checked and stopped (see the module docstring)::

        with Replicas(ProviderSpec.of("docker", replicas=4, image=IMAGE), cache=cache) as servers:
            run_rollouts(..., urls=servers.urls)      # None for local: in process
    """

    spec: ProviderSpec
    cache: Any = None
    """The local scenario cache the servers must serve (``None``: not checked)."""
    say: Callable[[str], None] | None = None
    urls: list[str] | None = None
    """The replicas' base URLs once started; ``None`` for ``local``."""
    set_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    start_s: float = 0.0
    """Seconds from the first start to the last replica healthy and checked."""
    _replicas: list[_Replica] = field(default_factory=list)
    _signals: dict[int, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{LABEL}={self.set_id}"

    def __enter__(self) -> "Replicas":
        if threading.current_thread() is threading.main_thread():
            # SIGTERM would end the process without unwinding, leaving containers and servers running
            self._signals[signal.SIGTERM] = signal.signal(signal.SIGTERM, _raise_on_sigterm)
        try:
            self.start()
        except BaseException:
            self._restore_signals()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self._restore_signals()

    def _restore_signals(self) -> None:
        for number, handler in self._signals.items():
            signal.signal(number, handler)
        self._signals.clear()

    def _server_env(self) -> dict[str, str]:
        sessions = str(self.spec.per_replica_sessions())
        env = {"A01_UI": "0", "A01_MAX_SESSIONS": sessions, "A01_MAX_SESSIONS_PER_CLIENT": sessions}
        if self.spec.kind in ("docker", "swarm"):
            env |= {k: os.environ[k] for k in FORWARDED_SETTINGS if os.environ.get(k)}
        if self.spec.cache_dir:
            env["A01_CACHE"] = self._cache_path()
        return env

    def _cache_path(self) -> str:
        """Where the replicas find the run's cache: as given for processes; inside the image when it is
        part of the checkout; else mounted (docker) at /srv/a01-cache."""
        assert self.spec.cache_dir
        local = Path(self.spec.cache_dir).resolve()
        if self.spec.kind in ("uv", "process"):
            return str(local)
        try:
            return f"{APP_DIR}/{local.relative_to(ROOT).as_posix()}"
        except ValueError:
            if self.spec.kind == "swarm":
                raise ProviderError(f"provider swarm serves the caches in its image; {local} is not in the checkout "
                                    "(DockerSwarmProvider takes no volumes): use provider docker") from None
            return "/srv/a01-cache"

    def _mounts(self) -> list[str]:
        if not self.spec.cache_dir or self._cache_path() != "/srv/a01-cache":
            return []
        return [f"{Path(self.spec.cache_dir).resolve()}:/srv/a01-cache:ro"]

    def _make(self, index: int) -> _Replica:
        spec, env = self.spec, self._server_env()
        if spec.kind == "docker":
            assert spec.image
            return _DockerReplica(spec.image, env, name=f"a01-replica-{self.set_id}-{index}", label=self.label,
                                  mounts=self._mounts())
        if spec.kind == "swarm":
            assert spec.image
            return _SwarmReplicas(spec.image, env, spec.replicas, label=self.label)
        if spec.kind == "uv":
            return _UvReplica(env, timeout_s=spec.start_timeout_s)
        if spec.kind == "process":
            return _ProcessReplica(env)
        return _UrlReplica(spec.urls[index])

    def start(self) -> list[str] | None:
        """Start every replica, wait until each is healthy and serves the local cache; on any failure
        stop what was started and raise :class:`ProviderError`."""
        if self.spec.kind == "local":
            return None
        if self.spec.kind in ("docker", "swarm"):
            assert self.spec.image
            problem = image_problem(self.spec.image)
            if problem:
                raise ProviderError(f"provider {self.spec.kind}: {problem}")
        started = time.monotonic()
        count = 1 if self.spec.kind == "swarm" else self.spec.replicas
        atexit.register(self.stop)  # a last resort if the process ends some other way
        try:
            for index in range(count):
                replica = self._make(index)
                self._replicas.append(replica)
                try:
                    replica.start()
                except RuntimeError as exc:
                    raise ProviderError(f"provider {self.spec.kind}: replica {index + 1} did not start: {exc}") from None
            for replica in self._replicas:
                self._wait(replica, deadline=started + self.spec.start_timeout_s)
            if self.cache is not None:
                checks = self.spec.replicas if self.spec.kind == "swarm" else 1  # the mesh reaches each in turn
                for replica in self._replicas:
                    for _ in range(checks):
                        check_same_cache(replica.url, self.cache)
        except BaseException:
            self.stop()
            raise
        self.urls = [r.url for r in self._replicas]
        self.start_s = time.monotonic() - started
        if self.say:
            self.say(f"environment: {self.spec.describe()} ready in {self.start_s:.1f} s: {', '.join(self.urls)}")
        return self.urls

    def _wait(self, replica: _Replica, *, deadline: float) -> None:
        """OpenEnv's wait, in slices, looking between them for a replica that stopped or refuses to grade."""
        while True:
            try:
                replica.wait_for_ready(max(min(3.0, deadline - time.monotonic()), 0.5))
                return
            except TimeoutError:
                why = replica.gone()
            except RuntimeError as exc:
                why = str(exc)
            if why is None:
                why = health_refusal(replica.url)
            if why is None and time.monotonic() >= deadline:
                why = f"not healthy within {self.spec.start_timeout_s:g} s"
            if why is not None:
                log = replica.log()
                raise ProviderError(f"provider {self.spec.kind}: {replica.url or 'a replica'}: {why}" +
                                    (f"\n--- its log ---\n{log}" if log else ""))

    def stop(self) -> None:
        """Stop every replica this set started (idempotent), then remove anything still carrying its label."""
        replicas, self._replicas = self._replicas, []
        errors = []
        threads = [threading.Thread(target=_stop_quietly, args=(r, errors)) for r in replicas]
        for thread in threads:  # at once: a container takes a second or two to stop
            thread.start()
        for thread in threads:
            thread.join()
        if self.spec.kind in ("docker", "swarm") and replicas:
            _remove_labelled(self.label)
        atexit.unregister(self.stop)
        self.urls = None
        if errors and self.say:
            self.say(f"environment: stopping replicas: {'; '.join(errors)}")

    def pids(self) -> list[int]:
        """The server processes' ids (uv, process)."""
        return [pid for r in self._replicas if (pid := getattr(r, "pid", None))]


def _stop_quietly(replica: _Replica, errors: list[str]) -> None:
    try:
        replica.stop()
    except Exception as exc:  # noqa: BLE001 - the others must be stopped all the same
        errors.append(f"{replica.url}: {type(exc).__name__}: {exc}")


def _remove_labelled(label: str) -> None:
    """Remove every container and service carrying ``label`` (what a timed-out stop left behind)."""
    try:
        services = _docker("service", "ls", "-q", "--filter", f"label={label}").stdout.split()
        if services:
            _docker("service", "rm", *services)
        containers = _docker("ps", "-aq", "--filter", f"label={label}").stdout.split()
        if containers:
            _docker("rm", "-f", *containers, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        pass


def labelled_containers(label: str) -> list[str]:
    """Ids of the containers carrying ``label`` (``a01.replicas=<set id>``), running or not."""
    return _docker("ps", "-aq", "--filter", f"label={label}").stdout.split()


def _raise_on_sigterm(number: int, frame: Any) -> None:
    raise SystemExit(128 + number)


# --- the command line --------------------------------------------------------------------------------


def add_arguments(parser: Any) -> None:
    """``--provider``, ``--replicas`` and ``--image`` (``--url`` is the command's own)."""
    parser.add_argument("--provider", choices=KINDS,
                        help="where the servers come from: local (in process; the default without --url), docker "
                             "(--replicas containers of --image), swarm (a Swarm service of --replicas), uv or process "
                             "(--replicas servers from this checkout), url (the --url servers; the default with "
                             "--url); sessions go to the least-loaded replica (docs/scale-out.md)")
    parser.add_argument("--replicas", type=int, help="replicas to start (docker, swarm, uv, process; default 1)")
    parser.add_argument("--image", help=f"the server image for docker and swarm (e.g. {IMAGE})")


def spec_from_args(args: Any, *, sessions: int) -> ProviderSpec:
    """The spec of ``args``' ``--provider``, ``--replicas``, ``--image``, ``--url`` and ``--cache``;
    raises :class:`ProviderError` with what is wrong, before anything starts."""
    return ProviderSpec.of(getattr(args, "provider", None), replicas=getattr(args, "replicas", None),
                           image=getattr(args, "image", None), urls=getattr(args, "url", None) or (),
                           sessions=sessions, cache_dir=getattr(args, "cache", None))
