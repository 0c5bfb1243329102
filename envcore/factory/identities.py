"""Per-seed identities and values: usernames, ids, tokens, record markers.

Everything here is drawn from one ``random.Random`` so the same seed gives the same people and
records, and different seeds give different ones. Text values carry a short random *marker* (hex),
which is how probes recognise a record in a response without relying on ids or positions.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from envcore.scenario.bundle import ShadowValue
from envcore.scenario.spec import FieldSpec, Role, ScenarioSpec, UserSpec
from envcore.verifier.shadow import identities_of

FIRST = (
    "alice", "bilal", "chen", "dana", "emeka", "farah", "goran", "hana", "ivan", "jun", "kofi", "lena",
    "marta", "nadia", "omar", "priya", "quinn", "rosa", "sven", "tariq", "uma", "viktor", "wen", "yara",
    "zoe", "arjun", "beatriz", "dmitri", "elif", "hugo", "ines", "kenji", "lucia", "mateo", "noor", "pablo",
)
LAST = (
    "okafor", "lindqvist", "haddad", "moreau", "tanaka", "silva", "kowalski", "nguyen", "berg", "adeyemi",
    "rossi", "fischer", "patel", "novak", "garcia", "ivanova", "kim", "murphy", "dubois", "schmidt",
)


class Draw:
    """A seeded source of identities and values. All randomness of one scenario goes through here."""

    def __init__(self, rng: random.Random, id_type: str) -> None:
        self.rng = rng
        self.id_type = id_type
        self._used: set[str] = set()

    def hex(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def unique(self, make) -> str:
        for _ in range(1000):
            value = make()
            if value not in self._used:
                self._used.add(value)
                return value
        raise RuntimeError("identity space exhausted")  # pragma: no cover - 1000 tries of 16**6

    def marker(self) -> str:
        return self.unique(lambda: self.hex(6))

    def object_id(self, prefix: str) -> str:
        if self.id_type == "int":
            return self.unique(lambda: str(self.rng.randint(1000, 99999)))
        return self.unique(lambda: f"{prefix}_{self.hex(8)}")

    def user(self, role: Role, tenant: str | None) -> UserSpec:
        first = self.rng.choice(FIRST)
        last = self.rng.choice(LAST)
        username = self.unique(lambda: f"{first}.{last}{self.rng.randint(2, 99)}")
        token = self.unique(lambda: f"tok_{self.hex(24)}")
        secret = self.hex(10)
        return UserSpec(
            username=username,
            display_name=f"{first.title()} {last.title()}",
            user_id=self.object_id("usr"),
            role=role,
            tenant=tenant,
            token=token,
            email=f"{username}@example.test",
            password_hash="pbkdf2$" + hashlib.sha256(secret.encode()).hexdigest()[:32],
            api_key=f"key_{self.hex(20)}",
        )

    def value(self, field: FieldSpec) -> Any:
        """A value for ``field``. Text values end with a unique marker so leaks are recognisable."""
        if field.kind == "int":
            return self.rng.randint(1, 9)
        if field.kind == "money":
            return round(self.rng.uniform(10, 9000), 2)
        if field.kind == "bool":
            return self.rng.random() < 0.5
        if field.kind == "date":
            return f"2026-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"
        if field.kind == "email":
            return f"{self.rng.choice(FIRST)}.{self.marker()}@example.test"
        words = field.words or ("item",)
        return f"{self.rng.choice(words)} {self.marker()}"


_MARKER = re.compile(r"(?<![0-9a-z])[0-9a-f]{6}(?![0-9a-z])")


def shadow_values(spec: ScenarioSpec) -> tuple[ShadowValue, ...]:
    """Every value of ``spec`` drawn per seed, with the prefix a fresh one keeps: what grading
    replaces in a shadow (see :mod:`envcore.verifier.shadow`). Roles, field names and the words
    of record texts are the app's vocabulary, not identities, and stay."""
    pairs: list[tuple[str, int]] = []
    for user in spec.users:
        pairs += [(user.username, 0), (user.display_name, 0), (user.user_id, _prefix(user.user_id)),
                  (user.token, _prefix(user.token)), (user.api_key, _prefix(user.api_key)),
                  (user.password_hash, _prefix(user.password_hash))]
        if user.tenant:
            pairs.append((user.tenant, 0))
    for record in spec.records:
        pairs.append((record.record_id, _prefix(record.record_id)))
        if record.share_code:
            pairs.append((record.share_code, _prefix(record.share_code)))
        for value in record.values.values():
            if isinstance(value, str):
                pairs += [(marker, 0) for marker in _MARKER.findall(value)]
    for file in spec.files:
        stem = file.name.rsplit(".", 1)[0]  # report-4bdf.txt: the drawn part is 4bdf
        pairs.append((stem, stem.index("-") + 1 if "-" in stem else 0))
        pairs += [(marker, 0) for marker in _MARKER.findall(file.content)]
    if spec.app_secret:
        pairs.append((spec.app_secret, _prefix(spec.app_secret)))
    # sorted, so the declaration does not depend on the order of a record's fields (a cache stores
    # bundles with sorted keys, and the check compiles the stored spec again)
    return tuple(sorted(identities_of(pairs), key=lambda item: item.value))


def _prefix(value: str) -> int:
    """How much of a drawn value is a fixed prefix: up to the first ``_`` or ``$`` (``tok_``, ``pbkdf2$``)."""
    cut = min((i for i in (value.find("_"), value.find("$")) if i >= 0), default=-1)
    return cut + 1
