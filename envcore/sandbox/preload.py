"""Templates: a process that holds one scenario's original app and forks workers that swap in patches.

The zygote forks a template on the parent's request (see :mod:`envcore.sandbox.templates`). The
template imports the scenario's *original* app, which is trusted (it came from the factory or the
cache, like the apps the zygote warms up on), with the data files the grader will use, and records
what a worker needs to load a patched version of it without importing it again
(:class:`~envcore.sandbox.hotswap.LoadedApp`): every app function that ran during the import, every
function object by qualified name, each module's compiled code. It builds the routes FastAPI would
otherwise build on the first request, runs the app's startup when its workers could not tell the
difference (:func:`start_template`), freezes its heap, and from then on serves the zygote's
protocol (:mod:`envcore.sandbox.forker`: ``spawn``, ``kill``, ``status``, ``ping``) on its own socket to the parent.

A worker forked from a template contains itself exactly as a zygote's worker does; its workspace is
the template's folder, with the rights a fresh worker has in its own (it may write the app's existing
files, not create any). The template belongs to one run at a time and its workers run one after the
other; the parent puts the folder back after each (see :mod:`envcore.sandbox.templates`). Given the
patched files, a worker swaps in the changed function bodies (:mod:`envcore.sandbox.hotswap`), runs
the app's startup and serves requests like any worker. When the patch changes more than function
bodies it answers ``unswappable`` and exits, and the parent loads the patch in a fresh worker
instead; no patched code has run by then.

Workers start from the template's state right after the import and the app's startup, before any
request, so each begins exactly where a fresh worker that imported and started the same files
would. The startup runs in the template (instead of in each worker, where it cost about half of a
worker's time: tables created, users seeded, pages copied) only when no worker could tell: every app
function it calls counts as run at import (a patch changing one loads afresh), and afterwards the
process holds no thread, no pending task, timer or callback of its event loop, and no asyncio
object bound to that loop (:func:`start_template`); a startup that leaves any of them refuses the
template, and the parent builds it again with the startup left to each worker. Anything the import
or the startup left that a fork would *share* rather than copy (an open file, whose offset and
locks every worker would hold in common, or a shared memory mapping) would break that too, so a
template that holds one refuses to serve, and the parent loads such an app afresh for every worker.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import os
import socket
import stat
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envcore.runner import request_warmup
from envcore.runner.databases import DatabaseBuildError, build_databases
from envcore.runner.http import Lifespan
from envcore.runner.loader import AppFinder, AppLoadError, load_app, short_traceback, top_level_names
from envcore.sandbox import containment, hotswap
from envcore.sandbox.app_runtime import import_named_modules, importable_modules
from envcore.sandbox.forker import Forker
from envcore.sandbox.limits import SandboxLimits
from envcore.sandbox.wire import PeerClosed, encode, read_frame_fd, send_frame, write_all_fd
from envcore.sandbox.worker import precompiled, start_and_serve


@dataclass
class Template:
    """The loaded original app, as every worker of this template inherits it."""

    app: Any
    loaded: hotswap.LoadedApp
    finder: AppFinder
    entrypoint: str
    started: bool = False
    """Whether the app's startup has run here (its workers then go straight to their requests)."""
    lifespan: Any = None
    """The started app's lifespan (its task waits for a shutdown that never comes, as in a worker)."""
    held: tuple[tuple[int, int, int], ...] = ()
    """Files of its own folder the import left open (a SQLite database the app connected to at
    import): (descriptor, offset, status flags) as they were after the import. Its workers share
    these open files; each puts the offset and flags back before its app runs (see :func:`rewind`)."""


def build_routes(app: Any) -> None:
    """Build the per-route state FastAPI builds lazily on the first request that walks an included
    router (so each worker does not build it again). Harmless where FastAPI does not do this."""
    stack = list(getattr(getattr(app, "router", None), "routes", None) or [])
    while stack:
        route = stack.pop()
        candidates = getattr(route, "effective_candidates", None)
        if callable(candidates):
            stack.extend(candidates())
            low = getattr(route, "effective_low_priority_routes", None)
            if callable(low):
                low()


def load_template(root: str, files: dict[str, str], entrypoint: str, cache) -> Template:
    """Import the original app under ``root`` and index it (trusted code only)."""
    before = set(sys.modules)
    called: set[tuple[str, str]] = set()
    stop = hotswap.record_import_calls(root, called)
    try:
        imported = load_app(Path(root), files, entrypoint, cache)  # kept: every worker serves this app
    finally:
        stop()
    app = imported.app
    build_routes(app)
    prefix = root.rstrip("/") + "/"
    modules: dict[str, hotswap.AppModule] = {}
    unswappable: dict[str, str] = {}
    for name in set(sys.modules) - before:
        filename = str(getattr(sys.modules[name], "__file__", None) or "")
        path = filename[len(prefix):]
        if filename.startswith(prefix) and path in files:
            try:
                modules[path] = hotswap.AppModule.index(path, name, files[path], cache.compile(files[path], filename),
                                                        filename)
            except hotswap.NotSwappable as exc:  # a patch of this module loads afresh; the others swap
                unswappable[path] = f"{path}: {exc}"
    top = entrypoint.partition(":")[0].split(".")[0]
    loaded = hotswap.LoadedApp(
        root=root,
        top=top,
        modules=modules,
        functions=hotswap.index_functions(root, gc.get_objects()),
        called_at_import=called,
        py_files={p: t for p, t in files.items() if p.endswith(".py")},
        unswappable=unswappable,
    )
    return Template(app, loaded, imported.finder, entrypoint)


class StartedUnlikeAWorker(Exception):
    """The app's startup left something a worker that started the app itself would not have."""


def start_template(template: Template, root: str) -> str | None:
    """Run the app's startup here, recording every app function it calls as run at import; return
    ``None``, or why it was not run. :class:`AppLoadError` if the startup failed (the original app
    does not start: nothing is graded on it), :class:`StartedUnlikeAWorker` if it left a thread, a
    pending task, timer or callback, or an asyncio object bound to its event loop: state a worker
    starting the app on its own loop would have and a fork of this process would not."""
    loop = asyncio.new_event_loop()
    lifespan = Lifespan(template.app, lambda exc: short_traceback(exc, Path(root)))
    stop = hotswap.record_import_calls(root, template.loaded.called_at_import)
    try:
        failure = loop.run_until_complete(lifespan.startup())
    finally:
        stop()
    if failure is not None:
        loop.close()
        raise AppLoadError(f"startup failed: {failure}")
    problem = _unlike_a_worker(loop, lifespan)
    loop.close()  # its selector and wake-up socket: descriptors every worker would share
    if problem is not None:
        raise StartedUnlikeAWorker(f"the app's startup {problem}")
    template.started, template.lifespan = True, lifespan
    return None


_LOOP_BOUND = (asyncio.Future, asyncio.Lock, asyncio.Event, asyncio.Condition, asyncio.Semaphore, asyncio.Queue)


def _unlike_a_worker(loop: asyncio.AbstractEventLoop, lifespan: Lifespan) -> str | None:
    """What the startup left that a fork could not carry on, or ``None``."""
    if threading.active_count() > 1 or len(os.listdir("/proc/self/task")) > 1:
        return "started a thread"
    own = {lifespan.task, getattr(lifespan.task, "_fut_waiter", None), lifespan.inbox, lifespan.outbox}
    if any(task not in own for task in asyncio.all_tasks(loop)):
        return "left a task running"
    if getattr(loop, "_scheduled", None) or getattr(loop, "_ready", None):
        return "left a timer or a callback waiting"
    for obj in gc.get_objects():
        if isinstance(obj, _LOOP_BOUND) and obj not in own and getattr(obj, "_loop", None) is loop:
            if isinstance(obj, asyncio.Future) and obj.done():
                continue  # a finished future answers without its loop
            return f"left {type(obj).__name__} bound to its event loop"
    return None


def template_main(fd: int, zygote_pid: int, message: dict[str, Any], blob: bytes) -> None:
    """Run in a child of the zygote; never returns."""
    code = 0
    try:
        _run_template(fd, zygote_pid, message, blob)
    except (PeerClosed, BrokenPipeError, ConnectionResetError):
        pass
    except BaseException:  # noqa: BLE001 - the parent sees the socket close and treats it as lost
        code = 1
    os._exit(code)


def _run_template(fd: int, zygote_pid: int, message: dict[str, Any], blob: bytes) -> None:
    containment.tie_to_parent(zygote_pid)
    os.setsid()
    containment.isolate_descriptors(keep=fd)
    root = message["workspace"]
    os.chdir(root)
    containment.scrub_environment(root)
    containment.run_sync_inline()
    sock = socket.socket(fileno=fd)
    started = time.perf_counter()
    files: dict[str, str] = message["files"]
    try:
        build_databases(root, files)  # trusted: the original app's own data
        template = load_template(root, files, message["entrypoint"], precompiled(Path(root), files, message.get("compiled", []), blob))
    except (AppLoadError, DatabaseBuildError) as exc:
        send_frame(sock, {"type": "template", "ok": False, "error": str(exc)[:2000]})
        return
    except Exception as exc:  # noqa: BLE001 - indexing what the import built: never a silent death
        send_frame(sock, {"type": "template", "ok": False, "refused": True,
                          "error": f"the original app could not be indexed ({type(exc).__name__}: {exc})"[:2000]})
        return
    not_started = "turned off"
    if message.get("start", True):
        try:  # the app's startup, once here for every worker, when its workers could not tell
            not_started = start_template(template, root)
        except AppLoadError as exc:
            send_frame(sock, {"type": "template", "ok": False, "error": str(exc)[:2000]})
            return
        except StartedUnlikeAWorker as exc:
            send_frame(sock, {"type": "template", "ok": False, "refused": True, "unstartable": True,
                              "error": str(exc)[:2000]})
            return
    not_warmed = "turned off"
    if message.get("warm", True):
        try:  # the request path's first-use work, once here for every worker; nothing of the app's runs
            not_warmed = request_warmup.warm_up(template.app, lambda into: hotswap.record_import_calls(root, into))
        except request_warmup.WarmUpBroke as exc:
            send_frame(sock, {"type": "template", "ok": False, "refused": True, "error": str(exc)[:2000]})
            return
    held = _held_files(root, keep=fd)
    shared = held if isinstance(held, str) else _shared_state(keep=fd, held={h[0] for h in held})
    if shared:
        send_frame(sock, {"type": "template", "ok": False, "refused": True,
                          "error": f"the app's import left {shared}, which its workers would share"})
        return
    template.held = tuple(held)
    gc.collect()
    gc.freeze()  # collections in workers must not touch (and so copy) the template's pages
    send_frame(sock, {
        "type": "template", "ok": True, "load_ms": round((time.perf_counter() - started) * 1000, 3),
        "modules": len(template.loaded.modules), "functions": len(template.loaded.functions),
        "called_at_import": len(template.loaded.called_at_import),
        "started": not_started is None, "not_started": not_started,
        "warmed": not_warmed is None, "not_warmed": not_warmed,
    })
    read_roots = containment.python_read_roots()
    forker = Forker(sock, lambda child_fd, me, spawn, _blob: template_worker_main(child_fd, me, spawn, template),
                    extend_spawn=lambda spawn: spawn.update(read_roots=read_roots))
    forker.serve()


def _held_files(root: str, keep: int) -> list[tuple[int, int, int]] | str:
    """The regular files under ``root`` this process holds open (descriptor, offset, status flags):
    what a SQLite connection made at import leaves. The template's folder is put back after each
    worker, so the file's content is as after the import for every worker; what an open file
    shares between forks beyond that is its offset and its status flags, which :func:`rewind`
    puts back. A description of the problem when one cannot be inspected."""
    held = []
    prefix = root.rstrip("/") + "/"
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return "state this platform cannot inspect"
    for descriptor in descriptors:
        if descriptor == keep:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{descriptor}")
            if not target.startswith(prefix) or not stat.S_ISREG(os.fstat(descriptor).st_mode):
                continue
            held.append((descriptor, os.lseek(descriptor, 0, os.SEEK_CUR), fcntl.fcntl(descriptor, fcntl.F_GETFL)))
        except OSError:
            continue
    return held


def rewind(held: tuple[tuple[int, int, int], ...]) -> None:
    """Put the template's open files' offsets and status flags back as they were after the import
    (an earlier worker may have moved or changed them: they are shared, not copied, by a fork)."""
    for descriptor, offset, flags in held:
        os.lseek(descriptor, offset, os.SEEK_SET)
        fcntl.fcntl(descriptor, fcntl.F_SETFL, flags)


def _shared_state(keep: int, held: set[int] = frozenset()) -> str | None:
    """What this process holds that its forks would share instead of copying: a descriptor other
    than ``keep`` (the socket to the parent), ``held`` (its own files, see :func:`_held_files`) and
    ``/dev/null``, or a writable shared memory mapping. ``None`` if nothing."""
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            mappings = [line.split() for line in maps]
    except OSError:
        return "state this platform cannot inspect"
    for descriptor in descriptors:
        if descriptor == keep or descriptor in held:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{descriptor}")
        except OSError:
            continue  # the descriptor listdir itself used, closed since
        if target != os.devnull:  # stdin, stdout and stderr point there
            return f"descriptor {descriptor} open ({target})"
    for fields in mappings:
        # A read-only shared mapping (a locale cache) cannot carry anything from one worker to another.
        if len(fields) >= 2 and fields[1].endswith("s") and "w" in fields[1]:
            return f"a writable shared memory mapping ({fields[5] if len(fields) > 5 else 'anonymous'})"
    return None


def template_worker_main(fd: int, template_pid: int, spawn: dict[str, Any], template: Template) -> None:
    """Run in a child of a template; never returns."""
    code = 0
    try:
        _serve_swapped(fd, template_pid, spawn, template)
    except PeerClosed:
        pass
    except BaseException:  # noqa: BLE001 - whatever the app did, the process ends here
        code = 1
    os._exit(code)


def _serve_swapped(fd: int, template_pid: int, spawn: dict[str, Any], template: Template) -> None:
    containment.tie_to_parent(template_pid)
    os.setsid()
    containment.isolate_descriptors(fd, *(held[0] for held in template.held))
    root = template.loaded.root
    limits = SandboxLimits.from_json(spawn["limits"])
    loop = asyncio.new_event_loop()  # before seccomp: its self-pipe is a socketpair
    writable = bool(spawn.get("writable", True))
    # No rehearsal: copying the template's heap pages in advance (touching every object) cost
    # about 9 ms of CPU a worker and saved none on its requests (bench verify measured both).
    layers, freezer = containment.contain(root, limits, spawn["read_roots"],
                                          idle_priority=bool(spawn.get("idle_priority")),
                                          workspace_access="writable" if writable else "read-only")
    layers["workspace"] = "template's, restored after each worker" if writable else "read-only"
    write_all_fd(fd, encode({"type": "spare"}))

    message, blob = read_frame_fd(fd)
    clock = [time.perf_counter()]
    rewind(template.held)  # the previous worker has ended: its moves of the shared files are undone
    policy = containment.install_audit_hook(root, limits, spawn["read_roots"], writable=writable,
                                            importable=importable_modules() | top_level_names(message["files"]))
    layers["audit_hook"] = True
    files: dict[str, str] = message["files"]
    try:
        if message.get("plan") is not None:  # an earlier worker of this run planned the swap
            plans = hotswap.decode_plans(template.loaded, message["plan"], blob)
        else:
            plans = hotswap.plan_swap(template.loaded, files)
            # Told to the parent before any patched code runs: the run's later workers apply it.
            data, plan_blob = hotswap.encode_plans(plans)
            write_all_fd(fd, encode({"type": "plan", "plan": data}, plan_blob))
        for plan in plans:
            hotswap.apply_plan(template.loaded, plan)
    except hotswap.NotSwappable as exc:
        write_all_fd(fd, encode({"type": "unswappable", "reason": str(exc)[:2000], "containment": layers}))
        return
    except Exception as exc:  # noqa: BLE001 - an import the patch added failed: the app's error
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {os.path.relpath(frames[-1].filename, root)}:{frames[-1].lineno}" if frames else ""
        write_all_fd(fd, encode({"type": "load_error", "error": f"{type(exc).__name__}{where}: {exc}", "containment": layers}))
        return
    template.finder.files = files  # imports made later and tracebacks see the patched sources (as the disk does)
    clock.append(time.perf_counter())
    importable = importable_modules()
    start_and_serve(fd, template.app, loop, layers, clock, ("swap",), {"swapped_files": len(plans)},
                    started=template.started, root=root,
                    loaded=lambda: containment.freeze(freezer, policy,
                                                      before=lambda: import_named_modules(files, importable)))
