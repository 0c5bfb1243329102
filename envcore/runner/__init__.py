"""Running declarative probes against an app: the interface and its backends."""

from envcore.runner.base import AppSource, Batch, Gate, ProbeRunner, RunnerInfrastructureError, RunReport
from envcore.runner.inprocess import AppLoadError, InProcessRunner

__all__ = [
    "AppLoadError",
    "AppSource",
    "Batch",
    "Gate",
    "InProcessRunner",
    "ProbeRunner",
    "RunReport",
    "RunnerInfrastructureError",
]
