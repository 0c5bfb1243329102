"""Run untrusted (agent-patched) apps out of process, contained, and grade them from outside.

* :class:`Sandbox` (``pool``): a warm zygote process and the workers forked from it;
* :mod:`~envcore.sandbox.containment`: what a worker does to itself before app code runs
  (rlimits, capabilities, Landlock, seccomp, audit hook);
* :class:`SandboxRunner` / :func:`run_sandboxed` (``runner``): probes against a worker, judged here;
* :class:`LiveApp` (``live``): the running app behind an episode's request tool.

Exports are loaded lazily so that the zygote, which imports this package, stays small.
"""

from __future__ import annotations

import atexit
import threading
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
}
__all__ = [*_EXPORTS, "default_sandbox"]

if TYPE_CHECKING:  # pragma: no cover
    from envcore.sandbox.limits import SandboxLimits
    from envcore.sandbox.live import LiveApp
    from envcore.sandbox.pool import (AppLoadFailure, Sandbox, SandboxRefused, Worker, WorkerGone, ZygoteLost,
                                      supported_platform)
    from envcore.sandbox.runner import SandboxRunner, run_sandboxed


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'envcore.sandbox' has no attribute {name!r}")


_default = None
_default_lock = threading.Lock()


def default_sandbox() -> "Sandbox":
    """The process-wide sandbox with default limits, started on first use and closed at exit."""
    global _default
    with _default_lock:
        if _default is None:
            from envcore.sandbox.pool import Sandbox

            _default = Sandbox().start()
            atexit.register(_default.close)
        return _default
