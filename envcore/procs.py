"""Stopping a child process the same way everywhere: SIGTERM, a grace period, then SIGKILL."""

from __future__ import annotations

import subprocess


def terminate(process: subprocess.Popen, timeout_s: float = 10) -> None:
    """Ask ``process`` to stop (SIGTERM); kill it if it is still running ``timeout_s`` later; reap it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
