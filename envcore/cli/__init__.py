"""The command line: ``python -m envcore <group> <command>``.

Each group lives in its own module and registers its sub-commands on the shared parser; a command is
a function taking the parsed arguments and returning an exit code.
"""

from __future__ import annotations

import argparse
import os
import sys

from envcore import __version__
from envcore.cli import bench_cmd, demos_cmd, eval_cmd, factory_cmd, feedback_cmd, job_cmd, train_cmd, try_cmd

GROUPS = (factory_cmd, try_cmd, bench_cmd, eval_cmd, demos_cmd, train_cmd, job_cmd, feedback_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m envcore",
        description="The A01 repair gym: scenario factory, runtime and tools for Broken Access Control repair.",
    )
    parser.add_argument("--version", action="version", version=f"envcore {__version__}")
    groups = parser.add_subparsers(dest="group", metavar="<group>", required=True)
    for module in GROUPS:
        module.register(groups)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and friends: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
