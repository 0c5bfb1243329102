"""Run untrusted (agent-patched) apps out of process, contained, and grade them from outside.

* :class:`Sandbox` (``pool``): a warm zygote process and the workers forked from it;
* :mod:`~envcore.sandbox.containment`: what a worker does to itself before app code runs
  (rlimits, capabilities, Landlock, seccomp, audit hook);
* :class:`SandboxRunner` / :func:`run_sandboxed` (``runner``): probes against a worker, judged here;
* :class:`LiveApp` (``live``): the running app behind an episode's request tool;
* :func:`default_sandbox` (``default``): the process-wide sandbox.

Exports are loaded lazily so that the zygote, which imports this package, stays small.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Sandbox": "envcore.sandbox.pool",
    "Worker": "envcore.sandbox.pool",
    "AppLoadFailure": "envcore.sandbox.pool",
    "WorkerGone": "envcore.sandbox.pool",
    "ZygoteLost": "envcore.sandbox.pool",
    "SandboxRefused": "envcore.sandbox.pool",
    "supported_platform": "envcore.sandbox.pool",
    "SandboxLimits": "envcore.sandbox.limits",
    "SandboxRunner": "envcore.sandbox.runner",
    "run_sandboxed": "envcore.sandbox.runner",
    "LiveApp": "envcore.sandbox.live",
    "default_sandbox": "envcore.sandbox.default",
}
__all__ = [*_EXPORTS]

if TYPE_CHECKING:  # pragma: no cover
    from envcore.sandbox.default import default_sandbox
    from envcore.sandbox.limits import SandboxLimits
    from envcore.sandbox.live import LiveApp
    from envcore.sandbox.pool import (AppLoadFailure, Sandbox, SandboxRefused, Worker, WorkerGone, ZygoteLost,
                                      supported_platform)
    from envcore.sandbox.runner import SandboxRunner, run_sandboxed


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'envcore.sandbox' has no attribute {name!r}")
