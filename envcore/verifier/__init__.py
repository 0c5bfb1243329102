"""Grade a patched workspace: ``verify(bundle, workspace) → VerificationReport``.

* ``report``: the report model, per-probe results, and the pure grading chain (tallies → FULL /
  PARTIAL / NO, SWE-bench style);
* ``shadow``: fresh identities for every grading, as a pure transformation of the bundle's data;
* ``verify``: runs the probes against the sandboxed app, one fresh worker per probe, on shadow data,
  and builds the report in terms the agent knows.
"""

from envcore.verifier.report import ProbeResult, Resolution, Tally, VerificationReport, resolve
from envcore.verifier.shadow import draw_shadow
from envcore.verifier.verify import GradingData, grading_data, read_workspace, verify

__all__ = ["GradingData", "ProbeResult", "Resolution", "Tally", "VerificationReport", "draw_shadow", "grading_data",
           "read_workspace", "resolve", "verify"]
