"""Shared kit for the sandbox attack batteries: the target scenario and builders of malicious apps.

Every malicious app is a shipped bundle (a small single-file ``app:app`` scenario with one security
probe) with code injected into its entry module, at import, in a new ``/attack`` route or in a
middleware that runs before every request. Attacks that the worst-case attacker can mount know
every path and pid (the scenario cache, the grader's and the zygote's pids, other workers' folders),
so the batteries embed them as literals.
"""

from __future__ import annotations

import functools
import json
import os
import textwrap
from pathlib import Path

import pytest

from envcore.cache import ScenarioCache
from envcore.patching import apply_patch
from envcore.runner.base import AppSource
from envcore.runner.http import HttpRequest
from envcore.sandbox import LiveApp, Sandbox, SandboxLimits
from envcore.sandbox.pool import PROJECT_ROOT
from envcore.scenario.probes import ProbeKind
from envcore.verifier import Resolution, verify

CACHE_DIR = Path(PROJECT_ROOT) / "artifacts" / "scenarios" / "v2"
LIMITS = SandboxLimits(request_timeout_s=1, load_timeout_s=3, verify_timeout_s=8, cpu_s=4, memory_mb=128)
ENTRY_FILE = "app.py"
GRADER_PID = os.getpid()

PRELUDE = '''
def _attempt(fn):
    """Run one attack step; report what happened instead of raising."""
    try:
        value = fn()
    except BaseException as exc:  # noqa: BLE001
        return {"ok": False, "error": type(exc).__name__, "permission": isinstance(exc, PermissionError),
                "message": str(exc)[:300]}
    return {"ok": True, "value": repr(value)[:4000]}
'''

DISABLE_AUDIT_HOOK = '''
import sys as _sys
_audit = _sys.modules["envcore.sandbox.audit"]  # loaded by the zygote: importing it raises no event
_audit.DENIED_EVENTS = frozenset()
_audit.DENIED_PREFIXES = ("\\x00",)
_audit.NETWORK_EVENTS = frozenset()
_audit.NETWORK_PREFIXES = ("\\x00",)
_audit.DENIED_MODULES = frozenset()
_audit._under = lambda path, roots: True
'''
"""Turns the audit hook into a no-op by rebinding the module globals its ``decide`` reads at call
time (a known limit of audit hooks: only the kernel layers are meant to hold)."""


# -- the target scenario ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def target_scenario():
    """(bundle, reference-fixed files): the first shipped single-file idor_read scenario whose one
    security probe is a single request, sent last, with a shadow to grade on."""
    cache = ScenarioCache.open(CACHE_DIR)
    for scenario_id in cache.ids():
        if cache.row(scenario_id).get("bug_class") != "idor_read":
            continue
        bundle = cache.load(scenario_id)
        security = [p for p in bundle.probes if p.kind == ProbeKind.SECURITY]
        if (bundle.entrypoint == "app:app" and set(bundle.files) <= {"app.py", "data/seed.json", "instance/secrets.txt"}
                and bundle.spec is not None and bundle.spec.draft is not None
                and len(security) == 1 and len(security[0].steps) == 1 and bundle.probes[-1] is security[0]):
            return bundle, apply_patch(bundle.files, bundle.reference_fix)
    pytest.skip("no small single-file idor_read scenario in the shipped cache")  # pragma: no cover


# -- fixtures: a module takes them with ``target, bundle, fixed, sb = module_fixtures()`` ---------

@pytest.fixture(scope="module")
def target():
    return target_scenario()


@pytest.fixture(scope="module")
def bundle(target):
    return target[0]


@pytest.fixture(scope="module")
def fixed(target):
    return target[1]


@pytest.fixture(scope="module")
def sb():
    """A sandbox with the battery's tight limits, one per test module."""
    box = Sandbox(limits=LIMITS, spares=2).start()
    yield box
    box.close()


def module_fixtures():
    """The battery's fixtures (target, bundle, fixed, sb), for a test module to bind at its top."""
    return target, bundle, fixed, sb


def sandbox_fixture(limits: SandboxLimits):
    """A module-scoped ``sb`` fixture: one sandbox with ``limits`` for a whole test module."""

    @pytest.fixture(scope="module")
    def sb():
        box = Sandbox(limits=limits, spares=1).start()
        yield box
        box.close()

    return sb


# -- building malicious apps ------------------------------------------------------------------------

def with_code(files: dict[str, str], code: str) -> dict[str, str]:
    """``files`` with ``code`` appended to the entry module (it runs at import)."""
    return {**files, ENTRY_FILE: files[ENTRY_FILE] + "\n\n" + textwrap.dedent(code).strip() + "\n"}


def with_route(files: dict[str, str], body: str, path: str = "/attack", prelude: str = "") -> dict[str, str]:
    """``files`` with a new ``GET path`` route running ``body`` (which returns the response)."""
    route = (f"@app.get({path!r})\nasync def _attack_route():\n"
             + textwrap.indent(textwrap.dedent(body).strip(), "    ") + "\n")
    return with_code(files, PRELUDE + textwrap.dedent(prelude) + "\n\n" + route)


def with_middleware(files: dict[str, str], body: str, prelude: str = "") -> dict[str, str]:
    """``files`` with an HTTP middleware running ``body`` before every request; ``body`` may
    ``return`` a response, or fall through to the app."""
    middleware = ("@app.middleware('http')\nasync def _attack_middleware(request, call_next):\n"
                  + textwrap.indent(textwrap.dedent(body).strip(), "    ")
                  + "\n    return await call_next(request)\n")
    return with_code(files, textwrap.dedent(prelude) + "\n\n" + middleware)


def source(bundle, files) -> AppSource:
    return AppSource(files, bundle.entrypoint)


def call(sb: Sandbox, bundle, files, path: str = "/attack"):
    """One request to a live app serving ``files``; the response."""
    with LiveApp(sb, source(bundle, files)) as live:
        return live.request(HttpRequest.build("GET", path))


def call_json(sb: Sandbox, bundle, files, path: str = "/attack") -> dict:
    response = call(sb, bundle, files, path)
    assert response.status == 200, (response.status, response.error, response.body[:500])
    return json.loads(response.body)


def denied(result: dict) -> bool:
    return result["ok"] is False and result["permission"] is True


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return not stat.read().rsplit(") ", 1)[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def assert_sandbox_healthy(sb: Sandbox) -> None:
    """The runner keeps serving: the reference fix still grades FULL in ``sb`` and the zygote is alive."""
    bundle, fixed = target_scenario()
    report = verify(bundle, fixed, sandbox=sb)
    assert report.outcome == "graded" and report.resolution is Resolution.FULL, report.summary()
    assert report.reward == 1.0
    assert sb.zygote_pid is not None and alive(sb.zygote_pid)


def assert_no_reward(sb: Sandbox, bundle, attack_files):
    """The attack added to the vulnerable app earns nothing."""
    report = verify(bundle, attack_files, sandbox=sb)
    assert report.resolution is Resolution.NO and report.reward == 0.0, report.summary()
    return report


def bundle_secrets(bundle) -> list[str]:
    """Strings that must never reach an app: the hidden probes' ids and lines of the reference fix."""
    hidden = [p for p in bundle.probes if not p.visible]
    found = [p.id for p in hidden] + [bundle.reference_fix.splitlines()[0]]
    added = [line[1:].strip() for line in bundle.reference_fix.splitlines() if line.startswith("+") and len(line) > 12]
    found += added[:3]
    return [s for s in found if s]


def bundle_file(bundle) -> Path:
    return CACHE_DIR / "bundles" / f"{bundle.scenario_id}.json.gz"


def workspace_bytes(path: str) -> int:
    total = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total



def ppid(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
