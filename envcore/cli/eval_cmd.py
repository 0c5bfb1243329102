"""``python -m envcore eval`` and ``python -m envcore compare``: held-out evaluation and paired comparison.

``eval`` plays one agent on the first ``--n`` scenarios of ``--split`` (in process, or against the
servers given with ``--url``) and writes to ``--out``: ``episodes.jsonl`` (the episode log, which
makes the run resumable: run the same command again to finish an interrupted one), ``summary.json``
and ``report.md``. ``compare`` pairs two such folders on the scenarios both played.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from envcore.cli.progress import progress_bar


def register(groups: argparse._SubParsersAction) -> None:
    from envcore.agents.baselines import BASELINES

    e = groups.add_parser("eval", help="evaluate an agent on held-out scenarios",
                          description="Play --agent on the first --n scenarios of --split (sorted by id, so every agent "
                          "gets the same ones) and write episodes.jsonl, summary.json and report.md to --out. "
                          "Resumable: episodes already in --out/episodes.jsonl are not played again.")
    e.add_argument("--agent", required=True, choices=sorted(BASELINES), help="the agent to evaluate")
    e.add_argument("--adapter", help="a LoRA adapter folder (language-model agents only)")
    e.add_argument("--split", default="test", help="split to evaluate on (default test; 'any' for all)")
    e.add_argument("--n", type=int, help="number of scenarios (default: the whole split)")
    e.add_argument("--out", required=True, help="output folder")
    e.add_argument("--parallel", type=int, default=1, help="sessions played at once (default 1)")
    e.add_argument("--url", action="append", default=[], help="play against this server (repeat for several replicas)")
    e.add_argument("--cache", help="scenario cache (default: the newest shipped one)")
    e.set_defaults(func=cmd_eval)

    c = groups.add_parser("compare", help="compare two evaluation runs, paired on their common scenarios",
                          description="Pair two eval output folders on the scenarios both played and print (and with "
                          "--out, write) the difference in mean reward with its 95%% bootstrap interval and the full "
                          "fixes each made that the other did not.")
    c.add_argument("base", help="eval folder of the baseline")
    c.add_argument("other", help="eval folder of the agent compared with it")
    c.add_argument("--out", help="write the comparison as Markdown here")
    c.set_defaults(func=cmd_compare)


def _domains(cache) -> dict[str, str]:
    return {row["scenario_id"]: row.get("domain", "unknown") for row in cache.rows}


def cmd_eval(args: argparse.Namespace) -> int:
    from envcore.agents.baselines import BASELINES, OracleAgent
    from envcore.agents.evaluate import evaluation_episodes, render_report, summarize
    from envcore.agents.rollouts import run_rollouts
    from envcore.cache import ScenarioCache
    from envcore.env.episode_log import read_episodes

    if args.adapter:
        raise SystemExit(f"--adapter is for language-model agents; {args.agent!r} is a scripted baseline")
    if args.n is not None and args.n < 1 or args.parallel < 1:
        raise SystemExit("--n and --parallel must be at least 1")
    cache = ScenarioCache.open(args.cache)
    split = None if args.split == "any" else args.split
    episodes = evaluation_episodes(cache, split=split, n=args.n)
    if not episodes:
        raise SystemExit(f"no scenarios in split {args.split!r} of {cache.root}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "episodes.jsonl"
    agent_class = BASELINES[args.agent]

    def factory():
        return OracleAgent(cache) if agent_class is OracleAgent else agent_class()

    runtime = None
    if not args.url:
        from envcore.env.environment import Runtime
        from envcore.env.sampler import CurriculumSampler

        runtime = Runtime.from_environ(sampler=CurriculumSampler(cache))
    with progress_bar(len(episodes), f"eval {args.agent}") as update:
        result = run_rollouts(factory, episodes, log=log, parallel=args.parallel, urls=args.url or None,
                              runtime=runtime, agent_id=args.agent, source="evaluation", progress=update)
    records = [r for r in read_episodes(log) if r.agent_id == args.agent]
    summary = summarize(records, domains=_domains(cache))
    summary["run"] = {"agent": args.agent, "split": args.split, "n": len(episodes), "cache": cache.root.name,
                      "played": result.played, "resumed": result.skipped, "failed": result.failed}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "report.md").write_text(render_report(summary, title=f"{args.agent} on {args.split} ({cache.root.name})"))
    overall = summary["overall"]
    print(f"{args.agent}: {summary['episodes']} episodes ({result.played} played, {result.skipped} resumed, "
          f"{len(result.failed)} failed); full fix {overall['full_fix']['mean']:.1%}, "
          f"mean reward {overall['reward']['mean']:+.3f}; report: {out / 'report.md'}")
    for failure in result.failed[:10]:
        print(f"  failed: {failure}", file=sys.stderr)
    return 1 if result.failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from envcore.agents.evaluate import compare, render_comparison
    from envcore.env.episode_log import read_episodes

    logs = []
    for folder in (args.base, args.other):
        log = Path(folder) / "episodes.jsonl"
        if not log.exists():
            raise SystemExit(f"{folder} has no episodes.jsonl (is it an eval --out folder?)")
        logs.append(list(read_episodes(log)))
    result = compare(logs[0], logs[1])
    text = render_comparison(result, base=Path(args.base).name, other=Path(args.other).name)
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return 0
