"""``python -m envcore job prepare | run | import``: the from-scratch training job and its files.

* ``prepare`` packs what the job needs beyond a GPU machine's image into ``build/gpu-job/`` (the
  demonstrations, the Python 3.12 wheels, ``run.sh``) and checks that it travels (64 MiB with the
  tracked files);
* ``run`` runs the job (:mod:`envcore.training.scratch_job`) inside a wall-clock budget, writing its
  results into ``--out`` as it goes; ``--preset smoke`` is the same code path at toy scale;
* ``import`` puts the files a job wrote into ``artifacts/``, where the Space shows them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_FOLDER = "build/gpu-job"


def register(groups: argparse._SubParsersAction) -> None:
    job = groups.add_parser("job", help="the from-scratch training job: prepare its files, run it, import its results",
                            description="A model trained from nothing in one budgeted job: its own tokenizer, SFT on "
                            "verified demonstrations, GRPO against the environment, and the three-stage table on "
                            "the test split, the held-out styles and the external split (docs/training.md, "
                            "'The from-scratch job').")
    commands = job.add_subparsers(dest="command", metavar="<command>", required=True)

    p = commands.add_parser("prepare", help="pack the demonstrations, the wheels and run.sh for a GPU machine",
                            description="Write build/gpu-job/: the demonstrations packed with xz, the Python 3.12 "
                            "wheels of what the job imports beyond a GPU machine's image (at the versions installed "
                            "here), and run.sh, the one command that machine runs; then check that it travels.")
    p.add_argument("--demos", required=True, help="a demos folder (python -m envcore demos --out ...)")
    p.add_argument("--out", default=DEFAULT_FOLDER, help=f"the folder to write (default {DEFAULT_FOLDER}; git ignores it)")
    p.add_argument("--budget", type=int, default=540, help="the job's default budget in run.sh, seconds (default 540)")
    p.add_argument("--no-wheels", action="store_true", help="skip downloading the wheels (they are there already)")
    p.set_defaults(func=cmd_prepare)

    r = commands.add_parser("run", help="run the job within a wall-clock budget",
                            description="Build a model from nothing, SFT it on the demonstrations, GRPO it against "
                            "the environment and evaluate every stage, each stage ending at its deadline; results "
                            "are written into --out after each stage.")
    r.add_argument("--demos", required=True, help="demonstrations: a demos folder or a packed demos.jsonl.xz")
    r.add_argument("--out", required=True, help="where the results go (job.log is written by run.sh)")
    r.add_argument("--budget", type=float, default=540.0, help="wall-clock seconds for the whole job (default 540)")
    r.add_argument("--preset", choices=("gpu", "smoke"), default="gpu",
                   help="gpu: the real run (default); smoke: the same code path at toy scale, for a CPU")
    r.add_argument("--cache", default=None, help="the scenario cache (default: the newest shipped one)")
    r.add_argument("--work", default=None, help="working folder (default: OUT/work)")
    r.add_argument("--name", default=None, help="the run's name (default: the preset's)")
    r.set_defaults(func=cmd_run)

    i = commands.add_parser("import", help="put a job's results into artifacts/ for the Space",
                            description="Unpack results.tar.gz (or its parts) and the weight shards from FOLDER into "
                            "artifacts/training/<run>/ and artifacts/models/<run>/, and the run's metrics into "
                            "artifacts/trackio/.")
    i.add_argument("folder", help="the folder the job's files came back to")
    i.add_argument("--artifacts", default="artifacts", help="the artifacts folder (default artifacts)")
    i.add_argument("--overwrite", action="store_true", help="replace a run of the same name")
    i.set_defaults(func=cmd_import)


def cmd_prepare(args: argparse.Namespace) -> int:
    from envcore.training.job_files import (MAX_CARRIED_BYTES, download_wheels, folder_bytes, pack_demos,
                                            tracked_bytes, write_run_script)

    folder = Path(args.out)
    packed = pack_demos(args.demos, folder)
    print(f"demonstrations: {packed['demonstrations']} ({packed['raw_bytes'] / 2**20:.1f} MiB, packed "
          f"{packed['packed_bytes'] / 2**20:.1f} MiB)")
    if not args.no_wheels:
        wheels = download_wheels(folder / "wheels")
        print(f"wheels: {len(wheels)} ({folder_bytes(folder / 'wheels') / 2**20:.1f} MiB)")
    write_run_script(folder, budget=args.budget)
    carried, tracked = folder_bytes(folder), tracked_bytes(Path.cwd())
    total = carried + tracked
    print(f"travels: {folder} {carried / 2**20:.1f} MiB + tracked files {tracked / 2**20:.1f} MiB = "
          f"{total / 2**20:.1f} MiB of {MAX_CARRIED_BYTES / 2**20:.0f}")
    if total > MAX_CARRIED_BYTES:
        print("too large to travel: carry fewer demonstrations or untrack large files", file=sys.stderr)
        return 1
    print(f"on the GPU machine, carrying {folder}: OUT=... bash {folder}/run.sh")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from envcore.training.job_spec import PRESETS
    from envcore.training.scratch_job import JobError, run_job

    spec = PRESETS[args.preset]
    if args.name:
        spec = spec.model_copy(update={"name": args.name})
    if args.budget <= 0:
        print("--budget must be a positive number of seconds", file=sys.stderr)
        return 2
    try:
        run_job(spec, demos=Path(args.demos), out=Path(args.out), budget_s=args.budget,
                work=Path(args.work) if args.work else None, cache_path=args.cache,
                say=lambda line: print(line, flush=True))
    except (JobError, FileNotFoundError) as exc:
        print(f"job stopped: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from envcore.training.job_files import import_results

    try:
        result = import_results(Path(args.folder), Path(args.artifacts), overwrite=args.overwrite)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        print(f"import stopped: {exc}", file=sys.stderr)
        return 1
    print(f"imported {result['run']}: {result['run_dir']}, {result['model_dir']}, {result['metric_rows']} metric rows")
    return 0
