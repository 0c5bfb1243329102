"""The code styles written like production FastAPI apps: router modules with pydantic-settings config,
SQLAlchemy 2 / SQLModel on a SQLite file, OAuth2 password + JWT, API-key header and session-cookie auth.

Every bug class renders in every one of these style values and passes the whole scenario check
(exploitable as shipped, closed by the reference fix, lazy, partial and narrow fixes caught, shadow
data, determinism); the apps are written with the idioms such apps use; each bug's fix lands where
such an app keeps the check; users sign in the way the app expects; the same draft and seed give the
same bytes; a realistic scenario survives export and import; and the compact styles, which every
shipped scenario uses, still render byte for byte as they did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envcore.cache import CacheEntry
from envcore.factory.bugs import BUG_CLASSES
from envcore.factory.byo import export_bundle_dir, load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.factory.compiler import compile_spec
from envcore.factory.config import FactoryConfig
from envcore.factory.draft import SpecDraft, expand
from envcore.factory.template_author import draft_for
from envcore.patching import apply_patch
from envcore.runner.actors import actors_of
from envcore.runner.base import AppSource
from envcore.scenario.probes import Probe, ProbeKind, ProbeStep, StatusIn
from envcore.scenario.spec import CodeStyle

ROOT = Path(__file__).resolve().parent.parent
NEW_VALUES = {
    "layout": ("routers", "routers_flat"),
    "auth": ("oauth2_jwt", "api_key", "cookie"),
    "store": ("sqlalchemy", "sqlmodel"),
}
COMPACT_VALUES = {
    "layout": ("single_file", "package"),
    "auth": ("depends", "inline", "decorator"),
    "store": ("dict", "sqlite"),
}


def style(label: str) -> CodeStyle:
    layout, auth, store, id_type = label.split("/")
    return CodeStyle(layout=layout, auth=auth, store=store, id_type=id_type)


REALISTIC = ("routers/oauth2_jwt/sqlalchemy/int", "routers_flat/api_key/sqlmodel/str", "routers/cookie/sqlmodel/int")
"""Three styles that between them hold every new value of every axis, each with every bug class."""
MIXED = (
    "single_file/depends/sqlalchemy/str", "package/decorator/sqlmodel/int", "routers/inline/dict/int",
    "routers_flat/depends/sqlite/str", "single_file/oauth2_jwt/sqlite/int", "package/api_key/dict/str",
    "single_file/cookie/sqlite/str",
)
"""Each new value beside compact values of the other axes."""
DOMAINS = ("clinic", "invoices", "notes", "projects", "orders", "documents", "hr", "tickets")
TENANTED = ("clinic", "invoices", "projects", "documents", "hr", "tickets")
BUGS = list(BUG_CLASSES)


def draft(label: str, bug_name: str, variant_name: str, index: int, domain: str | None = None) -> SpecDraft:
    bug = BUG_CLASSES[bug_name]
    variant = bug.variant(variant_name)
    tenanted = bug.requires_tenant or variant.requires_tenant
    domain = domain or (TENANTED[index % len(TENANTED)] if tenanted else DOMAINS[index % len(DOMAINS)])
    traps = ["admin_access", "public_route", "legacy_alias"] + (["second_site"] if variant.multi_site else [])
    return SpecDraft(domain=domain, bug_class=bug_name, variant=variant_name, style=style(label), traps=tuple(traps),
                     decoys=("search", "profile", "directory", "files"))


def bundle(label: str, bug_name: str, variant_name: str | None = None, index: int = 0, seed: int = 900,
           domain: str | None = None):
    variants = BUG_CLASSES[bug_name].variants
    name = variant_name or variants[index % len(variants)].name
    return compile_spec(expand(draft(label, bug_name, name, index, domain), seed=seed + index))


def _assert_checks(b, runner) -> None:
    report = check_scenario(b, runner, fail_fast=False)
    assert report.ok, f"{b.code_style} {b.bug_class}/{b.variant}: {report.summary()}"


# -- every bug class in every new style value ------------------------------------------------

EVERY = [(label, bug, BUGS.index(bug) + i) for i, label in enumerate(REALISTIC) for bug in BUGS]
"""Every bug class in each of the three styles that hold every new value (the slow run); the mixed
styles, with every variant, are in the slow run too (SLOW)."""
FAST = [entry for entry in EVERY if BUGS.index(entry[1]) % len(REALISTIC) == REALISTIC.index(entry[0])]
"""Every bug class once, the three styles taking turns."""
DEFAULT = [next(entry for entry in FAST if entry[0] == label) for label in REALISTIC]
"""The default run: FAST's first entry in each style (each style holds new values the others do not);
the rest of FAST in the slow run (a whole scenario check is 2-8 s)."""


@pytest.mark.parametrize("label, bug_name, index",
                         [pytest.param(*entry, marks=() if entry in DEFAULT else pytest.mark.slow) for entry in FAST],
                         ids=[f"{lab}-{bug}" for lab, bug, _ in FAST])
def test_every_bug_class_passes_the_whole_scenario_check_in_the_realistic_styles(label, bug_name, index, runner):
    _assert_checks(bundle(label, bug_name, index=index), runner)


@pytest.mark.slow
@pytest.mark.parametrize("label, bug_name, index", [e for e in EVERY if e not in FAST],
                         ids=[f"{lab}-{bug}" for lab, bug, _ in EVERY if (lab, bug, _) not in FAST])
def test_every_bug_class_passes_the_whole_scenario_check_in_every_realistic_style(label, bug_name, index, runner):
    _assert_checks(bundle(label, bug_name, index=index), runner)


def test_the_checked_styles_hold_every_new_value_with_every_bug_class():
    assert {bug for _, bug, _ in FAST} == set(BUGS)
    for axis, values in NEW_VALUES.items():
        for value in values:
            covering = [label for label in REALISTIC if getattr(style(label), axis) == value]
            assert covering, f"no realistic style has {axis}={value}"
            assert {bug for label, bug, _ in EVERY if label in covering} == set(BUGS), (axis, value)
            assert any(label in covering for label, _, _ in DEFAULT), (axis, value)  # the default run sees it too


SLOW_STYLES = [
    f"{layout}/{auth}/{store}/{('int', 'str')[i % 2]}"
    for i, (layout, auth, store) in enumerate(
        (layout, auth, store)
        for layout in NEW_VALUES["layout"] for auth in NEW_VALUES["auth"] for store in NEW_VALUES["store"]
    )
] + list(MIXED)
SLOW = [(label, bug.name, v.name, i) for i, label in enumerate(SLOW_STYLES) for bug in BUG_CLASSES.values()
        for v in bug.variants]


@pytest.mark.slow
@pytest.mark.parametrize("label, bug_name, variant_name, index", SLOW,
                         ids=[f"{lab}-{bug}-{var}" for lab, bug, var, _ in SLOW])
def test_every_variant_passes_the_whole_scenario_check_in_every_realistic_style(
    label, bug_name, variant_name, index, runner
):
    _assert_checks(bundle(label, bug_name, variant_name, index=index), runner)


# -- what the apps look like ----------------------------------------------------------------


def _py(b) -> dict[str, str]:
    return {path: text for path, text in b.files.items() if path.endswith(".py")}


def test_realistic_apps_use_the_idioms_of_production_fastapi_projects():
    jwt_app = bundle("routers/oauth2_jwt/sqlalchemy/int", "idor_read", "missing_check", domain="notes")
    files = _py(jwt_app)
    assert jwt_app.entrypoint == "app.main:app"
    assert 'OAuth2PasswordBearer(tokenUrl="auth/token")' in files["app/deps.py"]
    assert "def get_current_user(token: str = Depends(oauth2_scheme), db: Session = Depends(get_db))" in files[
        "app/deps.py"]
    assert "jwt.decode(token, settings.secret_key, algorithms=[ALGORITHM])" in files["app/deps.py"]
    assert "jwt.encode(" in files["app/security.py"] and "BcryptHasher(rounds=4)" in files["app/security.py"]
    assert "form_data: OAuth2PasswordRequestForm = Depends()" in files["app/routers/auth.py"]
    assert "class Settings(BaseSettings):" in files["app/config.py"]
    assert "settings = Settings()" in files["app/config.py"]
    assert "class Base(DeclarativeBase):" in files["app/database.py"] and "def get_db():" in files["app/database.py"]
    assert "sqlite:///" in files["app/config.py"] and "create_engine(settings.database_url" in files["app/database.py"]
    assert "id: Mapped[int] = mapped_column(primary_key=True)" in files["app/models.py"]
    assert "Base.metadata.create_all(engine)" in files["app/seed.py"] and 'seed["users"]' in files["app/seed.py"]
    assert "lifespan=lifespan" in files["app/main.py"] and "app.include_router(notes.router)" in files["app/main.py"]
    notes = files["app/routers/notes.py"]
    assert 'router = APIRouter(prefix="/api/notes", tags=["notes"])' in notes
    assert '@router.get("/{note_id}", response_model=NoteRead)' in notes
    assert "user: User = Depends(get_current_user)" in notes and "db: Session = Depends(get_db)" in notes
    assert "db.scalars(select(Note).where(visible_scope(user)).order_by(Note.id)).all()" in notes
    assert "from app.models import Note, User" in notes
    assert "app.db" not in jwt_app.files and "data/seed.json" in jwt_app.files
    seeded = json.loads(jwt_app.files["data/seed.json"])["users"]
    assert all("password" in row and "password_hash" not in row for row in seeded)

    flat = bundle("routers_flat/api_key/sqlmodel/str", "idor_read", "missing_check", domain="notes")
    files = _py(flat)
    assert flat.entrypoint == "main:app" and "main.py" in files and "models.py" in files
    assert not any("from app." in text or "import app" in text for text in files.values())
    assert "from models import Note, User" in files["routers/notes.py"]
    assert 'APIKeyHeader(name="X-API-Key", auto_error=False)' in files["deps.py"]
    assert "Security(api_key_header)" in files["deps.py"]
    assert "class Base(SQLModel, registry=registry()):" in files["database.py"]
    assert "class Note(Base, table=True):" in files["models.py"] and "db.exec(select(" in files["routers/notes.py"]

    cookie = bundle("routers/cookie/sqlmodel/int", "idor_read", "missing_check")
    assert 'APIKeyCookie(name="session_id", auto_error=False)' in cookie.files["app/deps.py"]


def test_the_compact_styles_keep_their_files_and_settings():
    compact = bundle("package/depends/dict/int", "idor_read", "missing_check")
    text = "\n".join(_py(compact).values())
    for idiom in ("BaseSettings", "Mapped[", "OAuth2PasswordBearer", "response_model="):
        assert idiom not in text
    assert compact.files["instance/secrets.txt"].startswith("SECRET_KEY=")


FIX_SITES = [
    ("idor_read", "missing_check", "app/routers/notes.py", "+    if not can_read(user, note):"),
    ("list_leak", "list_unfiltered", "app/routers/notes.py", ".where(visible_scope(user))"),
    ("client_identity", "user_id_header", "app/deps.py", '-    acting_as = request.headers.get("x-user-id")'),
    ("missing_admin_check", "users_route", "app/routers/admin.py",
     "+def admin_list_users(user: User = Depends(require_admin)"),
    ("sensitive_exposure", "directory_full_records", "app/routers/account.py",
     '+@router.get("/people", response_model=list[PersonOut])'),
    ("mass_assignment", "profile_role_field", "app/schemas.py", "-    role: str | None = None"),
    ("tenant_leak", "manager_any_tenant", "app/policy.py", "+    if user.role == \"manager\" and project.workspace_id"),
]


@pytest.mark.parametrize("bug_name, variant_name, path, line", FIX_SITES, ids=[f"{b}-{v}" for b, v, _, _ in FIX_SITES])
def test_the_reference_fix_goes_where_a_production_app_keeps_the_check(bug_name, variant_name, path, line):
    tenanted = BUG_CLASSES[bug_name].requires_tenant
    spec = expand(SpecDraft(domain="projects" if tenanted else "notes", bug_class=bug_name, variant=variant_name,
                            style=style("routers/oauth2_jwt/sqlalchemy/int")), seed=41)
    fix = compile_spec(spec).reference_fix
    touched = [chunk.split("\n", 1)[0] for chunk in fix.split("diff --git ")[1:]]
    assert touched == [f"a/{path} b/{path}"], touched
    assert line in fix, fix


@pytest.mark.parametrize("label, kind", [("routers/oauth2_jwt/sqlmodel/int", "login"),
                                         ("routers_flat/api_key/sqlalchemy/str", "header"),
                                         ("single_file/cookie/dict/int", "cookie")])
def test_users_sign_in_the_way_the_app_expects_and_a_bare_bearer_token_is_refused(label, kind, runner):
    b = bundle(label, "idor_read", "missing_check")
    assert {u.credentials.kind for u in b.users} == {kind}
    victim = b.spec.roles["victim"]
    me = Probe(id="reg-me", kind=ProbeKind.REGRESSION, title="own account",
               steps=(ProbeStep(actor=victim, method="GET", path="/api/me", expect=(StatusIn(codes=(200,)),)),))
    source = AppSource(b.files, b.entrypoint)
    signed = runner.run(source, [me], actors_of(b.users))
    assert signed.loaded and signed.outcomes[0].passed, signed.outcomes
    bearer = runner.run(source, [me], {u.username: u.token for u in b.users})
    assert bearer.loaded and bearer.outcomes[0].steps[0].status == 401


# -- determinism, export and import, configs, the shipped cache ------------------------------


def test_the_same_draft_and_seed_give_byte_identical_realistic_bundles():
    for label in REALISTIC + MIXED[:2]:
        first = bundle(label, "client_identity", "role_header", seed=77)
        again = bundle(label, "client_identity", "role_header", seed=77)
        assert CacheEntry.of(first, "train").data == CacheEntry.of(again, "train").data, label
    other = bundle(REALISTIC[0], "client_identity", "role_header", seed=78)
    assert other.files["data/seed.json"] != first.files["data/seed.json"]


def test_realistic_bundles_hash_the_same_in_processes_with_different_hash_seeds():
    code = (
        "import sys; sys.path.insert(0, 'tests');"
        "from test_realistic_styles import REALISTIC, bundle;"
        "print(' '.join(bundle(label, 'list_leak', index=1).content_hash() for label in REALISTIC))"
    )
    outs = []
    for hash_seed in ("3", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                              check=True)
        outs.append(proc.stdout.split())
    assert outs[0] == outs[1] == [bundle(label, "list_leak", index=1).content_hash() for label in REALISTIC]


@pytest.mark.slow  # test_byo_import and test_credentials export and import by default
def test_a_realistic_scenario_survives_export_and_import(tmp_path, runner):
    original = bundle("routers_flat/oauth2_jwt/sqlmodel/str", "tenant_leak", "tenant_header")
    imported = load_bundle_dir(export_bundle_dir(original, tmp_path / "realistic"))
    for name in ("files", "probes", "users", "sites", "traps", "reference_fix", "shadow_values", "title", "domain",
                 "bug_class", "cwe", "variant", "code_style", "tier", "entrypoint", "task", "policy_text"):
        assert getattr(imported, name) == getattr(original, name), name
    assert all(u.credentials is not None and u.credentials.kind == "login" for u in imported.users)
    _assert_checks(imported, runner)


def test_the_default_config_draws_only_the_compact_styles_and_the_realistic_config_only_the_new_ones():
    default = FactoryConfig.load(ROOT / "configs" / "factory.yaml")
    realistic = FactoryConfig.load(ROOT / "configs" / "realistic.yaml")
    seen: dict[str, set[str]] = {axis: set() for axis in NEW_VALUES}
    for seed in range(120):
        compact, new = draft_for(default, seed).style, draft_for(realistic, seed).style
        for axis, values in NEW_VALUES.items():
            assert getattr(compact, axis) in COMPACT_VALUES[axis]
            assert getattr(new, axis) in values
            seen[axis].add(getattr(new, axis))
    assert seen == {axis: set(values) for axis, values in NEW_VALUES.items()}
    with pytest.raises(ValueError, match="unknown store values"):
        FactoryConfig.model_validate({"code_styles": {"store": {"postgres": 1.0}}})


def test_the_shipped_cache_still_compiles_to_the_same_bytes(shipped):
    ids = shipped.ids()
    assert ids
    for scenario_id in ids[::25]:
        cached = shipped.load(scenario_id)
        assert compile_spec(cached.spec).content_hash()[:16] == scenario_id, cached.code_style


def test_the_reference_fix_of_a_realistic_app_is_graded_full_in_the_sandbox(sandbox):
    from envcore.verifier.verify import verify

    b = bundle("routers/oauth2_jwt/sqlmodel/str", "idor_write", "update_unchecked")
    fixed = verify(b, apply_patch(b.files, b.reference_fix), sandbox=sandbox)
    shipped = verify(b, b.files, sandbox=sandbox)
    assert fixed.reward == 1.0, fixed.model_dump_json()[:2000]
    assert shipped.outcome == "graded" and shipped.reward is not None and shipped.reward < 1.0
