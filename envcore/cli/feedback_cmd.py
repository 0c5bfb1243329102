"""``python -m envcore feedback analyze | plan | refresh``: the feedback loop's three steps.

* ``analyze --logs DIR [--logs DIR ...] --out DIR``: categorise every episode of every log under the
  folders, and write ``analysis.json`` and ``report.md``;
* ``plan --analysis FILE --agent NAME --out DIR``: write ``weights.json`` (what the curriculum
  sampler reads: ``A01_WEIGHTS``, a training config's ``environment.weights``), ``job.yaml`` (what
  ``factory build --job`` and ``feedback refresh`` take) and ``plan.md``;
* ``refresh --job FILE --out artifacts/scenarios/vN [--n 200]``: a new cache version holding the
  parent's scenarios and ``n`` new ones built from the job, with its lineage in the manifest.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from envcore.cli.progress import progress_bar


def register(groups: argparse._SubParsersAction) -> None:
    group = groups.add_parser("feedback", help="failure analysis, sampling weights, factory jobs, cache refresh",
                              description="The feedback loop: episode logs -> failure analysis -> sampling weights and "
                              "a factory job -> a refreshed cache version (docs/feedback.md).")
    cmds = group.add_subparsers(dest="command", metavar="<command>", required=True)

    a = cmds.add_parser("analyze", help="categorise why episodes failed, by bug class, tier, domain and agent",
                        description="Give every finished episode of the logs a failure category (a declarative table: "
                        "app broken, guard broken, over-restriction, partial fix, format errors, budget exhausted, no "
                        "patch, wrong site; infrastructure failures excluded) and write analysis.json and report.md to "
                        "--out.")
    a.add_argument("--logs", action="append", required=True, type=Path,
                   help="a folder of episode logs (searched recursively) or one log; repeatable")
    a.add_argument("--out", required=True, type=Path, help="output folder")
    a.add_argument("--cache", type=Path, help="the scenario cache the episodes played (default: the newest shipped one)")
    a.add_argument("--examples", type=int, default=3, help="example episodes per category (default 3)")
    a.add_argument("--include-validation", action="store_true", help="also count the oracle's validation runs")
    a.set_defaults(func=cmd_analyze)

    p = cmds.add_parser("plan", help="sampling weights and a factory job for one agent, from an analysis",
                        description="From --analysis, for --agent: sampling weights that favour the slices at the edge of "
                        "its ability (weights.json, read by the curriculum sampler), a factory job asking for more of "
                        "what it fails at (job.yaml) and plan.md.")
    p.add_argument("--analysis", required=True, type=Path, help="an analysis.json from feedback analyze")
    p.add_argument("--agent", help="the agent to plan for (required when the analysis holds several)")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--cache", type=Path, help="the parent cache whose factory config the job changes (default: newest)")
    p.add_argument("--floor", type=float, default=0.1, help="the weight of an always- or never-solved slice (default 0.1)")
    p.add_argument("--min-episodes", type=int, default=5, help="fewer graded episodes than this: weight 1 (default 5)")
    p.set_defaults(func=cmd_plan)

    r = cmds.add_parser("refresh", help="build a new cache version from a factory job, with lineage",
                        description="Copy the parent cache's scenarios and add --n new ones built from the job's config "
                        "changes (train-split domains only, so held-out splits stay the parent's), into --out, a new "
                        "version whose manifest records its lineage. The parent is not modified.")
    r.add_argument("--job", required=True, type=Path, help="a job.yaml from feedback plan")
    r.add_argument("--out", required=True, type=Path, help="the new version's folder, e.g. artifacts/scenarios/v2")
    r.add_argument("--cache", type=Path, help="the parent cache (default: the newest shipped one)")
    r.add_argument("--n", type=int, default=200, help="new scenarios to build (default 200)")
    r.add_argument("--seed", type=int, help="first seed (default: after the parent's)")
    r.add_argument("--workers", type=int, help="build processes (default: CPU count)")
    r.set_defaults(func=cmd_refresh)


def cmd_analyze(args: argparse.Namespace) -> int:
    from envcore.cache import CacheError, ScenarioCache
    from envcore.feedback.analysis import analyze, find_logs, render_report

    logs = []
    for folder in args.logs:
        if not folder.exists():
            raise SystemExit(f"{folder} does not exist")
        found = find_logs(folder)
        prefix = folder.name if len(args.logs) > 1 else ""
        logs += [(f"{prefix}/{name}".strip("/") if prefix else name, path) for name, path in found]
    if not logs:
        raise SystemExit(f"no episode log under {', '.join(map(str, args.logs))}")
    try:
        cache = ScenarioCache.open(args.cache)
    except CacheError as exc:
        raise SystemExit(f"error: {exc}") from None
    analysis = analyze(logs, cache, examples=args.examples, include_validation=args.include_validation)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "analysis.json").write_text(json.dumps(analysis, indent=1) + "\n")
    (args.out / "report.md").write_text(render_report(analysis))
    overall = analysis["overall"]
    top = sorted(((n, c) for c, n in overall["counts"].items() if c != "solved" and n), reverse=True)[:3]
    print(f"{overall['episodes']} episodes from {len(logs)} log(s): solved {overall['counts']['solved']}; most common "
          f"failures: {', '.join(f'{c} {n}' for n, c in top) or 'none'}; wrote {args.out / 'analysis.json'}, "
          f"{args.out / 'report.md'}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    import yaml

    from envcore.cache import CacheError, ScenarioCache
    from envcore.feedback.plan import PlanError, choose_agent, factory_job, render_plan, sampling_weights
    from envcore.feedback.refresh import parent_config

    try:
        analysis = json.loads(args.analysis.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read {args.analysis}: {exc}") from None
    if not 0 <= args.floor <= 1 or args.min_episodes < 0:
        raise SystemExit("--floor must be in [0, 1] and --min-episodes at least 0")
    try:
        cache = ScenarioCache.open(args.cache)
        agent = choose_agent(analysis, args.agent)
        weights = sampling_weights(analysis, agent, floor=args.floor, min_episodes=args.min_episodes,
                                   source=str(args.analysis))
        base, _ = parent_config(cache)
        job = factory_job(analysis, agent, base, parent=cache.root.name, source=str(args.analysis),
                          min_episodes=args.min_episodes)
    except (PlanError, CacheError) as exc:
        raise SystemExit(f"error: {exc}") from None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "weights.json").write_text(json.dumps(weights, indent=1) + "\n")
    (args.out / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    (args.out / "plan.md").write_text(render_plan(weights, job, agent))
    print(f"{job['reason']}\nwrote {args.out / 'weights.json'} (A01_WEIGHTS, environment.weights), "
          f"{args.out / 'job.yaml'} (factory build --job, feedback refresh --job), {args.out / 'plan.md'}")
    return 0


def cmd_refresh(args: argparse.Namespace) -> int:
    from envcore.cache import CacheError
    from envcore.feedback.refresh import RefreshError, refresh

    try:
        with progress_bar(max(args.n, 1), "building") as update:
            manifest = refresh(args.cache, args.job, args.out, n=args.n, seed=args.seed, workers=args.workers,
                               progress=update)
    except (RefreshError, CacheError) as exc:
        raise SystemExit(f"error: {exc}") from None
    lineage = manifest["lineage"]
    print(f"{args.out}: {manifest['counts']['total']['scenarios']} scenarios ({lineage['parent_scenarios']} from "
          f"{lineage['parent']}, {lineage['added']} new, {lineage['rejected']} seeds rejected); lineage in its manifest")
    return 0
