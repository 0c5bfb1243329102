"""``python -m envcore bench ui``: the Space's cold start and the server-side time of each UI action.

* **Cold start**: ``python app.py`` in a fresh process, from ``Popen`` to the first ``200`` for ``/``
  (the page's HTML), repeated ``--cold-runs`` times.
* **Actions**: every button, dropdown and page load of the three tabs, each run ``--rounds`` times on
  different scenarios against the shipped cache and rollout sets. What is timed is what the server
  does for one click: the tab controller's method (the same one Gradio calls) plus the
  ``postprocess`` of every output component (DataFrames and Plotly figures turned into what is sent
  to the browser). The browser's rendering and the network are not included. The rollout sets are
  read in the background first, as ``app.py`` does at start-up.

Targets (the Space's): cold start at most 15 s; every action's p50 at most 300 ms.

What a visitor waits for in a browser (click to the updated content painted, rendering included) is
``bench ui --browser``, :mod:`ui.browser_bench`.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ui.wiring import NOTICE, REFUSED, message_markdown

COLD_START_TARGET_S = 15.0
ACTION_TARGET_MS = 300.0


def cold_start(*, timeout_s: float = 60.0) -> float:
    """Seconds from starting ``python app.py`` to the page served on ``/``."""
    from envcore.env.bench import free_port, start_server, stop_server

    with tempfile.TemporaryDirectory(prefix="a01-cold-start-") as scratch:
        started = time.perf_counter()
        process = start_server(None, free_port(), ready="/", timeout_s=timeout_s,
                               env={"A01_HUMAN_LOG": str(Path(scratch) / "human.jsonl")})
        elapsed = time.perf_counter() - started
        stop_server(process)
    return elapsed


class _Timer:
    def __init__(self, components: dict[str, dict[str, Any]]) -> None:
        self.components = components
        self.samples: dict[str, list[float]] = defaultdict(list)

    def __call__(self, tab: str, name: str, method: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        started = time.perf_counter()
        named = method(*args)
        for key, value in named.items():
            if key in (REFUSED, NOTICE):  # shown in the action's message component, as bind() does
                message_markdown(value)
            elif not isinstance(value, dict):  # a gr.update(...) is sent as it is
                self.components[tab][key].postprocess(value)
        self.samples[f"{tab}: {name}"].append((time.perf_counter() - started) * 1000)
        return named


def action_timings(*, rounds: int) -> dict[str, list[float]]:
    """Milliseconds per call of every UI action, ``rounds`` calls each."""
    import gradio as gr

    from envcore.env.environment import Runtime
    from envcore.server.sessions import ARTIFACTS, SessionHub
    from ui import dashboard_tab, play_tab, watch_tab
    from ui.app import warm

    warm(ARTIFACTS).join()
    runtime = Runtime.from_environ()
    scratch = tempfile.TemporaryDirectory(prefix="a01-bench-actions-")
    hub = SessionHub.for_server(runtime, human_log=Path(scratch.name) / "human.jsonl", sweep_every_s=0)
    cache = runtime.cache
    try:
        with gr.Blocks():
            play = play_tab.build(hub, bug_classes=[], domains=[])
            watch = watch_tab.build(hub, ARTIFACTS)
            dash = dashboard_tab.build(hub, ARTIFACTS)
        timer = _Timer({"play": play, "watch": watch, "dashboard": dash})
        p, w, d = play["controller"], watch["controller"], dash["controller"]
        sets = [name for _, name in w.set_choices()]
        left = next(n for n in sets if n.endswith("heuristic"))
        right = next(n for n in sets if n.endswith("noop"))
        test_ids = sorted(cache.ids(split="test"))
        sid = live = None
        for round_ in range(rounds):
            out = timer("play", "new episode", p.new_episode, sid, "test", "any", "any", "any", "", round_, 60, "bench")
            sid = out["sid"]
            names = [f if isinstance(f, str) else f[1] for f in out["files"]["choices"]]
            target = next((f for f in names if "/routers/" in f and not f.endswith("__init__.py")),
                          next(f for f in names if f.endswith(".py")))
            editing = timer("play", "open file", p.open_file, sid, target)["editing"]
            users = hub.users(sid)
            timer("play", "send request", p.send_request, sid, "GET", "/api/me", users[0], "")
            timer("play", "search code", p.search, sid, "def ")
            edited = (hub.current_file(sid, target) or "") + "\n# reviewed\n"
            timer("play", "apply edit", p.apply_edit, sid, editing, edited)
            timer("play", "view diff", p.view_diff, sid)
            timer("play", "run visible tests", p.run_tests, sid)
            timer("play", "submit", p.submit, sid)

            scenario = test_ids[round_ % len(test_ids)]
            timer("watch", "page load (sets)", w.refresh)
            timer("watch", "choose sets", w.pick_sets, left, right)
            timer("watch", "choose scenario", w.show, left, right, scenario, 0)
            timer("watch", "step forward", w.step_forward, left, right, scenario, 2)
            out = timer("watch", "start live agent", w.start_live, live, "heuristic", scenario)
            live = out["live_sid"]
            timer("watch", "live agent step", w.live_step, live)

            timer("dashboard", "page load (all charts)", d.refresh)
            timer("dashboard", "break down by tier", d.draw, sets, "Tier", "Partial fix")
            timer("dashboard", "compare two sets", d.delta, sets, right, left, "Full fix")
            timer("dashboard", "filter scenarios", d.scenarios, "test", "2", "any", "any", "")
            runs = d.training.runs()
            timer("dashboard", "training curves (metrics)", d.training.draw, runs,
                  ["env/reward", "env/full_fix", "env/component/steps_used", "env/episode_steps"])
            analyses = d.failures.analyses()
            timer("dashboard", "failure analysis by agent", d.failures.draw, analyses[0] if analyses else None, "Agent")
        return dict(timer.samples)
    finally:
        hub.shutdown()
        scratch.cleanup()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main(*, cold_runs: int, rounds: int) -> int:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if cold_runs:
        times = [cold_start() for _ in range(cold_runs)]
        median = statistics.median(times)
        print(f"cold start of python app.py to first page served: median {median:.2f} s over {cold_runs} "
              f"({', '.join(f'{t:.2f}' for t in times)} s); target <= {COLD_START_TARGET_S:.0f} s: "
              f"{'met' if median <= COLD_START_TARGET_S else 'NOT met'}")
    if rounds:
        samples = action_timings(rounds=rounds)
        width = max(len(k) for k in samples)
        print(f"\nserver-side time per UI action over {rounds} rounds (ms): p50 / p90 / max")
        worst = 0.0
        for name, values in samples.items():
            p50 = statistics.median(values)
            worst = max(worst, p50)
            print(f"  {name:<{width}}  {p50:8.1f} {_quantile(values, 0.9):8.1f} {max(values):8.1f}"
                  f"{'  over target' if p50 > ACTION_TARGET_MS else ''}")
        print(f"slowest p50: {worst:.1f} ms; target every p50 <= {ACTION_TARGET_MS:.0f} ms: "
              f"{'met' if worst <= ACTION_TARGET_MS else 'NOT met'}")
    return 0
