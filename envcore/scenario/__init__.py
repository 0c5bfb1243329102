"""Wire types of a scenario: the authored spec, the declarative probes and the compiled bundle."""

from envcore.scenario.bundle import Bundle, BundleMetrics, BundleUser
from envcore.scenario.probes import Probe, ProbeKind, ProbeOutcome, ProbeStep, check_fact
from envcore.scenario.spec import CodeStyle, DomainSpec, ScenarioSpec, SpecDraft

__all__ = [
    "Bundle",
    "BundleMetrics",
    "BundleUser",
    "CodeStyle",
    "DomainSpec",
    "Probe",
    "ProbeKind",
    "ProbeOutcome",
    "ProbeStep",
    "ScenarioSpec",
    "SpecDraft",
    "check_fact",
]
