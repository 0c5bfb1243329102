"""Bring your own app: the on-disk bundle format, and import/export between it and a Bundle.

A scenario folder looks like this (see ``docs/bundle-format.md``)::

    scenario.yaml      metadata: title, domain, bug class, CWE ids, entrypoint, task, policy, users
                       (with their credentials where the app does not take bearer tokens),
                       vulnerable sites, traps, optional tier
    probes.yaml        the declarative probes (same schema as in a bundle)
    app/               the vulnerable app, exactly as an agent will first see it
    fix.diff           optional: the reference fix, a unified diff against app/

:func:`load_bundle_dir` reads such a folder into a :class:`Bundle` and reports every problem with the
file it is in; ``python -m envcore factory import`` then runs the same scenario check as generated
scenarios go through. :func:`export_bundle_dir` writes any bundle out in this format, so a generated
scenario can be edited by hand and imported back.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envcore.factory import yaml_positions
from envcore.factory.compiler import difficulty_score, tier_of
from envcore.factory.scenario_base import compose_app
from envcore.factory.yaml_positions import Positions
from envcore.filetree import tree_problem
from envcore.patching import PatchError, changed_lines, parse_patch
from envcore.runner.databases import dump_text, is_sqlite_file
from envcore.scenario.bundle import Bundle, BundleMetrics, BundleUser, ShadowInCode, ShadowValue
from envcore.scenario.patch_scope import apply_in_scope, is_code
from envcore.scenario.probes import Probe
from envcore.scenario.spec import SiteRef, Trap
from envcore.verifier.password_hashes import hashes_in, is_hashed_in
from envcore.verifier.shadow import encoded_forms, literal_line, shadow_coverage, shadowed_code

METADATA = "scenario.yaml"
PROBES = "probes.yaml"
APP_DIR = "app"
FIX = "fix.diff"
MAX_FILE_BYTES = 512_000
MAX_FILES = 200
"""Within the limits every app folder has (``envcore.filetree``), which the import also applies."""


class ImportProblem(ValueError):
    """The folder is not a valid scenario; the message lists every problem found, file by file."""


class ShadowDeclaration(BaseModel):
    """``scenario.yaml``'s ``shadow``: the identities and secrets grading replaces with fresh ones of
    the same shape, drawn anew for every grading (see ``envcore/verifier/shadow.py``), so a patch
    that special-cases the users or records it can see fails. They are replaced in the probes, the
    users and every data file of the app (any file but ``.py``), in every encoding they travel in;
    the app reads them from such files (``data/users.json``, ``seed.sql``) or says where its code
    makes its users (``code``). A declared value grading cannot replace is named in an import
    warning (:func:`import_warnings`), never dropped silently."""

    model_config = ConfigDict(extra="forbid")

    users: bool | list[str] = True
    """Every user's username, user id, token and credential values (secret, login name, login form);
    a list of usernames: those users' only (an app whose code names its administrator everywhere
    keeps that one as it is)."""
    values: list[str | ShadowValue] = Field(default_factory=list)
    """More values: record ids and markers, file names, the app's secret; ``{value, keep}`` keeps a
    prefix (``{value: tok_5f1c, keep: 4}``)."""
    code: list[str] = Field(default_factory=list)
    """Python files (paths under ``app/``) where the app makes its users in code: the values are
    replaced inside their string literals too, on the lines a patch leaves as they were, and values
    shorter than four characters (an id ``"2"``, a name ``bob``) as whole words."""
    jwt_secret: str | None = None
    """The HS256 secret the app signs its bearer tokens with, when the users' tokens are JWTs that
    name them: each is signed anew for the shadow's users."""


class ScenarioMetadata(BaseModel):
    """``scenario.yaml``."""

    model_config = ConfigDict(extra="forbid")

    title: str
    domain: str
    bug_class: str
    cwe: list[str] = Field(min_length=1)
    variant: str = "custom"
    code_style: str = "custom"
    entrypoint: str
    """``module:attribute`` relative to ``app/``, e.g. ``main:app``."""
    task: str
    policy: str
    users: list[BundleUser] = Field(min_length=1)
    sites: list[SiteRef] = Field(min_length=1)
    traps: list[Trap] = Field(default_factory=list)
    tier: int | None = Field(default=None, ge=1, le=3)
    shadow: ShadowDeclaration | None = None
    """Absent: the scenario is graded on its own data (a patch that special-cases its users is not caught)."""


_PREFIX = re.compile(r"^[A-Za-z]{1,6}[_-]")


def _user_values(user: BundleUser) -> list[str]:
    values = [user.username, user.user_id, user.token or ""]
    credentials = user.credentials
    if credentials is not None:
        values += [credentials.secret or "", credentials.login_name or ""]
        login = credentials.login
        if login is not None:
            values += [str(v) for v in (login.form or {}).values()]
            if isinstance(login.json_body, dict):
                values += [str(v) for v in login.json_body.values() if isinstance(v, (str, int))]
    return [v for v in values if v]


def shadow_values(meta: ScenarioMetadata, files: dict[str, str], problems: list[str]) -> tuple[ShadowValue, ...]:
    """The bundle's declared shadow values (users' first, then ``values``), each once; a user's
    identity written in the app's code is a problem (grading could not replace it)."""
    if meta.shadow is None:
        return ()
    found: dict[str, ShadowValue] = {}
    declared = set(meta.shadow.code)
    for path in meta.shadow.code:
        if not path.endswith(".py") or path not in files:
            problems.append(f"{METADATA}: shadow: code: {path!r} is not a Python file of the app (paths are under app/)")
    if meta.shadow.users:
        code = {path: text for path, text in files.items() if path.endswith(".py") and path not in declared}
        chosen = meta.shadow.users
        if isinstance(chosen, list):
            known = {u.username for u in meta.users}
            problems += [f"{METADATA}: shadow: users: {name!r} is not a user of the scenario"
                         for name in chosen if name not in known]
        for user in meta.users:
            if isinstance(chosen, list) and user.username not in chosen:
                continue
            for value in _user_values(user):
                prefix = _PREFIX.match(value)
                found.setdefault(value, ShadowValue(value=value, keep=len(prefix.group(0)) if prefix else 0))
            for value in (user.username, user.token or ""):
                where = next((path for path, text in code.items() if value in text), None)
                if where is not None and len(value) >= 4:
                    problems.append(f"{METADATA}: shadow: {user.username}'s {'name' if value == user.username else 'token'} "
                                    f"{value!r} is written in app/{where}, so grading cannot replace it: keep the "
                                    "users in a data file the app reads (data/users.json, say), list the file where "
                                    "the code makes them under shadow.code, or set shadow.users: false")
    for item in meta.shadow.values:
        declared = item if isinstance(item, ShadowValue) else ShadowValue(value=item)
        found.setdefault(declared.value, declared)
    return tuple(found.values())


def _prefix_hint(files: dict[str, str], fix: str) -> str:
    """A hint when each side's paths of ``fix`` all start with one folder the app does not have, and
    without it they are the app's: the diff was made between folders not named ``a`` and ``b``."""
    try:
        patches = parse_patch(fix)
    except PatchError:
        return ""
    heads: list[str] = []
    found = False
    for paths in ([p.old_path for p in patches if p.old_path], [p.new_path for p in patches if p.new_path]):
        if not paths:
            continue
        head = {p.split("/", 1)[0] if "/" in p else "" for p in paths}
        if len(head) != 1 or "" in head or head <= {p.split("/", 1)[0] for p in files}:
            return ""
        heads.append(head.pop())
        found = found or any(p.split("/", 1)[1] in files for p in paths)
    if not found:
        return ""
    named = " and ".join(f"'{h}/'" for h in dict.fromkeys(heads))
    return (f" (its paths start with {named}, which the app does not have: make the diff between folders named a "
            "and b, `diff -ruN a b`, or with `git diff --no-index a b`, so its paths are the app's)")


def import_warnings(bundle: Bundle) -> list[str]:
    """What ``factory import`` says about ``bundle`` without refusing it: an app whose users cannot be
    shadowed at all (no ``shadow``), with the file where its code makes them when it does; each user
    left out of the shadow; each declared value grading cannot shadow, and why; and a user's secret
    that no file of the app holds (the shadow's could never be accepted)."""
    if not bundle.shadow_values:
        where = _users_made_in(bundle)
        hint = f"; the app makes its users in its code ({where}): list that file under shadow.code" if where else ""
        return [f"{METADATA}: shadow: none declared, so its users cannot be shadowed: grading runs on the app's own "
                "users and data, and a patch that refuses the test users by name, id or token is not caught; declare "
                f"shadow (docs/bundle-format.md, section 2){hint}"]
    declared = {item.value for item in bundle.shadow_values}
    warnings = [f"{METADATA}: shadow: {user.username} is not in shadow.users, so grading keeps {user.username}'s name, "
                f"id and secrets as they are and a patch may special-case {user.username}"
                for user in bundle.users if user.username not in declared and user.user_id not in declared]
    kept, left = shadow_coverage(bundle)
    owners = {value: user for user in bundle.users for value in _user_values(user)}
    for item in left:
        user = owners.get(item.value)
        named = f"{user.username}'s {_field(user, item.value)} {item.value!r}" if user else f"{item.value!r}"
        hint = ""
        if user is not None and item.reason.startswith("is written in") and bundle.shadow_in_code is None:
            hint = " (if the app makes its users there, list that file under shadow.code)"
        warnings.append(f"{METADATA}: shadow: {named} {item.reason}, so grading leaves it as it is and a patch may "
                        f"special-case it{hint}")
    files = "\n".join([*bundle.files, *bundle.files.values()])
    hashed = hashes_in(text for path, text in bundle.files.items() if not is_code(path) or path in shadowed_code(bundle))
    signed = bundle.shadow_in_code is not None and bundle.shadow_in_code.jwt_secret
    for item in kept:
        user = owners.get(item.value)
        if user is None or item.value in (user.username, user.user_id):
            continue
        if signed and item.value.startswith("eyJ"):
            continue  # a token the app signs itself: signed anew with the declared secret
        if not any(form in files for form in encoded_forms(item.value)) and not is_hashed_in(hashed, item.value):
            warnings.append(f"{METADATA}: shadow: {user.username}'s {_field(user, item.value)} is in no file of the "
                            "app (nor a hash of it in a scheme the shadow can write anew: the app makes it itself, or hashes "
                            "it another way?), so the app cannot know the one the shadow gives "
                            f"{user.username} and will refuse it: keep it (or its bcrypt, Argon2, PBKDF2 or plain "
                            "digest hash) in a data file the app reads, list the file where the code makes the users "
                            f"under shadow.code, or leave {user.username} out of shadow.users")
    return warnings


def _users_made_in(bundle: Bundle) -> str | None:
    """Where the app's code makes its users, by the string literals that hold their names, ids and
    tokens: ``app/<path> line <n>`` of the first, in the code file that names the most users."""
    best: tuple[int, str] | None = None
    for path, text in bundle.files.items():
        if not is_code(path):
            continue
        found = [where for user in bundle.users
                 if (where := next((at for value in (user.username, user.token or "", user.user_id)
                                    if (at := literal_line(text, value)) is not None), None)) is not None]
        if found and (best is None or len(found) > best[0]):
            best = (len(found), f"app/{path} line {min(found)}")
    return best[1] if best else None


def _field(user: BundleUser, value: str) -> str:
    """Which of ``user``'s values ``value`` is, in words."""
    credentials = user.credentials
    if value == user.username:
        return "name"
    if value == user.user_id:
        return "user_id"
    if credentials is not None and value == credentials.login_name:
        return "login name"
    if credentials is not None and credentials.kind in ("basic", "login") and value in (credentials.secret, user.token):
        return "password"
    return "token" if value == user.token else "secret" if credentials and value == credentials.secret else "login value"


def _read_yaml(path: Path, problems: list[str], positions: dict[str, Positions]) -> Any:
    """The file's data (``None`` when missing or invalid, with the problem added), its positions
    kept in ``positions`` under the file's name."""
    try:
        data, positions[path.name] = yaml_positions.load(path.read_text(encoding="utf-8"))
        return data
    except FileNotFoundError:
        problems.append(f"{path.name}: missing")
    except UnicodeDecodeError as exc:
        problems.append(f"{path.name}: not valid YAML (not UTF-8 text: {exc.reason} at byte {exc.start})")
    except yaml_positions.YamlSyntaxError as exc:
        problems.append(f"{path.name}: not valid YAML ({exc})")
    return None


def _validation_lines(name: str, exc: ValidationError, positions: Positions | None = None,
                      base: tuple[Any, ...] = ()) -> list[str]:
    """One line per error: the file, the field's dotted location, what is wrong and, where the
    text is known, the line and column of the value (or of the mapping that lacks it)."""
    lines = []
    for error in exc.errors():
        where = positions.of((*base, *error["loc"])) if positions is not None else None
        at = f" (line {where[0]}, column {where[1]})" if where else ""
        lines.append(f"{name}: {'.'.join(str(p) for p in error['loc'])}: {error['msg']}{at}")
    return lines


def _read_app(app_dir: Path, problems: list[str], label: str = APP_DIR) -> dict[str, str] | None:
    """The files under ``app_dir`` (``None`` when it is missing), each problem named ``<label>/<path>``:
    the scenario's own ``app/``, or a base's (``../_upstream/dvra/app``, see ``scenario_base``)."""
    if app_dir.is_symlink():  # a link could lead anywhere on the importer's machine
        problems.append(f"{label}/: symbolic links are not allowed")
        return None
    if not app_dir.is_dir():
        problems.append(f"{label}/: missing (the app's source folder)")
        return None
    files: dict[str, str] = {}
    for path in sorted(app_dir.rglob("*")):
        if path.is_symlink():
            problems.append(f"{label}/{path.relative_to(app_dir)}: symbolic links are not allowed")
            continue
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(app_dir).as_posix()
        if path.stat().st_size > MAX_FILE_BYTES:
            problems.append(f"{label}/{rel}: larger than {MAX_FILE_BYTES} bytes")
            continue
        data = path.read_bytes()
        if is_sqlite_file(data):  # a shipped database: kept as SQL text, rebuilt before the app loads
            try:
                files[rel] = dump_text(data)
            except sqlite3.Error as exc:
                problems.append(f"{label}/{rel}: a SQLite database that cannot be read ({exc})")
            continue
        try:
            files[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(f"{label}/{rel}: not UTF-8 text (binary files other than SQLite databases are not supported)")
    return files


def _app_problems(files: dict[str, str]) -> list[str]:
    """What the app as a whole (with its base's files, if it has one) must not be."""
    problems = []
    if len(files) > MAX_FILES:
        problems.append(f"{APP_DIR}/: more than {MAX_FILES} files")
    elif (problem := tree_problem(files)) is not None:  # what an agent's patch of it could never be
        problems.append(f"{APP_DIR}/: {problem}")
    if not any(rel.endswith(".py") for rel in files):
        problems.append(f"{APP_DIR}/: no Python files")
    return problems


def _count_routes(files: dict[str, str]) -> int:
    pattern = re.compile(r"^\s*@\w+\.(get|post|put|patch|delete|api_route|head|options)\(", re.MULTILINE)
    return sum(len(pattern.findall(text)) for rel, text in files.items() if rel.endswith(".py"))


def _trap_reference_problems(traps: list[Trap], raw_probes: list[Any]) -> list[str]:
    """Trap names are unique and every trap probe names a trap ``scenario.yaml`` declares (a trap with
    no probe is left to the scenario check, which says so with the check's other findings)."""
    problems = []
    keys = [t.key for t in traps]
    for key in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append(f"{METADATA}: traps: two traps are named {key!r}")
    declared = ", ".join(keys) or "none"
    for i, item in enumerate(raw_probes):
        if not isinstance(item, dict) or item.get("kind") != "trap":
            continue
        name = item.get("trap")
        if name is None:
            problems.append(f"{PROBES}[{i}]: trap probe {item.get('id')} names no trap (set trap: to one of the traps "
                            f"{METADATA} declares: {declared})")
        elif name not in keys:
            problems.append(f"{PROBES}[{i}]: trap probe {item.get('id')} names trap {name!r}, which {METADATA} does "
                            f"not declare (its traps: {declared})")
    return problems


def load_bundle_dir(folder: str | Path, *, require_fix: bool = True) -> Bundle:
    """Read a scenario folder into a bundle; raise :class:`ImportProblem` listing every problem."""
    folder = Path(folder)
    problems: list[str] = []
    if not folder.is_dir():
        raise ImportProblem(f"{folder}: not a folder")
    positions: dict[str, Positions] = {}
    raw_meta = _read_yaml(folder / METADATA, problems, positions)
    raw_probes = _read_yaml(folder / PROBES, problems, positions)
    raw_meta, app = compose_app(folder, raw_meta, problems, _read_app)  # with `base`: another folder's app/ below
    files = app or {}
    problems += _app_problems(files) if app is not None else []
    meta: ScenarioMetadata | None = None
    if raw_meta is None and (folder / METADATA).is_file() and not any(p.startswith(METADATA) for p in problems):
        problems.append(f"{METADATA}: empty")
    if raw_probes is None and (folder / PROBES).is_file() and not any(p.startswith(PROBES) for p in problems):
        problems.append(f"{PROBES}: empty (expected a list of probes)")
    if raw_meta is not None:
        try:
            meta = ScenarioMetadata.model_validate(raw_meta)
        except ValidationError as exc:
            problems += _validation_lines(METADATA, exc, positions.get(METADATA))
    probes: list[Probe] = []
    if raw_probes is not None:
        if not isinstance(raw_probes, list):
            problems.append(f"{PROBES}: expected a list of probes")
        else:
            for i, item in enumerate(raw_probes):
                try:
                    probes.append(Probe.model_validate(item))
                except ValidationError as exc:
                    problems += _validation_lines(f"{PROBES}[{i}]", exc, positions.get(PROBES), (i,))
    fix = ""
    fix_path = folder / FIX
    if fix_path.is_file():
        try:
            fix = fix_path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            problems.append(f"{FIX}: not UTF-8 text")
        if fix and files:
            try:
                apply_in_scope(files, fix)  # what an agent's patch may change, a fix may: no more
            except PatchError as exc:
                problems.append(f"{FIX}: {exc}{_prefix_hint(files, fix)}")
    elif fix_path.exists():
        problems.append(f"{FIX}: not a regular file")
    elif require_fix:
        problems.append(f"{FIX}: missing (the reference fix proves the scenario can be fixed)")
    if meta is not None:
        problems += _trap_reference_problems(meta.traps, raw_probes if isinstance(raw_probes, list) else [])
    shadows = shadow_values(meta, files, problems) if meta is not None else ()
    if problems or meta is None:
        raise ImportProblem("\n".join(problems) or "unknown problem")
    fix_files, fix_lines = changed_lines(fix) if fix.strip() else (0, 0)
    metrics = {
        "files": sum(1 for p in files if p.endswith(".py")),
        "source_lines": sum(t.count("\n") for p, t in files.items() if p.endswith(".py")),
        "routes": _count_routes(files),
        "sites": len(meta.sites),
        "traps": len(meta.traps),
        "fix_lines": fix_lines,
        "fix_files": fix_files,
        "subtle_variant": False,
        "decoy_routes": 0,
    }
    score = difficulty_score(metrics, package=metrics["files"] > 1, helper_fix=False)
    bundle = Bundle(
        generator="import",
        title=meta.title,
        domain=meta.domain,
        bug_class=meta.bug_class,
        cwe=tuple(meta.cwe),
        variant=meta.variant,
        code_style=meta.code_style,
        tier=meta.tier or tier_of(score),
        entrypoint=meta.entrypoint,
        files=dict(sorted(files.items())),
        users=tuple(meta.users),
        task=meta.task,
        policy_text=meta.policy,
        probes=tuple(probes),
        reference_fix=fix,
        sites=tuple(meta.sites),
        traps=tuple(meta.traps),
        metrics=BundleMetrics(**metrics, score=score),
        shadow_values=shadows,
        shadow_in_code=(ShadowInCode(files=tuple(meta.shadow.code), jwt_secret=meta.shadow.jwt_secret)
                        if meta.shadow is not None and (meta.shadow.code or meta.shadow.jwt_secret) else None),
    )
    return bundle.with_id()


def _prune(value: Any) -> Any:
    """Drop empty values (None, {}, []) so exported probes read like hand-written ones."""
    if isinstance(value, dict):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _user_row(user: BundleUser) -> dict[str, Any]:
    """A user as ``scenario.yaml`` lists it: its credentials (when it has any) as written by hand,
    without the fields left to their defaults."""
    row = user.model_dump(mode="json")
    if user.credentials is not None:
        row["credentials"] = {"kind": user.credentials.kind,
                              **user.credentials.model_dump(mode="json", exclude_defaults=True)}
    return row


def export_bundle_dir(bundle: Bundle, folder: str | Path) -> Path:
    """Write ``bundle`` as a scenario folder (the inverse of :func:`load_bundle_dir`)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} exists and is not empty")
    meta = {
        "title": bundle.title,
        "domain": bundle.domain,
        "bug_class": bundle.bug_class,
        "cwe": list(bundle.cwe),
        "variant": bundle.variant,
        "code_style": bundle.code_style,
        "entrypoint": bundle.entrypoint,
        "task": bundle.task,
        "policy": bundle.policy_text,
        "users": [_user_row(u) for u in bundle.users],
        "sites": [s.model_dump() for s in bundle.sites],
        "traps": [t.model_dump() for t in bundle.traps],
        "tier": bundle.tier,
    }
    if bundle.shadow_values:  # listed as they are: the users' values are among them already
        meta["shadow"] = {"users": False, "values": [
            item.value if item.keep == 0 else item.model_dump() for item in bundle.shadow_values]}
        if bundle.shadow_in_code is not None:
            meta["shadow"].update({"code": list(bundle.shadow_in_code.files)} if bundle.shadow_in_code.files else {})
            meta["shadow"].update({"jwt_secret": bundle.shadow_in_code.jwt_secret}
                                  if bundle.shadow_in_code.jwt_secret else {})
    for rel, text in bundle.files.items():
        target = folder / APP_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    (folder / METADATA).write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100))
    probes = [_prune(p.model_dump(mode="json")) for p in bundle.probes]
    (folder / PROBES).write_text(yaml.safe_dump(probes, sort_keys=False, allow_unicode=True, width=100))
    if bundle.reference_fix:
        (folder / FIX).write_text(bundle.reference_fix, encoding="utf-8")
    return folder
