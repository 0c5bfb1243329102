"""What a bug class is, and the helpers its probes and narrow fixes are written with.

A :class:`BugClass` names an OWASP A01 pattern and its CWE ids, and lists :class:`Variant` s. A
variant says which code sites it breaks (and how: ``mutations`` map code-site keys to functions that
rewrite the secure fragment), which optional routes the app needs, which security probes prove the
bug, and which :class:`NarrowFix` es its probes must catch. Adding a bug class is one module defining
one ``BugClass`` and one line in the registry.

**Every exploit path the policy forbids is probed.** A bug is rarely reachable one way only: a raw
profile update accepts every account column, a shared permission helper answers for several routes
and several kinds of caller, a redirect check can be dodged with several spellings of "another site".
Probes try each of them, so a fix that closes only the path a naive author thought of fails a probe.
The *paths* are spelled out twice, on purpose: once as probe steps (what an attacker sends) and once
as narrow fixes (the reference fix weakened to leave exactly one path open), which the scenario check
runs to prove the first list covers the second.

Who may do what follows the policy's roles. The parts people play in probes (see
:data:`INTRUDERS`): ``attacker`` is a plain user of the victim's tenant, ``bystander`` a plain user of
another tenant, ``manager`` the manager of the victim's tenant (who may read, not modify) and
``rival_manager`` the manager of another tenant. Managers exist only in multi-tenant domains.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from envcore.factory.codegen.names import Names
from envcore.factory.codegen.parts import Mutation, py
from envcore.scenario.probes import (
    DENIED,
    BodyExcludes,
    BodyIncludes,
    Fact,
    JsonEquals,
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


INTRUDERS: dict[str, tuple[str, ...]] = {
    "read": ("attacker", "rival_manager"),
    "modify": ("attacker", "manager"),
    "admin": ("attacker", "manager"),
    "assign": ("attacker", "manager"),
}
"""Who must be refused, per action, one part per role the policy names: a plain user who does not own
the record, and the manager the policy leaves out (of another tenant for reads; of the same tenant for
changes, which the policy reserves to owners and administrators; any manager for admin functions).
Parts the scenario does not cast (managers in single-tenant domains) are left out. ``assign`` is
naming another owner for a new record, which the policy gives to nobody ("the owner is always the
caller")."""

MIRRORED = ("read", "target_update", "target_delete")
"""The victim's records exploits aim at, seeded again as the attacker's (purpose ``attacker_<name>``,
the ``read`` one with a share code too): an exploit tried the other way round, by the victim, aims at
the attacker's copy, so no two tries of different exploits touch the same record."""

ROLE_OF = {"attacker": "user", "bystander": "user", "manager": "manager", "rival_manager": "manager"}
WHO = {
    "attacker": "another user",
    "bystander": "a user of another tenant",
    "manager": "the manager of the owner's tenant",
    "rival_manager": "a manager of another tenant",
}


def plays(part: str, *, record: bool = True) -> Callable[[Names], str]:
    """A condition in the generated code: the caller (``user``) plays ``part``, towards ``record``
    when ``record`` (same or other tenant), else by role alone."""

    def condition(names: Names) -> str:
        text = f'{names.attr("user", "role")} == {py(ROLE_OF[part])}'
        if record and names.tenant:
            op = "==" if part in ("attacker", "manager") else "!="
            text += f" and {names.attr(names.rec, names.tenant)} {op} {names.attr('user', names.tenant)}"
        return text

    return condition


@dataclass(frozen=True)
class NarrowFix:
    """A fix that closes every exploit path of a variant but one: the reference fix weakened where a
    naive author stops (the ``role`` field refused, ``api_key`` let through). The scenario check
    renders the secure app with ``mutations`` and requires some probe to fail: a scenario whose probes
    pass a narrow fix never tries the path it leaves open."""

    name: str
    """Stable id, unique within the variant."""
    leaves_open: str
    """The path left open, in plain words (``"setting api_key on one's own profile"``)."""
    mutations: Mapping[str, Mutation]
    """Code-site key -> rewrite of the secure fragment (as a variant's flaws)."""
    needs: tuple[str, ...] = ()
    """What the path needs to exist: ``"tenant"`` (a multi-tenant domain), ``"field:<i>"`` (a resource
    with more than ``i`` fields) and optional routes (``"legacy_alias"``, ``"search"``...)."""

    def applies(self, spec: ScenarioSpec) -> bool:
        return all(_has(spec, need) for need in self.needs)


def _has(spec: ScenarioSpec, need: str) -> bool:
    if need == "tenant":
        return spec.tenanted
    if need.startswith("field:"):
        return len(spec.domain.resource.fields) > int(need.partition(":")[2])
    return need in spec.features


def needs_of(part: str) -> tuple[str, ...]:
    """Every part but the attacker exists only in multi-tenant domains."""
    return () if part == "attacker" else ("tenant",)


def let_through(action: str, build: Callable[[Callable[[Names], str]], Mapping[str, Mutation]], what: str,
                *, record: bool = True, needs: tuple[str, ...] = ()) -> tuple[NarrowFix, ...]:
    """One narrow fix per intruder of ``action``: ``build(condition)`` gives the mutations that let
    callers matching ``condition`` through; ``what`` says what they then do (``"read the record"``)."""
    return tuple(
        NarrowFix(f"lets_{part}", f"{what} as {WHO[part]}", build(plays(part, record=record)), needs_of(part) + needs)
        for part in INTRUDERS[action]
    )


def check_skipped_for(condition: Callable[[Names], str]) -> Mutation:
    """A route's ``if not can_x(user, record):`` check that callers matching ``condition`` skip."""

    def mutate(names: Names, secure: list[str]) -> list[str]:
        head, *rest = secure
        if not head.startswith("if not "):
            raise ValueError(f"not a permission check: {head!r}")
        return [f"if not ({condition(names)}) and {head[3:]}", *rest]

    return mutate


def helper_allows(condition: Callable[[Names], str]) -> Mutation:
    """A permission helper that answers True first for callers matching ``condition``."""
    return lambda names, secure: [f"if {condition(names)}:", "    return True", *secure]


def inline_check(action: str) -> Mutation:
    """A route's ``if not can_x(user, record):`` replaced by the policy written out in the route (the
    fix an author makes in the route they were told about, leaving the shared helper as it is)."""

    def mutate(names: Names, secure: list[str]) -> list[str]:
        role, rec, t = names.attr("user", "role"), names.rec, names.tenant
        allowed = f'{role} == "admin" or {names.attr(rec, names.owner)} == {names.attr("user", "id")}'
        if action == "read" and t:
            allowed += f' or {role} == "manager" and {names.attr(rec, t)} == {names.attr("user", t)}'
        return [f"if not ({allowed}):", *secure[1:]]

    return mutate


@dataclass(frozen=True)
class Variant:
    """One concrete way to get a bug class wrong."""

    name: str
    sites: tuple[str, ...]
    """Logical sites (keys of ``SITE_ROUTES``) the bug is reachable through."""
    mutations: Mapping[str, Mutation]
    """Code-site key -> rewrite of the secure fragment."""
    probes: Callable[[ProbeContext], list[Probe]]
    features: tuple[str, ...] = ()
    requires_tenant: bool = False
    subtle: bool = False
    """The vulnerable code contains a check that looks plausible."""
    description: str = ""
    site_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """For multi-site variants whose sites are separate code: site -> the code keys it owns. The
    scenario check uses it to build "fixed one site only" apps; shared-helper variants leave it empty."""
    narrow_fixes: tuple[NarrowFix, ...] = ()
    """Fixes that leave one forbidden path open each; the probes must fail every one that applies."""

    def narrow_fixes_for(self, spec: ScenarioSpec) -> tuple[NarrowFix, ...]:
        """The narrow fixes whose path exists in the app of ``spec``."""
        return tuple(fix for fix in self.narrow_fixes if fix.applies(spec))

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

    def intruders(self, action: str) -> tuple[str, ...]:
        """The parts (of :data:`INTRUDERS`) this scenario casts for ``action``."""
        return tuple(part for part in INTRUDERS[action] if part in self.spec.roles)

    def forged(self, record: RecordSpec, field_name: str, stem: str):
        """A value for ``field_name`` that differs from ``record``'s (what an intruder writes)."""
        kind = next(f.kind for f in self.spec.domain.resource.fields if f.name == field_name)
        original = record.values[field_name]
        if kind == "int":
            return original % 9 + 1
        if kind == "money":
            return round(original + 1.25, 2)
        if kind == "bool":
            return not original
        if kind == "date":
            return "2019-07-04"
        if kind == "email":
            return f"intruder.{self.token(stem)}@example.test"
        return f"Edited by intruder {self.token(stem)}"

    def read_steps(self, record: RecordSpec, *, legacy: bool = False, **request) -> list[ProbeStep]:
        """Every read intruder asks for ``record`` by id and gets neither its title nor its secrets."""
        leaks = denied(self.title(record), *self.secrets(record))
        path = self.detail(record, legacy=legacy)
        return [step(self.who(part), "GET", path, *leaks, **request) for part in self.intruders("read")]

    def edit_steps(self, record: RecordSpec, stem: str, **request) -> list[ProbeStep]:
        """The attacker tries to change each field of ``record`` on its own (a check that looks at one
        field only lets the others through), every other modify intruder tries the title, and the
        owner then finds every field as it was."""
        n = self.names
        attacker, *others = self.intruders("modify")
        steps = [
            step(self.who(attacker), "PATCH", self.detail(record), *denied(),
                 json_body={f: self.forged(record, f, stem)}, **request)
            for f in n.fields
        ]
        steps += [
            step(self.who(part), "PATCH", self.detail(record), *denied(),
                 json_body={n.title: self.forged(record, n.title, f"{stem}:{part}")}, **request)
            for part in others
        ]
        unchanged = [JsonEquals(path=f, value=record.values[f]) for f in n.fields]
        steps.append(step(self.who("victim"), "GET", self.detail(record), StatusIn(codes=(200,)), *unchanged))
        return steps

    def delete_steps(self, record: RecordSpec, **request) -> list[ProbeStep]:
        """Every modify intruder tries to delete ``record``; the owner still reads it afterwards."""
        steps = [step(self.who(part), "DELETE", self.detail(record), *denied(), **request)
                 for part in self.intruders("modify")]
        steps.append(step(self.who("victim"), "GET", self.detail(record), *ok(self.title(record))))
        return steps

    def admin_steps(self, method: str, path: str, *leaks: str, **request) -> list[ProbeStep]:
        """Every admin intruder calls an administrators' route and is refused."""
        return [step(self.who(part), method, path, *denied(*leaks), **request) for part in self.intruders("admin")]

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

    def legacy_read_security(self, record: RecordSpec) -> Probe:
        """The exploit through the v1 alias: other users read ``record`` there and get nothing."""
        return self.security(f"other users cannot read the victim's {self.names.s} through the v1 alias",
                             self.read_steps(record, legacy=True), "legacy")


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


def identity_override(names: Names, secure: list[str], after: list[str]) -> list[str]:
    """The identity code (code site ``auth.identity``) with ``after`` run on the user it found, in place
    of returning that user: ``after`` refers to the found user as ``user`` and returns the caller."""
    *head, tail = secure
    if tail == "return user":  # the dependency styles: the user is found, checked, then returned
        return head + after
    if not tail.startswith("return "):
        raise ValueError(f"the identity code does not end by returning the user: {tail!r}")
    return head + [f"user = {tail[len('return '):]}"] + after


def override_field(names: Names, field: str, value: str) -> list[str]:
    """Lines (inside an ``if``) that make the request's ``user`` claim ``field = value``: a changed
    copy of a dict row, or an ORM row taken out of the session first, so nothing is ever saved."""
    if names.orm:
        return ["    db.expunge(user)  # for this request only", f"    user.{field} = {value}"]
    return [f"    user = {{**user, {py(field)}: {value}}}"]


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
