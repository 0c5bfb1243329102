"""``python -m envcore job prepare | run | import``: the from-scratch training job and its files.

* ``prepare`` packs what the job needs beyond a GPU machine's image into ``build/gpu-job/`` (the
  demonstrations, the Python 3.12 wheels, ``run.sh``) and checks that it travels (64 MiB with the
  tracked files);
* ``run`` runs the job (:mod:`envcore.training.scratch_job`) inside a wall-clock budget, writing its
  results into ``--out`` as it goes; ``--preset smoke`` is the same code path at toy scale;
* ``estimate`` measures here what a CPU can tell and estimates the GPU budget's split;
* ``curve`` compares the GRPO curves of several runs (seeds) with their controls (learning rate 0);
* ``import`` puts the files a job wrote into ``artifacts/``, where the Space shows them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_FOLDER = "build/gpu-job"
WHEELS_DOWNLOAD = "build/wheels-py312"
"""Where the wheels are downloaded (not carried: the carried folder holds them packed)."""
DEMOS = "build/demos-scratch"
DEMO_CACHE = "build/demo-cache"


def demo_recipe() -> list[tuple[str, list[str], str]]:
    """How the job's demonstrations are made: 18,000 scenarios of their own (seeds no shipped cache uses; the
    default styles and the realistic ones, with cache v3's held-out styles filed under test_styles), then the
    expert on every train one, a bug class at a time (each part is kept once done). Each step is
    ``(what, the arguments after python -m envcore, the folder it writes)``, skipped when that folder holds its
    manifest."""
    from envcore.factory.bugs import BUG_CLASSES

    return [
        ("scenarios of the default styles", ["factory", "build", "--n", "14000", "--seed", "1000000", "--out",
                                            "build/demo-cache-default", "--workers", "2"], "build/demo-cache-default"),
        ("scenarios of the realistic styles", ["factory", "build", "--n", "4000", "--seed", "2000000", "--config",
                                              "configs/cache-v3.yaml", "--out", "build/demo-cache-realistic", "--workers",
                                              "2"], "build/demo-cache-realistic"),
        ("one cache of both", ["factory", "merge", "build/demo-cache-default", "build/demo-cache-realistic", "--config",
                               "configs/cache-v3.yaml", "--out", DEMO_CACHE], DEMO_CACHE),
        *((f"the expert's verified demonstrations of {bug_class}",
           ["demos", "--cache", DEMO_CACHE, "--out", f"{DEMOS}/parts/{bug_class}", "--expert", "all", "--bug-class",
            bug_class, "--parallel", "2"], f"{DEMOS}/parts/{bug_class}") for bug_class in sorted(BUG_CLASSES)),
    ]


DEMO_RECIPE_WORDS = ("18,000 scenarios of new seeds (default and realistic styles), then the expert on every train "
                     "one, about 10,000 verified full fixes")


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
    p.add_argument("--demos", default=DEMOS,
                   help=f"a demos folder (default {DEMOS}; built first when it holds none: {DEMO_RECIPE_WORDS})")
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
    r.add_argument("--preset", choices=("gpu", "cpu-learn", "smoke"), default="gpu",
                   help="gpu: the real run (default); cpu-learn: GRPO's effect on four apps, on a CPU; smoke: the "
                   "same code path at toy scale, for a CPU")
    r.add_argument("--grpo-seed", type=int, default=None,
                   help="GRPO's seed (scenario draws and sampling); the model and SFT stay the same")
    r.add_argument("--grpo-learning-rate", type=float, default=None, metavar="LR",
                   help="GRPO's learning rate instead of the preset's")
    r.add_argument("--control", action="store_true",
                   help="GRPO with a learning rate of 0: the same rounds, no update (the curve's control)")
    r.add_argument("--cache", default=None, help="the scenario cache (default: the newest shipped one)")
    r.add_argument("--work", default=None,
                   help="working folder, replaced and kept (default: a folder of its own in the temporary folder, "
                   "removed at the end); never inside OUT, where only the exported files go")
    r.add_argument("--name", default=None, help="the run's name (default: the preset's)")
    r.set_defaults(func=cmd_run)

    e = commands.add_parser("estimate", help="estimate the GPU job's budget split from measurements on this machine",
                            description="Measure here what a CPU can tell (demonstrations encoded per second, the "
                            "tokenizer's training, tokens per demonstration, the environment's seconds per episode) "
                            "and estimate, with the GPU's throughput and decoding latency as stated assumptions, how "
                            "the job's budget splits into setup, SFT, evaluations and GRPO.")
    e.add_argument("--demos", required=True, help="the demonstrations the job will carry")
    e.add_argument("--budget", type=float, default=540.0, help="the job's budget in seconds (default 540)")
    e.add_argument("--tflops", type=float, default=61.0,
                   help="sustained bf16 training throughput on the GPU, TFLOP/s (default 61, measured by the job "
                   "on an H200)")
    e.add_argument("--ms-per-token", type=float, default=15.0,
                   help="milliseconds per decoding step of generate on the GPU (default 15: the job's model in 16 "
                   "bits on an H200 took 11 at a 2,000-token prompt and 24 at 5,000)")
    e.add_argument("--sample", type=int, default=200, help="demonstrations encoded to measure (default 200)")
    e.set_defaults(func=cmd_estimate)

    b = commands.add_parser("bench-decoding", help="time the job's model decoding: float32 under autocast against 16 bits",
                            description="Build a model of a preset's shape with random weights and time the job's own "
                            "greedy generation on random prompts, two ways in one run: float32 weights under bf16 "
                            "autocast, and the 16-bit copy the job decodes with. Prints milliseconds per decoding step "
                            "(prefill apart) and the ratio. Meaningful on a GPU; on a CPU it runs but says nothing about one.")
    b.add_argument("--preset", default="gpu", help="the model shape: a preset of `job run` (default gpu)")
    b.add_argument("--batch", type=int, default=160, help="sequences decoded at once (default 160, the evaluation's)")
    b.add_argument("--prompt-tokens", type=int, default=2000, help="the longer prompts' length (default 2000)")
    b.add_argument("--new-tokens", type=int, default=33, help="tokens decoded per timing (default 33)")
    b.set_defaults(func=cmd_bench_decoding)

    c = commands.add_parser("curve", help="learning curves of several GRPO runs against their controls",
                            description="Read the GRPO rows of several jobs' metrics (one per seed) and of their "
                            "controls (--control runs: the same rounds with a learning rate of 0), and say per step "
                            "the mean reward and full-fix share with a 95%% interval over the runs, each run's rise "
                            "(last third minus first third) and whether GRPO raised them.")
    c.add_argument("runs", nargs="+", help="the treated runs' --out folders")
    c.add_argument("--control", nargs="*", default=[], help="the control runs' --out folders")
    c.add_argument("--out", default=None, help="write curves.json and curves.md into this folder")
    c.set_defaults(func=cmd_curve)

    i = commands.add_parser("import", help="put a job's results into artifacts/ for the Space",
                            description="Unpack results.tar.gz (or its parts) and the weight shards from FOLDER into "
                            "artifacts/training/<run>/ and artifacts/models/<run>/, and the run's metrics into "
                            "artifacts/trackio/.")
    i.add_argument("folder", help="the folder the job's files came back to")
    i.add_argument("--artifacts", default="artifacts", help="the artifacts folder (default artifacts)")
    i.add_argument("--overwrite", action="store_true", help="replace a run of the same name")
    i.set_defaults(func=cmd_import)


def cmd_prepare(args: argparse.Namespace) -> int:
    from envcore.training.job_files import (
        MAX_CARRIED_BYTES,
        WHEELS_PACK,
        download_wheels,
        folder_bytes,
        pack_demos,
        pack_wheels,
        tracked_bytes,
        write_run_script,
    )

    folder = Path(args.out)
    if not folder.resolve().is_relative_to(Path.cwd().resolve()):
        print(f"--out {folder} is outside this repository: it must travel with the working tree", file=sys.stderr)
        return 2
    if not (Path(args.demos) / "demos.jsonl").is_file():
        if args.demos != DEMOS:
            print(f"no demos.jsonl in {args.demos}", file=sys.stderr)
            return 1
        build_demonstrations()
    packed = pack_demos(args.demos, folder)
    print(f"demonstrations: {packed['demonstrations']} ({packed['raw_bytes'] / 2**20:.1f} MiB, packed "
          f"{packed['packed_bytes'] / 2**20:.1f} MiB)")
    if not args.no_wheels:
        wheels = download_wheels(Path(WHEELS_DOWNLOAD))
        packed_wheels = pack_wheels(wheels, folder / WHEELS_PACK)
        print(f"wheels: {len(wheels)} ({sum(w.stat().st_size for w in wheels) / 2**20:.1f} MiB, packed "
              f"{packed_wheels.stat().st_size / 2**20:.1f} MiB)")
    elif not (folder / WHEELS_PACK).is_file():
        print(f"--no-wheels, but {folder / WHEELS_PACK} is not there yet", file=sys.stderr)
        return 1
    stale = folder / "wheels"  # the unpacked layout of earlier versions would travel beside the pack
    if stale.is_dir():
        import shutil

        shutil.rmtree(stale)
    write_run_script(folder, repo=Path.cwd(), budget=args.budget)
    carried, tracked = folder_bytes(folder), tracked_bytes(Path.cwd())
    total = carried + tracked
    print(f"travels: {folder} {carried / 2**20:.1f} MiB + tracked files {tracked / 2**20:.1f} MiB = "
          f"{total / 2**20:.1f} MiB of {MAX_CARRIED_BYTES / 2**20:.0f}")
    if total > MAX_CARRIED_BYTES:
        print("too large to travel: carry fewer demonstrations or untrack large files", file=sys.stderr)
        return 1
    print(f"on the GPU machine, carrying {folder}: OUT=... bash {folder}/run.sh")
    return 0


def build_demonstrations() -> None:
    """Run :func:`demo_recipe`, each step that has not run yet, printing how long each took."""
    import shutil
    import subprocess
    import time

    for what, arguments, output in demo_recipe():
        if (Path(output) / "manifest.json").is_file():  # written last, by every step
            print(f"{what}: {output} is there")
            continue
        shutil.rmtree(output, ignore_errors=True)  # what an interrupted step left
        print(f"{what}: python -m envcore {' '.join(arguments)}", flush=True)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "envcore", *arguments], check=True)
        print(f"{what}: {time.perf_counter() - started:.0f} s", flush=True)
    from envcore.training.demos import combine

    parts = sorted(Path(DEMOS, "parts").iterdir())
    manifest = combine(parts, DEMOS)
    print(f"{manifest['demonstrations']} demonstrations of {manifest['scenarios']} train scenarios in {DEMOS} "
          f"({manifest['seconds']:.0f} s of play in {len(parts)} parts)")


def cmd_run(args: argparse.Namespace) -> int:
    from envcore.training.job_spec import PRESETS
    from envcore.training.scratch_job import JobError, run_job

    spec = PRESETS[args.preset]
    grpo: dict[str, object] = {}
    if args.grpo_seed is not None:
        grpo["seed"] = args.grpo_seed
    if args.grpo_learning_rate is not None:
        if args.grpo_learning_rate < 0:
            print("--grpo-learning-rate must be 0 or more", file=sys.stderr)
            return 2
        grpo["learning_rate"] = args.grpo_learning_rate
    if args.control:
        grpo["learning_rate"] = 0.0
    if grpo:
        spec = spec.model_copy(update={"grpo": spec.grpo.model_copy(update=grpo)})
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


def cmd_estimate(args: argparse.Namespace) -> int:
    import json

    from envcore.training.job_estimate import estimate, measure, render_estimate
    from envcore.training.job_spec import GPU

    measured = measure(GPU, Path(args.demos), sample=args.sample)
    result = estimate(GPU, measured, budget_s=args.budget, tflops=args.tflops, ms_per_token=args.ms_per_token)
    print(render_estimate(result))
    print(json.dumps({"measured": measured, "estimate": result}))
    return 0


def cmd_bench_decoding(args: argparse.Namespace) -> int:
    import json

    from envcore.training.decode_bench import bench_decoding
    from envcore.training.job_spec import PRESETS

    if args.preset not in PRESETS:
        print(f"no preset {args.preset!r}; the presets: {', '.join(sorted(PRESETS))}")
        return 2
    if args.new_tokens < 2 or args.batch < 1 or args.prompt_tokens < 2:
        print("--new-tokens must be at least 2, --batch at least 1 and --prompt-tokens at least 2")
        return 2
    result = bench_decoding(PRESETS[args.preset], batch=args.batch, prompt_tokens=args.prompt_tokens,
                            new_tokens=args.new_tokens)
    print(json.dumps(result))
    return 0


def cmd_curve(args: argparse.Namespace) -> int:
    import json

    from envcore.training.curves import learning_curves, render_curves

    try:
        result = learning_curves(args.runs, args.control)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        print(f"curve stopped: {exc}", file=sys.stderr)
        return 1
    text = render_curves(result)
    print(text)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "curves.json").write_text(json.dumps(result, indent=2) + "\n")
        (folder / "curves.md").write_text(text)
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
