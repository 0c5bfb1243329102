"""The numbers that bound an untrusted app: time, memory, CPU, files.

Defaults are sized for the generated apps (a few hundred lines, in-memory stores, sub-millisecond
requests) with room to spare; an honest app never comes near them. They are one frozen value so
that a deployment can tighten or loosen them in one place (``Sandbox(limits=...)``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SandboxLimits:
    request_timeout_s: float = 2.0
    """Wall-clock time one request may take before the parent kills the worker."""
    load_timeout_s: float = 5.0
    """Wall-clock time for importing the app and running its startup."""
    verify_timeout_s: float = 20.0
    """Wall-clock time for a whole verification, before :attr:`probe_allowance_s` per probe is added."""
    probe_allowance_s: float = 1.0
    """Wall-clock time a verification gets for each of its probes (each loads the app afresh), on top
    of :attr:`verify_timeout_s`: a busy machine slows every load, and running out of time fails every
    probe, so the budget grows with the work an honest app needs."""
    memory_mb: int = 256
    """Address space a worker may add to what it inherits from the zygote (``RLIMIT_AS``)."""
    cpu_s: int = 10
    """CPU seconds over a worker's whole life (``RLIMIT_CPU``)."""
    max_file_mb: int = 2
    """Largest file a worker may write (``RLIMIT_FSIZE``)."""
    max_new_files: int = 32
    """Files a worker may create in its workspace (audit policy)."""
    max_open_files: int = 64
    """Descriptors a worker may hold (``RLIMIT_NOFILE``)."""
    idle_s: float = 300.0
    """A live app's worker with no request for this long is stopped (restarted on the next request)."""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "SandboxLimits":
        return cls(**data)
