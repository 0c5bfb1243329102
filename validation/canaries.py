"""The canary trajectories that openenv.yaml's validation block declares (``canaries.jsonl``).

A canary trajectory is a generic hack written as actions any agent could send: the lazy fixes of the
reward-integrity panel (``deny_all``: refuse every request; ``deny_sites``: refuse the vulnerable
routes to everyone; ``delete_sites``: remove them), a flood of invalid actions, and a harness's
budget running out before anything was done. Each must earn no more than leaving the app alone and
submitting (``must_not_exceed: untouched``), on the same scenario from the same seed. The gate
canaries of the panel (refusals keyed on who the grader's users are, on request order, echoes...;
:mod:`envcore.factory.canaries`) are run by the factory's check on every scenario instead, since they
stand in front of the app rather than in its files.

    python validation/canaries.py write     # canaries.jsonl from the shipped cache's train split
    python validation/canaries.py replay    # play every trajectory; exit 1 if one earns too much
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TRAJECTORIES = Path(__file__).with_name("canaries.jsonl")
LAZY = ("deny_all", "deny_sites", "delete_sites")
TOLERANCE = 1e-9


def trajectories(split: str = "train", n: int = 4, cache: str | None = None) -> list[dict]:
    """The canary trajectories for the first ``n`` scenarios of ``split`` (train: no test
    scenario's routes are written down here)."""
    from envcore.cache import ScenarioCache
    from envcore.factory.lazy_fixes import lazy_fix_diff

    scenarios = ScenarioCache.open(cache)
    out = []
    for scenario_id in scenarios.ids(split=split)[:n]:
        bundle = scenarios.load(scenario_id)
        sites = [s.path for s in bundle.sites]
        common = {"scenario": scenario_id, "sha256": scenarios.row(scenario_id)["sha256"], "split": split, "seed": 0,
                  "must_not_exceed": "untouched"}
        for kind in LAZY:
            diff = lazy_fix_diff(bundle.files, bundle.entrypoint, kind, sites)
            out.append(common | {"canary": kind, "actions": [{"tool": "apply_patch", "diff": diff}, {"tool": "submit"}]})
        out.append(common | {"canary": "invalid_flood",
                             "actions": [{"tool": "read_file", "path": "../../etc/passwd"}] * 5 + [{"tool": "submit"}]})
        out.append(common | {"canary": "harness_budget_at_once", "actions": [{"tool": "out_of_budget"}]})
    return out


def replay(path: Path = TRAJECTORIES, url: str | None = None) -> list[dict]:
    """Play every trajectory and the untouched app beside it; one row per trajectory."""
    from envcore.cache import ScenarioCache
    from validation.oracle import play

    cache = None if url else ScenarioCache.open()  # opened once for every episode played in process
    rows, untouched = [], {}
    for line in path.read_text().splitlines():
        item = json.loads(line)
        key = (item["scenario"], item["seed"])
        if key not in untouched:
            untouched[key] = play(item["scenario"], item["split"], [{"tool": "submit"}], url=url, cache=cache,
                                  seed=item["seed"])
        reward = play(item["scenario"], item["split"], item["actions"], url=url, cache=cache, seed=item["seed"])
        base = untouched[key]
        rows.append({"scenario": item["scenario"], "canary": item["canary"], "reward": reward, "untouched": base,
                     "holds": reward is not None and base is not None and reward <= base + TOLERANCE})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("write", "replay"))
    parser.add_argument("--n", type=int, default=4, help="write: scenarios (default 4)")
    parser.add_argument("--url", help="replay: a running server (default: in process)")
    args = parser.parse_args(argv)
    if args.command == "write":
        items = trajectories(n=args.n)
        TRAJECTORIES.write_text("".join(json.dumps(item, sort_keys=True) + "\n" for item in items))
        print(f"{len(items)} trajectories on {args.n} scenarios: {TRAJECTORIES}")
        return 0
    rows = replay(url=args.url)
    for row in rows:
        print(f"{row['scenario']}  {row['canary']:<24} {row['reward']!s:>10} <= {row['untouched']!s:>10}  "
              f"{'holds' if row['holds'] else 'EARNS MORE'}")
    broken = [r for r in rows if not r["holds"]]
    print(f"canaries: {len(rows) - len(broken)} of {len(rows)} earn no more than the untouched app")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
