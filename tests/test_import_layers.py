"""The project's modules import each other in layers: no cycles, and no lower layer reaching up.

The import graph is read from the source with :mod:`ast`, never by importing anything: every
``import`` and ``from ... import`` anywhere in a module counts, inside functions, under ``try`` and
under ``if TYPE_CHECKING:`` alike. An import deferred into a function or kept for the type checker
still makes the two modules need each other; deferring it hides the cycle from the interpreter, not
from the design. Relative imports are resolved against the importing module, and
``from package import name`` is an edge to ``package.name`` when that is a module, else to the
package. Importing ``a.b.c`` is an edge to ``a.b.c`` alone: the packages above it run too, but
counting them would make every package that re-exports its own modules a cycle. A package's
``__init__`` is a module like any other (one that re-exports lazily, under ``TYPE_CHECKING``,
included).

Besides "no cycle", the rules the code and the docs state about who may import whom:

* grading never imports the factory (docs/sandbox.md): no module of :mod:`envcore.verifier`,
  :mod:`envcore.sandbox` or :mod:`envcore.runner` reaches an :mod:`envcore.factory` module, however
  indirectly;
* :mod:`envcore.settings` and :mod:`envcore.numbers` import nothing of the project (their
  docstrings: every layer may use them);
* :mod:`envcore.env.client` imports only the wire types (:mod:`envcore.env.actions`), never server
  code (its docstring);
* the page never imports the sandbox (``ui/app.py``), and its layers (docs/space.md, "Layers")
  import downwards only: the record views (``ui/data.py``, ``ui/rollout_view.py``) never reach the
  charts, the tabs or their wiring, and the charts never reach the tabs or their wiring.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envcore", "a01_repair_gym", "ui", "app")
"""What must form no cycle: the environment core, the Inspect tasks, the page and the server's entry
(``app.py``); those missing from a checkout are skipped."""

Graph = Mapping[str, Iterable[str]]

GRADING = ("envcore.verifier", "envcore.sandbox", "envcore.runner")
FACTORY = "envcore.factory"


# --- the graph ------------------------------------------------------------------------------------


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of the given top-level packages (or single-file modules) under ``root``, by dotted
    name."""
    found: dict[str, Path] = {}
    for package in packages:
        folder = root / package
        files = sorted(folder.rglob("*.py")) if folder.is_dir() else [root / f"{package}.py"]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                found[module_name(path, root)] = path
    return found


def imported_names(name: str, path: Path) -> Iterator[str]:
    """Every dotted name an import statement anywhere in the module asks for, relative imports resolved
    against ``name``; ``from p import x`` yields ``p.x`` (:func:`resolve` falls back to ``p`` when ``x``
    is not a module)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                parts = here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                package = ".".join(parts)
            else:
                package = node.module or ""
            for alias in node.names:
                yield package if alias.name == "*" else f"{package}.{alias.name}"


def resolve(target: str, known: Mapping[str, Path]) -> str | None:
    """The module an imported name lands in: the longest known module that is ``target`` or a package
    above it (``from p import f`` of a function ``f`` lands in ``p``); ``None`` outside ``known``."""
    parts = target.split(".")
    while parts:
        if (candidate := ".".join(parts)) in known:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, frozenset[str]]:
    """Module -> the modules of ``packages`` it imports anywhere in its source (itself left out)."""
    known = find_modules(root, packages)
    graph: dict[str, frozenset[str]] = {}
    for name, path in known.items():
        targets = {resolve(target, known) for target in imported_names(name, path)}
        graph[name] = frozenset(t for t in targets if t is not None and t != name)
    return graph


def without(graph: Graph, edges: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    dropped = set(edges)
    return {node: frozenset(t for t in targets if (node, t) not in dropped) for node, targets in graph.items()}


# --- cycles and paths -------------------------------------------------------------------------------


def knots(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan's algorithm,
    without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for start in sorted(graph):
        if start in index:
            continue
        visit(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    visit(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def shortest_path(graph: Graph, start: str, goal: str, within: set[str] | None = None) -> list[str]:
    """A shortest import chain from ``start`` to ``goal`` (``start`` again for a cycle), through
    ``within`` only when given; ``[]`` when there is none."""
    previous: dict[str, str] = {}
    frontier, seen = [start], {start}
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if within is not None and child not in within:
                    continue
                if child == goal:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return chain[::-1] + [goal]
                if child not in seen:
                    seen.add(child)
                    previous[child] = node
                    following.append(child)
        frontier = following
    return []


def chain(modules: list[str]) -> str:
    return " -> ".join(modules)


def cycle_report(graph: Graph, knot: list[str]) -> list[str]:
    """The cycles that tie the knot together, each as ``a -> b -> a``: a shortest one through each of its
    modules in turn, kept when it holds an import none before it did."""
    cycles: list[str] = []
    covered: set[tuple[str, str]] = set()
    for module in knot:
        cycle = shortest_path(graph, module, module, set(knot))
        edges = set(zip(cycle, cycle[1:]))
        if not edges <= covered:
            covered |= edges
            cycles.append(chain(cycle))
    return cycles


def reachable(graph: Graph, start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for child in graph.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen - {start}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# --- the checks -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, frozenset[str]]:
    return import_graph(ROOT, PACKAGES)


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """The reader is not blind: an import in a function, one under TYPE_CHECKING, a relative one and
    ``from package import module`` each make an edge, and a cycle through them is found and spelled out."""
    files = {
        "pkg/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low import Low\n",
        "pkg/low.py": "def f():\n    from . import mid\n    return mid\n",
        "pkg/mid.py": "import os\nfrom pkg.sub import deep\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "from ..low import f\n",
        "pkg/top.py": "import pkg.sub.deep\nfrom pkg import something_not_a_module\n",
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(textwrap.dedent(text))
    graph = import_graph(tmp_path, ["pkg"])
    assert graph == {"pkg": {"pkg.low"}, "pkg.low": {"pkg.mid"}, "pkg.mid": {"pkg.sub.deep"},
                     "pkg.sub": frozenset(), "pkg.sub.deep": {"pkg.low"}, "pkg.top": {"pkg.sub.deep", "pkg"}}
    assert knots(graph) == [["pkg.low", "pkg.mid", "pkg.sub.deep"]]
    assert cycle_report(graph, knots(graph)[0]) == ["pkg.low -> pkg.mid -> pkg.sub.deep -> pkg.low"]
    assert knots(without(graph, {("pkg.mid", "pkg.sub.deep")})) == []


def test_the_graph_covers_the_project(graph):
    assert "envcore.training.pipeline" in graph and "envcore.sandbox" in graph
    assert "envcore.training.stages" in graph["envcore.training.pipeline"]
    assert len(graph) > 100


def test_no_import_cycles(graph):
    """No two modules need each other, directly or round a longer loop."""
    cycles = [cycle for knot in knots(graph) for cycle in cycle_report(graph, knot)]
    assert not cycles, "import cycles (move what both sides need into the lower one, or a module of its own):\n" + \
        "\n".join(f"  {c}" for c in cycles)


@pytest.mark.parametrize("package", GRADING)
def test_grading_never_imports_the_factory(graph, package):
    """docs/sandbox.md: grading never imports the factory, not even through another module."""
    reaches = []
    for module in sorted(m for m in graph if within(m, package)):
        factory = sorted(m for m in reachable(graph, module) if within(m, FACTORY))
        if factory:
            reaches.append(chain(shortest_path(graph, module, factory[0])))
    assert not reaches, f"{package} reaches the factory:\n" + "\n".join(f"  {r}" for r in reaches)


@pytest.mark.parametrize("module", ["envcore.settings", "envcore.numbers"])
def test_leaf_modules_import_nothing_of_the_project(graph, module):
    assert graph[module] == frozenset()


def test_the_client_imports_only_the_wire_types(graph):
    """envcore.env.client: "It imports only the wire types (envcore.env.actions), never server code"."""
    client = "envcore.env.client"
    assert graph[client] == {"envcore.env.actions"}
    server_side = ("envcore.server", "envcore.sandbox", "envcore.verifier", "envcore.runner", "envcore.factory",
                   "envcore.agents", "envcore.training")
    beyond = sorted(m for m in reachable(graph, client)
                    if any(within(m, p) for p in server_side) or (within(m, "envcore.env") and m != "envcore.env.actions"))
    assert not beyond, "\n".join(chain(shortest_path(graph, client, m)) for m in beyond)


def test_the_page_never_imports_the_sandbox(graph):
    """ui/app.py: the UI reaches the environment through the session hub and never imports the sandbox."""
    importing = sorted((m, t) for m in graph if within(m, "ui") for t in graph[m] if within(t, "envcore.sandbox"))
    assert not importing


def test_the_page_layers_import_downwards(graph):
    """docs/space.md, "Layers": records -> views (ui/data.py, ui/rollout_view.py), then the charts
    (ui/charts.py), then the tabs and their wiring (ui/*_tab.py, ui/wiring.py)."""
    if "ui.data" not in graph:
        pytest.skip("no page in this checkout")
    tabs = {m for m in graph if m.startswith("ui.") and m.endswith("_tab")} | {"ui.wiring"}
    above = {"ui.data": tabs | {"ui.charts"}, "ui.rollout_view": tabs | {"ui.charts"}, "ui.charts": tabs}
    upward = [chain(shortest_path(graph, low, high))
              for low, highs in above.items() for high in sorted(highs & reachable(graph, low))]
    assert tabs and not upward, "\n".join(upward)
