"""What a freshly forked worker does to itself before any app code runs.

In order (each step needs the ones before it):

1. **Tie its life to the zygote** (``PR_SET_PDEATHSIG``) and leave the zygote's process group.
2. **Descriptors**: stdin, stdout and stderr become ``/dev/null``; every other inherited descriptor is
   closed except the one socket to the parent.
3. **Environment**: cleared down to ``PATH``, ``LANG``, ``HOME`` and ``TMPDIR`` (the last two point
   at the workspace). The zygote was itself started with a scrubbed environment, so no API key or
   token is even in the memory a worker inherits.
4. **No threads**: sync endpoints and dependencies, which Starlette would hand to a thread pool,
   run inline on the event loop. One request is served at a time anyway, and it lets the seccomp
   filter refuse ``clone`` outright.
5. **Resource limits**: address space, CPU seconds, file size, open files, processes, no core dumps.
6. **Capabilities** dropped (when running as root, as in many containers).
7. **Landlock** file and network rules, then the **seccomp** filter, then the **audit hook**.
8. Once the app has loaded (imported and started, which may create files such as a SQLite
   database): a second Landlock layer that refuses **creating** any file or folder
   (:func:`prepare_freeze`, :func:`freeze`).

:func:`contain` returns which layers are active; the verifier copies that into every report, so a
result produced on a kernel without Landlock says so.

What this does **not** protect against: kernel exploits (the system calls left open are the ones
CPython needs), CPU-cache side channels, a worker using its full share of CPU and memory until its
limits stop it, and reading world-readable files *inside* the Python installation. A deployment
adds the container it runs in (Docker, gVisor, a VM) with no secrets mounted, a read-only root
filesystem, and cgroup limits on the container as a whole.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import sysconfig
import tempfile
from typing import Any, Callable

from envcore.sandbox import landlock, seccomp
from envcore.sandbox.audit import AuditPolicy
from envcore.sandbox.limits import SandboxLimits

_PR_SET_PDEATHSIG = 1
_CAPSET = 126  # x86-64
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def python_read_roots() -> list[str]:
    """Folders an app may read: the Python installation and the system's shared libraries."""
    roots: list[str] = []
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.append(os.path.realpath(path))
    for module in ("_json", "_sqlite3", "_asyncio"):
        spec_file = getattr(sys.modules.get(module), "__file__", None)
        if spec_file:
            roots.append(os.path.dirname(os.path.realpath(spec_file)))
    roots += [p for p in landlock.SHARED_LIBRARY_DIRS if os.path.isdir(p)]
    return sorted(set(roots))


def tie_to_parent(expected_parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != expected_parent:  # the parent died before the line above took effect
        os._exit(70)


def isolate_descriptors(keep: int, *also: int) -> None:
    """stdin, stdout and stderr to ``/dev/null``; every other descriptor closed but ``keep`` (the
    socket to the parent) and ``also`` (a template's own database files, see
    :mod:`envcore.sandbox.preload`)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    start = 3
    for fd in sorted({keep, *also}):
        if fd >= start:
            os.closerange(start, fd)
            start = fd + 1
    os.closerange(start, 1 << 16)


def scrub_environment(workspace: str) -> None:
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workspace, "TMPDIR": workspace})
    tempfile.tempdir = workspace


def run_sync_inline() -> None:
    """Make ``anyio.to_thread.run_sync`` (Starlette's thread pool) call the function in place."""
    import anyio.to_thread

    async def run_sync(func: Any, *args: Any, abandon_on_cancel: bool = False, cancellable: Any = None,
                       limiter: Any = None) -> Any:
        return func(*args)

    anyio.to_thread.run_sync = run_sync


def set_limits(limits: SandboxLimits) -> None:
    inherited = _address_space_bytes()
    rules = [
        (resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1)),
        (resource.RLIMIT_FSIZE, (limits.max_file_mb << 20,) * 2),
        (resource.RLIMIT_NOFILE, (limits.max_open_files,) * 2),
        (resource.RLIMIT_NPROC, (0, 0)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if inherited:
        rules.append((resource.RLIMIT_AS, (inherited + (limits.memory_mb << 20),) * 2))
    for which, value in rules:
        resource.setrlimit(which, value)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writing past the limit fails with EFBIG instead


def _address_space_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def drop_capabilities() -> str | None:
    if os.geteuid() != 0:
        return None
    if not seccomp.supported():
        return "capability drop not available on this platform"

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    data = (Data * 2)()
    if libc.syscall(_CAPSET, ctypes.byref(Header(_LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
        return f"capset failed: {os.strerror(ctypes.get_errno())}"
    return None


def contain(
    workspace: str,
    limits: SandboxLimits,
    read_roots: list[str],
    *,
    rehearse: Callable[[], None] | None = None,
    idle_priority: bool = False,
    workspace_access: str = "writable",
) -> tuple[dict[str, Any], landlock.PreparedLayer | None]:
    """Steps 5-7 but the audit hook (the caller has done 1-4); return the active layers (and what could
    not be applied) and the prepared layer that seals the worker once the app has loaded (:func:`freeze`;
    ``None`` without Landlock). The hook comes last, with :func:`install_audit_hook`, once the worker has
    written the app's files (which must not count against the app's own file quota).

    The order: limits, the Landlock layer, the seal prepared, ``rehearse``, capabilities
    dropped, and the seccomp allowlist last, so the filter need not allow anything the earlier layers
    call (no Landlock call is open to the app but applying the one prepared seal).

    ``rehearse`` (trusted code, see :func:`envcore.sandbox.worker.rehearse`) runs once the Landlock
    layer is in place. With ``idle_priority`` everything up to there runs under ``SCHED_IDLE``, so
    preparing a spare only ever uses a CPU nobody else wants; the worker returns to normal priority
    before it drops its capabilities (only a privileged process may leave ``SCHED_IDLE``).
    ``workspace_access`` is ``"writable"`` (a worker, which may create files until its app has loaded
    and then freezes the folder), ``"frozen"`` (no file may be created at all) or ``"read-only"``."""
    if idle_priority:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    layers: dict[str, Any] = {"rlimits": True}
    set_limits(limits)
    if workspace_access == "writable":
        abi, problem_ll = landlock.restrict(read_roots, [workspace])
    elif workspace_access == "frozen":
        abi, problem_ll = landlock.restrict(read_roots, [workspace], workspace_access=landlock.FROZEN_WORKSPACE)
    elif workspace_access == "read-only":
        abi, problem_ll = landlock.restrict([*read_roots, workspace], [])
    else:
        raise ValueError(f"unknown workspace access {workspace_access!r}")
    layers["landlock_abi"] = abi
    freezer = prepare_freeze(workspace, workspace_access) if abi else None
    layers["no_new_files"] = layers["no_reads_after_load"] = freezer is not None
    if rehearse is not None:
        rehearse()
    if idle_priority:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    problem = drop_capabilities()
    layers["capabilities_dropped"] = problem is None
    problem_sc = seccomp.install(freezer.ruleset if freezer is not None else None)
    layers["seccomp"] = problem_sc is None
    notes = [p for p in (problem, problem_ll, problem_sc) if p]
    if notes:
        layers["notes"] = notes
    return layers, freezer


def can_leave_idle_priority() -> bool:
    """Whether a worker may use ``SCHED_IDLE`` while it prepares: leaving it again needs
    ``CAP_SYS_NICE`` (a root without that capability, as in a default container, cannot)."""
    return hasattr(os, "SCHED_IDLE") and has_capability(CAP_SYS_NICE)


CAP_SYS_NICE = 23


def has_capability(number: int) -> bool:
    """Whether this process holds capability ``number`` in its effective set (from ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> number & 1)
    except (OSError, ValueError):
        pass
    return False


def prepare_freeze(workspace: str, workspace_access: str = "writable") -> landlock.PreparedLayer | None:
    """The Landlock layer that seals the worker once its app has loaded: no file or folder can be
    created in the workspace (or anywhere), and **nothing outside the workspace can be read** (the
    Python installation included). Built by :func:`contain` before the seccomp filter (which refuses
    building rulesets), applied by :func:`freeze` after the app's import and start-up, which may create
    files (a SQLite database) and import modules; its requests may do neither. Without reads outside
    the folder, a request cannot leave a trace in the installation's access times for a later worker
    to read (whatever it learns from grading traffic stays in the worker). ``None`` without Landlock,
    where the audit hook's file quota is what remains."""
    if workspace_access == "read-only":
        layer, _problem = landlock.prepare([workspace], [], probe_read=os.path.realpath(os.__file__))
    else:
        layer, _problem = landlock.prepare([], [workspace], workspace_access=landlock.FROZEN_WORKSPACE,
                                           probe_folder=workspace, probe_read=os.path.realpath(os.__file__))
    if layer is not None:
        layer.folder = os.path.realpath(workspace)
    return layer


def drop_outside_descriptors(workspace: str | None) -> int:
    """Point every descriptor open on a file or folder outside ``workspace`` at ``/dev/null`` (standard
    input's); return how many. A descriptor opened while the app loaded would otherwise still read the
    Python installation after the seal, and a read moves a file's access time. Sockets, pipes, event
    descriptors and the workspace's own files are kept."""
    if workspace is None:
        return 0
    prefix = workspace.rstrip(os.sep) + os.sep
    dropped = 0
    for fd in range(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0]):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not target.startswith("/") or target == "/dev/null" or target == workspace or target.startswith(prefix):
            continue
        os.dup2(0, fd, inheritable=False)
        dropped += 1
    return dropped


def freeze(layer: landlock.PreparedLayer | None, policy: AuditPolicy, *,
           before: Callable[[], Any] | None = None) -> str | None:
    """Run ``before`` (the worker's last imports, :func:`~envcore.sandbox.app_runtime.import_named_modules`),
    apply a layer from :func:`prepare_freeze` (the audit hook lets exactly its system calls through),
    then check it: creating a file in the folder and reading one outside it must now fail. ``None``,
    or why the worker is not sealed (the app's doing: it closed or replaced the layer's descriptor, or
    the kernel did not apply it), which the worker reports as a load error."""
    if layer is None:
        return None
    if before is not None:
        before()
    drop_outside_descriptors(layer.folder)
    problem = policy.permit_call(layer.function_address, layer.apply)
    if problem is None:
        problem = policy.permit_call(layer.function_address, layer.creates_files)
    if problem is None:
        problem = policy.permit_call(layer.function_address, layer.reads_outside)
    return None if problem is None else f"the app's worker could not be sealed ({problem})"


def install_audit_hook(workspace: str, limits: SandboxLimits, read_roots: list[str], *, writable: bool = True,
                       importable: frozenset[str] | None = None) -> AuditPolicy:
    return AuditPolicy(workspace, read_roots, limits.max_new_files, writable=writable, importable=importable).install()
