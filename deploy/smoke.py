"""Check a deployed A01 repair gym from outside: health, the sandbox it reports, the page, two episodes.

    python deploy/smoke.py http://localhost:7860 [--expect full|reduced|refused] [--json]

1. ``GET /health`` until it answers (up to ``--wait`` seconds): its status and the sandbox layers it
   reports must match ``--expect`` (``full``: every layer, grading on, HTTP 200; ``reduced``: a layer
   missing and allowed by the operator, HTTP 200; ``refused``: HTTP 503 and no grading);
2. ``GET /metadata`` reports the same sandbox; ``GET /`` serves the page (unless ``--no-page``);
3. with grading on, one episode over ``/ws`` that applies the scenario's reference fix and submits
   (FULL, reward above 0.95) and one that submits the app untouched (NO, reward at most 0); with
   grading refused, the submit must come back without a reward and say why.

The reference fix comes from this checkout's copy of the server's scenario cache (the one the image
was built from). Prints one line per check (or a JSON summary) and exits 1 on the first failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class SmokeFailure(AssertionError):
    pass


def _get(url: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for_health(base: str, wait_s: float) -> tuple[int, dict[str, Any], float]:
    """``/health``'s status code and body, and the seconds it took to answer at all."""
    started = time.monotonic()
    last: Exception | None = None
    while time.monotonic() - started < wait_s:
        try:
            code, body = _get(base + "/health", timeout_s=5.0)
            return code, json.loads(body), time.monotonic() - started
        except (OSError, ValueError) as exc:
            last = exc
            time.sleep(0.25)
    raise SmokeFailure(f"/health did not answer within {wait_s:g} s ({last})")


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def play(base: str, *, fix: bool) -> tuple[Any, str]:
    """One episode on a test scenario: the reference fix (``fix``) or nothing, then submit."""
    from envcore.cache import ScenarioCache
    from envcore.env.actions import ApplyPatch, ListFiles, Submit
    from envcore.env.client import A01Env

    with A01Env(base_url=base, message_timeout_s=120.0).sync() as env:
        result = env.reset(seed=5, split="test")
        scenario_id = result.observation.scenario_id
        env.step(ListFiles())
        if fix:
            bundle = ScenarioCache.open(None).load(scenario_id)
            patched = env.step(ApplyPatch(diff=bundle.reference_fix))
            check(patched.observation.error is None, f"the reference fix did not apply: {patched.observation.error}")
        return env.step(Submit()), scenario_id


def run(base: str, expect: str, wait_s: float, page: bool) -> dict[str, Any]:
    base = base.rstrip("/")
    summary: dict[str, Any] = {"url": base}
    code, health, took = wait_for_health(base, wait_s)
    summary["health_after_s"] = round(took, 2)
    sandbox = health.get("sandbox") or {}
    summary["sandbox"] = sandbox.get("summary")
    summary["mode"] = sandbox.get("mode")
    check(sandbox.get("mode") == expect, f"/health reports the sandbox as {sandbox.get('mode')!r}, expected {expect!r}: "
                                         f"{sandbox.get('summary')}")
    if expect == "refused":
        check(code == 503 and health.get("status") == "unhealthy", f"/health answered {code} {health.get('status')}")
    else:
        check(code == 200 and health.get("status") == "healthy", f"/health answered {code} {health.get('status')}")
    code, body = _get(base + "/metadata")
    metadata = json.loads(body)
    check(code == 200 and metadata.get("name") and (metadata.get("sandbox") or {}).get("mode") == expect,
          f"/metadata answered {code} without the same sandbox")
    if page:
        started = time.monotonic()
        code, body = _get(base + "/", timeout_s=60.0)
        summary["page_s"] = round(time.monotonic() - started, 2)
        check(code == 200 and b"A01 repair gym" in body, f"the page answered {code}")
    fixed, scenario_id = play(base, fix=True)
    summary["scenario"] = scenario_id
    if expect == "refused":
        check(fixed.reward is None and "refuses" in json.dumps(fixed.observation.model_dump(mode="json")),
              f"a refused sandbox still graded: reward {fixed.reward}")
        summary["refused_submit"] = "no reward, with the reason"
        return summary
    result = fixed.observation.result or {}
    check(fixed.done and fixed.reward is not None and fixed.reward > 0.95 and result.get("resolution") == "full",
          f"the reference fix scored {fixed.reward} ({result.get('resolution')}) on {scenario_id}")
    summary["reference_fix"] = {"reward": fixed.reward, "resolution": result.get("resolution")}
    untouched, _ = play(base, fix=False)
    check(untouched.done and untouched.reward is not None and untouched.reward <= 0,
          f"the untouched app scored {untouched.reward}")
    summary["untouched"] = {"reward": untouched.reward, "resolution": (untouched.observation.result or {}).get("resolution")}
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="http://localhost:7860")
    parser.add_argument("--expect", choices=("full", "reduced", "refused"), default="full")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for /health (default 120)")
    parser.add_argument("--no-page", action="store_true", help="skip GET / (a server run with A01_UI=0)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    try:
        summary = run(args.url, args.expect, args.wait, page=not args.no_page)
    except SmokeFailure as exc:
        print(f"smoke: FAILED: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary) if args.json else "\n".join(f"smoke: {k}: {v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
