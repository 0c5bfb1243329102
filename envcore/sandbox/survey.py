"""Which system calls contained workers make: the evidence behind the seccomp allowlist.

``python -m envcore.sandbox.survey`` runs, under ``strace -f``, a child process that grades a sample
of scenarios from every shipped cache (each app untouched and with its reference fix, through fresh
and template workers) and plays an episode's tools on a few of them. It then reads the trace and
prints, for the processes that installed the filter, every system call made *after* it was
installed: how often, whether the allowlist (:data:`envcore.sandbox.seccomp.X86_64_LISTED`) has it,
and every call the filter refused. A new Python, glibc or library version that needs a call the
allowlist lacks shows up here first (and as refused calls: the app sees ``PermissionError``), which
is how the list is kept current. The command exits 1 if a call outside the allowlist was seen.

It needs ``strace`` (``apt-get install strace``) and takes a few minutes.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_CALL = re.compile(r"^(?P<pid>\d+)\s+(?:<\.\.\. (?P<resumed>\w+) resumed>|(?P<name>\w+)\()(?P<rest>.*)$")
_SECCOMP_ON = re.compile(r"^(\d+)\s+(?:prctl\(PR_SET_SECCOMP|seccomp\(SECCOMP_SET_MODE_FILTER)")


def _child(per_cache: int) -> None:
    """What runs under strace: gradings and episodes on a sample of every shipped cache."""
    from envcore.cache import ScenarioCache
    from envcore.env.episode import Episode
    from envcore.patching import apply_patch
    from envcore.sandbox import Sandbox
    from envcore.verifier.verify import verify

    sandbox = Sandbox(spares=1).start()
    try:
        for root in sorted(Path("artifacts/scenarios").iterdir()):
            cache = ScenarioCache.open(str(root))
            seen: dict[tuple[str, str], int] = collections.Counter()
            for row in cache.rows:
                key = (row["split"], row["bug_class"])
                if seen[key] >= per_cache:
                    continue
                seen[key] += 1
                bundle = cache.load(row["scenario_id"])
                verify(bundle, bundle.files, sandbox=sandbox)
                if bundle.reference_fix:
                    fixed = apply_patch(bundle.files, bundle.reference_fix)
                    verify(bundle, fixed, sandbox=sandbox)
                    verify(bundle, fixed, sandbox=sandbox, probe_set="visible")
                if seen[key] == 1:
                    episode = Episode(bundle, sandbox, max_steps=8)
                    users = sorted(u.username for u in bundle.users)[:1]
                    episode.step({"tool": "http_request", "method": "GET", "path": "/", "as_user": users[0] if users else None})
                    episode.step({"tool": "run_tests"})
                    episode.close_live()
    finally:
        sandbox.close()


def survey_trace(trace: Path) -> dict[str, Any]:
    """Per system call made after a process installed the filter: count, and how many were refused."""
    filtered: set[str] = set()
    counts: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    pending: dict[str, str] = {}
    for path in sorted(trace.parent.glob(trace.name + "*")):
        with open(path, errors="replace") as lines:
            for line in lines:
                on = _SECCOMP_ON.match(line)
                if on:
                    filtered.add(on.group(1))
                    continue
                match = _CALL.match(line)
                if not match or match.group("pid") not in filtered:
                    continue
                pid = match.group("pid")
                name = match.group("name") or match.group("resumed")
                rest = match.group("rest")
                if "<unfinished ...>" in rest:
                    pending[pid] = name
                    continue
                if match.group("resumed"):
                    pending.pop(pid, None)
                counts[name] += 1
                if "EPERM" in rest.rsplit("=", 1)[-1]:
                    refused[name] += 1
    return {"processes": len(filtered), "calls": dict(counts), "refused": dict(refused)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envcore.sandbox.survey", description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-cache", type=int, default=2, help="scenarios graded per cache, split and bug class (default 2)")
    parser.add_argument("--json", help="also write the survey here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.per_cache)
        return 0
    from envcore.sandbox.seccomp import X86_64_LISTED

    strace = shutil.which("strace")
    if strace is None:
        print("strace is not installed (apt-get install strace)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="a01-survey-") as folder:
        trace = Path(folder) / "trace"
        command = [strace, "-f", "-qq", "-ff", "-o", str(trace), sys.executable, "-m", "envcore.sandbox.survey",
                   "--child", "--per-cache", str(args.per_cache)]
        subprocess.run(command, check=True)
        # -ff writes one file per process, named trace.<pid>; put the pid in front of each line
        joined = Path(folder) / "joined"
        with open(joined, "w") as out:
            for path in sorted(Path(folder).glob("trace.*")):
                pid = path.suffix[1:]
                with open(path, errors="replace") as lines:
                    for line in lines:
                        out.write(f"{pid} {line}")
        result = survey_trace(joined)
    missing = sorted(set(result["calls"]) - set(X86_64_LISTED))
    result["outside_allowlist"] = missing
    for name, count in sorted(result["calls"].items(), key=lambda kv: -kv[1]):
        mark = "" if name in X86_64_LISTED else "   <- not in the allowlist"
        refused = f" ({result['refused'][name]} refused)" if name in result["refused"] else ""
        print(f"{count:>10,}  {name}{refused}{mark}")
    print(f"{result['processes']} filtered processes; {len(result['calls'])} distinct calls; "
          f"{len(missing)} outside the allowlist")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
