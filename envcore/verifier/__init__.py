"""Grade a patched workspace: ``verify(bundle, workspace) → VerificationReport``.

* ``report``: the report model, per-probe results, and the pure grading chain (tallies → FULL /
  PARTIAL / NO, SWE-bench style);
* ``verify``: runs the probes against the sandboxed app, with shadow identities, and builds the report.
"""

from envcore.verifier.report import ProbeResult, Resolution, Tally, VerificationReport, resolve
from envcore.verifier.verify import read_workspace, shadow_for, verify

__all__ = ["ProbeResult", "Resolution", "Tally", "VerificationReport", "read_workspace", "resolve", "shadow_for", "verify"]
