"""Build the Space's image and run it the ways docs/deploy.md describes, checking each one from outside.

    python deploy/container_check.py [--base IMAGE] [--tag TAG] [--keep] [--json FILE]

Needs a running Docker engine. ``--base`` is the Python 3.11 base (default ``python:3.11-slim``;
where Docker Hub cannot be reached, ``bash deploy/standin-base.sh`` builds ``a01-standin/python:3.11-slim``
and ``--base standin`` uses it, building it first if needed). Steps, each timed:

1. ``docker build`` (build time, image size, the largest installed packages) of the checkout, or with
   ``--source push`` of exactly what ``openenv push --exclude deploy/push-exclude.txt`` uploads to a
   Space (made by OpenEnv's own staging code, web interface on as by default: the Space then opens
   at ``/web``, which must lead to the page);
2. **as a Space runs it** (default seccomp, uid 1000, no flags): ``deploy/smoke.py`` (health, sandbox
   layers, page, a reference fix FULL and an untouched app NO over ``/ws``);
3. **hardened**: ``--read-only``, ``--tmpfs /tmp``, a 64 MB ``/dev/shm``, ``--cap-drop ALL``,
   ``no-new-privileges``, memory and process limits: cold start to ``/health`` and to the first page,
   the smoke test, PID 1 is tini and reaps an orphaned process, the app folder is read-only and owned
   by uid 1000, Docker's HEALTHCHECK reports healthy;
4. **a platform that blocks Landlock** (tests/layer_blocker.py mounted read-only): ``/health`` 503 and
   no grading; then with ``A01_ALLOW_REDUCED_SANDBOX=landlock``: graded, reported as reduced.

Prints the figures (or writes them as JSON) and exits 1 at the first check that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STANDIN = "a01-standin/python:3.11-slim"
HARDENED = ["--read-only", "--tmpfs", "/tmp:size=512m,mode=1777", "--shm-size=64m", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--memory", "4g", "--pids-limit", "512"]
"""The flags docs/deploy.md recommends (and this check verifies)."""


class CheckFailed(AssertionError):
    pass


def docker(*args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise CheckFailed(f"docker {' '.join(args[:3])} ... failed: {(done.stderr or done.stdout).strip()[-2000:]}")
    return done


def engine_problem() -> str | None:
    """``None`` when a Docker engine answers, else why not."""
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no docker command ({exc})"
    return None if done.returncode == 0 and done.stdout.strip() else f"no Docker engine answers ({done.stderr.strip()[:200]})"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, timeout_s: float, *, statuses: tuple[int, ...] = (200, 503)) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status in statuses:
                    return time.monotonic() - started
        except urllib.error.HTTPError as exc:
            if exc.code in statuses:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.1)
    raise CheckFailed(f"{url} did not answer within {timeout_s:g} s")


def smoke(url: str, expect: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(ROOT / "deploy" / "smoke.py"), url, "--expect", expect, "--json"],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise CheckFailed(f"smoke ({expect}) against {url}: {done.stderr.strip()[-1500:]}")
    return json.loads(done.stdout)


class Container:
    """One ``docker run -d`` of the image, removed on exit."""

    def __init__(self, tag: str, flags: list[str], command: list[str] | None = None, env: dict[str, str] | None = None,
                 mounts: list[str] | None = None) -> None:
        self.port = free_port()
        self.name = f"a01-check-{os.getpid()}-{self.port}"
        args = ["run", "-d", "--name", self.name, "-p", f"127.0.0.1:{self.port}:7860", *flags]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        for mount in mounts or []:
            args += ["-v", mount]
        self.started = time.monotonic()
        docker(*args, tag, *(command or []))
        self.url = f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        return docker("logs", self.name, check=False).stdout + docker("logs", self.name, check=False).stderr

    def exec(self, *command: str) -> subprocess.CompletedProcess:
        return docker("exec", self.name, *command, check=False, timeout=60)

    def __enter__(self) -> "Container":
        return self

    def __exit__(self, *exc: object) -> None:
        docker("rm", "-f", self.name, check=False)


ZOMBIE_PROBE = """
import os, time
child = os.fork()
if child == 0:
    if os.fork() == 0:   # the grandchild outlives its parent: an orphan, handed to PID 1
        time.sleep(0.5)
        os._exit(0)
    os._exit(0)
os.waitpid(child, 0)
time.sleep(2.0)          # the orphan has exited by now; PID 1 must have reaped it
zombies = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if fields[0] == "Z":
        zombies.append(pid)
print(open("/proc/1/cmdline").read().replace("\\0", " ").strip(), "|", len(zombies))
"""


def check_hardened(tag: str, figures: dict[str, Any]) -> None:
    with Container(tag, HARDENED) as box:
        figures["cold_start_to_health_s"] = round(wait_for(box.url + "/health", 180), 2)
        figures["cold_start_to_page_s"] = round(wait_for(box.url + "/", 180, statuses=(200,)) +
                                                figures["cold_start_to_health_s"], 2)
        figures["hardened"] = smoke(box.url, "full")
        probe = box.exec("python", "-c", ZOMBIE_PROBE)
        init, _, zombies = probe.stdout.strip().rpartition("|")
        if "tini" not in init or zombies.strip() != "0":
            raise CheckFailed(f"PID 1 is {init.strip()!r} and left {zombies.strip()} zombie(s): {probe.stderr[-500:]}")
        figures["pid1"] = init.strip()
        wrote = box.exec("sh", "-c", "touch /home/user/app/probe 2>&1; id -u; stat -c %u /home/user/app/app.py")
        lines = wrote.stdout.strip().splitlines()
        if "Read-only file system" not in wrote.stdout or lines[-2:] != ["1000", "1000"]:
            raise CheckFailed(f"the app folder should be read-only and uid 1000's: {wrote.stdout.strip()}")
        logs = box.logs()
        if "sandbox layers in force: Landlock" not in logs or "data folder" not in logs:
            raise CheckFailed(f"the start-up log does not say what protects the grader:\n{logs[:1500]}")
        deadline = time.monotonic() + 150  # the first HEALTHCHECK runs one interval (30 s) after the start
        state = ""
        while time.monotonic() < deadline:
            state = docker("inspect", "--format", "{{.State.Health.Status}}", box.name).stdout.strip()
            if state in ("healthy", "unhealthy"):
                break
            time.sleep(2)
        if state != "healthy":
            raise CheckFailed(f"Docker's HEALTHCHECK says {state!r}")
        figures["docker_health"] = state
        stats = docker("stats", "--no-stream", "--format", "{{.MemUsage}}", box.name, check=False).stdout.strip()
        figures["memory_after_episodes"] = stats.split("/")[0].strip()


def check_blocked_platform(tag: str, figures: dict[str, Any]) -> None:
    blocker = f"{ROOT / 'tests' / 'layer_blocker.py'}:/opt/layer_blocker.py:ro"
    command = ["python", "/opt/layer_blocker.py", "--block", "landlock", "--", "python", "app.py"]
    with Container(tag, HARDENED, command, mounts=[blocker]) as box:
        wait_for(box.url + "/health", 180)
        figures["without_landlock"] = smoke(box.url, "refused")["mode"]
        if "grading is REFUSED" not in box.logs():
            raise CheckFailed("the start-up log does not say grading is refused")
    with Container(tag, HARDENED, command, env={"A01_ALLOW_REDUCED_SANDBOX": "landlock"}, mounts=[blocker]) as box:
        wait_for(box.url + "/health", 180)
        reduced = smoke(box.url, "reduced")
        figures["without_landlock_opted_in"] = f"{reduced['mode']}, reference fix {reduced['reference_fix']['resolution']}"


def stage_like_openenv_push(dest: Path) -> Path:
    """The folder ``openenv push --exclude deploy/push-exclude.txt`` would upload, made by OpenEnv's own
    staging code (its private helpers: this check is how a change in them is noticed)."""
    from openenv.cli.commands import push

    patterns = push._load_ignore_patterns(ROOT, str(ROOT / "deploy" / "push-exclude.txt"))
    staging = dest / "staging"
    push._prepare_staging_directory(ROOT, "a01_repair_gym", staging, ignore_patterns=patterns, enable_interface=True)
    for left_out in ("tests", "build", ".git", ".dockerignore", "scenarios"):
        if (staging / left_out).exists():
            raise CheckFailed(f"openenv push would upload {left_out}")
    return staging


def largest_packages(tag: str, count: int = 8) -> list[str]:
    done = docker("run", "--rm", "--entrypoint", "sh", tag, "-c",
                  "du -sm /opt/venv/lib/python3*/site-packages/* | sort -rn | head -n %d" % count, check=False)
    return [f"{line.split()[1].rsplit('/', 1)[-1]} {line.split()[0]} MB" for line in done.stdout.strip().splitlines()]


def run(base: str, tag: str, *, keep: bool, source: str = "checkout") -> dict[str, Any]:
    problem = engine_problem()
    if problem:
        raise CheckFailed(problem)
    if base == "standin":
        subprocess.run(["bash", str(ROOT / "deploy" / "standin-base.sh"), STANDIN], check=True, timeout=1800)
        base = STANDIN
    figures: dict[str, Any] = {"base": base, "tag": tag, "source": source}
    scratch = tempfile.TemporaryDirectory(prefix="a01-push-")
    context = stage_like_openenv_push(Path(scratch.name)) if source == "push" else ROOT
    started = time.monotonic()
    docker("build", "--build-arg", f"BASE_IMAGE={base}", "-t", tag, str(context), timeout=3600)
    scratch.cleanup()
    figures["build_s"] = round(time.monotonic() - started, 1)
    size = int(docker("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())
    base_size = int(docker("image", "inspect", "--format", "{{.Size}}", base).stdout.strip())
    figures["image_mb"], figures["base_mb"] = round(size / 1e6), round(base_size / 1e6)
    figures["largest_packages"] = largest_packages(tag)
    try:
        with Container(tag, []) as box:
            wait_for(box.url + "/health", 180)
            figures["as_a_space"] = smoke(box.url, "full")
            with urllib.request.urlopen(box.url + "/web", timeout=30) as response:  # follows the redirect
                if response.status != 200 or b"A01 repair gym" not in response.read():
                    raise CheckFailed("/web (where openenv push opens a Space) does not lead to the page")
        check_hardened(tag, figures)
        check_blocked_platform(tag, figures)
    finally:
        if not keep:
            docker("image", "rm", tag, check=False)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="python:3.11-slim",
                        help="the base image; 'standin' builds and uses a local stand-in (deploy/standin-base.sh)")
    parser.add_argument("--tag", default="a01-repair-gym:check")
    parser.add_argument("--source", choices=("checkout", "push"), default="checkout",
                        help="build the checkout, or what `openenv push` would upload (default: checkout)")
    parser.add_argument("--keep", action="store_true", help="keep the image afterwards")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    try:
        figures = run(args.base, args.tag, keep=args.keep, source=args.source)
    except CheckFailed as exc:
        print(f"container_check: FAILED: {exc}", file=sys.stderr)
        return 1
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    for key, value in figures.items():
        print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
