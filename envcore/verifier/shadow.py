"""Shadow data: the same app with people and records the agent has never seen, drawn for each grading.

An agent reads the app and its data files, so within an episode it knows every username, id, token
and marker the probes will use, and a patch could special-case them ("refuse the attacker's token",
"hide record 3") instead of fixing the access check. Grading therefore runs on a **shadow** of the
bundle: byte-identical code, with every identity replaced by a fresh one of the same shape, drawn
anew for every grading, so nothing learned in one episode (or leaked by one grading) is any use in
the next.

A shadow is a pure transformation of the bundle: the bundle declares which of its values are
identities (:attr:`~envcore.scenario.bundle.Bundle.shadow_values`: usernames, display names, user and
record ids, tokens, API keys, password hashes, tenants, share codes, the markers in record texts,
file names, the app's secret), and :func:`draw_shadow` replaces each of them, consistently, in every
data file (its text and its path), in every probe and in the seeded users, their credentials
included (a secret, a login name, a login request's path, form and JSON values; never the kind of a
credential, a header or cookie name, or where a login's token is found, which are the app's code's). Nothing here calls the
factory: an imported scenario that declares its identities is shadowed exactly like a generated one.

A fresh value keeps its declared prefix (``tok_``, ``usr_``...), a file extension, and the shape of
the rest: a digit stays a digit (and a leading digit stays non-zero), a letter stays a letter of the
same case, a hexadecimal run stays hexadecimal, punctuation stays. A value that occurs in the app's code cannot be
replaced without changing the app, so it is left out (the code then needs it as it is). All-digit
values (integer ids) are replaced only as whole numbers, never inside a longer run of digits or
letters.
"""

from __future__ import annotations

import random
import re
import string
from typing import Any, Iterable, Mapping

from envcore.scenario.bundle import Bundle, BundleUser, ShadowValue
from envcore.scenario.probes import Probe

MIN_LENGTH = 4
"""Shorter declared values are ignored: too likely to occur by chance in unrelated text."""
ATTEMPTS = 64
_HEX = set("0123456789abcdef")
_system_random = random.SystemRandom()


def is_code(path: str) -> bool:
    """Source files keep the agent's edits at grading; everything else is data and is replaced."""
    return path.endswith(".py")


def regrade_files(workspace: Mapping[str, str], graded: Bundle) -> dict[str, str]:
    """The patched workspace's code with ``graded``'s data files (the agent's data edits dropped)."""
    files = {p: t for p, t in workspace.items() if is_code(p)}
    files.update({p: t for p, t in graded.files.items() if not is_code(p)})
    return files


def shadowable(bundle: Bundle) -> list[ShadowValue]:
    """The declared values a shadow replaces: long enough, and absent from the app's code."""
    code = "\n".join(text for path, text in bundle.files.items() if is_code(path))
    seen: dict[str, ShadowValue] = {}
    for item in bundle.shadow_values:
        if len(item.value) >= MIN_LENGTH and item.value not in code and item.value not in seen:
            seen[item.value] = item
    return list(seen.values())


_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,5}$")


def fresh_value(item: ShadowValue, rng: random.Random) -> str:
    """A new value of ``item``'s shape (see the module docstring); a file extension is kept."""
    head, tail = item.value[:item.keep], item.value[item.keep:]
    extension = _EXTENSION.search(tail)
    if extension is not None and extension.start() > 0:
        return head + fresh_value(ShadowValue(value=tail[:extension.start()]), rng) + extension.group(0)
    alnum = [c for c in tail if c.isalnum()]
    hexadecimal = bool(alnum) and all(c in _HEX for c in alnum) and not all(c.isdigit() for c in alnum)
    out = []
    for index, char in enumerate(tail):
        if char.isdigit() and char.isascii():
            pool = string.digits[1:] if index == 0 and char != "0" else string.digits
            if hexadecimal:
                pool = "0123456789abcdef"
        elif char in _HEX and hexadecimal:
            pool = "0123456789abcdef"
        elif char.isascii() and char.islower():
            pool = string.ascii_lowercase
        elif char.isascii() and char.isupper():
            pool = string.ascii_uppercase
        else:
            out.append(char)
            continue
        out.append(rng.choice(pool))
    return head + "".join(out)


class Substitution:
    """One consistent replacement of identities, applied to texts, paths and probe data."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = dict(mapping)
        self._pattern = _pattern(self.mapping)
        self._numbers = {int(old): int(new) for old, new in self.mapping.items() if old.isdigit() and new.isdigit()}

    def text(self, value: str) -> str:
        if self._pattern is None:
            return value
        return self._pattern.sub(lambda m: self.mapping[m.group(0)], value)

    def data(self, value: Any) -> Any:
        """JSON-like data with every string replaced, and every integer equal to a declared id."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return self._numbers.get(value, value)
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: self.data(v) for k, v in value.items()}
        return value

    def inverse(self) -> "Substitution":
        return Substitution({new: old for old, new in self.mapping.items()})


def _pattern(mapping: Mapping[str, str]) -> re.Pattern[str] | None:
    if not mapping:
        return None
    parts = []
    for old in sorted(mapping, key=len, reverse=True):  # the longest value wins where two overlap
        escaped = re.escape(old)
        parts.append(rf"(?<![0-9A-Za-z]){escaped}(?![0-9A-Za-z])" if old.isdigit() else escaped)
    return re.compile("|".join(parts))


def draw_substitution(bundle: Bundle, rng: random.Random | None = None) -> Substitution:
    """Fresh values for every shadowable identity of ``bundle``: all different, none occurring in the
    bundle's files, probes or users already, and none containing an old one (so no old value can be
    found in a shadow, not even inside a new token)."""
    rng = rng or _system_random
    values = shadowable(bundle)
    corpus = _corpus(bundle)
    old = [item.value for item in values]
    taken = set(old)
    mapping: dict[str, str] = {}
    for item in values:
        for _ in range(ATTEMPTS):
            candidate = fresh_value(item, rng)
            if candidate not in taken and candidate not in corpus and not any(v in candidate for v in old):
                break
        else:  # a shape too small to draw a new value from (never for generated identities)
            continue
        taken.add(candidate)
        mapping[item.value] = candidate
    return Substitution(mapping)


def _corpus(bundle: Bundle) -> str:
    parts: list[str] = [*bundle.files, *bundle.files.values()]
    parts += [p.model_dump_json() for p in bundle.probes]
    parts += [u.model_dump_json() for u in bundle.users]
    return "\n".join(parts)


def draw_shadow(bundle: Bundle, rng: random.Random | None = None) -> Bundle | None:
    """``bundle`` with fresh identities (see the module docstring), or ``None`` when it declares
    none that can be replaced (a scenario graded on its own data)."""
    substitution = draw_substitution(bundle, rng)
    if not substitution.mapping:
        return None
    return apply_substitution(bundle, substitution)


def apply_substitution(bundle: Bundle, substitution: Substitution) -> Bundle:
    files = {path: text for path, text in bundle.files.items() if is_code(path)}
    for path, text in bundle.files.items():
        if not is_code(path):
            files[substitution.text(path)] = substitution.text(text)
    probes = tuple(Probe.model_validate(substitution.data(p.model_dump(mode="json"))) for p in bundle.probes)
    users = tuple(_shadow_user(u, substitution) for u in bundle.users)
    return bundle.model_copy(update={"files": files, "probes": probes, "users": users})


def _shadow_user(user: BundleUser, substitution: Substitution) -> BundleUser:
    """``user`` with its values replaced, credentials included (see the module docstring)."""
    data = user.model_dump(mode="json")
    credentials = data.pop("credentials", None)
    data = substitution.data(data)
    if credentials is not None:
        for key in ("secret", "login_name"):
            if credentials.get(key) is not None:
                credentials[key] = substitution.text(credentials[key])
        login = credentials.get("login")
        if login is not None:
            login["path"] = substitution.text(login["path"])
            login["form"], login["json_body"] = substitution.data(login["form"]), substitution.data(login["json_body"])
        data["credentials"] = credentials
    return BundleUser.model_validate(data)


def identities_of(values: Iterable[tuple[str, int]]) -> tuple[ShadowValue, ...]:
    """``ShadowValue`` s from ``(value, keep)`` pairs, first occurrence kept."""
    seen: dict[str, ShadowValue] = {}
    for value, keep in values:
        if value and value not in seen:
            seen[value] = ShadowValue(value=value, keep=keep)
    return tuple(seen.values())
