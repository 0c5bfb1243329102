"""The attack batteries again, with the grader unprivileged, as the Space's container runs it (uid 1000).

A grader that is root with every capability hides a class of holes: its override powers mask what
its workers, running as the same user, could do to the files that user owns. So when the suite runs
as root, this module runs the sandbox attack modules once more in a child process that has given up
its privileges:

* as another, unprivileged user (``nobody``) when that user can read the interpreter, the virtual
  environment and the checkout; otherwise
* as root **without any capability** (``setpriv --bounding-set=-all``): a user that owns the grader's
  files, the interpreter and the workers' folders, but may not override permissions, change limits,
  renice, or leave ``SCHED_IDLE``. That is the situation of uid 1000 in the Dockerfile, with more
  to defend: a capability-less root owns the Python installation too.

The default run replays the attacks whose outcome depends on who owns what: files, metadata and
workspaces, IPC and locks, templates, other workers, the zygote, priorities and limits. Every attack
module, whole, runs in this mode in the slow suite (``-m slow``).

When the suite already runs unprivileged, the modules ran in this mode with the rest of the suite and
there is nothing more to do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envcore.sandbox import supported_platform

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("tests/test_sandbox_attacks.py", "tests/test_sandbox_isolation.py", "tests/test_sandbox_filter.py",
           "tests/test_bounded_work.py", "tests/test_fault_attribution.py",
           "tests/test_hidden_stays_hidden.py", "tests/test_coach.py", "tests/test_import_walls.py",
           "tests/test_templates.py")
NOBODY = 65534

pytestmark = [
    pytest.mark.skipif(supported_platform() is not None, reason="the sandbox is Linux only"),
    pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: the attack modules ran in this mode"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="util-linux's setpriv is needed to drop privileges"),
]


def _as_nobody() -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs"]


def _capless_root() -> list[str]:
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]


def _identity(home: Path) -> tuple[str, list[str]]:
    """The least privileged identity that can run the suite here, and the command prefix for it."""
    # It must be able to import the project and to start the interpreter again (the sandbox starts
    # its zygote that way): an interpreter under a private home folder can be run by path, not execed.
    check = "import subprocess, sys, envcore.sandbox, pytest; subprocess.run([sys.executable, '-c', 'pass'], check=True)"
    probe = subprocess.run([*_as_nobody(), sys.executable, "-c", check],
                           cwd=ROOT, capture_output=True, env={"PATH": os.environ.get("PATH", ""), "HOME": str(home)})
    if probe.returncode == 0:
        return "another user (nobody), no capabilities", _as_nobody()
    return "root without any capability", _capless_root()


@pytest.fixture
def home():
    """A folder any user can write (pytest's own temporary folders are private to their owner)."""
    path = Path(tempfile.mkdtemp(prefix="a01-unprivileged-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# The attacks on state that belongs to a user: what a capability-less grader could lose first.
OWNERSHIP_ATTACKS = ("metadata or ipc or locks or template_worker or workspaces_are_removed or leftover or healthy "
                     "or writing_outside or deleting_the_workspace or another_workers or killing or renicing or "
                     "lowering or reading_ or filling_the_disk or creating_files or zygote_killed or file_times or "
                     "trace_in_the_python")


def _run_unprivileged(home: Path, modules: tuple[str, ...], *select: str) -> str:
    mode, prefix = _identity(home)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "COV_"))}
    env.update({"HOME": str(home), "TMPDIR": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
                "HYPOTHESIS_STORAGE_DIRECTORY": str(home / ".hypothesis")})
    command = [*prefix, sys.executable, "-m", "pytest", *modules, *select, "-q", "-p", "no:cacheprovider",
               "-p", "no:randomly", "--no-header", "-x", "-m", "not slow", "-n", "0"]  # one process: its own summary
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    status = subprocess.run([*prefix, sys.executable, "-c",
                             "from envcore.sandbox.containment import has_capability; import os; "
                             "print(os.geteuid(), any(has_capability(n) for n in range(41)))"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert status.stdout.split()[1] == "False", f"the child kept a capability: {status.stdout} {status.stderr}"
    assert done.returncode == 0, f"as {mode}:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert " passed" in done.stdout and " failed" not in done.stdout, done.stdout[-2000:]
    return f"as {mode}: {done.stdout.strip().splitlines()[-1]}"


def test_the_attacks_on_what_a_user_owns_hold_when_the_grader_is_unprivileged(home):
    summary = _run_unprivileged(home, MODULES[:2], "-k", OWNERSHIP_ATTACKS)
    passed = int(summary.split(": ", 1)[1].split(" passed")[0])
    assert passed >= 20 and " deselected" in summary, summary  # a real subset, not an empty selection
    print(f"ownership attacks passed {summary}")


@pytest.mark.slow
def test_the_sandbox_attacks_hold_when_the_grader_is_unprivileged(home):
    print(f"attack modules passed {_run_unprivileged(home, MODULES)}")
