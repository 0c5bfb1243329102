"""``python -m envcore try``: play a scenario of a cache with patches of your own, as an agent would.

A scenario's author (or anyone checking a cache) wants to see what a patch earns: the reference fix,
a fix that is too narrow, a lazy one. Each patch is played as one episode in process, through the
same environment an agent plays (``apply_patch``, ``run_tests``, ``submit``), graded in the sandbox on
shadow data, and its reward and breakdown are printed. The untouched app is played first, as the
baseline every patch is compared with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def register(groups: argparse._SubParsersAction) -> None:
    t = groups.add_parser(
        "try", help="play a scenario with your own patches and print what each earns",
        description="Play SCENARIO of CACHE once per PATCH (a unified diff against the app, as fix.diff is), as an "
                    "agent's episode: apply the patch, run the visible tests, submit. Grading is the sandbox's, on "
                    "fresh shadow data, exactly as in training. The untouched app is played first as the baseline "
                    "(--no-baseline leaves it out). Prints each episode's resolution, reward and breakdown; --json "
                    "prints them as one JSON object instead.")
    t.add_argument("cache", help="scenario cache folder (made by factory build or factory import)")
    t.add_argument("scenario", help="scenario id, or a unique prefix of one")
    t.add_argument("patches", nargs="*", metavar="PATCH", help="diff files to play, one episode each")
    t.add_argument("--no-baseline", action="store_true", help="do not play the untouched app first")
    t.add_argument("--json", action="store_true", help="print the results as JSON")
    t.set_defaults(func=cmd_try)


def cmd_try(args: argparse.Namespace) -> int:
    from envcore.cache import CacheError, ScenarioCache
    from envcore.env.environment import A01Environment, Runtime
    from envcore.env.sampler import CurriculumSampler

    diffs: list[tuple[str, str | None]] = [] if args.no_baseline else [("untouched", None)]
    for name in args.patches:
        path = Path(name)
        try:
            diffs.append((name, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            print(f"error: {name}: cannot read the patch ({getattr(exc, 'strerror', None) or exc})", file=sys.stderr)
            return 2
    if not diffs:
        print("error: nothing to play: give a PATCH, or leave out --no-baseline", file=sys.stderr)
        return 2
    try:
        cache = ScenarioCache.open(args.cache)
        scenario = cache.resolve(args.scenario)
    except (CacheError, KeyError, ValueError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    runtime = Runtime(sampler=CurriculumSampler(cache), source="try")
    results = []
    for name, diff in diffs:
        env = A01Environment(runtime)
        try:
            results.append(_play(env, scenario, name, diff))
        finally:
            env.close()
    if args.json:
        print(json.dumps({"scenario": scenario, "episodes": results}, indent=1))
    else:
        print(f"scenario {scenario}: {cache.load(scenario).title}")
        for result in results:
            _print(result)
    return 0


def _play(env: Any, scenario: str, name: str, diff: str | None) -> dict[str, Any]:
    started = time.perf_counter()
    env.reset(scenario=scenario, split="any", agent_id="try")
    steps: list[dict[str, Any]] = []
    if diff is not None:
        applied = env.step({"tool": "apply_patch", "diff": diff})
        steps.append({"tool": "apply_patch", "error": applied.error, "text": applied.text})
        if applied.error is None:
            tested = env.step({"tool": "run_tests"})
            steps.append({"tool": "run_tests", "error": tested.error, "text": tested.text})
    final = env.step({"tool": "submit"})
    breakdown = final.reward_breakdown or {}
    return {"patch": name, "reward": final.reward, "resolution": breakdown.get("resolution"), "steps": steps,
            "components": breakdown.get("components", []), "summary": final.text,
            "seconds": round(time.perf_counter() - started, 2)}


def _print(result: dict[str, Any]) -> None:
    reward = result["reward"]
    shown = f"{reward:+.3f}" if isinstance(reward, (int, float)) else "none"
    print(f"\n== {result['patch']}: {str(result['resolution'] or 'no resolution').upper()}, reward {shown} "
          f"({result['seconds']:.1f} s)")
    for step in result["steps"]:
        if step["error"]:
            print(f"  {step['tool']}: error: {step['error']}")
        elif step["tool"] == "run_tests":
            print(f"  run_tests: {(step['text'] or '').splitlines()[0] if step['text'] else ''}")
    for component in result["components"]:
        print(f"  {component['name']:<18} {component['value']:+.3f}  {component['detail']}")
