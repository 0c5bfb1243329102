"""Wire types of a scenario: the authored spec, the declarative probes, the users' credentials and the
compiled bundle."""

from envcore.scenario.bundle import Bundle, BundleMetrics, BundleUser
from envcore.scenario.credentials import Credentials, LoginRequest
from envcore.scenario.probes import Probe, ProbeKind, ProbeOutcome, ProbeStep, check_fact
from envcore.scenario.spec import CodeStyle, DomainSpec, ScenarioSpec, SpecDraft

__all__ = [
    "Bundle",
    "BundleMetrics",
    "BundleUser",
    "CodeStyle",
    "Credentials",
    "DomainSpec",
    "LoginRequest",
    "Probe",
    "ProbeKind",
    "ProbeOutcome",
    "ProbeStep",
    "ScenarioSpec",
    "SpecDraft",
    "check_fact",
]
