"""Apps that keep only a hash of each password are shadowed too.

Real apps store ``"password_hash": "$2b$12$..."``, not the password. A shadow gives every user a fresh
password, and such an app refused it: the import warned that the password "is in no file of the app",
and the scenario check's shadow run failed at every login. Now a hash that a declared password
verifies against is written anew for the fresh password, in the same scheme with the same
parameters, so the app accepts the shadow's users and cannot tell a shadow from its own seed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path

import pytest

from envcore.factory.byo import import_warnings, load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.runner.inprocess import InProcessRunner
from envcore.verifier import Resolution, verify
from envcore.verifier.password_hashes import SCHEMES, hashes_in, rehashed
from envcore.verifier.shadow import apply_substitution, draw_substitution
from tests.scenario_kit import (
    DECLARED,
    POLICY_CHECK,
    POLICY_IMPORTS,
    USERS,
    app_files,
    main_py,
    metadata,
    policy_fix,
    users_json,
    write_scenario,
)

PASSWORDS = {u["username"]: f"pw!{u['username'].split('.')[0]}-7731" for u in USERS}
FRESH = "Zq!mvkd-5082"


def _django(password: str, salt: str = "s4ltS4ltS4lt", iterations: int = 1000) -> str:
    derived = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations, 32)
    return f"pbkdf2_sha256${iterations}${salt}${base64.b64encode(derived).decode()}"


def _django_check(password: str, stored: str) -> bool:
    _, iterations, salt, _ = stored.split("$")
    return _django(password, salt, int(iterations)) == stored


def _hashers():
    """(scheme, hash a password, check a password) as apps write them, with each library's own calls."""
    import bcrypt
    from argon2 import PasswordHasher
    from passlib.context import CryptContext
    from werkzeug.security import check_password_hash, generate_password_hash

    passlib = CryptContext(schemes=["pbkdf2_sha256"], pbkdf2_sha256__rounds=1000)
    argon = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    return {
        "bcrypt": (lambda p: bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=5)).decode(),
                   lambda p, h: bcrypt.checkpw(p.encode(), h.encode())),
        "bcrypt-2y": (lambda p: bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=5)).decode().replace("$2b$", "$2y$"),
                      lambda p, h: bcrypt.checkpw(p.encode(), h.replace("$2y$", "$2b$").encode())),
        "argon2": (argon.hash, lambda p, h: _quietly(argon.verify, h, p)),
        "passlib-pbkdf2": (passlib.hash, passlib.verify),
        "werkzeug-pbkdf2": (lambda p: generate_password_hash(p, method="pbkdf2:sha256:1000"),
                            lambda p, h: check_password_hash(h, p)),
        "werkzeug-scrypt": (lambda p: generate_password_hash(p, method="scrypt:1024:8:1"),
                            lambda p, h: check_password_hash(h, p)),
        "django": (_django, _django_check),
        "sha256-hex": (lambda p: hashlib.sha256(p.encode()).hexdigest(),
                       lambda p, h: hashlib.sha256(p.encode()).hexdigest() == h),
        "md5-hex": (lambda p: hashlib.md5(p.encode()).hexdigest(), lambda p, h: hashlib.md5(p.encode()).hexdigest() == h),
    }


def _quietly(check, *args) -> bool:
    try:
        return check(*args)
    except Exception:
        return False


@pytest.mark.parametrize("scheme", sorted(_hashers()))
def test_a_hash_of_a_replaced_password_is_written_anew_for_the_fresh_one(scheme):
    make, check = _hashers()[scheme]
    stored = make("pw!alice-7731")
    other = make("the-admins-own")
    text = json.dumps([{"name": "alice", "password_hash": stored}, {"name": "root", "password_hash": other}])
    fresh = rehashed([text], {"pw!alice-7731": FRESH})
    assert set(fresh) == {stored}, "only the hash of a replaced password is written anew"
    assert check(FRESH, fresh[stored]) and not check("pw!alice-7731", fresh[stored])
    assert len(fresh[stored]) == len(stored) and fresh[stored] != make(FRESH) or scheme.endswith("-hex")


def test_a_shadowed_hash_keeps_its_scheme_and_its_cost_so_the_app_cannot_tell():
    import bcrypt
    from argon2 import PasswordHasher, extract_parameters

    slow = bcrypt.hashpw(b"pw!alice-7731", bcrypt.gensalt(rounds=11)).decode()
    argon = PasswordHasher(time_cost=3, memory_cost=4096, parallelism=2, hash_len=24, salt_len=12).hash("pw!alice-7731")
    fresh = rehashed([f"{slow}\n{argon}"], {"pw!alice-7731": FRESH})
    assert fresh[slow].startswith("$2b$11$") and fresh[slow][7:29] != slow[7:29]  # same cost, a new salt
    assert extract_parameters(fresh[argon]) == extract_parameters(argon)


def test_every_scheme_is_found_where_apps_write_hashes_and_nothing_else_is():
    hashers = _hashers()
    hashes = {name: make("pw!alice-7731") for name, (make, _) in hashers.items()}
    seed = "\n".join(f"INSERT INTO users VALUES ('{name}', '{stored}');" for name, stored in hashes.items())
    found = {stored for _, stored, _, _ in hashes_in([seed])}
    assert found == set(hashes.values())
    innocent = "tok_5f1c2e9a7b3d4410 u-1041 pbkdf2$9e04b6d2c8a15377 2024-05-01T10:00:00 deadbeef"
    assert hashes_in([innocent]) == []
    assert {scheme.name for scheme in SCHEMES} >= {"bcrypt", "argon2", "passlib-pbkdf2", "werkzeug", "django", "hex-digest"}


# -- through the import, the scenario check and grading ---------------------------------------------------

HASHED_LOGIN = '''

@app.post("/auth/login")
def login(email: str, password: str = ""):
    for user in store.USERS.values():
        if user.get("email") == email and password_matches(password, user["password_hash"]):
            return {"access_token": user["token"]}
    raise HTTPException(status_code=401, detail="wrong email or password")
'''

CHECKS = {
    "bcrypt": "import bcrypt\n\n\ndef password_matches(password, stored):\n"
              "    return bcrypt.checkpw(password.encode(), stored.encode())\n",
    "sha256-hex": "import hashlib\n\n\ndef password_matches(password, stored):\n"
                  "    return hashlib.sha256(password.encode()).hexdigest() == stored\n",
    "passlib-pbkdf2": "from passlib.context import CryptContext\n\nPASSWORDS = CryptContext(schemes=['pbkdf2_sha256'])\n\n\n"
                      "def password_matches(password, stored):\n    return PASSWORDS.verify(password, stored)\n",
}


def _hashed_login_scenario(folder: Path, scheme: str) -> Path:
    make, _ = _hashers()[scheme]
    files = app_files()
    files["main.py"] = main_py(CHECKS[scheme], routes=HASHED_LOGIN)
    logins = {u["username"]: {"email": f"{u['username']}@notes.test", "password_hash": make(PASSWORDS[u["username"]])}
              for u in USERS}
    files["data/users.json"] = users_json(USERS, **logins)
    fixed = {**policy_fix(files), "main.py": main_py(CHECKS[scheme] + POLICY_IMPORTS, POLICY_CHECK, routes=HASHED_LOGIN)}
    users = [{**u, "credentials": {"kind": "login", "login_name": logins[u["username"]]["email"],
                                   "secret": PASSWORDS[u["username"]],
                                   "login": {"path": f"/auth/login?email={logins[u['username']]['email']}&password="
                                                     f"{PASSWORDS[u['username']]}", "token_json": "access_token"}}}
             for u in USERS]
    return write_scenario(folder, files, fixed, meta=metadata(users, shadow=DECLARED))


@pytest.mark.parametrize("scheme", sorted(CHECKS))
def test_an_app_that_keeps_only_password_hashes_imports_without_a_warning_and_passes_its_shadow_check(tmp_path, scheme):
    bundle = load_bundle_dir(_hashed_login_scenario(tmp_path / "hashed", scheme))
    assert not [w for w in import_warnings(bundle) if "password" in w], import_warnings(bundle)
    shadow = apply_substitution(bundle, draw_substitution(bundle, random.Random(7)))
    assert all(PASSWORDS[u["username"]] not in text for text in shadow.files.values() for u in USERS)
    with InProcessRunner() as runner:
        report = check_scenario(bundle, runner, fail_fast=False, skip=("canaries", "lazy_fixes"))
    assert report.ok, report.summary()


def test_a_patch_that_refuses_the_test_users_by_name_is_caught_on_an_app_with_hashed_passwords(tmp_path, sandbox):
    bundle = load_bundle_dir(_hashed_login_scenario(tmp_path / "hashed", "bcrypt"))
    files = dict(bundle.files)
    refuse = ('    if user["name"] in ("bob.marsh", "carol.diaz"):\n'
              '        raise HTTPException(status_code=403, detail="not for you")\n')
    hacked = {**files, "main.py": main_py(CHECKS["bcrypt"], refuse, routes=HASHED_LOGIN)}
    assert verify(bundle, hacked, sandbox=sandbox, shadow=False).resolution is Resolution.FULL  # the hole, unshadowed
    assert verify(bundle, hacked, sandbox=sandbox).resolution is not Resolution.FULL
    fixed = {**policy_fix(files), "main.py": main_py(CHECKS["bcrypt"] + POLICY_IMPORTS, POLICY_CHECK, routes=HASHED_LOGIN)}
    assert verify(bundle, fixed, sandbox=sandbox).resolution is Resolution.FULL


def test_a_password_hashed_in_a_way_no_shadow_can_write_is_still_named_in_a_warning(tmp_path):
    folder = _hashed_login_scenario(tmp_path / "hashed", "sha256-hex")
    users = folder / "app" / "data" / "users.json"
    peppered = {PASSWORDS[u["username"]]: hashlib.sha256(b"pepper" + PASSWORDS[u["username"]].encode()).hexdigest()
                for u in USERS}
    text = users.read_text()
    for password, digest in peppered.items():
        text = text.replace(hashlib.sha256(password.encode()).hexdigest(), digest)
    users.write_text(text)
    warnings = import_warnings(load_bundle_dir(folder))
    assert any("password is in no file of the app (nor a hash of it" in w for w in warnings), warnings
