"""What a bug class is, and the helpers its probes are written with.

A :class:`BugClass` names an OWASP A01 pattern and its CWE ids, and lists :class:`Variant` s. A
variant says which code sites it breaks (and how: ``mutations`` map code-site keys to functions that
rewrite the secure fragment), which optional routes the app needs, and which security probes prove
the bug. Adding a bug class is one module defining one ``BugClass`` and one line in the registry.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Mapping

from envcore.factory.codegen.names import Names
from envcore.factory.codegen.parts import Mutation
from envcore.scenario.probes import (
    DENIED,
    BodyExcludes,
    BodyIncludes,
    Fact,
    Probe,
    ProbeKind,
    ProbeStep,
    StatusIn,
)
from envcore.scenario.spec import RecordSpec, ScenarioSpec, SiteRef, UserSpec

# Logical site -> (method, path template) of the route a request exploits through it.
SITE_ROUTES: dict[str, Callable[[Names], tuple[str, str]]] = {
    "detail": lambda n: ("GET", f"/api/{n.p}/{{{n.id}}}"),
    "legacy": lambda n: ("GET", f"/api/v1/{n.p}/{{{n.id}}}"),
    "list": lambda n: ("GET", f"/api/{n.p}"),
    "search": lambda n: ("GET", f"/api/{n.p}/search"),
    "create": lambda n: ("POST", f"/api/{n.p}"),
    "update": lambda n: ("PATCH", f"/api/{n.p}/{{{n.id}}}"),
    "delete": lambda n: ("DELETE", f"/api/{n.p}/{{{n.id}}}"),
    "profile": lambda n: ("PATCH", "/api/me"),
    "directory.list": lambda n: ("GET", "/api/people"),
    "directory.detail": lambda n: ("GET", "/api/people/{person_id}"),
    "shared": lambda n: ("GET", "/api/shared/{code}"),
    "files": lambda n: ("GET", "/api/files"),
    "redirect": lambda n: ("GET", "/auth/logout"),
    "admin.users": lambda n: ("GET", "/api/admin/users"),
    "admin.export": lambda n: ("GET", f"/api/admin/{n.p}/export"),
    "admin.report": lambda n: ("POST", "/api/admin/report"),
    "internal.backup": lambda n: ("GET", "/api/internal/backup"),
}


@dataclass(frozen=True)
class Variant:
    """One concrete way to get a bug class wrong."""

    name: str
    sites: tuple[str, ...]
    """Logical sites (keys of ``SITE_ROUTES``) the bug is reachable through."""
    mutations: Mapping[str, Mutation]
    """Code-site key -> rewrite of the secure fragment."""
    probes: Callable[["ProbeContext"], list[Probe]]
    features: tuple[str, ...] = ()
    requires_tenant: bool = False
    subtle: bool = False
    """The vulnerable code contains a check that looks plausible."""
    description: str = ""
    site_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """For multi-site variants whose sites are separate code: site -> the code keys it owns. The
    scenario check uses it to build "fixed one site only" apps; shared-helper variants leave it empty."""

    @property
    def multi_site(self) -> bool:
        return len(self.sites) > 1

    def mutations_for(self, sites: tuple[str, ...]) -> dict[str, Mutation]:
        """The mutations that keep only ``sites`` vulnerable (requires ``site_keys``)."""
        keys = {key for site in sites for key in self.site_keys[site]}
        return {k: m for k, m in self.mutations.items() if k in keys}


@dataclass(frozen=True)
class BugClass:
    """An A01 pattern with its CWE ids and variants."""

    name: str
    cwe: tuple[str, ...]
    title: str
    symptom: str
    """Tier-2 task wording: what a user noticed, without saying where."""
    variants: tuple[Variant, ...]
    requires_tenant: bool = False

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"{self.name} has no variant {name!r}; known: {[v.name for v in self.variants]}")

    def applicable(self, tenanted: bool) -> list[Variant]:
        if self.requires_tenant and not tenanted:
            return []
        return [v for v in self.variants if tenanted or not v.requires_tenant]


def site_refs(variant: Variant, names: Names) -> tuple[SiteRef, ...]:
    refs = []
    for site in variant.sites:
        method, path = SITE_ROUTES[site](names)
        refs.append(SiteRef(site=site, method=method, path=path))
    return tuple(refs)


@dataclass
class ProbeContext:
    """Read-only view of a spec with helpers for writing probes."""

    spec: ScenarioSpec
    names: Names
    _ids: dict[str, int] = field(default_factory=dict)

    def who(self, part: str) -> str:
        return self.spec.roles[part]

    def user(self, part: str) -> UserSpec:
        return self.spec.player(part)

    def record(self, purpose: str) -> RecordSpec:
        for r in self.spec.records:
            if r.purpose == purpose:
                return r
        raise KeyError(f"no record seeded for {purpose!r}")

    def title(self, record: RecordSpec) -> str:
        return str(record.values[self.names.title])

    def secrets(self, record: RecordSpec) -> tuple[str, ...]:
        return tuple(str(record.values[f]) for f in self.names.sensitive)

    def detail(self, record: RecordSpec, legacy: bool = False) -> str:
        prefix = f"/api/v1/{self.names.p}" if legacy else f"/api/{self.names.p}"
        return f"{prefix}/{record.record_id}"

    def token(self, stem: str) -> str:
        """A short hex string fixed by the seed, for values a probe writes."""
        return hashlib.sha256(f"{self.spec.seed}:{stem}".encode()).hexdigest()[:8]

    def next_id(self, stem: str) -> str:
        self._ids[stem] = self._ids.get(stem, 0) + 1
        return f"{stem}-{self._ids[stem]}"

    # -- probe builders ---------------------------------------------------------------------

    def probe(
        self,
        kind: ProbeKind,
        stem: str,
        title: str,
        steps: list[ProbeStep],
        *,
        sites: tuple[str, ...] = (),
        visible: bool = False,
        trap: str | None = None,
    ) -> Probe:
        return Probe(
            id=self.next_id(stem), kind=kind, visible=visible, title=title, steps=tuple(steps), sites=sites, trap=trap
        )

    def security(self, title: str, steps: list[ProbeStep], *sites: str) -> Probe:
        return self.probe(ProbeKind.SECURITY, "sec", title, steps, sites=tuple(sites))


def step(actor: str | None, method: str, path: str, *expect: Fact, **kw) -> ProbeStep:
    return ProbeStep(actor=actor, method=method, path=path, expect=tuple(expect), **kw)


def denied(*leaks: str) -> tuple[Fact, ...]:
    """The request is refused and none of ``leaks`` shows up in the response."""
    facts: list[Fact] = [StatusIn(codes=DENIED)]
    if leaks:
        facts.append(BodyExcludes(texts=tuple(leaks)))
    return tuple(facts)


def ok(*texts: str, codes: tuple[int, ...] = (200,)) -> tuple[Fact, ...]:
    facts: list[Fact] = [StatusIn(codes=codes)]
    if texts:
        facts.append(BodyIncludes(texts=tuple(texts)))
    return tuple(facts)


def replace_line(old: str, new: list[str]) -> Mutation:
    """A mutation that swaps one exact secure line for ``new`` lines (an error if absent)."""

    def mutate(names: Names, secure: list[str]) -> list[str]:
        if old not in secure:
            raise ValueError(f"secure fragment has no line {old!r}")
        i = secure.index(old)
        return secure[:i] + new + secure[i + 1 :]

    return mutate


def drop() -> Mutation:
    """A mutation that removes the secure fragment entirely."""
    return lambda names, secure: []


def const(value) -> Mutation:
    """A mutation that replaces the fragment with a fixed value (lines, or an auth level)."""
    return lambda names, secure: value
