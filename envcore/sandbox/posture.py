"""What protects the grader on this machine, said out loud, and the operator's choice when a layer is missing.

A worker contains itself in layers (:mod:`envcore.sandbox.containment`): resource limits, capabilities
dropped, **Landlock** (which files it may read and write) and a **seccomp** filter (which system calls
it may make). The last two depend on the kernel and on the platform around it: a container runtime's
own seccomp profile may refuse the Landlock calls, an old kernel may lack Landlock, a non-x86-64
machine lacks the filter. Without them an agent's patched app could read files beside it (the other
scenarios of the cache, with their hidden probes) and make any system call the container allows.

So a missing layer is never silent:

* :func:`survey` runs, once per process and in a throwaway child, exactly what a worker does to
  itself, checks from the inside that the layers hold (a read outside the allowed folders must fail
  under Landlock; the kernel must list the process as filtered), and says where workers' folders go
  (:func:`workspace_parent`: its file system, whether it is memory-backed, its free space). The
  server logs it at start and reports it on ``/health`` and ``/metadata``; the page shows it.
* :func:`refusal_here` (:meth:`Posture.refusal`, the same decision ``/health`` reports) is checked before the sandbox runs any app (:mod:`envcore.sandbox.pool`):
  without Landlock or seccomp it **refuses to run the app**, so nothing is graded (an infrastructure
  error, no reward), unless the operator opts in with ``A01_ALLOW_REDUCED_SANDBOX``: ``1`` (any layer
  may be missing) or a comma list of the layers that may (``landlock``, ``seccomp``). The decision
  rests on this survey, made by the grader's own child, never on what a worker reports: a worker
  speaks after its app's code has run, and that code could forge the report. Every verification
  report still records the layers its workers said they ran with.

``python -m envcore.sandbox.posture`` prints the survey as JSON (``--probe`` is the child's side).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from envcore.settings import SettingError

REQUIRED_LAYERS = ("landlock", "seccomp")
"""Layers without which the sandbox refuses to run an app unless the operator opts in."""
ALLOW_VARIABLE = "A01_ALLOW_REDUCED_SANDBOX"
SHM_MIN_FREE_BYTES = 2 << 30
"""``/dev/shm`` holds workers' folders only with this much room (Docker's default 64 MB is too small)."""
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})


def workspace_parent() -> str:
    """Where workers' folders go: ``$A01_SANDBOX_DIR``, else ``/dev/shm`` (memory-backed: creating
    and deleting a worker's folder there is about four times faster than on an ext4 disk), else the
    system's temporary folder (``$TMPDIR``, ``/tmp``). A worker can fill at most ``max_new_files`` x
    ``max_file_mb`` of it; ``/dev/shm`` is used only when it has room for 2 GB."""
    chosen = os.environ.get("A01_SANDBOX_DIR")
    if chosen:
        return chosen
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        stats = os.statvfs("/dev/shm")
        if stats.f_bavail * stats.f_frsize >= SHM_MIN_FREE_BYTES:
            return "/dev/shm"
    return tempfile.gettempdir()


def filesystem_of(path: str) -> str:
    """The type of the file system ``path`` lives on (``tmpfs``, ``overlay``, ``ext4`` ...), from
    ``/proc/self/mounts`` (the longest mount point above it); ``unknown`` off Linux."""
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, parts[2]
    except OSError:
        pass
    return kind


def allowed_missing(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The layers the operator allows to be missing (``A01_ALLOW_REDUCED_SANDBOX``); a value it
    cannot take is a :class:`~envcore.settings.SettingError` naming the variable."""
    raw = (os.environ if environ is None else environ).get(ALLOW_VARIABLE, "").strip().lower()
    if raw in ("", "0", "no", "false"):
        return frozenset()
    if raw in ("1", "yes", "true", "all"):
        return frozenset(REQUIRED_LAYERS)
    names = frozenset(part.strip() for part in raw.split(",") if part.strip())
    unknown = sorted(names - set(REQUIRED_LAYERS))
    if unknown or not names:
        raise SettingError(f"{ALLOW_VARIABLE} must be 1 (any layer may be missing), 0, or a comma list of "
                           f"{', '.join(REQUIRED_LAYERS)}; not {raw!r}")
    return names


def missing_layers(layers: Mapping[str, Any]) -> list[str]:
    """The required layers that ``layers`` (what containment reported) lacks."""
    missing = []
    if not layers.get("landlock_abi"):
        missing.append("landlock")
    if not layers.get("seccomp"):
        missing.append("seccomp")
    return missing


LAYER_NAMES = {"landlock": "Landlock", "seccomp": "the seccomp filter"}


@dataclass
class Posture:
    """The survey's answer. ``layers`` is what :func:`~envcore.sandbox.containment.contain` returned
    in the probe, plus the checks made from inside it."""

    layers: dict[str, Any] = field(default_factory=dict)
    allowed_missing: list[str] = field(default_factory=list)
    workspace: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    """Why the probe itself could not run (then every layer counts as missing)."""

    @property
    def missing(self) -> list[str]:
        """The required layers that do not hold here (all of them when the probe could not run)."""
        return list(REQUIRED_LAYERS) if self.problem else missing_layers(self.layers)

    def refusal(self) -> str | None:
        """``None`` when apps may run here, else why not (naming the opt-in). The one decision behind
        both the sandbox's refusal (:func:`refusal_here`) and what ``/health`` and the page say."""
        missing = [name for name in self.missing if name not in self.allowed_missing]
        if not missing:
            return None
        if self.problem:
            return (f"the sandbox refuses to run the app: its layers could not be checked here ({self.problem}). "
                    f"Set {ALLOW_VARIABLE}=1 to run without them (see docs/deploy.md)")
        notes = "; ".join(str(note) for note in self.layers.get("notes") or []) or "no reason given"
        return (f"the sandbox refuses to run the app: {' and '.join(LAYER_NAMES[m] for m in missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not in force here ({notes}). "
                f"Run on a host that allows {'it' if len(missing) == 1 else 'them'}, or set "
                f"{ALLOW_VARIABLE}={','.join(missing)} to grade without (see docs/deploy.md)")

    @property
    def grading(self) -> bool:
        """Whether apps will be run and graded here."""
        return self.refusal() is None

    @property
    def mode(self) -> str:
        """``full`` (every layer), ``reduced`` (a layer missing, the operator opted in) or ``refused``."""
        if not self.grading:
            return "refused"
        return "reduced" if self.missing else "full"

    def in_force(self) -> list[str]:
        """The layers that hold, in words."""
        on = []
        if self.layers.get("landlock_abi"):
            on.append(f"Landlock (ABI {self.layers['landlock_abi']})")
        if self.layers.get("seccomp"):
            on.append("seccomp filter")
        if self.layers.get("rlimits"):
            on.append("resource limits")
        if self.layers.get("capabilities_dropped"):
            on.append("no capabilities")
        return on

    def summary(self) -> str:
        """One line for the log and the page."""
        if self.problem:
            return f"sandbox unavailable: {self.problem}"
        line = "sandbox layers in force: " + (", ".join(self.in_force()) or "none")
        if self.missing:
            off = ", ".join(LAYER_NAMES[m] for m in self.missing)
            line += (f"; MISSING: {off} (grading with the rest: the operator set {ALLOW_VARIABLE})" if self.grading
                     else f"; MISSING: {off}: grading is refused (set {ALLOW_VARIABLE} to grade without)")
        ws = self.workspace
        if ws:
            where = "memory" if ws.get("memory_backed") else f"disk ({ws.get('filesystem')})"
            line += f"; workers' folders in {ws.get('path')} on {where}, {ws.get('free_mb', 0):,} MB free"
        return line

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "missing": self.missing, "mode": self.mode, "grading": self.grading,
                "summary": self.summary()}


def survey(timeout_s: float = 30.0, environ: Mapping[str, str] | None = None) -> Posture:
    """Contain a throwaway child exactly as a worker contains itself and report what held."""
    parent = workspace_parent()
    workspace: dict[str, Any] = {"path": parent, "filesystem": filesystem_of(parent)}
    workspace["memory_backed"] = workspace["filesystem"] in MEMORY_FILESYSTEMS
    try:
        stats = os.statvfs(parent)
        workspace["free_mb"] = stats.f_bavail * stats.f_frsize >> 20
        workspace["writable"] = os.access(parent, os.W_OK | os.X_OK)
    except OSError as exc:
        workspace["free_mb"], workspace["writable"] = 0, False
        workspace["problem"] = str(exc)
    allowed = sorted(allowed_missing(environ))
    if sys.platform != "linux":
        return Posture(workspace=workspace, allowed_missing=allowed,
                       problem=f"the sandbox needs Linux (fork, prctl, seccomp, Landlock); this is {sys.platform}")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": PROJECT_ROOT, "PYTHONDONTWRITEBYTECODE": "1"}
    scratch = None
    try:
        scratch = tempfile.mkdtemp(prefix="a01-posture-", dir=parent)
        done = subprocess.run([sys.executable, "-m", "envcore.sandbox.posture", "--probe", scratch],
                              capture_output=True, text=True, timeout=timeout_s, env=env, cwd="/")
        layers = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return Posture(workspace=workspace, allowed_missing=allowed, problem=f"the probe could not run ({exc})")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if not isinstance(layers, dict):
        tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return Posture(workspace=workspace, allowed_missing=allowed, problem=f"the probe failed: {tail[0][:300]}")
    return Posture(layers=layers, allowed_missing=allowed, workspace=workspace)


def refusal_here() -> str | None:
    """``None`` when apps may run on this machine, else why not: :meth:`Posture.refusal` of this
    process's own survey (:func:`current`), never of what a worker reports."""
    return current().refusal()


_current: Posture | None = None
_current_lock = threading.Lock()


def current() -> Posture:
    """This process's survey, made on first use and kept."""
    global _current
    with _current_lock:
        if _current is None:
            _current = survey()
        return _current


def _probe(workspace: str) -> None:
    """The child's side: contain this process as a worker is contained (``workspace`` is its folder,
    made and removed by :func:`survey`), check it, print the layers."""
    from envcore.sandbox import containment
    from envcore.sandbox.limits import SandboxLimits

    outside = os.path.join(PROJECT_ROOT, "envcore", "sandbox", "posture.py")
    status_fd = os.open("/proc/self/status", os.O_RDONLY)  # opened before Landlock, read after
    try:
        layers, _freezer = containment.contain(workspace, SandboxLimits(), containment.python_read_roots())
        checks: dict[str, Any] = {}
        try:
            with open(outside, "rb") as handle:
                handle.read(1)
            checks["reads_outside_refused"] = False
        except PermissionError:
            checks["reads_outside_refused"] = True
        try:
            with open(os.path.join(workspace, "probe.txt"), "w") as handle:
                handle.write("ok")
            checks["workspace_writable"] = True
        except OSError:
            checks["workspace_writable"] = False
        text = os.pread(status_fd, 1 << 16, 0).decode("ascii", "replace")
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        checks["kernel_filter_mode"] = fields.get("Seccomp", "").strip()
        checks["no_new_privs"] = fields.get("NoNewPrivs", "").strip() == "1"
        if layers.get("landlock_abi") and not checks["reads_outside_refused"]:
            layers["landlock_abi"] = 0  # applied but not holding: count it as missing
            layers.setdefault("notes", []).append("Landlock was applied but a read outside its folders succeeded")
        if layers.get("seccomp") and checks["kernel_filter_mode"] != "2":
            layers["seccomp"] = False
            layers.setdefault("notes", []).append("the kernel does not list the process as filtered")
        layers["checks"] = checks
    except Exception as exc:  # report, never hang the server's start-up on a traceback
        layers = {"rlimits": False, "landlock_abi": 0, "seccomp": False, "notes": [f"{type(exc).__name__}: {exc}"]}
    sys.stdout.write(json.dumps(layers) + "\n")
    sys.stdout.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--probe"]:
        if len(args) != 2:
            print("usage: python -m envcore.sandbox.posture [--probe WORKSPACE]", file=sys.stderr)
            return 2
        _probe(args[1])
    posture = survey()
    print(json.dumps(posture.to_json(), indent=1))
    return 0 if posture.grading else 1


if __name__ == "__main__":
    sys.exit(main())
