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

An app that makes its users in its code (a port of a real app, say) declares where
(:class:`~envcore.scenario.bundle.ShadowInCode`): in those files the values are replaced inside string
literals, on the lines a patch left as they were (a line the patch wrote keeps what it says, so a
patch naming a user it read cannot follow the shadow), and values shorter than four characters
(``"1"``, ``"bob"``) are replaced too, as whole words only. Where the app signs its bearer tokens
itself with a declared HS256 secret, a user's token is signed anew with its claims shadowed.

A fresh value keeps its declared prefix (``tok_``, ``usr_``...), a file extension, and the shape of
the rest: a digit stays a digit (and a leading digit stays non-zero), a letter stays a letter of the
same case, a hexadecimal run stays hexadecimal, punctuation stays. A value that occurs in the app's code cannot be
replaced without changing the app, so it is left out (the code then needs it as it is). All-digit
values (integer ids) are replaced only as whole numbers, never inside a longer run of digits or
letters.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import hmac
import io
import json
import random
import re
import string
import tokenize
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


def shadowed_code(bundle: Bundle) -> tuple[str, ...]:
    """The code files where ``bundle`` says its app makes its users (:class:`ShadowInCode`)."""
    return bundle.shadow_in_code.files if bundle.shadow_in_code is not None else ()


def regrade_files(workspace: Mapping[str, str], graded: Bundle, original: Bundle | None = None) -> dict[str, str]:
    """The patched workspace's code with ``graded``'s data files (the agent's data edits dropped). In
    the code files where the app makes its users, the lines the patch left as in ``original`` (the
    bundle ``graded`` shadows) are ``graded``'s."""
    files = {p: t for p, t in workspace.items() if is_code(p)}
    files.update({p: t for p, t in graded.files.items() if not is_code(p)})
    for path in shadowed_code(graded):
        if path not in files or path not in graded.files:
            continue
        if original is None:
            raise ValueError("a bundle that keeps users in its code needs the bundle it shadows to regrade a patch")
        files[path] = _unchanged_lines_shadowed(original.files.get(path, ""), files[path], graded.files[path])
    return files


def _unchanged_lines_shadowed(before: str, patched: str, shadowed: str) -> str:
    """``patched`` with each line it kept from ``before`` taken from ``shadowed`` (``before`` with
    its literals shadowed, line for line)."""
    old, new, shadow = before.splitlines(keepends=True), patched.splitlines(keepends=True), shadowed.splitlines(keepends=True)
    if len(shadow) != len(old):
        return patched
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        out += shadow[i1:i2] if tag == "equal" else new[j1:j2]
    return "".join(out)


def substitute_literals(source: str, substitution: "Substitution") -> str:
    """``source`` with ``substitution`` applied inside its string literals only (code, names and
    comments as they are); the source as it is when it does not tokenize."""
    if substitution._pattern is None:
        return source
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING:
                begin = starts[token.start[0] - 1] + token.start[1]
                end = starts[token.end[0] - 1] + token.end[1]
                replaced = substitution.text(token.string)
                if replaced != token.string:
                    edits.append((begin, end, replaced))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return source
    for begin, end, text in reversed(edits):
        source = source[:begin] + text + source[end:]
    return source


def shadowable(bundle: Bundle) -> list[ShadowValue]:
    """The declared values a shadow replaces: absent from the app's code (but the files where it makes
    its users), and at least :data:`MIN_LENGTH` long unless the bundle says where its code makes its
    users (then matched as whole words)."""
    declared = set(shadowed_code(bundle))
    fixed = {path: text for path, text in bundle.files.items() if is_code(path) and path not in declared}
    code = "\n".join(fixed.values())
    literals: tuple[set[str], set[str]] | None = None
    seen: dict[str, ShadowValue] = {}
    for item in bundle.shadow_values:
        value = item.value
        if not value or value in seen or (len(value) < MIN_LENGTH and not declared):
            continue
        if len(value) < MIN_LENGTH:
            # too short to look for in text: a whole string of the code where the users are made
            # (else the app does not make it, a database does), and of no other code
            if literals is None:
                literals = (_string_literals(t for p, t in bundle.files.items() if p in declared),
                            _string_literals(fixed.values()))
            if value not in literals[0] or value in literals[1]:
                continue
        elif value in code:
            continue
        seen[value] = item
    return list(seen.values())


def _by_word(value: str) -> bool:
    """Whether ``value`` is matched only as a whole word (never inside a longer run of letters or digits)."""
    return value.isdigit() or len(value) < MIN_LENGTH


def _string_literals(sources: Iterable[str]) -> set[str]:
    """The values of the plain string literals in ``sources`` (files that do not tokenize: none)."""
    out: set[str] = set()
    for source in sources:
        try:
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.STRING and token.string[:1] in "'\"":
                    out.add(token.string.strip("'\""))
        except (tokenize.TokenError, SyntaxError, IndentationError):
            continue
    return out


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
        parts.append(rf"(?<![0-9A-Za-z]){escaped}(?![0-9A-Za-z])" if _by_word(old) else escaped)
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
        # a short value (kept in code) gets a longer one of its kind: one digit has nine others
        shape = item if len(item.value) >= MIN_LENGTH else ShadowValue(value=(item.value * 6)[:6])
        for _ in range(ATTEMPTS):
            candidate = fresh_value(shape, rng)
            if candidate not in taken and candidate not in corpus and not any(v in candidate for v in old):
                break
        else:  # a shape too small to draw a new value from (never for generated identities)
            continue
        taken.add(candidate)
        mapping[item.value] = candidate
    secret = bundle.shadow_in_code.jwt_secret if bundle.shadow_in_code is not None else None
    if secret and mapping:
        claims = Substitution(mapping)
        for token in sorted(set(_JWT.findall(corpus))):
            shadowed = shadow_jwt(token, secret, claims)
            if shadowed != token:
                mapping[token] = shadowed
    return Substitution(mapping)


_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
"""A JSON Web Token in compact form (its header and claims are JSON objects, hence ``eyJ``)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def shadow_jwt(token: str, secret: str, claims: "Substitution") -> str:
    """``token`` with its claims passed through ``claims``: signed anew when ``secret`` had signed it
    (HS256), its own signature kept otherwise (a forged token stays forged), unchanged when it is no
    JWT or names nobody shadowed."""
    parts = token.split(".")
    if len(parts) != 3:
        return token
    head, body, signature = parts
    try:
        header, payload = json.loads(_unb64(head)), json.loads(_unb64(body))
        given = _unb64(signature)
    except (ValueError, UnicodeError):
        return token
    fresh_claims = claims.data(payload)
    if fresh_claims == payload:
        return token
    fresh = _b64(json.dumps(fresh_claims, separators=(",", ":")).encode())
    if isinstance(header, dict) and header.get("alg") == "HS256":
        expected = hmac.new(secret.encode(), f"{head}.{body}".encode("ascii"), hashlib.sha256).digest()
        if hmac.compare_digest(expected, given):
            signature = _b64(hmac.new(secret.encode(), f"{head}.{fresh}".encode("ascii"), hashlib.sha256).digest())
    return f"{head}.{fresh}.{signature}"


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
    declared = set(shadowed_code(bundle))
    files = {path: substitute_literals(text, substitution) if path in declared else text
             for path, text in bundle.files.items() if is_code(path)}
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
