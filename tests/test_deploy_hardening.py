"""The server as deployed: it says what protects the grader, refuses to grade without it unless told,
and serves and grades from a read-only app folder.

A platform may block sandbox layers (an older container runtime's seccomp profile answers the
Landlock calls with ENOSYS; some platforms allow no seccomp filter). ``tests/layer_blocker.py``
makes this machine such a platform for one process tree, so the refusal is tested where every layer
exists. The read-only app folder is a read-only bind mount of the checkout in a mount namespace of
its own (what ``docker run --read-only`` gives the image's app folder), with the server running as a
root without capabilities, which cannot write through it either. The container itself, built and run
hardened, is ``tests/test_deploy_container.py`` (slow).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from envcore.sandbox import supported_platform

ROOT = Path(__file__).resolve().parents[1]
BLOCKER = [sys.executable, str(ROOT / "tests" / "layer_blocker.py")]

pytestmark = pytest.mark.skipif(supported_platform() is not None or os.uname().machine != "x86_64",
                                reason="the sandbox's layers are Linux x86-64")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("A01_")}
    env.update({"A01_DATA_DIR": str(tmp_path / "data"), "HOST": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False",
                "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra)
    return env


def serve_and_smoke(command: list[str], env: dict[str, str], expect: str, *, page: bool, cwd: Path | None = None,
                    wait_s: float = 90.0) -> tuple[dict, str]:
    """Start ``command`` (a server on ``env['PORT']``), run deploy/smoke.py against it, stop it; the
    smoke summary and what the server printed."""
    url = f"http://127.0.0.1:{env['PORT']}"
    server = subprocess.Popen(command, env=env, cwd=cwd or ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        smoke = subprocess.run([sys.executable, str(ROOT / "deploy" / "smoke.py"), url, "--expect", expect,
                                "--wait", str(wait_s), "--json", *([] if page else ["--no-page"])],
                               capture_output=True, text=True, timeout=wait_s + 120)
    finally:
        server.terminate()
        try:
            output, _ = server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            output, _ = server.communicate()
    assert smoke.returncode == 0, f"{smoke.stderr}\n--- server ---\n{output[-3000:]}"
    return json.loads(smoke.stdout), output


# --- what protects the grader, reported --------------------------------------------------------------


def test_health_and_metadata_say_which_layers_hold(shipped):
    from envcore.env.environment import Runtime
    from envcore.env.sampler import CurriculumSampler
    from envcore.env.server import create_env_app

    client = TestClient(create_env_app(Runtime(sampler=CurriculumSampler(shipped))))
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "healthy"
    sandbox = health.json()["sandbox"]
    assert sandbox["mode"] == "full" and sandbox["grading"] and sandbox["missing"] == []
    assert sandbox["layers"]["landlock_abi"] >= 1 and sandbox["layers"]["seccomp"] is True
    # checked from inside a contained process, not only asked of the kernel
    assert sandbox["checks"]["reads_outside_refused"] and sandbox["checks"]["kernel_filter_mode"] == "2"
    assert sandbox["workspace"]["path"] and sandbox["workspace"]["free_mb"] > 0
    assert "Landlock" in sandbox["summary"] and "seccomp" in sandbox["summary"]
    metadata = client.get("/metadata").json()
    assert metadata["name"] == "a01_repair_gym" and metadata["sandbox"]["mode"] == "full"


def test_missing_landlock_is_reported_and_grading_refused_by_default(tmp_path):
    env = server_env(tmp_path, PORT=str(free_port()), A01_UI="0")
    summary, output = serve_and_smoke([*BLOCKER, "--block", "landlock", "--", sys.executable, "app.py"], env,
                                      "refused", page=False)
    assert "MISSING: Landlock" in summary["sandbox"] and summary["refused_submit"]
    assert "grading is REFUSED" in output and "A01_ALLOW_REDUCED_SANDBOX" in output


def test_an_operator_who_opts_in_grades_with_the_rest_and_every_report_says_so(tmp_path):
    env = server_env(tmp_path, PORT=str(free_port()), A01_UI="0", A01_ALLOW_REDUCED_SANDBOX="landlock",
                     A01_EPISODE_LOG=str(tmp_path / "episodes.jsonl"))
    summary, output = serve_and_smoke([*BLOCKER, "--block", "landlock", "--", sys.executable, "app.py"], env,
                                      "reduced", page=False)
    assert summary["reference_fix"]["resolution"] == "full" and "MISSING: Landlock" in summary["sandbox"]
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    layers = [r["verification"]["containment"] for r in records if r.get("verification")]
    assert layers and all(c.get("landlock_abi") == 0 and c.get("seccomp") for c in layers)


def test_allowing_landlock_to_be_missing_does_not_allow_seccomp_to_be():
    done = subprocess.run([*BLOCKER, "--block", "landlock,seccomp", "--", sys.executable, "-m", "envcore.sandbox.posture"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "A01_ALLOW_REDUCED_SANDBOX": "landlock"})
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    assert found["mode"] == "refused" and found["missing"] == ["landlock", "seccomp"]
    assert found["allowed_missing"] == ["landlock"] and "seccomp" in found["summary"]


@pytest.mark.parametrize("value", [pytest.param("maybe", marks=pytest.mark.slow),
                                   pytest.param("landlock,apparmor", marks=pytest.mark.slow), ","])
def test_an_opt_in_the_server_cannot_read_stops_it_before_it_listens(tmp_path, value):
    env = server_env(tmp_path, PORT=str(free_port()), A01_UI="0", A01_ALLOW_REDUCED_SANDBOX=value)
    done = subprocess.run([sys.executable, "app.py"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "A01_ALLOW_REDUCED_SANDBOX" in done.stderr


# --- a read-only app folder -------------------------------------------------------------------------

def _read_only_prefix() -> list[str] | None:
    """A command prefix that runs its command with the checkout mounted read-only, as a root without
    capabilities; ``None`` where this machine cannot make one."""
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("unshare", "mount", "setpriv")):
        return None
    script = ('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && '
              'exec setpriv --inh-caps=-all --bounding-set=-all --no-new-privs "$@"')
    prefix = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "read-only", str(ROOT)]
    probe = subprocess.run([*prefix, "sh", "-c", f'touch "{ROOT}/.ro-probe"'], capture_output=True, text=True)
    if "Read-only file system" not in probe.stderr:
        (ROOT / ".ro-probe").unlink(missing_ok=True)
        return None
    return prefix


@pytest.mark.slow  # a server in a mount namespace of its own (over 10 s)
def test_a_read_only_app_folder_still_serves_and_grades(tmp_path):
    prefix = _read_only_prefix()
    if prefix is None:
        pytest.skip("needs root, unshare and mount to make a read-only bind mount of the checkout")
    env = server_env(tmp_path, PORT=str(free_port()), HOME="/nonexistent", TMPDIR=str(tmp_path / "tmp"),
                     A01_UI_MAX_SESSIONS="2", A01_MAX_SESSIONS="4")
    env.pop("A01_DATA_DIR")  # the default: neither /data nor the read-only checkout, so the temporary folder
    (tmp_path / "tmp").mkdir()
    before = set(os.listdir(ROOT))
    summary, output = serve_and_smoke([*prefix, sys.executable, "app.py"], env, "full", page=True)
    assert summary["reference_fix"]["resolution"] == "full" and summary["page_s"] < 30
    assert f"data folder {tmp_path / 'tmp' / 'a01-repair-gym'} (temporary" in output
    assert set(os.listdir(ROOT)) == before


# --- the page says it too ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "reduced", "refused"])
def test_the_page_says_which_layers_protect_the_grader_and_the_operators_choice(shipped, monkeypatch, mode):
    from envcore.env.environment import Runtime
    from envcore.env.sampler import CurriculumSampler
    from envcore.sandbox import posture
    from envcore.server.sessions import SessionHub
    from ui.app import build_ui

    layers = {"rlimits": True, "landlock_abi": 0 if mode != "full" else 7, "seccomp": True, "capabilities_dropped": True}
    found = posture.Posture(layers=layers, allowed_missing=["landlock"] if mode == "reduced" else [])
    monkeypatch.setattr(posture, "_current", found)
    hub = SessionHub.for_server(Runtime(sampler=CurriculumSampler(shipped)), human_log="")
    try:
        line = hub.sandbox_line()
        expected = {"full": "Every app runs in a sandbox: Landlock (ABI 7), seccomp filter",
                    "reduced": "Reduced sandbox:** Landlock not available on this host; the operator chose",
                    "refused": "Grading is turned off on this host:** Landlock not available"}[mode]
        assert expected in line and (mode == "full" or "A01_ALLOW_REDUCED_SANDBOX" in line)
        config = build_ui(hub).config
        shown = [c for c in config["components"] if c.get("props", {}).get("elem_id") == "sandbox-posture"]
        assert shown and shown[0]["props"]["value"] == line
    finally:
        hub.shutdown()


def test_what_health_reports_and_what_the_sandbox_does_are_one_decision():
    from envcore.sandbox import posture

    cases = [posture.Posture(problem="the probe could not run"),
             posture.Posture(problem="the probe could not run", allowed_missing=["landlock", "seccomp"]),
             posture.Posture(layers={"landlock_abi": 0, "seccomp": True}, allowed_missing=["seccomp"]),
             posture.Posture(layers={"landlock_abi": 0, "seccomp": True}, allowed_missing=["landlock"])]
    assert [p.grading for p in cases] == [False, True, False, True]
    for found in cases:
        assert found.grading == (found.refusal() is None) and (found.mode == "refused") == (not found.grading)
    assert "could not be checked" in cases[0].refusal() and "Landlock" in cases[2].refusal()
