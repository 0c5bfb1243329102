"""``python -m envcore bench ...``: commands that print measured figures (never timed assertions)."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from pathlib import Path

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
    p.add_argument("--beside", metavar="CONFIG",
                   help="also build the same seeds from this config in the same run (e.g. configs/realistic.yaml: "
                   "the realistic family beside the compact styles) and print the two side by side")
    p.set_defaults(func=cmd_factory)

    pv = cmds.add_parser("private", help="time to generate and verify a private split",
                         description="Generate and verify --n scenarios of the private split as `eval --split "
                         "private` does (the test split's mix, the whole scenario check, every core) from a fresh "
                         "random secret that is never shown, print the total seconds and scenarios per second with "
                         "the machine's load average before and after, and delete them.")
    pv.add_argument("--n", type=int, default=100, help="scenarios (default 100, what an evaluation uses)")
    pv.set_defaults(func=cmd_private)

    v = cmds.add_parser("verify", help="isolated verification latency against its baselines, live requests, memory, "
                        "throughput",
                        description="Verify N shipped scenarios patched with their reference fixes through the "
                        "sandbox (every probe in a worker of its own, fresh shadow data per grading) and print p50/p95 "
                        "latency, side by side in the same run with the same probes in-process with the same "
                        "isolation (one import, a fork per probe: the floor), in-process with none, and the naive way "
                        "(pytest + TestClient in a fresh subprocess). Also: the fork bound (fork, exit and reap of a process "
                        "holding one app, with and without one probe's requests: what a probe in a process of its own "
                        "costs with no sandbox, and so how far any process-per-probe design can beat naive), one request through a live "
                        "worker, unique memory per live worker, and verifications per second with every core busy. "
                        "Linux only.")
    v.add_argument("--cache", default=None, help="scenario cache to take bundles from (default: the newest shipped)")
    v.add_argument("--n", type=int, default=40, help="scenarios to verify (default 40)")
    v.add_argument("--rounds", type=int, default=3, help="verifications of each scenario (default 3)")
    v.add_argument("--naive", type=int, default=5, help="scenarios for the naive baseline (default 5; ~2 s each)")
    v.add_argument("--throughput-s", type=float, default=10.0, help="seconds of the throughput run (default 10)")
    v.add_argument("--spares", type=int, default=2, help="spare workers the sandbox keeps ready (default 2)")
    v.add_argument("--families", action="store_true",
                   help="instead: verify the compact generated styles, the realistic ones (SQLAlchemy/SQLModel, "
                   "OAuth2 + JWT, API keys, cookies, routers) and the external split side by side in one run, each "
                   "with templates off and on: what importing such an app costs and how much templates recover")
    v.set_defaults(func=cmd_verify)

    e = cmds.add_parser("env", help="reset and step latency, oracle episodes per second in process and over /ws",
                        description="Reset latency (scenario loaded from the cache, and already in memory), the "
                        "http_request step, and episodes per second of a scripted oracle (reset, two reads, three "
                        "requests, the reference fix, run_tests, submit) in process with 1 thread and one per CPU, "
                        "then over /ws against `python app.py` in its own process with concurrent clients.")
    e.add_argument("--cache", default=None, help="scenario cache to serve (default: the newest shipped)")
    e.add_argument("--resets", type=int, default=200, help="resets to time (default 200)")
    e.add_argument("--episodes", type=int, default=60, help="oracle episodes in process, per run (default 60)")
    e.add_argument("--ws-episodes", type=int, default=200, help="oracle episodes over /ws (default 200; 0 skips)")
    e.add_argument("--clients", type=int, default=32, help="concurrent /ws clients (default 32)")
    e.add_argument("--split", default="train", help="split to draw scenarios from (default train; 'any' for all)")
    e.add_argument("--scaling-episodes", type=int, default=20,
                   help="oracle episodes on 1 core and again on 2, for the scaling figures (default 20; 0 skips)")
    e.add_argument("--project-to", type=int, default=16,
                   help="cores to project the scaling to (default 16: the GPU machine's)")
    e.set_defaults(func=cmd_env)

    lo = cmds.add_parser("load", help="many concurrent /ws sessions over thousands of episodes: errors, memory",
                         description="Start `python app.py` and play --episodes episodes over --sessions concurrent "
                         "WebSocket sessions (scripted oracle, no-op and clumsy players). Print episodes per second "
                         "and the server's RSS per block of episodes, every error (transport errors, episodes "
                         "without a reward, rewards on the wrong side of their bound) and the RSS growth from the "
                         "end of the first block to the end of the last. Exits 1 if any episode went wrong.")
    lo.add_argument("--cache", default=None, help="scenario cache to serve (default: the newest shipped)")
    lo.add_argument("--episodes", type=int, default=5000, help="episodes in all (default 5000)")
    lo.add_argument("--sessions", type=int, default=64, help="concurrent WebSocket sessions (default 64)")
    lo.add_argument("--block", type=int, default=1000, help="episodes per reported block (default 1000)")
    lo.add_argument("--split", default="train", help="split to draw scenarios from (default train; 'any' for all)")
    lo.set_defaults(func=cmd_load)

    u = cmds.add_parser("ui", help="the Space's cold start and time per UI action: server-side, or in Chromium "
                        "(--browser)",
                        description="Two modes. Server-side (the default): cold start of `python app.py` to the first "
                        "page served on / (median of --cold-runs fresh processes), then the server-side time of every "
                        "UI action of the Play, Watch and Dashboard tabs (the handler Gradio calls plus the "
                        "postprocessing of its outputs), --rounds times each on different scenarios: p50, p90 and max. "
                        "--browser: start `python app.py` on a free port (or --port) and Debian's Chromium (driven by "
                        "Playwright, no downloaded browser), and measure in the page, --rounds times each, click -> "
                        "the updated content painted: the first page (navigation start -> intro and Play controls, "
                        "fresh context), Play (new episode, open a file, search, send a request, run tests, view "
                        "diff), Watch (pick a scenario, step forward, step back) and Dashboard (dimension, measure, "
                        "rollout sets); print n, p50, p95, the target and ok/over per action, with the machine's load "
                        "average before and after and the Chromium version. Exits 0 whatever the figures; 2 if the "
                        "measurement itself failed (server or browser did not start, an element never changed, the Space "
                        "answered with an error).")
    u.add_argument("--cold-runs", type=int, default=3,
                   help="fresh app.py processes to time (default 3; 0 skips; server-side mode only)")
    u.add_argument("--rounds", type=int, default=10, help="calls of each UI action (default 10; 0 skips in "
                   "server-side mode; at least 1 with --browser)")
    u.add_argument("--browser", action="store_true", help="measure click -> updated content in Chromium instead")
    u.add_argument("--json", metavar="PATH", help="with --browser: also save the figures and conditions as JSON")
    u.add_argument("--port", type=int, help="with --browser: the port for app.py (default: a free one)")
    u.add_argument("--chromium", metavar="PATH", help="with --browser: the Chromium binary (default: $A01_CHROMIUM "
                   "or /usr/bin/chromium)")
    u.set_defaults(func=cmd_ui)

    r = cmds.add_parser("rollouts", help="rollout episodes/s of the heuristic agent with 1, 2, 4 sessions, local and remote",
                        description="Play the heuristic agent with each number of parallel --sessions, in process and "
                        "as WebSocket clients of --servers `python app.py` processes on loopback (each new session on "
                        "the least-loaded), each run on its own unseen scenarios; print episodes per second, the speed-up "
                        "over one session and the machine-wide CPU per episode. Exits 1 if any episode failed.")
    r.add_argument("--cache", default=None, help="scenario cache to play (default: the newest shipped)")
    r.add_argument("--episodes", type=int, default=48, help="episodes per run (default 48)")
    r.add_argument("--sessions", default="1,2,4", help="comma-separated session counts (default 1,2,4)")
    r.add_argument("--servers", type=int, default=2, help="server processes for the remote runs (default 2)")
    r.add_argument("--split", default="train", help="split to draw scenarios from (default train; 'any' for all)")
    r.set_defaults(func=cmd_rollouts)

    pr = cmds.add_parser("providers", help="episodes/s in process and on 1, 2, 4 replicas from OpenEnv's providers",
                         description="Play a scripted agent on the same --episodes scenarios in process, then on "
                         "--replicas replicas of each of --providers (docker: containers of --image; uv and "
                         "process: servers from this checkout), each set fresh, sessions on the least-loaded "
                         "replica; print episodes per second side by side with the ratio to in process, the replicas' "
                         "start time and the machine-wide CPU per episode. A provider that cannot run here is "
                         "skipped, saying why. Exits 1 if any episode failed.")
    pr.add_argument("--cache", default=None, help="scenario cache to play (default: the newest shipped)")
    pr.add_argument("--episodes", type=int, default=24, help="episodes per row (default 24)")
    pr.add_argument("--sessions", type=int, default=4, help="sessions at once in every row (default 4)")
    pr.add_argument("--replicas", default="1,2,4", help="comma-separated replica counts (default 1,2,4)")
    pr.add_argument("--providers", default="docker,uv",
                    help="comma-separated providers: docker, swarm, uv, process (default docker,uv)")
    pr.add_argument("--image", default="a01-repair-gym:local", help="the image of docker and swarm replicas")
    pr.add_argument("--agent", choices=("oracle", "heuristic"), default="oracle",
                    help="oracle: the reference fix, then submit (one full grading an episode); heuristic: reads "
                    "every file first (more steps over the wire); default oracle")
    pr.add_argument("--split", default="test", help="split to draw scenarios from (default test; 'any' for all)")
    pr.set_defaults(func=cmd_providers)

    gp = cmds.add_parser("grpo-paths", help="seconds per GRPO step through environment_factory against rollout_func",
                         description="Train the tiny CPU configs (configs/train-tiny.yaml: rollout_func; "
                         "configs/train-tiny-factory.yaml: TRL's environment_factory) for --steps GRPO steps on the "
                         "same episodes, in process, tracking off, in a temporary folder; print seconds per step, the "
                         "environment's share of it, and the ratio to rollout_func.")
    gp.add_argument("--steps", type=int, default=4, help="GRPO steps per path (default 4)")
    gp.set_defaults(func=cmd_grpo_paths)


def cmd_ui(args: argparse.Namespace) -> int:
    if args.browser:
        from ui import browser_bench

        if args.rounds < 1:
            raise SystemExit("--rounds must be at least 1 with --browser")
        return browser_bench.main(rounds=args.rounds, chromium=args.chromium or browser_bench.CHROMIUM,
                                  port=args.port, json_path=args.json)
    given = [f"--{name}" for name in ("json", "port", "chromium") if getattr(args, name) is not None]
    if given:
        raise SystemExit(f"{', '.join(given)}: only with --browser")
    from ui.bench import main

    return main(cold_runs=args.cold_runs, rounds=args.rounds)


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
    if args.beside:
        other = {workers: _measure(FactoryConfig.load(args.beside), args, workers, full=False)
                 for workers in sorted({1, args.workers}, reverse=True)}
        for workers in sorted(other):
            base, beside = results[workers], other[workers]
            print(f"{args.beside} beside {args.config or 'the default config'}, {workers} worker(s): "
                  f"{beside.verified_per_s:.1f} vs {base.verified_per_s:.1f} verified scenarios/s "
                  f"({base.verified_per_s / beside.verified_per_s:.2f}x slower to build); rejects "
                  f"{beside.reject_share:.1%} vs {base.reject_share:.1%}")
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


def cmd_private(args: argparse.Namespace) -> int:
    import secrets
    import shutil
    import time

    from envcore.factory.private import private_cache

    if args.n < 1:
        raise SystemExit("--n must be at least 1")
    before = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.machine()}; "
          f"load average {before:.1f}")
    started = time.perf_counter()
    cache = private_cache(secrets.token_hex(16), count=args.n)
    elapsed = time.perf_counter() - started
    try:
        realistic = sum(1 for row in cache.rows if str(row["code_style"]).startswith("routers"))
    finally:
        shutil.rmtree(cache.root, ignore_errors=True)
    print(f"private split of {args.n} ({args.n - realistic} compact, {realistic} realistic): generated and verified "
          f"in {elapsed:.1f} s = {args.n / elapsed:.2f} scenarios/s with {default_workers()} workers; load average "
          f"{before:.1f} before, {os.getloadavg()[0]:.1f} after")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from envcore.cache import ScenarioCache
    from envcore.sandbox import Sandbox, supported_platform
    from envcore.verifier import bench

    problem = supported_platform()
    if problem:
        print(f"cannot run: {problem}")
        return 2
    print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.machine()}, "
          f"kernel {platform.release()}")
    print(f"isolation: {bench.ISOLATION}")
    if args.families:
        return verify_families(args)
    items = bench.patched_bundles(ScenarioCache.open(args.cache), args.n)
    probes = sorted(len(b.probes) for b, _ in items)
    median_probes = probes[len(probes) // 2]
    steps = sorted(sum(len(p.steps) for p in b.probes) for b, _ in items)
    print(f"scenarios: {len(items)} (probes per verification: median {median_probes}, max {probes[-1]}; "
          f"requests: median {steps[len(steps) // 2]}, max {steps[-1]})")

    with Sandbox(spares=args.spares, templates=0) as sandbox:
        bench.warm(sandbox, items)
        fresh = bench.measure_sandbox(sandbox, items, args.rounds)
    with Sandbox(spares=args.spares, template_spares=args.spares) as sandbox:
        bench.warm(sandbox, items)
        sandboxed = bench.measure_sandbox(sandbox, items, args.rounds)
        stats, built = dict(sandbox.stats), dict(sandbox.templates.stats)
        floor = bench.measure_inprocess(items, args.rounds, isolated=True)
        shared = bench.measure_inprocess(items, args.rounds, isolated=False)
        naive = bench.measure_naive(items[: args.naive]) if args.naive else None
        fork = bench.measure_fork_bound(items[0][0])
        live, memory = bench.measure_live(sandbox, items[:5], 200)
        threads = bench.default_threads()
        rate, total = bench.measure_throughput(sandbox, items, args.throughput_s, threads)
        layers = verify_layers(sandbox, items[0])

    s, f = sandboxed.all, floor
    print(f"resolutions (reference fixes): {sandboxed.resolutions}")
    print(f"sandbox, the isolation grading uses (whole verify() call):   {s.line()}")
    print(f"  workers from the run's template (patch swapped in):         {sandboxed.swapped.line()}")
    print(f"  workers each importing the app (patch beyond body changes): {sandboxed.afresh.line()}")
    print(f"  templates built: {built['built']} ({built['build_ms'] / max(built['built'], 1):.0f} ms mean); workers: "
          f"{stats['from_template']} from a template, {stats['spawns'] - stats['from_template']} fresh, "
          f"{stats['unswappable']} fell back to a fresh load")
    print(f"sandbox, templates off (every worker imports the app):       {fresh.all.line()}")
    print(f"in-process floor, same isolation (one import, a fork per probe): {f.line()}")
    print(f"in-process, no isolation (one app for every probe):          {shared.line()}")
    print(f"sandbox / in-process floor with the same isolation: {s.p50 / f.p50:.2f}x (p50 ratio; target <= 1.3x)")
    if sandboxed.swapped.samples_ms:
        print(f"  patches swapped into the run's template: {sandboxed.swapped.p50 / f.p50:.2f}x")
    if sandboxed.afresh.samples_ms:
        print(f"  patches loaded afresh in every worker: {sandboxed.afresh.p50 / f.p50:.2f}x (one import per probe "
              "in the sandbox, one per verification in the floor)")
    print(f"isolation's own cost, in process: {f.p50 / shared.p50:.2f}x (a fork per probe against one shared app)")
    if naive:
        print(f"naive pytest + TestClient subprocess: {naive.line()}; sandbox is {naive.p50 / s.p50:.0f}x faster "
              f"(p50 ratio; target >= 60x), {naive.p50 / fresh.all.p50:.0f}x with templates off")
    bare_run, pristine_run, served_run = (median_probes * d.p50 for d in (fork.bare, fork.pristine, fork.served))
    print(f"fork, exit and reap of a process holding one app (no probe run): {fork.bare.line()}; x {median_probes} "
          f"probes (the median) = {bare_run:.0f} ms a verification before any work")
    print(f"one probe in a fork of its own, no sandbox (fork, {fork.requests:.1f} requests on the app as loaded, "
          f"exit, reap): {fork.pristine.line()}; x {median_probes} = {pristine_run:.0f} ms a verification")
    print(f"  forked from a copy that had served every probe once (warm code paths, so not the app as loaded): "
          f"{fork.served.line()}; x {median_probes} = {served_run:.0f} ms")
    if naive:
        print(f"  so a process per probe is at most {naive.p50 / pristine_run:.0f}x faster than naive here one probe "
              f"at a time, {2 * naive.p50 / pristine_run:.0f}x with two at once on two CPUs "
              f"({2 * naive.p50 / served_run:.0f}x even from a served copy; {2 * naive.p50 / bare_run:.0f}x "
              "if a probe did no work at all)")
    print(f"one request through a live worker: {live.line()}")
    if memory:
        print(f"unique memory (USS) per live worker: median {statistics.median(memory) / 1024:.1f} MB, "
              f"max {max(memory) / 1024:.1f} MB (n={len(memory)})")
    print(f"throughput, {threads} threads on {os.cpu_count()} CPUs: {rate:.1f} verifications/s "
          f"({total} in {args.throughput_s:g} s)")
    print(f"containment layers: {layers}")
    return 0


REALISTIC_STYLE_VALUES = {"routers", "routers_flat", "oauth2_jwt", "api_key", "cookie", "sqlalchemy", "sqlmodel"}
"""Code-style values of the realistic family (see :class:`envcore.scenario.spec.CodeStyle`)."""


def style_families(cache, n: int) -> dict[str, list]:
    """Up to ``n`` reference-fixed scenarios of each family: the compact generated styles, the
    realistic ones (any axis realistic) and the external split (``scenarios/external``)."""
    from envcore.factory.byo import load_bundle_dir
    from envcore.patching import apply_patch

    families: dict[str, list] = {"compact": [], "realistic": []}
    for scenario_id in cache.ids():
        row = cache.row(scenario_id)
        if row.get("generator", "") == "import" or cache.split_of(scenario_id) == "external":
            continue
        family = "realistic" if set(str(row.get("code_style", "")).split("/")) & REALISTIC_STYLE_VALUES else "compact"
        if len(families[family]) < n:
            bundle = cache.load(scenario_id)
            families[family].append((bundle, apply_patch(bundle.files, bundle.reference_fix)))
    external = Path(__file__).resolve().parents[2] / "scenarios" / "external"
    families["external"] = []
    for folder in sorted(external.glob("*/scenario.yaml"))[:n]:
        bundle = load_bundle_dir(folder.parent)
        families["external"].append((bundle, apply_patch(bundle.files, bundle.reference_fix)))
    return {name: items for name, items in families.items() if items}


def verify_families(args: argparse.Namespace) -> int:
    """The families side by side: each verified with templates off (every worker imports the app)
    and on (one import per run, patches swapped in), and what building a template (one import of
    the original app, with its start-up work) costs."""
    from envcore.cache import ScenarioCache
    from envcore.sandbox import Sandbox
    from envcore.verifier import bench

    families = style_families(ScenarioCache.open(args.cache), args.n)
    print(f"families: {', '.join(f'{name} {len(items)}' for name, items in families.items())} scenarios, "
          f"{args.rounds} verifications each, reference fixes")
    print(f"{'family':<10} {'templates off p50/p95 ms':>26} {'templates on p50/p95 ms':>25} {'recovered':>10} "
          f"{'import ms':>10} {'swapped':>8}")
    for name, items in families.items():
        with Sandbox(spares=args.spares, templates=0) as sandbox:
            bench.warm(sandbox, items)
            off = bench.measure_sandbox(sandbox, items, args.rounds)
        with Sandbox(spares=args.spares, template_spares=args.spares) as sandbox:
            bench.warm(sandbox, items)
            on = bench.measure_sandbox(sandbox, items, args.rounds)
            built = dict(sandbox.templates.stats)
        load_ms = built["build_ms"] / max(built["built"], 1)
        swapped = len(on.swapped.samples_ms) / max(len(on.all.samples_ms), 1)
        print(f"{name:<10} {off.all.p50:>12.0f} / {off.all.p95:<11.0f} {on.all.p50:>11.0f} / {on.all.p95:<11.0f} "
              f"{off.all.p50 / on.all.p50:>9.2f}x {load_ms:>10.0f} {swapped:>7.0%}")
        print(f"{'':<10} resolutions off {off.resolutions}, on {on.resolutions}; templates built {built['built']}, "
              f"refused {built.get('refused', 0)}")
    print("recovered: p50 with templates off / p50 with templates on; import ms: mean time to build a template "
          "(import the original app once); swapped: verifications served by a template")
    return 0


def verify_layers(sandbox, item) -> dict:
    from envcore.verifier import verify

    return verify(item[0], item[1], sandbox=sandbox).containment


def cmd_env(args: argparse.Namespace) -> int:
    from envcore.env import bench

    split = None if args.split == "any" else args.split
    if args.scaling_episodes < 0 or args.project_to < 1:
        raise SystemExit("--scaling-episodes must be at least 0 and --project-to at least 1")
    return bench.run(args.cache, resets=args.resets, episodes=args.episodes, ws_episodes=args.ws_episodes,
                     clients=args.clients, split=split, scaling_episodes=args.scaling_episodes,
                     project_to=args.project_to)


def cmd_load(args: argparse.Namespace) -> int:
    from envcore.env import loadbench

    if args.episodes < 1 or args.sessions < 1 or args.block < 1:
        raise SystemExit("--episodes, --sessions and --block must be at least 1")
    split = None if args.split == "any" else args.split
    return loadbench.run(args.cache, episodes=args.episodes, sessions=args.sessions, block=args.block, split=split)


def cmd_grpo_paths(args: argparse.Namespace) -> int:
    if args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    from envcore.training import path_bench

    print(path_bench.render(path_bench.run(args.steps)))
    return 0


def cmd_providers(args: argparse.Namespace) -> int:
    from envcore.agents.providers import STARTED

    try:
        replicas = [int(n) for n in args.replicas.split(",")]
    except ValueError:
        raise SystemExit(f"--replicas must be comma-separated numbers, not {args.replicas!r}") from None
    kinds = [k.strip() for k in args.providers.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in STARTED]
    if unknown:
        raise SystemExit(f"--providers: {', '.join(unknown)}; choose from {', '.join(STARTED)}")
    if args.episodes < 1 or args.sessions < 1 or not replicas or not all(1 <= n <= 64 for n in replicas):
        raise SystemExit("--episodes and --sessions must be at least 1, every --replicas count between 1 and 64")
    from envcore.agents import providerbench

    split = None if args.split == "any" else args.split
    return providerbench.run(args.cache, episodes=args.episodes, sessions=args.sessions, replicas=replicas, kinds=kinds,
                             image=args.image, agent=args.agent, split=split)


def cmd_rollouts(args: argparse.Namespace) -> int:
    from envcore.agents import rolloutbench

    try:
        sessions = [int(n) for n in args.sessions.split(",")]
    except ValueError:
        raise SystemExit(f"--sessions must be comma-separated numbers, not {args.sessions!r}") from None
    if args.episodes < 1 or args.servers < 1 or not sessions or min(sessions) < 1:
        raise SystemExit("--episodes, --servers and every --sessions count must be at least 1")
    split = None if args.split == "any" else args.split
    return rolloutbench.run(args.cache, episodes=args.episodes, sessions=sessions, split=split, servers=args.servers)
