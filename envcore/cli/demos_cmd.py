"""``python -m envcore demos``: verified demonstrations for the SFT stage (:mod:`envcore.training.demos`).

Sources: the scripted expert on train scenarios (``--expert N`` or ``all``) and any episode logs
(``--from-log``: the Space's human play, evaluation runs of a teacher model). Every candidate is
played again and kept only if the grader scores it a full fix on a train scenario; the folder gets
``demos.jsonl`` and ``manifest.json``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path


def register(groups: argparse._SubParsersAction) -> None:
    d = groups.add_parser("demos", help="write verified full-fix demonstrations for SFT",
                          description="Write SFT demonstrations: episodes as the chat an agent sees, each played again "
                          "in the environment and kept only if it is a full fix of a train-split scenario (never test, "
                          "val or a held-out slice), deduplicated, with a manifest of sources and counts.")
    d.add_argument("--out", required=True, help="the folder to write (demos.jsonl, manifest.json)")
    d.add_argument("--cache", default=None, help="the scenario cache (default: the newest shipped one)")
    d.add_argument("--expert", default="0", metavar="N|all",
                   help="how many train scenarios the scripted expert plays (default 0; 'all': every one)")
    d.add_argument("--scenarios", default=None, metavar="ID,ID",
                   help="the expert plays exactly these scenarios (ids or unique prefixes) instead of a sample")
    d.add_argument("--tier", type=int, action="append", choices=(1, 2, 3), help="only scenarios of this tier (repeatable)")
    d.add_argument("--bug-class", action="append", default=None, help="only scenarios of this bug class (repeatable)")
    d.add_argument("--from-log", action="append", default=[], metavar="PATH",
                   help="an episode log (episodes.jsonl[.gz]) whose episodes are offered (repeatable)")
    d.add_argument("--max-steps", type=int, default=16, help="the expert's step budget (default 16)")
    d.add_argument("--parallel", type=int, default=2, help="episodes played at once (default 2)")
    d.add_argument("--seed", type=int, default=0, help="which sample of scenarios the expert plays")
    d.add_argument("--overwrite", action="store_true", help="replace an existing demonstrations folder")
    d.set_defaults(func=cmd_demos)


def choose_scenarios(cache, args: argparse.Namespace) -> list[str]:
    if args.scenarios:
        try:
            return [cache.resolve(s.strip()) for s in args.scenarios.split(",") if s.strip()]
        except (KeyError, ValueError) as exc:
            raise SystemExit(f"--scenarios: {exc}") from None
    ids = sorted(cache.ids(split="train"))
    if args.tier:
        ids = [i for i in ids if int(cache.row(i)["tier"]) in args.tier]
    if args.bug_class:
        unknown = set(args.bug_class) - {cache.row(i)["bug_class"] for i in cache.ids()}
        if unknown:
            raise SystemExit(f"--bug-class: no scenario of {', '.join(sorted(unknown))} in {cache.root}")
        ids = [i for i in ids if cache.row(i)["bug_class"] in args.bug_class]
    if args.expert == "all":
        return ids
    try:
        n = int(args.expert)
    except ValueError:
        raise SystemExit(f"--expert takes a number or 'all', not {args.expert!r}") from None
    if n < 0:
        raise SystemExit("--expert must not be negative")
    return sorted(random.Random(args.seed).sample(ids, min(n, len(ids))))


def cmd_demos(args: argparse.Namespace) -> int:
    from envcore.cache import ScenarioCache
    from envcore.env.environment import A01Environment, Runtime
    from envcore.env.sampler import CurriculumSampler
    from envcore.training import demos as D

    out = Path(args.out)
    if (out / "demos.jsonl").exists() and not args.overwrite:
        raise SystemExit(f"{out} already holds demonstrations; pass --overwrite to replace them")
    if not 1 <= args.max_steps <= 200:
        raise SystemExit("--max-steps must be between 1 and 200")
    cache = ScenarioCache.open(args.cache)
    candidates = D.expert_candidates(cache, choose_scenarios(cache, args) if (args.expert != "0" or args.scenarios) else [],
                                     max_steps=args.max_steps)
    for path in args.from_log:
        if not Path(path).is_file():
            raise SystemExit(f"--from-log {path}: no such file")
        candidates += D.log_candidates(path)
    if not candidates:
        raise SystemExit("nothing to offer: pass --expert N, --scenarios or --from-log")
    runtime = Runtime(sampler=CurriculumSampler(cache), sessions=max(1, args.parallel))
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if done == total or done % 25 == 0:
            print(f"  played {done}/{total}", file=sys.stderr, flush=True)

    collection = D.collect(cache, candidates, env_factory=lambda: A01Environment(runtime), parallel=args.parallel,
                           progress=progress)
    manifest = D.write(collection, out, cache=cache,
                       extra={"expert_max_steps": args.max_steps, "seconds": round(time.perf_counter() - started, 1)})
    print(f"{manifest['demonstrations']} demonstrations of {manifest['scenarios']} train scenarios -> {out / 'demos.jsonl'}")
    for name, count in manifest["sources"].items():
        dropped = ", ".join(f"{k} {v}" for k, v in count["dropped"].items() if v) or "none dropped"
        print(f"  {name}: offered {count['offered']}, kept {count['kept']} ({dropped})")
    return 0
