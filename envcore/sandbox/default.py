"""The process-wide sandbox: one per process, with default limits, started on first use and closed
at exit. For callers that were given no sandbox of their own (a test run, a verification, a runner)."""

from __future__ import annotations

import atexit
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from envcore.sandbox.pool import Sandbox

_default: "Sandbox | None" = None
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
