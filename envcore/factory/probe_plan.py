"""Regression and trap probes for a generated app: what legitimate use looks like.

Security probes come from the bug-class variant; this module writes the pass-to-pass side: the owner
can still list, read, create, edit and delete; administrators keep access; every optional route
still serves its legitimate caller. A probe becomes a *trap* probe when the spec plants the matching
trap, so reports can say which lazy fix an agent fell for. Every route a bug is reachable through is
covered by at least one probe here, which is what makes deny-the-route and delete-the-route fixes
fail the scenario check.

Who acts matters as much as what is done. If legitimate use were only ever the visible probes'
users (the victim, an administrator) and every exploit came from one attacker, a patch could refuse
everyone the visible probes never act as, found by their position in the data, and score a full fix
without fixing anything (the scenario check's canaries, :mod:`envcore.factory.canaries`, are such
patches). So the hidden plan also has:

* :func:`unseen_users_probes`: legitimate use by the attacker and by users no visible probe acts
  as, reads and writes both (each reads and edits their own record; the attacker creates one);
* :func:`second_intruder_probes`: every exploit the attacker tries, tried again by a second plain
  user of the same standing (the attacker's and that user's identities swapped, records included);
* :func:`victim_intruder_probes`: every exploit the attacker tries, tried again by the victim, a
  user the visible probes *do* act as, against the attacker's own record, so that the exploits
  come from a user the agent sees as well as from users it does not.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from envcore.factory.bugs.base import MIRRORED, ProbeContext, ok, step
from envcore.factory.codegen.names import a
from envcore.scenario.probes import BodyExcludes, HeaderEquals, JsonEquals, Probe, ProbeKind, StatusIn
from envcore.verifier.shadow import Substitution

REG = ProbeKind.REGRESSION


def legitimate_use_probes(ctx: ProbeContext) -> list[Probe]:
    spec, n = ctx.spec, ctx.names
    traps = {t.kind for t in spec.traps}
    victim, admin = ctx.who("victim"), ctx.who("admin")
    read = ctx.record("read")
    title = ctx.title(read)
    out: list[Probe] = []

    def reg(title_: str, steps, visible: bool = False) -> None:
        out.append(ctx.probe(REG, "reg", title_, steps, visible=visible))

    def maybe_trap(trap: str, title_: str, steps) -> None:
        if trap in traps:
            out.append(ctx.probe(ProbeKind.TRAP, "trap", title_, steps, trap=trap))
        else:
            reg(title_, steps)

    reg("the status endpoint answers anonymous callers", [step(None, "GET", "/api/status", *ok())], visible=True)
    reg(f"anonymous callers cannot list {n.p}", [step(None, "GET", f"/api/{n.p}", StatusIn(codes=(401,)))], visible=True)
    reg("a user can see their own account", [step(victim, "GET", "/api/me", *ok(), JsonEquals(path="username", value=victim))],
        visible=True)
    reg(f"the owner sees their {n.p} in the listing", [step(victim, "GET", f"/api/{n.p}", *ok(title))], visible=True)
    reg(f"the owner can read their {n.s}, sensitive fields included",
        [step(victim, "GET", ctx.detail(read), *ok(title, *ctx.secrets(read)))], visible=True)
    reg("administrators can list accounts", [step(admin, "GET", "/api/admin/users", *ok(victim))], visible=True)

    created = f"Fresh {n.s} {ctx.token('create')}"
    reg(f"a user can create {a(n.s)}", [
        step(victim, "POST", f"/api/{n.p}", StatusIn(codes=(200, 201)), JsonEquals(path=n.title, value=created),
             json_body={n.title: created}),
        step(victim, "GET", f"/api/{n.p}", *ok(created)),
    ])
    edit = ctx.record("own_edit")
    renamed = f"Renamed {ctx.token('rename')}"
    reg(f"the owner can edit their {n.s}", [
        step(victim, "PATCH", ctx.detail(edit), *ok(), json_body={n.title: renamed}),
        step(victim, "GET", ctx.detail(edit), *ok(renamed)),
    ])
    gone = ctx.record("own_remove")
    reg(f"the owner can delete their {n.s}", [
        step(victim, "DELETE", ctx.detail(gone), *ok(codes=(200, 204))),
        step(victim, "GET", ctx.detail(gone), StatusIn(codes=(404,))),
    ])

    target = edit  # the owner renamed it above; an administrator renames it again
    moderated = f"Moderated {ctx.token('admin')}"
    maybe_trap("admin_access", f"administrators can read any {n.s}, sensitive fields included",
               [step(admin, "GET", ctx.detail(read), *ok(title, *ctx.secrets(read)))])
    maybe_trap("admin_access", f"administrators see every user's {n.p} in the listing",
               [step(admin, "GET", f"/api/{n.p}", *ok(title))])
    maybe_trap("admin_access", f"administrators can edit any {n.s}", [
        step(admin, "PATCH", ctx.detail(target), *ok(), json_body={n.title: moderated}),
        step(victim, "GET", ctx.detail(target), *ok(moderated)),
    ])

    if spec.tenanted:
        manager = ctx.who("manager")
        reg(f"a manager can read {n.p} of their own {n.tenant[:-3]} without sensitive fields",
            [step(manager, "GET", ctx.detail(read), *ok(title), BodyExcludes(texts=ctx.secrets(read)))])
        reg(f"a manager sees their {n.tenant[:-3]}'s {n.p} in the listing",
            [step(manager, "GET", f"/api/{n.p}", *ok(title))])

    features = set(spec.features)
    if "search" in features:
        reg(f"the owner can search their {n.p}",
            [step(victim, "GET", f"/api/{n.p}/search", *ok(title), query={"q": title.split()[-1]})])
    if "legacy_alias" in features:
        maybe_trap("legacy_alias", f"the v1 alias still serves the owner's {n.s}",
                   [step(victim, "GET", ctx.detail(read, legacy=True), *ok(title))])
    if "shared" in features:
        shared = read  # the record the owner shared
        maybe_trap("public_route", "a share link works without signing in",
                   [step(None, "GET", f"/api/shared/{shared.share_code}", *ok(ctx.title(shared)))])
    if "profile" in features:
        name = f"Display {ctx.token('profile')}"
        reg("a user can change their display name", [
            step(victim, "PATCH", "/api/me", *ok(), json_body={"display_name": name}),
            step(victim, "GET", "/api/me", *ok(), JsonEquals(path="display_name", value=name)),
        ])
    if "directory" in features:
        colleague = ctx.user("attacker")
        reg("the people directory lists colleagues", [step(victim, "GET", "/api/people", *ok(colleague.username))])
        reg("a colleague's profile shows their name",
            [step(victim, "GET", f"/api/people/{colleague.user_id}", *ok(colleague.display_name))])
    if "files" in features:
        own = next(f for f in spec.files if f.owner == victim)
        reg("a user can download their own file",
            [step(victim, "GET", "/api/files", *ok(own.content.strip()), query={"name": own.name})])
    if "redirect" in features:
        reg("logout redirects to a page of this site", [
            step(None, "GET", "/auth/logout", StatusIn(codes=(302, 303, 307)),
                 HeaderEquals(name="location", value="/dashboard"), query={"next": "/dashboard"})
        ])
    if "export" in features:
        reg(f"administrators can export every {n.s}", [step(admin, "GET", f"/api/admin/{n.p}/export", *ok(title))])
    if "report" in features:
        reg("administrators can view and regenerate the usage report", [
            step(admin, "GET", "/api/admin/report", *ok()),
            step(admin, "POST", "/api/admin/report", *ok(), JsonEquals(path="regenerated", value=True)),
        ])
    if "backup" in features:
        reg("the backup job (an administrator) can pull the backup",
            [step(admin, "GET", "/api/internal/backup", *ok(victim))])
    return out


UNSEEN = ("attacker", "climber", "bystander")
"""Plain users no visible probe acts as: the attacker, a colleague of the same tenant, and a user of
another tenant where the domain has tenants."""
SECOND_INTRUDER = ("attacker", "climber")
"""The two plain users of the same standing whose identities :func:`second_intruder_probes` swaps."""


def unseen_users_probes(ctx: ProbeContext) -> list[Probe]:
    """Hidden legitimate use by users the visible probes never act as (module docstring)."""
    n = ctx.names
    out: list[Probe] = []

    def reg(title_: str, steps) -> None:
        out.append(ctx.probe(REG, "reg", title_, steps))

    parts = [part for part in UNSEEN if part in ctx.spec.roles]
    label = {"attacker": "another user", "climber": "a colleague", "bystander": "a user elsewhere"}
    # reads first, then writes that put back what they changed: in a run that shares one app between
    # probes (the scenario check's), no later probe finds a record other than as seeded
    for part in parts:
        own = ctx.record(f"{part}_own")
        reg(f"{label[part]} can read their own {n.s}, sensitive fields included",
            [step(ctx.who(part), "GET", ctx.detail(own), *ok(ctx.title(own), *ctx.secrets(own)))])
    attacker = ctx.who("attacker")
    own = ctx.record("attacker_own")
    reg(f"another user sees their own {n.p} in the listing", [step(attacker, "GET", f"/api/{n.p}", *ok(ctx.title(own)))])
    reg("another user can see their own account",
        [step(attacker, "GET", "/api/me", *ok(), JsonEquals(path="username", value=attacker))])
    for part in parts:
        who, mine = ctx.who(part), ctx.record(f"{part}_own")
        renamed = f"Kept {ctx.token(f'{part}:rename')}"
        reg(f"{label[part]} can edit their own {n.s}", [
            step(who, "PATCH", ctx.detail(mine), *ok(), json_body={n.title: renamed}),
            step(who, "GET", ctx.detail(mine), *ok(renamed)),
            step(who, "PATCH", ctx.detail(mine), *ok(), json_body={n.title: mine.values[n.title]}),
        ])
    created = f"Own {n.s} {ctx.token('attacker:create')}"
    reg(f"another user can create {a(n.s)}", [
        step(attacker, "POST", f"/api/{n.p}", StatusIn(codes=(200, 201)), JsonEquals(path=n.title, value=created),
             json_body={n.title: created}),
        step(attacker, "GET", f"/api/{n.p}", *ok(created)),
    ])
    return out


_MARKER = re.compile(r"[0-9a-f]{6,}")


def identity_swap(ctx: ProbeContext, first: str, second: str, records: tuple[str, str] | None = None) -> Substitution:
    """The two users' identities exchanged, one record of each too (by default their ``*_own``
    records; ``records`` names two other purposes) and their upload files: usernames, names, emails
    and secrets always; an id only where no other user or record has the same one (an id written as
    a number could otherwise be another's)."""
    spec = ctx.spec
    one, two = ctx.user(first), ctx.user(second)
    ids = [u.user_id for u in spec.users] + [r.record_id for r in spec.records]
    mapping: dict[str, str] = {}

    def pair(x: str, y: str, *, is_id: bool = False) -> None:
        if not x or not y or x == y or x in mapping or y in mapping \
                or (is_id and (ids.count(x) > 1 or ids.count(y) > 1)):
            return
        mapping[x], mapping[y] = y, x

    for field_name in ("username", "display_name", "email", "token", "api_key", "password_hash"):
        pair(str(getattr(one, field_name)), str(getattr(two, field_name)))
    pair(one.user_id, two.user_id, is_id=True)
    mine_purpose, theirs_purpose = records or (f"{first}_own", f"{second}_own")
    mine, theirs = ctx.record(mine_purpose), ctx.record(theirs_purpose)
    pair(mine.record_id, theirs.record_id, is_id=True)
    for key, value in mine.values.items():
        other = theirs.values.get(key)
        if isinstance(value, str) and isinstance(other, str):
            pair(value, other)
            # a value's marker on its own too (a search for a record's title asks for its marker)
            ours, yours = value.rsplit(" ", 1)[-1], other.rsplit(" ", 1)[-1]
            if _MARKER.fullmatch(ours) and _MARKER.fullmatch(yours):
                pair(ours, yours)
    files = {f.owner: f for f in spec.files}
    if one.username in files and two.username in files:
        mine_file, theirs_file = files[one.username], files[two.username]
        pair(mine_file.name, theirs_file.name)
        pair(mine_file.content.strip(), theirs_file.content.strip())
    return Substitution(mapping)


def second_intruder_probes(ctx: ProbeContext, security: list[Probe]) -> list[Probe]:
    """Each security probe in which one of :data:`SECOND_INTRUDER` acts, again with the two swapped."""
    if not all(part in ctx.spec.roles for part in SECOND_INTRUDER):
        return []
    swap = identity_swap(ctx, *SECOND_INTRUDER)
    acting = {ctx.who(part) for part in SECOND_INTRUDER}
    out = []
    for probe in security:
        if probe.kind != ProbeKind.SECURITY or not any(s.actor in acting for s in probe.steps):
            continue
        data = swap.data(probe.model_dump(mode="json"))
        data.update(id=ctx.next_id("sec"), title=f"{probe.title} (tried by a second user)", repeats=probe.id)
        out.append(Probe.model_validate(data))
    return out


VICTIM_OWN = "own_edit"
"""The victim's record that plays "their own" when an exploit names none of the victim's records."""


def victim_intruder_probes(ctx: ProbeContext, security: list[Probe]) -> list[Probe]:
    """Each exploit of the attacker, tried again the other way round: the victim (a user the visible
    probes act as) against the attacker's copy of the record it aims at (:data:`MIRRORED`; the
    attacker's own record where it aims at none of those), the two identities swapped together with
    the two records. Without it every exploit would
    come from users the visible probes never name, and a patch that closed the hole for those users
    alone (``refuse_unseen_on_sites`` in the canary panel) would pass as a fix."""
    if not all(part in ctx.spec.roles for part in ("victim", "attacker")):
        return []
    attacker, victim = ctx.who("attacker"), ctx.who("victim")
    victims_records = [r for r in ctx.spec.records if r.owner == victim]
    out = []
    for probe in security:
        if probe.kind != ProbeKind.SECURITY or not any(s.actor == attacker for s in probe.steps):
            continue
        data = probe.model_dump(mode="json")
        text = json.dumps(data)
        aimed = [r for r in victims_records if r.record_id in text
                 or any(isinstance(v, str) and len(v) > 3 and v in text for v in r.values.values())]
        if len(aimed) > 1:  # an exploit across several of the victim's records has no mirror image
            continue
        target = ctx.record(aimed[0].purpose if aimed else VICTIM_OWN)
        mirror = ctx.record(f"attacker_{target.purpose}" if target.purpose in MIRRORED else "attacker_own")
        swapped = identity_swap(ctx, "attacker", "victim", records=(mirror.purpose, target.purpose)).data(data)
        _swap_typed_values(swapped, target, mirror)
        swapped = _fresh_tokens(ctx, swapped, stem=f"reversed:{probe.id}")
        swapped.update(id=ctx.next_id("sec"), title=f"{probe.title} (tried the other way round)", repeats=probe.id)
        out.append(Probe.model_validate(swapped))
    return out


def _swap_typed_values(probe: dict[str, Any], one: Any, two: Any) -> None:
    """The two records' numbers, booleans and dates where a check expects them by field (a
    substitution swaps text only: the same number could be anything else)."""
    for sent in probe["steps"]:
        for fact in sent.get("expect", ()):
            if fact.get("kind") != "json_equals" or isinstance(fact.get("value"), str):
                continue
            field_name = str(fact.get("path", "")).rsplit(".", 1)[-1]
            if field_name in one.values and fact["value"] == one.values[field_name]:
                fact["value"] = two.values.get(field_name, fact["value"])
            elif field_name in two.values and fact["value"] == two.values[field_name]:
                fact["value"] = one.values.get(field_name, fact["value"])


_TOKEN = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{8}(?![0-9A-Za-z_])")


def _fresh_tokens(ctx: ProbeContext, probe: dict[str, Any], *, stem: str) -> dict[str, Any]:
    """``probe`` with every value it writes made anew (the seed's 8-hex tokens): in a run that shares
    one app between probes (the scenario check's), what the first try wrote is not what the second
    looks for."""
    text = json.dumps(probe)
    fresh = {old: ctx.token(f"{stem}:{old}") for old in sorted(set(_TOKEN.findall(text)))}
    return json.loads(_TOKEN.sub(lambda m: fresh[m.group(0)], text)) if fresh else probe


class PlannedProbes(NamedTuple):
    """A scenario's probes by where they come from, in the order the bundle lists them."""

    legitimate: list[Probe]
    """:func:`legitimate_use_probes`."""
    unseen: list[Probe]
    """:func:`unseen_users_probes`."""
    security: list[Probe]
    """The variant's own probes (its exploits, and regression probes for spellings its check refuses)."""
    second: list[Probe]
    """:func:`second_intruder_probes`."""
    reversed: list[Probe]
    """:func:`victim_intruder_probes`."""

    def all(self) -> list[Probe]:
        return self.legitimate + self.unseen + self.security + self.second + self.reversed


def plan_probes(ctx: ProbeContext, variant: Any) -> PlannedProbes:
    """Every probe of a scenario. The variant's probes are written first, so its ids come first (the
    order caches v4 and v5 were built in: changing it changes every scenario's hash)."""
    security = variant.probes(ctx)
    return PlannedProbes(legitimate_use_probes(ctx), unseen_users_probes(ctx), security,
                         second_intruder_probes(ctx, security), victim_intruder_probes(ctx, security))
