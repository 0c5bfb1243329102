"""``python -m envcore eval`` and ``python -m envcore compare``: held-out evaluation and paired comparison.

``eval`` plays one agent (a scripted baseline, a local ``transformers`` model with an optional LoRA
adapter, or an OpenAI-compatible endpoint) on the first ``--n`` scenarios of ``--split`` (in
process, against the servers given with ``--url``, or on ``--replicas`` servers ``--provider`` starts
for the run: docker, swarm, uv or process, see :mod:`envcore.agents.providers`) and writes to
``--out``: ``episodes.jsonl`` (the episode log, which makes the run resumable: run the same command
again to finish an interrupted one; ``--compress`` leaves it as ``episodes.jsonl.gz``, which a later
run unpacks and resumes), ``summary.json`` and ``report.md``. ``compare`` pairs two such folders on
the scenarios both played.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envcore.cli.progress import progress_bar
from envcore.numbers import signed


def register(groups: argparse._SubParsersAction) -> None:
    from envcore.agents.names import AGENTS
    from envcore.agents.providers import add_arguments as provider_arguments

    e = groups.add_parser("eval", help="evaluate an agent on held-out scenarios",
                          description="Play --agent on the first --n scenarios of --split (sorted by id, so every agent "
                          "gets the same ones) and write episodes.jsonl, summary.json and report.md to --out. "
                          "Resumable: episodes already in --out/episodes.jsonl are not played again. Language-model "
                          "agents: 'transformers' loads --model (a folder or hub name) with an optional LoRA --adapter; "
                          "'openai' calls an OpenAI-compatible endpoint (--base-url or A01_LLM_BASE_URL / OPENAI_BASE_URL, "
                          "--model or A01_LLM_MODEL, key from A01_LLM_API_KEY / OPENAI_API_KEY).")
    e.add_argument("--agent", required=True, choices=AGENTS, help="the agent to evaluate")
    e.add_argument("--model", help="language-model agents: model folder, hub name or endpoint model id")
    e.add_argument("--adapter", help="transformers agent: a LoRA adapter folder (its base model is the default --model)")
    e.add_argument("--base-url", help="openai agent: the endpoint's base URL (ending in /v1)")
    e.add_argument("--max-new-tokens", type=int, help="language-model agents: tokens per reply (default 512 local, 1024 endpoint)")
    e.add_argument("--temperature", type=float, default=0.0, help="language-model agents: sampling temperature (default 0: greedy)")
    e.add_argument("--tool-format", choices=("json", "native", "auto"), default="json",
                   help="language-model agents: json (one JSON action in the reply's text; the default), native (the "
                        "chat template's or endpoint's own tool calls) or auto (native where the template renders "
                        "tools or the endpoint takes them)")
    e.add_argument("--name", help="agent id in the episode log (default: the agent's name, e.g. llm:<model>)")
    e.add_argument("--split", default="test", help="split to evaluate on (default test; 'any' for all)")
    e.add_argument("--n", type=int, help="number of scenarios (default: the whole split)")
    e.add_argument("--out", required=True, help="output folder")
    e.add_argument("--parallel", type=int, default=1, help="sessions played at once (default 1)")
    e.add_argument("--max-steps", type=int, help="step budget per episode (default: the server's, 30)")
    e.add_argument("--url", action="append", default=[],
                   help="play against this server (repeat for several replicas): the scenarios are the ones its "
                        "catalogue lists, which --cache must hold")
    provider_arguments(e)
    e.add_argument("--cache", help="scenario cache (default: the newest shipped one)")
    e.add_argument("--compress", action="store_true",
                   help="leave the episode log gzip-compressed (episodes.jsonl.gz; a later run resumes from it)")
    e.add_argument("--private-seed-file", metavar="PATH",
                   help="--split private (scenarios generated from a secret, recorded by hash; --n defaults to 100): "
                        "the file holding the secret (default: $A01_PRIVATE_SEED); never an argument, which shell "
                        "history and ps keep")
    e.set_defaults(func=cmd_eval)

    t = groups.add_parser("tiny-model", help="build the tiny random-weight chat model used by tests and demos",
                          description="Train a small byte-level BPE tokenizer on a few strings and save it with a "
                          "two-layer random Llama model (deterministic for --seed): the language-model path with no "
                          "download. Its replies are noise.")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--tool-calling", action="store_true",
                   help="Qwen3's tool-calling chat template and markers instead of plain ChatML (native tool calls)")
    t.add_argument("--teach-tool-calls", type=int, default=0, metavar="STEPS",
                   help="with --tool-calling: then teach it for STEPS steps to answer with native tool calls "
                        "(list_files, submit); 300 steps take a few minutes on a CPU")
    t.add_argument("--hidden-size", type=int, default=64, help="the model's width (default 64)")
    t.set_defaults(func=cmd_tiny_model)

    c = groups.add_parser("compare", help="compare two evaluation runs, paired on their common scenarios",
                          description="Pair two eval output folders on the scenarios both played and print (and with "
                          "--out, write) the difference in mean reward with its 95%% bootstrap interval and the full "
                          "fixes each made that the other did not.")
    c.add_argument("base", help="eval folder of the baseline")
    c.add_argument("other", help="eval folder of the agent compared with it")
    c.add_argument("--out", help="write the comparison as Markdown here")
    c.set_defaults(func=cmd_compare)


def cmd_eval(args: argparse.Namespace) -> int:
    from envcore.agents.names import options_problem

    # Every argument is checked before the agents (and the web stack under them) are imported.
    problem = options_problem(args.agent, model=args.model, adapter=args.adapter, tool_format=args.tool_format)
    if problem:
        raise SystemExit(problem)
    if args.n is not None and args.n < 1 or args.parallel < 1:
        raise SystemExit("--n and --parallel must be at least 1")
    if args.max_new_tokens is not None and args.max_new_tokens < 1 or args.temperature < 0:
        raise SystemExit("--max-new-tokens must be at least 1 and --temperature at least 0")
    if args.max_steps is not None and not 1 <= args.max_steps <= 200:
        raise SystemExit("--max-steps must be between 1 and 200")
    if args.split == "private":  # generated here, from a secret: refused before any server starts
        if args.url or args.cache or args.provider not in (None, "local"):
            raise SystemExit("--split private generates its scenarios here: --url, --provider and --cache do not apply")
    elif args.private_seed_file:
        raise SystemExit("--private-seed-file goes with --split private")
    from envcore.agents.providers import ProviderError, Replicas, spec_from_args

    try:  # --provider's servers, started for the run and stopped when it ends (or fails, or is interrupted)
        provider = spec_from_args(args, sessions=args.parallel)
        cache = None if provider.kind == "local" else _open_cache(args.cache)
        with Replicas(provider, cache=cache, say=lambda line: print(line, file=sys.stderr)) as servers:
            args.url = servers.urls or []
            return _run_eval(args)
    except ProviderError as exc:
        raise SystemExit(str(exc)) from None


def _open_cache(path: str | None):
    from envcore.cache import ScenarioCache

    return ScenarioCache.open(path)


def _run_eval(args: argparse.Namespace) -> int:
    from envcore.agents.catalog import LLMOptions
    from envcore.agents.eval_run import evaluate_into
    from envcore.agents.evaluate import evaluation_episodes
    from envcore.agents.private_eval import DEFAULT_COUNT, PRIVATE_SPLIT, seed_from_file
    from envcore.agents.served import EvaluationError
    from envcore.cache import ScenarioCache

    try:
        private_seed = seed_from_file(args.private_seed_file) if args.private_seed_file else None  # None: the variable
    except EvaluationError as exc:
        raise SystemExit(str(exc)) from None
    cache = ScenarioCache.open(args.cache)
    split = None if args.split == "any" else args.split
    if args.url:  # the servers' own scenarios (their catalogue), which the local cache must hold
        from envcore.agents.served import served_scenarios

        try:
            served = served_scenarios(args.url, split=split, cache=cache)
        except EvaluationError as exc:
            raise SystemExit(str(exc)) from None
        chosen: list[str] | None = served if args.n is None else served[:args.n]
        total = len(chosen)
    else:
        chosen = None  # the split's first n, picked by the run itself
        total = (args.n or DEFAULT_COUNT) if split == PRIVATE_SPLIT else len(evaluation_episodes(cache, split=split, n=args.n))
    llm = LLMOptions(model=args.model, adapter=args.adapter, max_new_tokens=args.max_new_tokens,
                     temperature=args.temperature, base_url=args.base_url, tool_format=args.tool_format)
    try:
        with progress_bar(max(total, 1), f"eval {args.name or args.agent}") as update:
            run = evaluate_into(args.out, args.agent, cache=cache, split=args.split, n=args.n, llm=llm, name=args.name,
                                parallel=args.parallel, urls=args.url or None, max_steps=args.max_steps,
                                scenarios=chosen, private_seed=private_seed,
                                compress=args.compress, progress=update)
    except EvaluationError as exc:
        raise SystemExit(str(exc)) from None
    summary, result = run.summary, run.result
    overall = summary["overall"]
    print(f"{run.agent_id}: {summary['episodes']} episodes ({result.played} played, {result.skipped} resumed, "
          f"{len(result.failed)} failed); full fix {overall['full_fix']['mean']:.1%}, "
          f"mean reward {signed(overall['reward']['mean'])}; report: {run.folder / 'report.md'}")
    for failure in result.failed[:10]:
        print(f"  failed: {failure}", file=sys.stderr)
    return 1 if result.failed else 0


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from envcore.agents.tiny_model import build_tiny_model

    if args.teach_tool_calls and not args.tool_calling:
        raise SystemExit("--teach-tool-calls needs --tool-calling")
    folder = build_tiny_model(args.out, seed=args.seed, tool_calling=args.tool_calling, hidden_size=args.hidden_size)
    if args.teach_tool_calls:
        from envcore.agents.tiny_model import teach_tool_calls

        teach_tool_calls(folder, steps=args.teach_tool_calls, seed=args.seed)
    print(f"tiny random-weight chat model: {folder}")
    return 0


def episode_log_of(folder: Path) -> Path | None:
    """An eval folder's episode log, plain or compressed."""
    for name in ("episodes.jsonl", "episodes.jsonl.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def cmd_compare(args: argparse.Namespace) -> int:
    from envcore.agents.evaluate import compare, render_comparison
    from envcore.env.episode_log import read_episodes

    logs = []
    for folder in (args.base, args.other):
        log = episode_log_of(Path(folder))
        if log is None:
            raise SystemExit(f"{folder} has no episodes.jsonl (is it an eval --out folder?)")
        logs.append(list(read_episodes(log)))
    result = compare(logs[0], logs[1])
    text = render_comparison(result, base=Path(args.base).name, other=Path(args.other).name)
    if args.out:
        Path(args.out).write_text(text)
    print(text, end="")
    return 0
