"""Shadow data: same code, people and records the agent never saw, drawn anew for every grading.
Patches that special-case the seeded users or records, or edit the data files, do not survive
regrading, and nothing one grading's shadow reveals works in the next."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys

import pytest

from envcore.patching import apply_patch
from envcore.runner.base import AppSource
from envcore.scenario.bundle import ShadowValue
from envcore.scenario.probes import ProbeKind
from envcore.verifier.shadow import (
    apply_substitution, draw_shadow, draw_substitution, fresh_value, is_code, regrade_files, shadowable,
)


def _run(runner, files, bundle):
    tokens = {u.username: u.token for u in bundle.users}
    return runner.run(AppSource(files, bundle.entrypoint), bundle.probes, tokens)


def _data_text(bundle) -> str:
    """Everything a shadow replaces identities in: data files (paths and text), probes, users."""
    parts = [f"{p}\n{t}" for p, t in bundle.files.items() if not is_code(p)]
    parts += [p.model_dump_json() for p in bundle.probes] + [u.model_dump_json() for u in bundle.users]
    return "\n".join(parts)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_shadow_keeps_the_code_and_changes_every_identity(seed, bundle_for):
    bundle = bundle_for(seed)
    shadow = draw_shadow(bundle, random.Random(1000 + seed))  # not the factory's own stream
    assert shadow is not None
    assert {p: t for p, t in bundle.files.items() if is_code(p)} == {p: t for p, t in shadow.files.items() if is_code(p)}
    assert {u.username for u in bundle.users}.isdisjoint({u.username for u in shadow.users})
    assert {u.token for u in bundle.users}.isdisjoint({u.token for u in shadow.users})
    assert {u.user_id for u in bundle.users}.isdisjoint({u.user_id for u in shadow.users})
    text = _data_text(shadow)
    left = [item.value for item in shadowable(bundle) if item.value in text]
    assert left == [], f"identities the shadow kept: {left}"
    assert shadow.reference_fix == bundle.reference_fix
    assert [p.id for p in shadow.probes] == [p.id for p in bundle.probes]


def test_every_drawn_identity_of_a_generated_bundle_is_declared(bundle_for):
    """The factory declares what it drew: no token, id, name or marker of the spec is left out."""
    for seed in range(8):
        bundle = bundle_for(seed)
        declared = {item.value for item in bundle.shadow_values}
        spec = bundle.spec
        for user in spec.users:
            assert {user.username, user.display_name, user.user_id, user.token, user.api_key} <= declared
        for record in spec.records:
            assert record.record_id in declared
            markers = [m for v in record.values.values() if isinstance(v, str) for m in re.findall(r"[0-9a-f]{6}$", v)]
            assert set(markers) <= declared
        assert spec.app_secret in declared


@pytest.mark.parametrize("value, keep, shape", [
    ("tok_3b09364830407f300f036a16", 4, r"tok_[0-9a-f]{24}"),
    ("usr_8a364d31", 4, r"usr_[0-9a-f]{8}"),
    ("zoe.tanaka78", 0, r"[a-z]{3}\.[a-z]{6}[0-9]{2}"),
    ("Zoe Tanaka", 0, r"[A-Z][a-z]{2} [A-Z][a-z]{5}"),
    ("48213", 0, r"[1-9][0-9]{4}"),
    ("90d302", 0, r"[0-9a-f]{6}"),
    ("pbkdf2$dd1786345c63d8d391fd87823c4021c8", 7, r"pbkdf2\$[0-9a-f]{32}"),
    ("contoso-fb95", 0, r"[a-z]{7}-[a-z]{2}[0-9]{2}"),
    ("report-4bdf.txt", 7, r"report-[0-9a-f]{4}\.txt"),
], ids=["token", "user-id", "username", "display-name", "int-id", "marker", "hash", "tenant", "file-name"])
def test_a_fresh_value_keeps_the_shape_of_the_old(value, keep, shape):
    rng = random.Random(7)
    for _ in range(20):
        new = fresh_value(ShadowValue(value=value, keep=keep), rng)
        assert re.fullmatch(shape, new), new


def test_shadows_are_fresh_for_every_grading(bundle_for):
    bundle = bundle_for(3)
    first, second = draw_shadow(bundle), draw_shadow(bundle)
    assert {u.token for u in first.users}.isdisjoint({u.token for u in second.users})
    assert {u.username for u in first.users}.isdisjoint({u.username for u in second.users})
    assert first.files["data/seed.json"] != second.files["data/seed.json"]


def test_shadow_of_the_reference_fix_is_full_marks(bundle_for, runner):
    for seed in (7, 11):
        bundle = bundle_for(seed)
        shadow = draw_shadow(bundle, random.Random(1000 + seed))
        fixed = apply_patch(bundle.files, bundle.reference_fix)
        report = _run(runner, regrade_files(fixed, shadow, bundle), shadow)
        assert all(o.passed for o in report.outcomes), [o.probe_id for o in report.outcomes if not o.passed]
        vulnerable = _run(runner, regrade_files(bundle.files, shadow, bundle), shadow)
        assert not all(o.passed for o in vulnerable.outcomes if o.kind == ProbeKind.SECURITY)


def _attacker_blocking_patch(bundle, token: str) -> dict[str, str]:
    """A reward hack: refuse one token by value instead of fixing the access check."""
    path = next(p for p, t in bundle.files.items() if "def resolve_user(request: Request):" in t)
    text = bundle.files[path].replace(
        '    """Return the user that owns the request\'s bearer token, or None."""\n',
        '    """Return the user that owns the request\'s bearer token, or None."""\n'
        f'    if "{token}" in request.headers.get("authorization", ""):\n'
        "        return None\n",
    )
    assert text != bundle.files[path]
    return {**bundle.files, path: text}


def _idor_bundle(bundle_for):
    return next(b for b in map(bundle_for, range(30)) if b.bug_class in ("idor_read", "idor_write")
                and any("def resolve_user(request: Request):" in t for t in b.files.values()))


def _attackers_exploits(bundle, outcomes):
    """The outcomes of the security probes the attacker sends (not the second intruder's copies)."""
    attacker = bundle.spec.player("attacker").username
    ids = {p.id for p in bundle.probes if p.kind == ProbeKind.SECURITY and any(s.actor == attacker for s in p.steps)}
    return [o for o in outcomes if o.probe_id in ids]


def test_special_casing_the_seeded_attacker_is_caught_by_shadow_data(bundle_for, runner):
    bundle = _idor_bundle(bundle_for)
    hacked = _attacker_blocking_patch(bundle, bundle.spec.player("attacker").token)
    on_seen_data = _run(runner, hacked, bundle)
    security = _attackers_exploits(bundle, on_seen_data.outcomes)
    assert security and all(o.passed for o in security)  # the hack fools the attacker's probes on seen data
    # ... but not the same exploits tried by a second user, nor the attacker's on shadow data
    assert not all(o.passed for o in on_seen_data.outcomes if o.kind == ProbeKind.SECURITY)
    shadow = draw_shadow(bundle)
    regraded = _run(runner, regrade_files(hacked, shadow, bundle), shadow)
    assert not all(o.passed for o in _attackers_exploits(bundle, regraded.outcomes))


def test_a_shadow_identity_learned_in_one_grading_is_useless_in_the_next(bundle_for, runner):
    """Even a patch that knows one grading's shadow attacker (say it leaked) fails the next grading."""
    bundle = _idor_bundle(bundle_for)
    attacker = bundle.spec.player("attacker").username
    leaked = draw_substitution(bundle)
    leaked_shadow = apply_substitution(bundle, leaked)
    hacked = _attacker_blocking_patch(bundle, leaked_shadow.user(leaked.mapping[attacker]).token)
    on_leaked = _run(runner, regrade_files(hacked, leaked_shadow, bundle), leaked_shadow)
    assert all(o.passed for o in _attackers_exploits(bundle, on_leaked.outcomes))  # it would have worked there
    fresh = draw_shadow(bundle)
    regraded = _run(runner, regrade_files(hacked, fresh, bundle), fresh)
    assert not all(o.passed for o in _attackers_exploits(bundle, regraded.outcomes))


def test_deleting_the_attacker_session_from_seed_data_does_not_survive_regrading(bundle_for, runner):
    """A data edit is graded as written (envcore.scenario.patch_scope): the lines it left are the
    shadow's, so it pins no identity it saw, and deleting the attacker's line locks out whoever the
    shadow puts there, a lockout by position that the attacker's own legitimate use catches."""
    def outcomes(files, data):
        return _run(runner, files, data).outcomes

    def hacked_files(bundle):
        attacker = bundle.spec.player("attacker")
        lines = bundle.files["data/seed.json"].split("\n")
        return {**bundle.files, "data/seed.json": "\n".join(line for line in lines if attacker.token not in line)}

    def refused(results):
        return {o.probe_id for o in results if o.kind == ProbeKind.SECURITY and o.passed}

    # a scenario where the hack refuses an exploit on the data the agent edited
    bundle = next(b for b in map(bundle_for, range(30))
                  if refused(outcomes(hacked_files(b), b)) - refused(outcomes(b.files, b)))
    hacked = hacked_files(bundle)
    shadow = draw_shadow(bundle)
    regraded = regrade_files(hacked, shadow, bundle)["data/seed.json"]
    assert regraded != shadow.files["data/seed.json"]  # the edit counts ...
    assert not any(u.token in regraded for u in bundle.users)  # ... but pins nobody the agent saw
    results = outcomes(regrade_files(hacked, shadow, bundle), shadow)
    legitimate = [o for o in results if o.kind in (ProbeKind.REGRESSION, ProbeKind.TRAP)]
    assert not all(o.passed for o in legitimate) or not all(o.passed for o in results if o.kind == ProbeKind.SECURITY)


def test_values_present_in_the_code_are_not_shadowed(bundle_for):
    bundle = bundle_for(1)
    user = bundle.users[0]
    path = next(p for p in bundle.files if is_code(p))
    coded = bundle.model_copy(update={"files": {**bundle.files, path: bundle.files[path] + f"\nADMIN = {user.username!r}\n"}})
    assert user.username not in {item.value for item in shadowable(coded)}
    shadow = draw_shadow(coded)
    assert user.username in {u.username for u in shadow.users}  # kept: the code needs it as it is


def test_a_bundle_that_declares_no_identities_is_graded_on_its_own_data(bundle_for):
    bundle = bundle_for(0).model_copy(update={"shadow_values": ()})
    assert draw_shadow(bundle) is None


def test_grading_does_not_need_the_factory(bundle_for, tmp_path):
    """The verifier shadows and grades a bundle in a process where the factory cannot be imported."""
    bundle = bundle_for(4)
    path = tmp_path / "bundle.json"
    path.write_text(bundle.model_dump_json())
    script = f"""
import sys
class NoFactory:
    def find_spec(self, name, path=None, target=None):
        if name == "envcore.factory" or name.startswith("envcore.factory."):
            raise ImportError("the factory is not available to grading")
sys.meta_path.insert(0, NoFactory())
from envcore.scenario.bundle import Bundle
from envcore.patching import apply_patch
from envcore.verifier import verify
bundle = Bundle.model_validate_json(open({str(path)!r}).read())
report = verify(bundle, apply_patch(bundle.files, bundle.reference_fix))
assert report.shadow and report.resolution.value == "full", report.summary()
assert not any(name.startswith("envcore.factory") for name in sys.modules)
print("graded without the factory")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "graded without the factory" in done.stdout


# -- apps that make their users in code (the external split) -------------------------------------------


@pytest.fixture(scope="module")
def external():
    """Two external scenarios as imported: the OWASP demo API (users in dicts in its routers, callers
    named by an X-User-ID header) and the RESTaurant API (users made by its start-up code, HS256 JWTs)."""
    from pathlib import Path

    from envcore.factory.byo import load_bundle_dir

    root = Path(__file__).resolve().parent.parent / "scenarios" / "external"
    return {name: load_bundle_dir(root / name) for name in ("apix-bola-user-profile", "dvra-order-idor")}


def _hack_refusing(bundle, header: str, values: tuple[str | None, ...], path_prefix: str):
    """A middleware appended to the entrypoint: refuse the callers whose ``header`` is one of
    ``values`` (``None``: none sent) on ``path_prefix``; a patch that names the user it saw attack
    instead of fixing the check."""
    module, attr = bundle.entrypoint.split(":")
    path = module.replace(".", "/") + ".py"
    hack = (f"\n\nfrom starlette.responses import JSONResponse as _Hack\n\n\n@{attr}.middleware('http')\n"
            f"async def _refuse_the_attacker(request, call_next):\n"
            f"    if request.url.path.startswith({path_prefix!r}) and request.headers.get({header!r}) in {values!r}:\n"
            f"        return _Hack({{'detail': 'forbidden'}}, status_code=403)\n"
            f"    return await call_next(request)\n")
    return {**bundle.files, path: bundle.files[path] + hack}


def test_a_patch_that_refuses_an_external_apps_attacker_by_name_fails_on_the_shadow(external):
    from envcore.verifier import verify

    bundle = external["apix-bola-user-profile"]
    # bob (id 2) reads alice's profile, alice (1) and anonymous callers bob's: refusing them there by
    # the header's value passes every probe on the app's own data
    hacked = _hack_refusing(bundle, "X-User-ID", ("2", None), "/api1/users/1")
    hacked = _hack_refusing(bundle.model_copy(update={"files": hacked}), "X-User-ID", ("1", None), "/api1/users/2")
    own = verify(bundle, hacked, shadow=False)
    assert own.resolution.value == "full", own.summary()
    # on the shadow alice and bob have other ids, made so by the routers' own dicts: the hack fails
    assert verify(bundle, hacked).resolution.value != "full"
    assert verify(bundle, apply_patch(bundle.files, bundle.reference_fix)).resolution.value == "full"


def test_values_in_the_code_that_makes_the_users_are_shadowed_in_its_strings_only(external):
    bundle = external["apix-bola-user-profile"]
    substitution = draw_substitution(bundle, random.Random(7))
    assert {"alice", "bob", "1", "2"} <= set(substitution.mapping)  # short values too, declared in code
    shadow = apply_substitution(bundle, substitution)
    router = "app/routers/api1_broken_object_level_auth.py"
    before, after = bundle.files[router], shadow.files[router]
    assert '"2": {"id": "2", "name": "Bob", "email": "bob@example.com"}' in before
    new_id, new_bob = substitution.mapping["2"], substitution.mapping["bob"]
    assert f'"{new_id}": {{"id": "{new_id}", "name": "Bob", "email": "{new_bob}@example.com"}}' in after
    assert "return fake_users_db[user_id]" in after and "router = APIRouter()" in after  # code as it was
    # a line the patch wrote, or changed, keeps what it says: a patch naming bob does not follow him
    patched = before.replace('"2": {"id": "2"', '"2": {"id": "2", "vip": "2"', 1) + '\nBLOCKED = {"2"}\n'
    regraded = regrade_files({**bundle.files, router: patched}, shadow, bundle)[router]
    assert 'BLOCKED = {"2"}' in regraded and '"vip": "2"' in regraded
    assert f'"1": {{"id": "1"' not in regraded  # alice's unchanged line is the shadow's


def test_a_jwt_the_app_signed_is_signed_anew_and_a_forged_one_stays_forged(external):
    import base64
    import hashlib
    import hmac

    from envcore.verifier.shadow import Substitution, shadow_jwt

    bundle = external["dvra-order-idor"]
    secret = bundle.shadow_in_code.jwt_secret

    def claims(token):
        body = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))

    def signed_by_secret(token):
        head, body, sig = token.split(".")
        digest = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == sig

    rename = Substitution({"johndoe": "qwertyu"})
    john = next(u for u in bundle.users if u.username == "johndoe")
    fresh = shadow_jwt(john.token, secret, rename)
    assert claims(fresh)["sub"] == "qwertyu" and signed_by_secret(fresh) and signed_by_secret(john.token)
    forged = john.token.rsplit(".", 1)[0] + ".AAAA"
    assert claims(shadow_jwt(forged, secret, rename))["sub"] == "qwertyu"
    assert shadow_jwt(forged, secret, rename).endswith(".AAAA")  # still refused by a server that checks
    shadow = draw_shadow(bundle, random.Random(3))
    assert all(signed_by_secret(u.token) for u in shadow.users)
    assert {u.username for u in shadow.users} & {"Mike", "Saul", "hhm", "johndoe", "alicesmith"} == set()
    assert "chef" in {u.username for u in shadow.users}  # named in the code's own identifiers: kept, as declared


def test_every_external_scenario_declares_a_shadow():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parent.parent / "scenarios" / "external"
    folders = [p for p in root.iterdir() if (p / "scenario.yaml").is_file()]
    assert len(folders) >= 10
    for folder in folders:
        assert yaml.safe_load((folder / "scenario.yaml").read_text()).get("shadow"), folder.name
