"""``python -m envcore bench ...``: commands that print measured figures (never timed assertions)."""

from __future__ import annotations

import argparse
import platform
import os

from envcore.cli.progress import progress_bar
from envcore.factory.build import build, default_workers
from envcore.factory.config import FactoryConfig


def register(groups: argparse._SubParsersAction) -> None:
    bench = groups.add_parser("bench", help="print performance figures",
                              description="Benchmarks: each prints the figures it measured on this machine.")
    cmds = bench.add_subparsers(dest="command", metavar="<command>", required=True)
    p = cmds.add_parser("factory", help="verified scenarios per second and reject share",
                        description="Build N seeds from the default config (nothing is written) and print verified "
                        "scenarios per second, the share of rejected seeds and the number of distinct hashes. "
                        "Runs with one worker and with --workers side by side. The build check is what "
                        "`factory build` runs; --full adds a run with the whole scenario check.")
    p.add_argument("--n", type=int, default=300, help="seeds to build (default 300)")
    p.add_argument("--seed", type=int, default=10_000, help="first seed (default 10000)")
    p.add_argument("--workers", type=int, default=default_workers(), help="workers for the parallel run")
    p.add_argument("--config", help="factory config YAML")
    p.add_argument("--full", action="store_true",
                   help="also measure with the whole scenario check (partial fixes and pass-to-pass too)")
    p.set_defaults(func=cmd_factory)


def cmd_factory(args: argparse.Namespace) -> int:
    config = FactoryConfig.load(args.config)
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.machine()}")
    results = {}
    # The parallel run goes first: its workers are forked from this process, and forking a process
    # that has just built hundreds of apps itself hands them a heap full of garbage.
    for workers in sorted({1, args.workers}, reverse=True):
        results[workers] = _measure(config, args, workers, full=False)
    if len(results) == 2:
        one, many = results[1], results[args.workers]
        print(f"speed-up with {args.workers} workers: {many.verified_per_s / one.verified_per_s:.2f}x")
    if args.full:
        _measure(config, args, args.workers, full=True)
    return 0


def _measure(config: FactoryConfig, args: argparse.Namespace, workers: int, *, full: bool):
    label = "full check" if full else "build check"
    with progress_bar(args.n, f"{workers} worker(s), {label}") as update:
        report = build(config, range(args.seed, args.seed + args.n), workers=workers, progress=update, full_check=full)
    hashes = {e.scenario_id for e in report.accepted}
    print(f"workers={workers} ({label}): {len(report.accepted)}/{report.seeds} verified in {report.elapsed_s:.2f}s = "
          f"{report.verified_per_s:.1f} verified scenarios/s; rejects {report.reject_share:.1%}; "
          f"distinct hashes {len(hashes)}")
    return report
