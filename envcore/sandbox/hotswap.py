"""Loading a patched app into a process that already holds the original: swap function bodies.

Reinforcement learning grades many patches of the same scenario, and most patches change what a
handler or helper *does*, not the app's shape. Importing the whole app again for every patch
repeats the costly part of a load (building Pydantic models and FastAPI routes) for code that did
not change. A template process (:mod:`envcore.sandbox.template`) imports the original app once;
each worker forked from it compiles the patched modules and, when a change is confined to function
bodies, puts the new bodies into the existing function objects (``function.__code__``). The result
must be exactly the app a fresh import of the patched files would build, so a module qualifies only
when nothing a fresh import would *execute* differs:

* the module's own code (what runs at import: decorators, arguments, defaults, annotations, class
  bodies, every statement) compiles to the same bytecode, names and constants, comparing each
  function only by its signature and docstring (line numbers are ignored throughout);
* no changed function ran while the original was imported: a factory such as ``require_role(...)``
  whose closures were built at import time would otherwise keep its old behaviour (the template
  records every call, see :func:`record_import_calls`);
* each changed function is exactly one function object, keeps its free variables and stays a plain
  function, a coroutine or a generator as it was (FastAPI treats them differently);
* import statements may change (a fix often drops an import it no longer needs): names no longer
  imported are removed from the module, unless code run at import or another module took them
  from it; imports that are new or changed run in the module, provided they load no app module
  the original did not.

Anything else raises :class:`NotSwappable`, and the app is loaded afresh instead. All of this runs
inside a contained worker: patched source is only ever parsed and compiled there.
"""

from __future__ import annotations

import ast
import marshal
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from envcore.runner.request_warmup import record_calls_under

_KIND_FLAGS = 0x20 | 0x80 | 0x100 | 0x200  # GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
_OPTIMIZED = 0x1  # set on function code, not on module or class bodies
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class NotSwappable(Exception):
    """The patch changes more than function bodies; the app must be imported afresh."""


# -- comparing code ------------------------------------------------------------------------------
def _same_value(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, types.CodeType):
        return same_code(a, b)
    if isinstance(a, (tuple, frozenset)):
        if len(a) != len(b):
            return False
        if isinstance(a, frozenset):
            return a == b
        return all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (float, complex)):
        return repr(a) == repr(b)
    return a == b


_SIGNATURE_FIELDS = ("co_name", "co_qualname", "co_flags", "co_argcount", "co_posonlyargcount",
                     "co_kwonlyargcount", "co_freevars")
"""What a function's code says about how it is called and what kind it is."""
_BODY_FIELDS = ("co_code", "co_names", "co_varnames", "co_cellvars", "co_exceptiontable")
"""The rest of a code object, apart from its constants and line numbers."""


def _same_fields(a: types.CodeType, b: types.CodeType, fields: tuple[str, ...]) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def _same_frame(a: types.CodeType, b: types.CodeType) -> bool:
    """Everything but constants and line numbers."""
    return _same_fields(a, b, _SIGNATURE_FIELDS) and _same_fields(a, b, _BODY_FIELDS)


def same_code(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two code objects do the same thing, ignoring where their lines are."""
    return _same_frame(a, b) and len(a.co_consts) == len(b.co_consts) and all(
        _same_value(x, y) for x, y in zip(a.co_consts, b.co_consts)
    )


def _is_def(code: types.CodeType) -> bool:
    """A ``def`` (whose body is swappable), not a lambda, comprehension or class body."""
    return bool(code.co_flags & _OPTIMIZED) and not code.co_name.startswith("<")


def _same_signature(a: types.CodeType, b: types.CodeType) -> bool:
    """Same name, arguments, kind, closure and docstring (co_consts[0] is the docstring or None)."""
    nargs = a.co_argcount + a.co_kwonlyargcount + bool(a.co_flags & 0x4) + bool(a.co_flags & 0x8)
    return (
        _same_fields(a, b, _SIGNATURE_FIELDS)
        and a.co_varnames[:nargs] == b.co_varnames[:nargs]
        and _same_value(a.co_consts[:1], b.co_consts[:1])
    )


def changed_bodies(old: types.CodeType, new: types.CodeType, changed: list[str] | None = None) -> list[str]:
    """Qualified names of the ``def``s whose bodies differ between two compilations of a module
    (or class body); :class:`NotSwappable` if anything run at import differs."""
    changed = [] if changed is None else changed
    if not _same_frame(old, new) or len(old.co_consts) != len(new.co_consts):
        raise NotSwappable(f"the code run at import changes ({old.co_qualname})")
    for a, b in zip(old.co_consts, new.co_consts):
        if isinstance(a, types.CodeType) and isinstance(b, types.CodeType):
            if _is_def(a) and _is_def(b):
                if not _same_signature(a, b):
                    raise NotSwappable(f"{a.co_qualname} changes its signature, kind or docstring")
                if not same_code(a, b):
                    changed.append(a.co_qualname)
                continue
            if not (a.co_flags & _OPTIMIZED) and not (b.co_flags & _OPTIMIZED):  # a class body
                changed_bodies(a, b, changed)
                continue
        if not _same_value(a, b):
            raise NotSwappable(f"the code run at import changes ({old.co_qualname})")
    return changed


def code_by_qualname(code: types.CodeType) -> dict[str, types.CodeType]:
    """The ``def``s of a module and of its class bodies (recursively), by qualified name."""
    found: dict[str, types.CodeType] = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if _is_def(const):
                found[const.co_qualname] = const
            elif not const.co_flags & _OPTIMIZED:
                found.update(code_by_qualname(const))
    return found


# -- imports -------------------------------------------------------------------------------------
def _is_plain_import(node: ast.stmt) -> bool:
    return isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and node.module != "__future__")


def _single(node: ast.stmt, alias: ast.alias) -> ast.stmt:
    fields = {f: getattr(node, f) for f in node._fields}
    return ast.copy_location(type(node)(**{**fields, "names": [alias]}), node)


def _import_bindings(tree: ast.Module) -> dict[str, ast.stmt]:
    """Name -> the module-level import (of that one name) that binds it last."""
    bound: dict[str, ast.stmt] = {}
    for node in tree.body:
        if _is_plain_import(node):
            for alias in node.names:  # type: ignore[attr-defined]
                if alias.name == "*":
                    raise NotSwappable("a star import")
                bound[alias.asname or alias.name.split(".")[0]] = _single(node, alias)
    return bound


def _without_imports(tree: ast.Module) -> ast.Module:
    return ast.Module(body=[n for n in tree.body if not _is_plain_import(n)], type_ignores=[])


def _bound_by_statements(tree: ast.Module) -> set[str]:
    """Names that module-level statements other than imports bind."""
    names: set[str] = set()
    for node in tree.body:
        if _is_plain_import(node):
            continue
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            names.add(node.name)
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                names.add(sub.id)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names |= {a.asname or a.name.split(".")[0] for a in sub.names}
    return names


def _run_at_import(tree: ast.Module) -> Iterable[ast.AST]:
    """The parts of a module that run when it is imported (everything but function bodies)."""
    for node in tree.body:
        if _is_plain_import(node):
            continue
        if isinstance(node, _FUNCTIONS):
            yield from (*node.decorator_list, node.args, *([node.returns] if node.returns else []))
        elif isinstance(node, ast.ClassDef):
            yield from (*node.decorator_list, *node.bases, *node.keywords)
            for inner in node.body:
                if isinstance(inner, _FUNCTIONS):
                    yield from (*inner.decorator_list, inner.args, *([inner.returns] if inner.returns else []))
                else:
                    yield inner
        else:
            yield node


def _names_run_at_import(tree: ast.Module) -> set[str]:
    return {sub.id for part in _run_at_import(tree) for sub in ast.walk(part) if isinstance(sub, ast.Name)}


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
    return ".".join([*base, *([node.module] if node.module else [])])


def _import_targets(node: ast.stmt, package: str) -> list[str]:
    """Absolute names of the modules an import statement may load."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = _resolve(node, package)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _taken(tree: ast.Module, package: str) -> tuple[set[tuple[str, str]], set[str]]:
    """What importing ``tree`` takes from other modules: (module, name) for every ``from module
    import name`` anywhere (``*`` for a star import), and the attribute names code run at import uses."""
    taken = {(_resolve(node, package), alias.name)
             for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    attributes = {sub.attr for part in _run_at_import(tree) for sub in ast.walk(part) if isinstance(sub, ast.Attribute)}
    return taken, attributes


# -- the loaded app ------------------------------------------------------------------------------
@dataclass
class AppModule:
    """One imported module of the original app, with what comparing a patch of it needs."""

    path: str
    name: str
    source: str
    code: types.CodeType
    imports: dict[str, str] = field(default_factory=dict)
    """Name -> the module-level import binding it (dumped syntax)."""
    bare: types.CodeType | None = None
    """The module compiled without its module-level imports."""
    taken: set[tuple[str, str]] = field(default_factory=set)
    attributes_at_import: set[str] = field(default_factory=set)

    @property
    def package(self) -> str:
        return self.name if self.path.endswith("__init__.py") else self.name.rpartition(".")[0]

    @classmethod
    def index(cls, path: str, name: str, source: str, code: types.CodeType, filename: str) -> "AppModule":
        """Parse and compile the original once, in the template (trusted code)."""
        module = cls(path, name, source, code)
        tree = ast.parse(source, filename)
        module.imports = {n: _dump(node) for n, node in _import_bindings(tree).items()}
        module.bare = compile(_without_imports(tree), filename, "exec", dont_inherit=True)
        module.taken, module.attributes_at_import = _taken(tree, module.package)
        return module


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


@dataclass
class LoadedApp:
    """What a template knows about the original app it imported."""

    root: str
    top: str
    """The app's top-level package or module name."""
    modules: dict[str, AppModule]
    """File path (relative to the app) -> the module imported from it."""
    functions: dict[tuple[str, str], types.FunctionType]
    """(file path, qualified name) -> the one function object with that code."""
    called_at_import: set[tuple[str, str]]
    """(file path, qualified name) of every app function that ran while the app was imported."""
    py_files: dict[str, str]
    """Every ``.py`` file of the original app, imported or not."""
    unswappable: dict[str, str] = field(default_factory=dict)
    """File path -> why a patch of that imported module can never be swapped in (a star import):
    such a patch loads afresh."""


def record_import_calls(root: str, into: set[tuple[str, str]]) -> Callable[[], None]:
    """Record which functions of files under ``root`` are called, until the returned function is
    called. Only for trusted code (a template importing and starting the original app)."""
    return record_calls_under(root, into)


def index_functions(root: str, objects: Iterable[Any]) -> dict[tuple[str, str], types.FunctionType]:
    """(relative path, qualified name) -> function object, for the app functions among ``objects``
    (a template passes ``gc.get_objects()``); a name with several function objects is left out."""
    prefix = root.rstrip("/") + "/"
    found: dict[tuple[str, str], types.FunctionType] = {}
    twice: set[tuple[str, str]] = set()
    for obj in objects:
        if type(obj) is types.FunctionType:
            code = obj.__code__
            if code.co_filename.startswith(prefix):
                key = (code.co_filename[len(prefix):], code.co_qualname)
                if key in found and found[key] is not obj:
                    twice.add(key)
                found[key] = obj
    for key in twice:
        del found[key]
    return found


# -- planning and applying -----------------------------------------------------------------------
@dataclass
class ModulePlan:
    """How one module changes: new code for some functions, imports to run, names to drop."""

    path: str
    swaps: list[tuple[str, types.FunctionType, types.CodeType]] = field(default_factory=list)
    """(qualified name, the function object, its new code)."""
    imports: list[ast.stmt] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)


def _compile(source: str | ast.Module, filename: str) -> types.CodeType:
    try:
        return compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise NotSwappable(f"{filename} does not compile ({type(exc).__name__})") from None


def plan_module(app: LoadedApp, path: str, new_source: str) -> ModulePlan:
    """How to turn the loaded module at ``path`` into ``new_source``; :class:`NotSwappable` if a
    swap would not give what a fresh import gives."""
    module = app.modules.get(path)
    if module is None:
        raise NotSwappable(app.unswappable.get(path) or f"{path} was not imported by the original app")
    filename = f"{app.root.rstrip('/')}/{path}"
    new_code = _compile(new_source, filename)
    plan = ModulePlan(path)
    try:
        qualnames = changed_bodies(module.code, new_code)
        functions = code_by_qualname(new_code)
    except NotSwappable:
        # Perhaps only imports changed around the bodies: compare the modules without them.
        try:
            new_tree = ast.parse(new_source, filename)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise NotSwappable(f"{path} does not parse") from None
        assert module.bare is not None
        new_bare = _compile(_without_imports(new_tree), filename)
        qualnames = changed_bodies(module.bare, new_bare)
        functions = code_by_qualname(new_bare)
        new_imports = _import_bindings(new_tree)
        changed = {n for n, node in new_imports.items() if module.imports.get(n) != _dump(node)}
        plan.dropped = set(module.imports) - set(new_imports)
        if (changed | plan.dropped) & _bound_by_statements(new_tree):
            raise NotSwappable(f"{path}: an import changes a name the module also defines")
        if plan.dropped & _names_run_at_import(new_tree):
            raise NotSwappable(f"{path}: code run at import uses a name no longer imported")
        plan.imports = [new_imports[n] for n in sorted(changed)]
        _check_imports(app, module, plan)
    for qualname in qualnames:
        key = (path, qualname)
        if key in app.called_at_import:
            raise NotSwappable(f"{qualname} in {path} ran while the app was imported or started")
        fn, code = app.functions.get(key), functions.get(qualname)
        if fn is None or code is None:
            raise NotSwappable(f"{qualname} in {path} is not exactly one function")
        old = fn.__code__
        if code.co_freevars != old.co_freevars or (code.co_flags & _KIND_FLAGS) != (old.co_flags & _KIND_FLAGS):
            raise NotSwappable(f"{qualname} in {path} changes its kind or its closure")
        plan.swaps.append((qualname, fn, code))
    return plan


def _check_imports(app: LoadedApp, module: AppModule, plan: ModulePlan) -> None:
    for node in plan.imports:
        for target in _import_targets(node, module.package):
            base = target.replace(".", "/")
            is_app = f"{base}.py" in app.py_files or f"{base}/__init__.py" in app.py_files
            if is_app and target not in sys.modules:
                raise NotSwappable(f"{module.path} imports {target}, which the original app did not load")
    for name in plan.dropped:
        for other in app.modules.values():
            if other.path == module.path:
                continue
            if (module.name, name) in other.taken or (module.name, "*") in other.taken or name in other.attributes_at_import:
                raise NotSwappable(f"{name} is no longer imported by {module.path} but {other.path} takes it from there")


def apply_plan(app: LoadedApp, plan: ModulePlan) -> None:
    """Put the planned bodies in place and run the planned imports (their errors are the app's)."""
    module = sys.modules[app.modules[plan.path].name]
    for _qualname, fn, code in plan.swaps:
        fn.__code__ = code
    for name in plan.dropped:
        module.__dict__.pop(name, None)
    if plan.imports:
        filename = f"{app.root.rstrip('/')}/{plan.path}"
        exec(compile(ast.Module(body=plan.imports, type_ignores=[]), filename, "exec", dont_inherit=True), module.__dict__)


def plan_swap(app: LoadedApp, files: Mapping[str, str]) -> list[ModulePlan]:
    """The plans that make the loaded app the one ``files`` describe; :class:`NotSwappable` unless
    every changed module qualifies. Nothing is changed and no patched code runs."""
    py = {p for p in files if p.endswith(".py")}
    if py != set(app.py_files):
        raise NotSwappable("Python files were added or removed")
    changed = [p for p in sorted(py) if files[p] != app.py_files[p]]
    return [plan_module(app, path, files[path]) for path in changed]


def swap_in(app: LoadedApp, files: Mapping[str, str]) -> list[str]:
    """Make the loaded app the one ``files`` describe; returns the changed paths.
    :class:`NotSwappable` (with nothing changed) unless every changed module qualifies."""
    plans = plan_swap(app, files)
    for plan in plans:
        apply_plan(app, plan)
    return [plan.path for plan in plans]


# -- plans as data: one worker plans, the run's later workers apply -------------------------------
def encode_plans(plans: list[ModulePlan]) -> tuple[list[dict[str, Any]], bytes]:
    """Plans as JSON-able data and one blob of marshalled code, to send to the parent. A worker
    sends them before any patched code has run, so they are what it computed, nothing else."""
    data, blob = [], bytearray()
    for plan in plans:
        swaps = []
        for qualname, _fn, code in plan.swaps:
            raw = marshal.dumps(code)
            swaps.append([qualname, len(blob), len(raw)])
            blob += raw
        data.append({"path": plan.path, "swaps": swaps, "dropped": sorted(plan.dropped),
                     "imports": [ast.unparse(node) for node in plan.imports]})
    return data, bytes(blob)


def decode_plans(app: LoadedApp, data: list[dict[str, Any]], blob: bytes) -> list[ModulePlan]:
    """What :func:`encode_plans` sent, against this worker's copy of the loaded app. It comes from
    an earlier worker of the same run (contained, and before it ran patched code), and is only ever
    read inside a worker: the same trust as compiling the patch here. :class:`NotSwappable` if it
    does not fit the app."""
    plans = []
    try:
        for item in data:
            path = str(item["path"])
            if path not in app.modules:
                raise NotSwappable(f"a plan for {path}, which the original app did not import")
            plan = ModulePlan(path, dropped={str(n) for n in item["dropped"]})
            for qualname, offset, length in item["swaps"]:
                fn = app.functions.get((path, str(qualname)))
                code = marshal.loads(blob[int(offset):int(offset) + int(length)])
                if fn is None or not isinstance(code, types.CodeType):
                    raise NotSwappable(f"a plan for {qualname} in {path}, which is not exactly one function")
                plan.swaps.append((str(qualname), fn, code))
            for text in item["imports"]:
                plan.imports += ast.parse(str(text)).body
            plans.append(plan)
    except (KeyError, TypeError, ValueError, EOFError, SyntaxError) as exc:
        raise NotSwappable(f"an unreadable plan ({type(exc).__name__})") from None
    return plans

