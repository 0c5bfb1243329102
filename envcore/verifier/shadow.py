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

An app that keeps only a hash of a user's password (or key) still accepts the fresh one: a hash that a
replaced secret verifies against, in a file the shadow rewrites, is replaced by a hash of the fresh
secret in the same scheme, with the same parameters (:mod:`envcore.verifier.password_hashes`).

A value is replaced in every encoding it travels in: as written, percent-encoded (a login path, a
query, a link in a data file; upper- or lower-case escapes, ``+`` or ``%20`` for a space),
JSON-escaped (``\\u00e9``, ``\\/``), and inside the base64 of an ``Authorization: Basic`` header,
in the probes, the users' credentials and the data files alike.

What a patch changed is graded as it made it (:mod:`envcore.scenario.patch_scope`, the one
definition of what a patch may change): :func:`regrade_files` gives the patched app on a shadow's
data, the shadow's lines wherever the patch left the original's, the patch's own lines wherever it
wrote some.

A declared value the shadow cannot replace is left as it is, and :func:`shadow_coverage` says which
and why (it occurs in code grading cannot change, it is too short to look for, it has nothing to
replace), so the import can warn about each one instead of dropping it silently.

A fresh value keeps its declared prefix (``tok_``, ``usr_``...), a file's extension (``.pdf``; a dotted
name's last part, ``bob.marsh``, is no extension and is replaced), and the shape of
the rest: a digit stays a digit (and a leading digit stays non-zero), a letter stays a letter of the
same case, a hexadecimal run stays hexadecimal, punctuation stays. A value that occurs in the app's
code (in any of its encodings) cannot be replaced without changing the app, so it is left out (the
code then needs it as it is). All-digit values (integer ids) are replaced only as whole numbers, never inside a longer run of digits or
letters.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import io
import json
import random
import re
import string
import tokenize
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import quote, quote_plus

from envcore.scenario.bundle import Bundle, BundleUser, ShadowValue
from envcore.scenario.patch_scope import graded_files, is_code
from envcore.scenario.probes import Probe
from envcore.verifier.password_hashes import rehashed

MIN_LENGTH = 4
"""Shorter declared values are ignored: too likely to occur by chance in unrelated text."""
ATTEMPTS = 64
_HEX = set("0123456789abcdef")
_system_random = random.SystemRandom()


def shadowed_code(bundle: Bundle) -> tuple[str, ...]:
    """The code files where ``bundle`` says its app makes its users (:class:`ShadowInCode`)."""
    return bundle.shadow_in_code.files if bundle.shadow_in_code is not None else ()


def shadow_paths(original: Bundle, graded: Bundle) -> dict[str, str]:
    """Each file path of ``original`` with its path in ``graded``, a shadow of it (or ``original``
    itself). :func:`apply_substitution` keeps the files in the bundle's order, path for path, and
    renames only data files, which is how a shadow's files are paired with the original's."""
    if graded is original:
        return {path: path for path in original.files}
    if len(graded.files) != len(original.files):
        raise ValueError("the graded bundle is not a shadow of the original (another number of files)")
    pairs = dict(zip(original.files, graded.files))
    if any(is_code(path) and new != path for path, new in pairs.items()):
        raise ValueError("the graded bundle is not a shadow of the original (its code files differ)")
    return pairs


def regrade_files(workspace: Mapping[str, str], graded: Bundle, original: Bundle) -> dict[str, str]:
    """The patched ``workspace`` (``original``'s files after a patch) on ``graded``'s data (a shadow
    of ``original``, or ``original`` itself): what the patch changed, code and data, as it made it,
    and the shadow everywhere else (see :func:`envcore.scenario.patch_scope.graded_files`). The
    files a shadow rewrites are the data files and the code files where the app makes its users."""
    if graded is original:
        return dict(workspace)
    pairs = shadow_paths(original, graded)
    declared = set(shadowed_code(original))
    rewritten = {path: (pairs[path], graded.files[pairs[path]]) for path in original.files
                 if not is_code(path) or path in declared}
    return graded_files(original.files, workspace, rewritten)


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


# -- which declared values a shadow can replace -------------------------------------------------------


@dataclass(frozen=True)
class Unshadowed:
    """A declared value a shadow leaves as it is, and why (for the import's warnings)."""

    value: str
    reason: str
    """Why, in a clause that follows the value: ``"is written in app/auth.py line 12 ..."``."""


def shadow_coverage(bundle: Bundle) -> tuple[list[ShadowValue], list[Unshadowed]]:
    """The declared values a shadow replaces, and those it leaves as they are with the reason.

    A value is replaced unless it occurs, in any encoding, in the app's code (but the files where it
    makes its users), which grading cannot change; a value shorter than :data:`MIN_LENGTH` is matched
    as a whole word, and replaced when the bundle says where its code makes its users and it is a
    whole string literal there and of no other code, or, in an app that keeps its users in data files,
    when it has a letter and no code file holds it as a word (:func:`_short_value_unshadowable`); a
    value with nothing after its kept prefix has nothing to replace."""
    declared = set(shadowed_code(bundle))
    fixed = {path: text for path, text in bundle.files.items() if is_code(path) and path not in declared}
    literals: tuple[set[str], dict[str, str]] | None = None
    seen: dict[str, ShadowValue] = {}
    left: dict[str, Unshadowed] = {}
    for item in bundle.shadow_values:
        value = item.value
        if not value or value in seen or value in left:
            continue
        if not any(c.isalnum() for c in value[item.keep:]):
            left[value] = Unshadowed(value, f"has nothing to replace after its first {item.keep} characters"
                                            if item.keep else "has no letter or digit to replace")
            continue
        if len(value) < MIN_LENGTH:
            if not declared:
                reason = _short_value_unshadowable(value, fixed)
                if reason is not None:
                    left[value] = Unshadowed(value, reason)
                    continue
                seen[value] = item  # a short name (``bob``) no code names: replaced as a whole word
                continue
            # too short to look for in text: a whole string of the code where the users are made
            # (else the app does not make it, a database does), and of no other code
            if literals is None:
                literals = (_string_literals(t for p, t in bundle.files.items() if p in declared),
                            _literal_places(fixed))
            if value in literals[1]:
                left[value] = Unshadowed(value, f"is a whole string literal of {literals[1][value]} too, code "
                                                "grading cannot change")
                continue
            if value not in literals[0]:
                left[value] = Unshadowed(value, f"is shorter than {MIN_LENGTH} characters and no whole string "
                                                f"literal of {', '.join('app/' + p for p in sorted(declared))}")
                continue
        else:
            where = written_in(value, fixed)
            if where is not None:
                left[value] = Unshadowed(value, f"is written in {where}, code grading cannot change")
                continue
        seen[value] = item
    return list(seen.values()), list(left.values())


def _short_value_unshadowable(value: str, code: Mapping[str, str]) -> str | None:
    """Why a value shorter than :data:`MIN_LENGTH` cannot be replaced in an app that keeps its users in
    data files, or ``None`` when it can (as a whole word): a name with a letter that no code file
    holds as a whole word. An all-digit id is too likely to be any number of the data (a quantity, a
    price) unless the code says where it makes it."""
    if not any(c.isalpha() for c in value):
        return (f"is a number shorter than {MIN_LENGTH} digits: it is replaced only where the app's code makes it "
                "(a whole string literal of a file listed under shadow.code); an id the database assigns cannot be "
                "replaced")
    word = re.compile(rf"(?<![0-9A-Za-z]){re.escape(value)}(?![0-9A-Za-z])")
    for path, text in code.items():
        found = word.search(text)
        if found is not None:
            line = text.count("\n", 0, found.start()) + 1
            return f"is a word of app/{path} line {line} too, code grading cannot change"
    return None


def shadowable(bundle: Bundle) -> list[ShadowValue]:
    """The declared values a shadow replaces (see :func:`shadow_coverage`)."""
    return shadow_coverage(bundle)[0]


def written_in(value: str, code: Mapping[str, str]) -> str | None:
    """Where ``value``, in any of its encodings, first occurs in ``code``: ``app/<path> line <n>``."""
    for path, text in code.items():
        for form in encoded_forms(value):
            at = text.find(form)
            if at >= 0:
                return f"app/{path} line {text.count(chr(10), 0, at) + 1}"
    return None


def _by_word(value: str) -> bool:
    """Whether ``value`` is matched only as a whole word (never inside a longer run of letters or digits)."""
    return value.isdigit() or len(value) < MIN_LENGTH


def _string_literals(sources: Iterable[str]) -> set[str]:
    """The values of the plain string literals in ``sources`` (files that do not tokenize: none)."""
    out: set[str] = set()
    for source in sources:
        out.update(_literals_of(source))
    return out


def _literal_places(code: Mapping[str, str]) -> dict[str, str]:
    """Each plain string literal's value in ``code``, with the first file it is in (``app/<path>``)."""
    places: dict[str, str] = {}
    for path, source in code.items():
        for value in _literals_of(source):
            places.setdefault(value, f"app/{path}")
    return places


def literal_line(source: str, value: str) -> int | None:
    """The line of the first string literal of ``source`` that holds ``value`` (the whole literal
    when ``value`` is shorter than :data:`MIN_LENGTH`), or ``None``."""
    if not value:
        return None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and token.string[:1] in "'\"":
                inner = token.string.strip("'\"")
                if inner == value or (len(value) >= MIN_LENGTH and value in inner):
                    return token.start[0]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return None


def _literals_of(source: str) -> Iterator[str]:
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and token.string[:1] in "'\"":
                yield token.string.strip("'\"")
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return


_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,5}$")
_FILE_EXTENSIONS = frozenset(
    "pdf txt md csv tsv json jsonl xml yaml yml toml ini cfg html htm png jpg jpeg gif svg webp bmp ico tif tiff "
    "heic doc docx xls xlsx ppt pptx odt ods odp rtf epub zip tar gz tgz bz2 xz 7z rar log sql db sqlite bin dat "
    "py js css mp3 mp4 wav ogg mov avi webm key pem crt cer p12 pfx eml ics vcf bak tmp".split())
"""Extensions a fresh value keeps: the app may serve or check a file by its type, and every file of a
type shares it. Any other dotted ending (``bob.marsh``) is part of the identity and is replaced."""


def _kept_ending(tail: str) -> re.Match[str] | None:
    """The ending of ``tail`` a fresh value keeps: a file's extension, or an email address's top-level
    domain (every user of a domain shares it; the rest of the domain is replaced)."""
    ending = _EXTENSION.search(tail)
    if ending is None or ending.start() == 0:
        return None
    if ending.group(0)[1:].lower() in _FILE_EXTENSIONS or "@" in tail[:ending.start()]:
        return ending
    return None


def fresh_value(item: ShadowValue, rng: random.Random) -> str:
    """A new value of ``item``'s shape (see the module docstring); a file's extension and an email
    address's top-level domain are kept (:func:`_kept_ending`)."""
    head, tail = item.value[:item.keep], item.value[item.keep:]
    extension = _kept_ending(tail)
    if extension is not None:
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


_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _encoders() -> tuple[Any, ...]:
    """The ways a value is written besides as it is: percent-encoded as a path, a query value, a
    form value and by JavaScript's ``encodeURIComponent`` (escapes in upper and lower case), and
    JSON-escaped (``ensure_ascii`` or not, with ``/`` as ``\\/`` or not)."""
    percent = (lambda v: quote(v, safe=""), lambda v: quote(v, safe="/"), lambda v: quote_plus(v, safe=""),
               lambda v: quote(v, safe="!'()*~"))
    lower = tuple((lambda e: lambda v: _PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), e(v)))(e) for e in percent)
    escaped = (lambda v: json.dumps(v)[1:-1], lambda v: json.dumps(v, ensure_ascii=False)[1:-1])
    slashed = tuple((lambda e: lambda v: e(v).replace("/", "\\/"))(e) for e in escaped)
    return percent + lower + escaped + slashed


_ENCODERS = _encoders()


_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*")
"""Characters every encoder leaves as they are: a value made of them travels only as it is."""


def encoded_forms(value: str) -> list[str]:
    """``value`` as written, then each other way it may travel in a text (:func:`_encoders`)."""
    forms = [value]
    if _PLAIN.fullmatch(value):
        return forms
    for encode in _ENCODERS:
        form = encode(value)
        if form not in forms:
            forms.append(form)
    return forms


_BASIC = re.compile(r"(?i)(?<![0-9A-Za-z])(basic[ \t]+)([A-Za-z0-9+/]{4,}={0,2})(?![0-9A-Za-z+/=])")
"""HTTP basic credentials: ``Basic base64(<name>:<password>)``."""


class Substitution:
    """One consistent replacement of identities, applied to texts, paths and probe data, to each value
    in every encoding it travels in (:func:`encoded_forms`, and the base64 of basic credentials)."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = dict(mapping)
        forms: dict[str, str] = dict(self.mapping)  # a value as written wins over another's encoding
        for old, new in self.mapping.items():
            if not _PLAIN.fullmatch(old):
                for encode in _ENCODERS:
                    forms.setdefault(encode(old), encode(new))
        self._forms = forms
        self._word = {form for old in self.mapping if _by_word(old) for form in encoded_forms(old)}
        self._pattern = _pattern(forms, self._word)
        self._numbers = {int(old): int(new) for old, new in self.mapping.items() if old.isdigit() and new.isdigit()}

    def text(self, value: str) -> str:
        if self._pattern is None:
            return value
        out, last = [], 0
        for match in _BASIC.finditer(value):
            out.append(self._plain(value[last:match.start(2)]))
            out.append(self._basic(match.group(2)))
            last = match.end(2)
        out.append(self._plain(value[last:]))
        return "".join(out)

    def _plain(self, value: str) -> str:
        assert self._pattern is not None
        return self._pattern.sub(lambda m: self._forms[m.group(0)], value)

    def _basic(self, encoded: str) -> str:
        """The base64 of basic credentials with the values in it replaced (not base64 of text: as
        any other text)."""
        try:
            decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            return self._plain(encoded)
        if ":" not in decoded:
            return self._plain(encoded)
        replaced = self._plain(decoded)
        if replaced == decoded:
            return encoded
        fresh = base64.b64encode(replaced.encode("utf-8")).decode("ascii")
        return fresh if encoded.endswith("=") or len(encoded) % 4 == 0 else fresh.rstrip("=")

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


def _pattern(forms: Mapping[str, str], by_word: set[str]) -> re.Pattern[str] | None:
    if not forms:
        return None
    parts = []
    for old in sorted(forms, key=len, reverse=True):  # the longest value wins where two overlap
        escaped = re.escape(old)
        parts.append(rf"(?<![0-9A-Za-z]){escaped}(?![0-9A-Za-z])" if old in by_word else escaped)
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
    owners = user_secrets(bundle)
    passwords = {old: mapping[old] for old in owners if old in mapping}
    if passwords:  # a hash of a replaced password, in a file the shadow rewrites: a hash of the fresh one
        texts = [text for path, text in bundle.files.items() if not is_code(path) or path in shadowed_code(bundle)]
        for stored, fresh in rehashed(texts, passwords, {old: owners[old] for old in passwords}).items():
            mapping.setdefault(stored, fresh)
    secret = bundle.shadow_in_code.jwt_secret if bundle.shadow_in_code is not None else None
    if secret and mapping:
        claims = Substitution(mapping)
        for token in sorted(set(_JWT.findall(corpus))):
            shadowed = shadow_jwt(token, secret, claims)
            if shadowed != token:
                mapping[token] = shadowed
    return Substitution(mapping)


def user_secrets(bundle: Bundle) -> dict[str, list[str]]:
    """Each user's secrets, the values an app may keep only a hash of (a token, a key, a password, what a
    login sends), each with the values that name its user (name, login name, id)."""
    found: dict[str, list[str]] = {}
    for user in bundle.users:
        credentials = user.credentials
        names = [user.username, user.user_id]
        secrets = [user.token]
        if credentials is not None:
            names.append(credentials.login_name)
            secrets.append(credentials.secret)
            if credentials.login is not None:
                sent = [*(credentials.login.form or {}).values()]
                if isinstance(credentials.login.json_body, dict):
                    sent += [v for v in credentials.login.json_body.values() if isinstance(v, str)]
                secrets += [v for v in sent if v not in names]
        for value in secrets:
            if value and value not in names:
                found.setdefault(value, [n for n in names if n])
    return found


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
    """``bundle`` with ``substitution`` applied to its data files (text and path), to the string
    literals of the code files where it makes its users, to its probes and to its users. The files
    keep the bundle's order, path for path (:func:`shadow_paths` pairs them so)."""
    declared = set(shadowed_code(bundle))
    files: dict[str, str] = {}
    for path, text in bundle.files.items():
        if not is_code(path):
            files[substitution.text(path)] = substitution.text(text)
        else:
            files[path] = substitute_literals(text, substitution) if path in declared else text
    probes = tuple(_shadow_probe(p, substitution) for p in bundle.probes)
    users = tuple(_shadow_user(u, substitution) for u in bundle.users)
    return bundle.model_copy(update={"files": files, "probes": probes, "users": users})


_PROBE_NAMES = ("id", "kind", "visible", "sites", "trap", "repeats")
"""A probe's names for the scenario's own things (itself, its sites, traps and exploits): never data,
so never shadowed, whatever user's name they happen to hold (``sec-alice-reads-bob``)."""
_FACT_DATA = ("texts", "value")
"""What an expected fact compares with the app's answer; its other fields (a JSON path, key or header
name) name the app's fields and stay as they are."""


def _shadow_probe(probe: Probe, substitution: Substitution) -> Probe:
    """``probe`` with its requests, expectations and title shadowed, its names kept (:data:`_PROBE_NAMES`)."""
    data = probe.model_dump(mode="json")
    kept = {key: data.pop(key) for key in _PROBE_NAMES if key in data}
    steps = data.pop("steps")
    data = substitution.data(data)
    for step in steps:
        facts = step.pop("expect", [])
        method = step.pop("method")
        step.update(substitution.data(step), method=method)
        step["expect"] = [{key: substitution.data(value) if key in _FACT_DATA else value for key, value in fact.items()}
                          for fact in facts]
    return Probe.model_validate({**data, **kept, "steps": steps})


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
