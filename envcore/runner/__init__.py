"""Running declarative probes against an app: the interface and its backends."""

from envcore.runner.base import AppSource, Batch, Gate, ProbeRunner, RunnerInfrastructureError, RunReport
from envcore.runner.inprocess import InProcessRunner
from envcore.runner.loader import AppLoadError

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
