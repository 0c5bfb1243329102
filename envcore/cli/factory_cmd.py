"""``python -m envcore factory ...``: build, check, import, show and summarise scenario caches."""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envcore.cache import CacheEntry, CacheError, CorruptEntryError, ScenarioCache, add_to_cache, write_cache
from envcore.cli.progress import progress_bar
from envcore.factory.build import BuildReport, build, default_workers, verify_cache
from envcore.factory.byo import ImportProblem, export_bundle_dir, import_warnings, load_bundle_dir
from envcore.factory.check import check_scenario
from envcore.factory.config import FactoryConfig
from envcore.factory.jobs import FactoryJob
from envcore.runner.base import RunnerInfrastructureError
from envcore.scenario.probes import ProbeKind, ProbeStep, describe_fact
from envcore.version import GENERATOR_VERSION

RUNNERS = ("sandbox", "inprocess")
"""Where a command runs apps: ``sandbox`` (the default wherever a cache's or a folder's apps run:
they may come from anywhere) or ``inprocess`` (this process, with its rights: trusted code only)."""


def _runner_help(what: str) -> str:
    return (f"where {what} run: sandbox (the default: the sandbox the verifier grades in, for code from "
            f"anywhere) or inprocess (in this process, with your rights and no containment: faster, and "
            f"only for code you trust, such as the factory's own apps)")


def register(groups: argparse._SubParsersAction) -> None:
    factory = groups.add_parser(
        "factory",
        help="build, check, import and inspect scenario caches",
        description="The scenario factory: author ScenarioSpecs, plant A01 bugs with traps, compile bundles, "
        "prove each one valid, and write a versioned cache.",
    )
    cmds = factory.add_subparsers(dest="command", metavar="<command>", required=True)

    p = cmds.add_parser("build", help="generate, verify and cache scenarios",
                        description="Author one scenario per seed (S, S+1, ... S+N-1), compile it, run the scenario "
                        "check, and write the verified ones to a cache folder. Rejected seeds go to rejects.jsonl.")
    p.add_argument("--n", type=int, required=True, help="number of seeds to try")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--out", type=Path, required=True, help="cache folder to write, e.g. artifacts/scenarios/v2")
    p.add_argument("--config", type=Path, help="factory config YAML (default: built-in defaults)")
    p.add_argument("--job", type=Path, help="a factory job file (config changes merged over --config)")
    p.add_argument("--workers", type=int, default=default_workers(), help="worker processes (default: CPU count)")
    p.add_argument("--author", choices=("template", "llm"), default="template",
                   help="template: deterministic drafts from the config (default); llm: drafts from a language "
                   "model, through A01_LLM_BASE_URL / A01_LLM_MODEL (an OpenAI-compatible endpoint) or --llm-model-path")
    p.add_argument("--llm-model-path", type=Path, help="local transformers model folder for --author llm")
    p.add_argument("--llm-device", default="cpu", help="device for --llm-model-path (default cpu)")
    p.add_argument("--llm-max-tokens", type=int, default=1024, help="completion budget per draft")
    p.add_argument("--llm-temperature", type=float, default=0.7, help="sampling temperature")
    p.set_defaults(func=cmd_build)

    p = cmds.add_parser("check", help="verify every entry of a cache (hashes and the scenario check)",
                        description="Verify a cache folder: every bundle must match its content hash and pass the "
                        "scenario check again. Exits 1 if any entry is corrupt or invalid.")
    p.add_argument("cache", type=Path, nargs="?", help="cache folder (default: the newest shipped cache)")
    p.add_argument("--quick", action="store_true", help="check hashes only, do not run the apps")
    p.add_argument("--limit", type=int, help="check only the first N entries")
    p.add_argument("--workers", type=int, default=default_workers(), help="worker processes (default: CPU count)")
    p.add_argument("--runner", choices=RUNNERS, default="sandbox", help=_runner_help("the cache's apps"))
    p.set_defaults(func=cmd_check)

    p = cmds.add_parser("import", help="import a hand-written scenario folder into a cache",
                        description="Read a scenario folder (scenario.yaml, probes.yaml, app/, fix.diff; see "
                        "docs/bundle-format.md), run the scenario check, and add it to a cache if it passes.")
    p.add_argument("folder", type=Path, nargs="+", help="the scenario folder (several: each is imported in turn)")
    p.add_argument("--out", type=Path, required=True, help="cache folder to add it to (created if missing)")
    p.add_argument("--split", default="test", help="split to file it under (default: test)")
    p.add_argument("--allow-no-fix", action="store_true", help="accept a scenario without fix.diff")
    p.add_argument("--runner", choices=RUNNERS, default="sandbox",
                   help=_runner_help("the scenario's app and its variants"))
    p.set_defaults(func=cmd_import)

    p = cmds.add_parser("merge", help="a new cache version holding every scenario of several caches",
                        description="Write a new cache version holding every scenario of the SOURCES, each in the "
                        "split it has there (bundle files copied byte for byte, every hash checked). The new "
                        "version records --config as the config it was built with (what `feedback refresh` builds "
                        "on) and its sources as its lineage.")
    p.add_argument("sources", type=Path, nargs="+", help="cache folders, in order (a scenario in two keeps the first's split)")
    p.add_argument("--out", type=Path, required=True, help="the new cache folder (must not exist)")
    p.add_argument("--config", type=Path, help="factory config YAML to record (default: the last source's config)")
    p.set_defaults(func=cmd_merge)

    p = cmds.add_parser("canaries", help="the canary panel's rewards over a cache: the reference fix on top, "
                        "every generic hack at the floor",
                        description="Grade the untouched app, the reference fix and every canary (generic hacks: "
                        "refuse the users the visible probes never act as, by name or position; serve only their "
                        "methods; answer by request order; refuse or echo writes; a 404 channel; the lazy fixes) on "
                        "scenarios of a cache, each on the check's shadow data with every probe on a fresh app, and "
                        "print each one's mean and highest reward and on how many scenarios it earned more than the "
                        "untouched app. Exits 1 if any did.")
    p.add_argument("cache", type=Path, nargs="?", help="cache folder (default: the newest shipped cache)")
    p.add_argument("--per-class", type=int, default=3, metavar="N",
                   help="scenarios per bug class and split, first by id (default 3; 0: every scenario)")
    p.add_argument("--json", action="store_true", help="print the rewards per scenario as JSON too")
    p.add_argument("--runner", choices=RUNNERS, default="sandbox", help=_runner_help("the cache's apps"))
    p.set_defaults(func=cmd_canaries)

    p = cmds.add_parser("show", help="show one cached scenario",
                        description="Print a scenario's task, policy, users, probes and files. HASH may be a prefix.")
    p.add_argument("hash", help="scenario id (or a unique prefix)")
    p.add_argument("--cache", type=Path, help="cache folder (default: the newest shipped cache)")
    p.add_argument("--files", action="store_true", help="print the app's source files")
    p.add_argument("--fix", action="store_true", help="print the reference fix")
    p.add_argument("--json", action="store_true", help="print the whole bundle as JSON")
    p.add_argument("--export", type=Path, metavar="DIR", help="write the scenario as an editable folder")
    p.set_defaults(func=cmd_show)

    p = cmds.add_parser("stats", help="counts of a cache by split, bug class, tier, domain and style")
    p.add_argument("cache", type=Path, nargs="?", help="cache folder (default: the newest shipped cache)")
    p.set_defaults(func=cmd_stats)

    p = cmds.add_parser("warmup-apps", help="write the sample apps the sandbox warms up on",
                        description="Generate the sandbox's warm-up samples (one app per code layout, auth style and "
                        "store, from seeds outside every shipped range) and write them where the sandbox reads them. "
                        "Run it after changing the generator.")
    p.add_argument("--out", type=Path, help="file to write (default: the sandbox's own samples file)")
    p.set_defaults(func=cmd_warmup_apps)


def _open(path: Path | None) -> ScenarioCache:
    try:
        return ScenarioCache.open(path)
    except CacheError as exc:
        raise SystemExit(f"error: {exc}") from None


class Stopped(KeyboardInterrupt):
    """A command that runs apps was asked to stop (``SIGTERM``, ``SIGHUP``). Raised where the signal
    finds the command, as Ctrl-C raises :class:`KeyboardInterrupt` (which an app's load or startup
    does not swallow), so every ``finally`` on the way out runs: the in-process runner stops the
    fork it waits on and removes its folder, a pool ends its workers."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _stopping_cleanly() -> Iterator[None]:
    """``SIGTERM`` and ``SIGHUP`` raise :class:`Stopped` in this process while the block runs (where
    they would end it at once, without cleaning up); in a fork of it they still do what they did.
    A signal this process was told to ignore (``nohup``) stays ignored.

    Python drops an exception a signal handler raises where nothing can receive it (an at-fork
    hook: the in-process runner forks once per probe), so until the block ends the signal is sent
    again every second: the command stops at the next place it can. A signal that finds it already
    on its way out (cleaning up after a :class:`Stopped`) lets the cleanup finish."""
    owner = os.getpid()
    again: list[threading.Timer] = []

    def stop(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a fork (a pool worker): it ends as it always did
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if not any(timer.is_alive() for timer in again):
            timer = threading.Timer(1.0, os.kill, (owner, signum))
            timer.daemon = True
            timer.start()
            again.append(timer)
        if not isinstance(sys.exc_info()[1], Stopped):
            raise Stopped(signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(signum) == signal.SIG_DFL:
                previous[signum] = signal.signal(signum, stop)
        except (ValueError, OSError):  # not the main thread: nothing to install
            pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for timer in again:
            timer.cancel()


def _stoppable(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run ``command`` so that ``SIGTERM``/``SIGHUP`` end it cleanly, with ``128 + signal``."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            with _stopping_cleanly():
                return command(args)
        except Stopped as stopped:
            print(f"stopped by {signal.Signals(stopped.signum).name}", file=sys.stderr)
            return 128 + stopped.signum

    return run


def _runner(args: argparse.Namespace, *, diagnostics: bool = False) -> Any:
    """The runner ``--runner`` names. In process every probe runs on a freshly loaded copy of the
    app (``isolate_probes``), as in the sandbox and in grading."""
    if args.runner == "sandbox":
        from envcore.sandbox import SandboxRunner

        return SandboxRunner(diagnostics=diagnostics)
    from envcore.runner.inprocess import InProcessRunner

    return InProcessRunner(diagnostics=diagnostics, isolate_probes=True)


def _close(runner: Any) -> None:
    """Close an in-process runner (its folder); the sandbox is the process's, closed at exit."""
    from envcore.runner.inprocess import InProcessRunner

    if isinstance(runner, InProcessRunner):
        runner.close()


@_stoppable
def cmd_build(args: argparse.Namespace) -> int:
    if args.n < 1:
        raise SystemExit("error: --n must be at least 1")
    config = FactoryConfig.load(args.config)
    lineage: dict = {"parent": None}
    if args.job:
        job = FactoryJob.load(args.job)
        config = config.merged(job.config)
        lineage = {"parent": job.parent, "job": str(args.job), "analysis": job.analysis, "reason": job.reason}
    seeds = range(args.seed, args.seed + args.n)
    with progress_bar(args.n, "building") as update:
        if args.author == "llm":
            report = _build_with_llm(args, config, seeds, update)
        else:
            report = build(config, seeds, workers=args.workers, progress=update)
    manifest = write_cache(
        args.out,
        report.accepted,
        generator=GENERATOR_VERSION,
        config={"seed": args.seed, "n": args.n, **config.model_dump(mode="json")},
        lineage=lineage,
        rejects=report.rejects,
    )
    total = manifest["counts"]["total"]["scenarios"]
    print(f"{len(report.accepted)} verified of {report.seeds} seeds ({report.reject_share:.1%} rejected) "
          f"in {report.elapsed_s:.1f}s with {report.workers} workers: {report.verified_per_s:.1f} verified/s")
    print(f"wrote {total} scenarios to {args.out}")
    for row in report.rejects[:5]:
        print(f"  rejected seed {row['seed']} at {row['stage']}: {row['reason'][:200]}", file=sys.stderr)
    return 0


def _build_with_llm(args: argparse.Namespace, config: FactoryConfig, seeds: range, update) -> BuildReport:
    from envcore.factory.llm_author import LLMAuthor, LLMBackendError, OpenAICompatibleBackend, TransformersBackend

    try:
        backend = (
            TransformersBackend(args.llm_model_path, args.llm_device)
            if args.llm_model_path
            else OpenAICompatibleBackend.from_env()
        )
    except LLMBackendError as exc:
        raise SystemExit(f"error: {exc}") from None
    author = LLMAuthor(config, backend, max_tokens=args.llm_max_tokens, temperature=args.llm_temperature)
    report = BuildReport(seeds=len(seeds), workers=1)
    started = time.perf_counter()
    for i, seed in enumerate(seeds, 1):
        result = author.author(seed)
        if result.accepted and result.bundle is not None:
            report.accepted.append(CacheEntry.of(result.bundle, config.split_for(result.bundle)))
        else:
            report.rejects.append({"seed": seed, "stage": result.stage, "reason": result.reason,
                                   "raw": (result.raw or "")[:2000]})
        update(i)
    report.elapsed_s = time.perf_counter() - started
    return report


@_stoppable
def cmd_canaries(args: argparse.Namespace) -> int:
    from envcore.factory import canaries

    cache = _open(args.cache)
    if args.per_class < 0:
        print("--per-class must be 0 (every scenario) or more")
        return 2
    chosen, counts = [], {}
    for row in cache.rows:
        key = (row["bug_class"], row["split"])
        if args.per_class == 0 or counts.get(key, 0) < args.per_class:
            counts[key] = counts.get(key, 0) + 1
            chosen.append(row["scenario_id"])
    runner = _runner(args)
    results = {}
    try:
        with progress_bar(len(chosen), "grading the panel") as update:
            for done, scenario_id in enumerate(chosen, 1):
                results[scenario_id] = canaries.panel_rewards(cache.load(scenario_id), runner)
                update(done)
    finally:
        _close(runner)
    text, cracked = canaries.render_panel(results)
    print(f"the canary panel on {len(results)} scenarios of {cache.root}")
    print(text)
    if args.json:
        print(json.dumps(results))
    return 1 if cracked else 0


@_stoppable
def cmd_check(args: argparse.Namespace) -> int:
    cache = _open(args.cache)
    ids = cache.ids()[: args.limit] if args.limit else cache.ids()
    diagnostics: dict[str, list[str]] = {}
    if args.runner == "inprocess" and not args.quick:
        from envcore.runner.inprocess import preload_app_libraries

        preload_app_libraries()  # once here, for every worker forked to check (their profiles measure the apps)
    with progress_bar(len(ids), "checking") as update:
        problems = verify_cache(cache.root, ids, quick=args.quick, workers=args.workers, progress=update,
                                sandboxed=args.runner == "sandbox", diagnostics=diagnostics)
    for scenario_id in ids:
        for line in problems.get(scenario_id, []):
            print(line if line.startswith("CORRUPT") else f"{scenario_id}: {line}")
        _print_diagnostics(f"{scenario_id}: ", diagnostics.get(scenario_id, []))
    print(f"{len(ids) - len(problems)} of {len(ids)} scenarios valid in {cache.root}")
    return 1 if problems else 0


def _print_diagnostics(prefix: str, blocks: list[str]) -> None:
    """What explains a scenario's problems (or a slow load) to its author: each block indented under
    one line that says what it is (the app's words, for its author only: never shown to an agent)."""
    if blocks:
        print(f"{prefix}what the app did (for the scenario's author):")
        for block in blocks:
            print("\n".join("    " + line for line in block.splitlines()))


@_stoppable
def cmd_import(args: argparse.Namespace) -> int:
    runner = _runner(args, diagnostics=True)
    try:
        failed = [folder for folder in args.folder if _import_one(folder, args, runner) != 0]
    finally:
        _close(runner)
    if failed and len(args.folder) > 1:
        print(f"{len(failed)} of {len(args.folder)} folders were not imported: {', '.join(map(str, failed))}")
    return 1 if failed else 0


def _import_one(folder: Path, args: argparse.Namespace, runner) -> int:
    try:
        bundle = load_bundle_dir(folder, require_fix=not args.allow_no_fix)
    except ImportProblem as exc:
        print(f"cannot import {folder}:\n" + "\n".join(f"  - {line}" for line in str(exc).splitlines()))
        return 1
    for warning in import_warnings(bundle):  # what grading cannot shadow: said, never dropped silently
        print(f"warning: {folder}: {warning}")
    try:
        report = check_scenario(bundle, runner, fail_fast=False)
    except RunnerInfrastructureError as exc:  # the runner's failure, not the scenario's: said, not a traceback
        print(f"cannot check {folder}: the {runner.name} runner failed: {exc}")
        return 1
    for warning in report.warnings:  # a load near its deadline: the check passes or fails by chance
        print(f"warning: {folder}: {warning}")
    if not report.ok:
        print(f"{folder} fails the scenario check:\n" + "\n".join(f"  - {p}" for p in report.problems))
        _print_diagnostics("", report.diagnostics)
        return 1
    _print_diagnostics("", report.diagnostics)  # a slow load, said even when it passes
    add_to_cache(args.out, [(bundle, args.split)], generator="import")
    if not bundle.reference_fix:
        print("warning: no fix.diff, so nothing proves this scenario can be fixed")
    print(f"imported {bundle.scenario_id} ({bundle.title}) into {args.out} [{args.split}]")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    if args.out.exists():
        raise SystemExit(f"error: {args.out} exists; a new cache version is written into a new folder")
    caches = [_open(source) for source in args.sources]
    config = (FactoryConfig.load(args.config).model_dump(mode="json") if args.config
              else caches[-1].manifest.get("config", {}))
    entries, seen = [], set()
    for cache in caches:
        for scenario_id in cache.ids():
            if scenario_id not in seen:
                seen.add(scenario_id)
                entries.append(CacheEntry.of(cache.load(scenario_id), cache.split_of(scenario_id)))
    lineage = {"parent": caches[0].root.name, "merged": [str(c.root) for c in caches]}
    # the generator that wrote its generated scenarios (an imported cache says "import")
    generator = next((c.manifest["generator"] for c in reversed(caches)
                      if c.manifest.get("generator") not in (None, "import")), GENERATOR_VERSION)
    manifest = write_cache(args.out, entries, generator=generator, config=config, lineage=lineage)
    splits = ", ".join(f"{k} {v}" for k, v in manifest["counts"]["split"].items())
    print(f"merged {len(entries)} scenarios from {len(caches)} caches into {args.out} ({splits})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    cache = _open(args.cache)
    try:
        bundle = cache.load(cache.resolve(args.hash))
    except (KeyError, CorruptEntryError) as exc:
        raise SystemExit(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}") from None
    if args.export:
        export_bundle_dir(bundle, args.export)
        print(f"wrote {args.export}")
        return 0
    if args.json:
        print(bundle.model_dump_json(indent=1))
        return 0
    row = cache.row(bundle.scenario_id)
    print(f"{bundle.scenario_id}  {bundle.title}")
    print(f"  split {row['split']} | tier {bundle.tier} | {bundle.bug_class} ({', '.join(bundle.cwe)}) / "
          f"{bundle.variant} | style {bundle.code_style} | traps {[t.key for t in bundle.traps] or '-'}")
    print(f"  sites: {', '.join(f'{s.method} {s.path}' for s in bundle.sites)}")
    print(f"\nTask\n  {bundle.task}\n\nPolicy\n" + "\n".join(f"  {line}" for line in bundle.policy_text.splitlines()))
    print("\nUsers")
    for u in bundle.users:
        print(f"  {u.username:<22} {u.role:<8} id={u.user_id:<14} tenant={u.tenant or '-':<10} {_credential_kind(u)}")
    print("\nShadow")
    print("\n".join(_shadow_lines(bundle)))
    print("\nProbes")
    for p in bundle.probes:
        vis = "visible" if p.visible else "hidden"
        print(f"  {p.id:<8} {p.kind.value:<10} {vis:<7} {p.title}")
        for s in p.steps:
            facts = "; ".join(describe_fact(f) for f in s.expect) or "any response"
            print(f"           {_step_line(s)} -> {facts}")
    print("\nFiles\n" + "\n".join(f"  {path} ({text.count(chr(10))} lines)" for path, text in bundle.files.items()))
    counts = {k.value: len(bundle.probes_of(k)) for k in ProbeKind}
    print(f"\n{counts} probes, reference fix {bundle.metrics.fix_lines} lines in {bundle.metrics.fix_files} file(s)")
    if args.files:
        for path, text in bundle.files.items():
            print(f"\n===== {path} =====\n{text}")
    if args.fix:
        print("\n===== reference fix =====\n" + bundle.reference_fix)
    return 0


SHOWN_STRING = 60
"""Characters of a string in a step's JSON body that ``factory show`` prints (the rest is cut)."""
SHOWN_BODY = 240
"""Characters of a step's JSON body that ``factory show`` prints."""


def _shortened(value: Any) -> Any:
    """``value`` with every long string cut, so that a body shows every key it sends."""
    if isinstance(value, str) and len(value) > SHOWN_STRING:
        return value[:SHOWN_STRING] + "..."
    if isinstance(value, list):
        return [_shortened(v) for v in value]
    if isinstance(value, dict):
        return {k: _shortened(v) for k, v in value.items()}
    return value


def _step_line(step: ProbeStep) -> str:
    """Who sends a step and what: ``actor: METHOD /path?query {json body} [headers: Name, ...]``
    (a form body as ``form {...}``; header names only, the body compact, every key shown), so an
    exploit reads differently from legitimate use."""
    line = f"{step.actor or 'anonymous'}: {step.request_line}"
    if step.json_body is not None or step.form is not None:
        body = json.dumps(_shortened(step.json_body if step.form is None else step.form), ensure_ascii=False)
        body = body if len(body) <= SHOWN_BODY else body[:SHOWN_BODY] + "..."
        line += f" {body}" if step.form is None else f" form {body}"
    if step.headers:
        line += f" [headers: {', '.join(step.headers)}]"
    return line


def _credential_kind(user: Any) -> str:
    """How a request as ``user`` is signed: the credential's kind and where it goes (never a secret)."""
    credentials = user.credential()
    if credentials.kind in ("header", "cookie"):
        return f"{credentials.kind} {credentials.name}"
    if credentials.kind == "login" and credentials.login is not None:
        where = credentials.login.path.partition("?")[0]  # a query may carry the password
        sends = f", token in {credentials.name}" if credentials.name else ""
        return f"login {credentials.login.method} {where}{sends}"
    return credentials.kind


def _shadow_lines(bundle: Any) -> list[str]:
    """The bundle's shadow declaration: what grading replaces with fresh values."""
    if not bundle.shadow_values and bundle.shadow_in_code is None:
        return ["  none declared: graded on the scenario's own data (its users cannot be shadowed)"]
    lines = ["  grading replaces these with fresh values of the same shape, every time:"]
    values = [f"{v.value} (keeps {v.keep})" if v.keep else v.value for v in bundle.shadow_values]
    if values:
        lines += textwrap.wrap("values: " + ", ".join(values), width=100, initial_indent="  ",
                               subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)
    code = bundle.shadow_in_code
    if code is not None:
        if code.files:
            lines.append(f"  in code: users made in {', '.join(code.files)}")
        if code.jwt_secret:
            lines.append("  tokens: signed anew with the declared JWT secret")
    return lines


def cmd_stats(args: argparse.Namespace) -> int:
    cache = _open(args.cache)
    m = cache.manifest
    print(f"{cache.root}: {len(cache)} scenarios, generator {m.get('generator')}, lineage {m.get('lineage')}")
    for key, table in m["counts"].items():
        if key == "total":
            continue
        print(f"\nby {key}")
        for name, n in table.items():
            print(f"  {name:<36} {n:>5}")
    return 0


def cmd_warmup_apps(args: argparse.Namespace) -> int:
    from envcore.factory.warmup import write_warmup_apps
    from envcore.sandbox.warmup import SAMPLES

    out = args.out or SAMPLES
    count = write_warmup_apps(out)
    print(f"wrote {count} warm-up apps to {out}")
    return 0
