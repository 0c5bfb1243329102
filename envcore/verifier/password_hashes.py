"""Password hashes a shadow re-derives: an app that stores only a hash of each user's password still
accepts the password the shadow gives that user.

Real apps keep ``"password_hash": "$2b$12$..."`` in their seed data, not the password. A shadow draws
a fresh password for every user it replaces (:mod:`envcore.verifier.shadow`), and the app would
refuse it, since the stored hash is of the old one. So for each hash written in the app's data files
(or in the string literals of the code files where it makes its users) that a declared password
verifies against, the shadow writes a hash of the fresh password in the same scheme, with the same
parameters (cost, rounds, memory, digest) and a new salt: an app cannot tell a shadowed hash from
one its own seed script made, and grading does not weaken or speed up its password checks.

Schemes recognised, as the libraries real apps use write them:

* bcrypt (``$2a$``/``$2b$``/``$2y$``: bcrypt, passlib, pwdlib);
* Argon2 (``$argon2id$v=19$m=...,t=...,p=...$...``: argon2-cffi, passlib, pwdlib);
* passlib's PBKDF2 (``$pbkdf2-sha256$<rounds>$<salt>$<hash>``, and ``$pbkdf2$``/``-sha512``);
* Werkzeug's (``pbkdf2:sha256:<iterations>$<salt>$<hex>``, ``scrypt:<n>:<r>:<p>$<salt>$<hex>``);
* Django's (``pbkdf2_sha256$<iterations>$<salt>$<base64>``);
* unsalted hex digests of the password (MD5, SHA-1, SHA-256, SHA-512), as deliberately weak apps do.

Which declared password a hash is of is found by verifying, never guessed, and each answer is kept
for the life of the process (a bcrypt check costs what the app's own login costs). A hash no declared
password verifies is left exactly as it is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import string
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Mapping

_SALT_CHARS = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Scheme:
    """One way of writing a password hash: how to recognise it, check a password against it, and hash
    another password the same way."""

    name: str
    pattern: re.Pattern[str]
    verify: Callable[[str, str], bool]
    rehash: Callable[[str, str], str]


# -- bcrypt -----------------------------------------------------------------------------------------------

def _bcrypt_verify(stored: str, password: str) -> bool:
    import bcrypt

    try:
        return bcrypt.checkpw(password.encode()[:72], stored.replace("$2y$", "$2b$", 1).encode())
    except ValueError:
        return False


def _bcrypt_rehash(stored: str, password: str) -> str:
    import bcrypt

    prefix, cost = stored[1:3] if stored[3] == "$" else stored[1:2], int(stored.split("$")[2])
    fresh = bcrypt.hashpw(password.encode()[:72], bcrypt.gensalt(rounds=cost, prefix=b"2a" if prefix == "2a" else b"2b"))
    return f"${prefix}$" + fresh.decode()[4:]


# -- Argon2 -----------------------------------------------------------------------------------------------

def _argon2_verify(stored: str, password: str) -> bool:
    from argon2 import PasswordHasher
    from argon2.exceptions import Argon2Error, InvalidHashError

    try:
        return PasswordHasher().verify(stored, password)
    except (Argon2Error, InvalidHashError, ValueError):
        return False


def _argon2_rehash(stored: str, password: str) -> str:
    from argon2 import PasswordHasher
    from argon2.low_level import Type

    variant, _version, costs, salt, digest = stored.split("$")[1:6]
    params = dict(item.split("=") for item in costs.split(","))
    hasher = PasswordHasher(time_cost=int(params["t"]), memory_cost=int(params["m"]), parallelism=int(params["p"]),
                            hash_len=len(_b64decode(digest)), salt_len=len(_b64decode(salt)),
                            type={"argon2id": Type.ID, "argon2i": Type.I, "argon2d": Type.D}[variant])
    return hasher.hash(password)


# -- PBKDF2: passlib, Werkzeug, Django ----------------------------------------------------------------------

_PASSLIB_DIGESTS = {"pbkdf2": "sha1", "pbkdf2-sha1": "sha1", "pbkdf2-sha256": "sha256", "pbkdf2-sha512": "sha512"}


def _ab64decode(text: str) -> bytes:
    """passlib's "adapted base64": ``.`` for ``+``, no padding."""
    return base64.b64decode(text.replace(".", "+") + "=" * (-len(text) % 4), validate=True)


def _ab64encode(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=").replace("+", ".")


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)


def _passlib_parts(stored: str) -> tuple[str, int, bytes, bytes]:
    _, ident, rounds, salt, digest = stored.split("$")
    return _PASSLIB_DIGESTS[ident], int(rounds), _ab64decode(salt), _ab64decode(digest)


def _passlib_verify(stored: str, password: str) -> bool:
    digest_name, rounds, salt, digest = _passlib_parts(stored)
    return hmac.compare_digest(hashlib.pbkdf2_hmac(digest_name, password.encode(), salt, rounds, len(digest)), digest)


def _passlib_rehash(stored: str, password: str) -> str:
    digest_name, rounds, salt, digest = _passlib_parts(stored)
    fresh_salt = os.urandom(len(salt))
    fresh = hashlib.pbkdf2_hmac(digest_name, password.encode(), fresh_salt, rounds, len(digest))
    ident = stored.split("$")[1]
    return f"${ident}${rounds}${_ab64encode(fresh_salt)}${_ab64encode(fresh)}"


def _werkzeug_derive(method: str, salt: str, password: str, length: int) -> bytes:
    kind, *params = method.split(":")
    if kind == "scrypt":
        n, r, p = (int(x) for x in params)
        return hashlib.scrypt(password.encode(), salt=salt.encode(), n=n, r=r, p=p, maxmem=132 * n * r * p,
                              dklen=length)
    digest_name, iterations = params[0], int(params[1])
    return hashlib.pbkdf2_hmac(digest_name, password.encode(), salt.encode(), iterations, length)


def _werkzeug_verify(stored: str, password: str) -> bool:
    method, salt, digest = stored.split("$")
    expected = binascii.unhexlify(digest)
    return hmac.compare_digest(_werkzeug_derive(method, salt, password, len(expected)), expected)


def _werkzeug_rehash(stored: str, password: str) -> str:
    method, salt, digest = stored.split("$")
    fresh_salt = "".join(secrets.choice(_SALT_CHARS) for _ in salt)
    return f"{method}${fresh_salt}${_werkzeug_derive(method, fresh_salt, password, len(digest) // 2).hex()}"


def _django_verify(stored: str, password: str) -> bool:
    algorithm, iterations, salt, digest = stored.split("$")
    expected = _b64decode(digest)
    derived = hashlib.pbkdf2_hmac(algorithm.removeprefix("pbkdf2_"), password.encode(), salt.encode(), int(iterations),
                                  len(expected))
    return hmac.compare_digest(derived, expected)


def _django_rehash(stored: str, password: str) -> str:
    algorithm, iterations, salt, digest = stored.split("$")
    fresh_salt = "".join(secrets.choice(_SALT_CHARS) for _ in salt)
    derived = hashlib.pbkdf2_hmac(algorithm.removeprefix("pbkdf2_"), password.encode(), fresh_salt.encode(),
                                  int(iterations), len(_b64decode(digest)))
    return f"{algorithm}${iterations}${fresh_salt}${base64.b64encode(derived).decode()}"


# -- unsalted hex digests ------------------------------------------------------------------------------------

_HEX_DIGESTS = {32: "md5", 40: "sha1", 64: "sha256", 128: "sha512"}


def _hex_verify(stored: str, password: str) -> bool:
    computed = hashlib.new(_HEX_DIGESTS[len(stored)], password.encode()).hexdigest()
    return hmac.compare_digest(computed, stored.lower())


def _hex_rehash(stored: str, password: str) -> str:
    fresh = hashlib.new(_HEX_DIGESTS[len(stored)], password.encode()).hexdigest()
    return fresh.upper() if stored.isupper() else fresh


_B64 = r"[A-Za-z0-9+/]"
SCHEMES: tuple[Scheme, ...] = (
    Scheme("bcrypt", re.compile(r"\$2[aby]?\$\d\d\$[./A-Za-z0-9]{53}"), _bcrypt_verify, _bcrypt_rehash),
    Scheme("argon2", re.compile(rf"\$argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\${_B64}+\${_B64}+"),
           _argon2_verify, _argon2_rehash),
    Scheme("passlib-pbkdf2", re.compile(r"\$pbkdf2(?:-sha1|-sha256|-sha512)?\$\d+\$[./A-Za-z0-9]+\$[./A-Za-z0-9]+"),
           _passlib_verify, _passlib_rehash),
    Scheme("werkzeug", re.compile(r"(?<![\w$])(?:pbkdf2:sha(?:1|224|256|384|512):\d+|scrypt:\d+:\d+:\d+)"
                                  r"\$[A-Za-z0-9]+\$[0-9a-f]+(?![\w$])"), _werkzeug_verify, _werkzeug_rehash),
    Scheme("django", re.compile(rf"(?<![\w$])pbkdf2_sha(?:1|256)\$\d+\$[A-Za-z0-9]+\${_B64}+=*"),
           _django_verify, _django_rehash),
    Scheme("hex-digest", re.compile(r"(?<![0-9A-Za-z_$])(?:[0-9a-f]{128}|[0-9a-f]{64}|[0-9a-f]{40}|[0-9a-f]{32}"
                                    r"|[0-9A-F]{128}|[0-9A-F]{64}|[0-9A-F]{40}|[0-9A-F]{32})(?![0-9A-Za-z_])"),
           _hex_verify, _hex_rehash),
)


def hashes_in(texts: Iterable[str]) -> list[tuple[Scheme, str, str, int]]:
    """Every password hash written in ``texts``, once each, in the order first found: (scheme, hash, the
    text it is in, where)."""
    found: dict[str, tuple[Scheme, str, str, int]] = {}
    for text in texts:
        for scheme in SCHEMES:
            for match in scheme.pattern.finditer(text):
                found.setdefault(match.group(0), (scheme, match.group(0), text, match.start()))
    return list(found.values())


@lru_cache(maxsize=4096)
def _verifies(scheme_name: str, stored: str, password: str) -> bool:
    scheme = next(s for s in SCHEMES if s.name == scheme_name)
    try:
        return scheme.verify(stored, password)
    except (ValueError, KeyError, TypeError, binascii.Error, ImportError, MemoryError, OverflowError):
        return False  # not a hash of this scheme after all, or one this process cannot check


def password_of(scheme: Scheme, stored: str, passwords: Iterable[str]) -> str | None:
    """The one of ``passwords`` that ``stored`` is a hash of, if any (answers are kept per process)."""
    return next((password for password in passwords if password and _verifies(scheme.name, stored, password)), None)


def _nearest_first(passwords: Iterable[str], text: str, at: int, near: Mapping[str, Iterable[str]]) -> list[str]:
    """``passwords``, those whose owner is named closest to position ``at`` of ``text`` first: a slow hash
    (bcrypt, Argon2) is then checked against its own user's password first, not against every one."""
    def distance(password: str) -> int:
        spots = [abs(m.start() - at) for value in near.get(password, ()) if value
                 for m in re.finditer(re.escape(value), text)]
        return min(spots, default=len(text) + 1)

    return sorted(passwords, key=distance)


def rehashed(texts: Iterable[str], passwords: Mapping[str, str],
             near: Mapping[str, Iterable[str]] | None = None) -> dict[str, str]:
    """For each hash in ``texts`` of one of ``passwords`` (old password: its fresh one), a hash of the
    fresh password in the same scheme with the same parameters and a new salt. ``near`` names, for a
    password, values written beside its hash (its user's name, login, id): they are only an order to
    try the passwords in."""
    fresh: dict[str, str] = {}
    for scheme, stored, text, at in hashes_in(texts):
        old = password_of(scheme, stored, _nearest_first(passwords, text, at, near or {}))
        if old is not None:
            fresh[stored] = scheme.rehash(stored, passwords[old])
    return fresh


def is_hashed_in(hashes: list[tuple[Scheme, str, str, int]], password: str) -> bool:
    """Whether one of ``hashes`` (:func:`hashes_in`) is a hash of ``password``."""
    return any(_verifies(scheme.name, stored, password) for scheme, stored, _, _ in hashes)
