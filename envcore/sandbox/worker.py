"""The worker: one forked process serving one version of an untrusted app over a socket.

The zygote forks and calls :func:`worker_main` in the child, which never returns. The worker first
contains itself (:mod:`envcore.sandbox.containment`) and then waits, as a *spare*, for the parent to
send an app; the parent keeps a few spares ready so that forking and containment are off the path
of a verification. Given an app (whose files the parent has already written into the workspace), the
worker installs the audit hook, imports the app and runs its start-up (both may create files, up to
the hook's quota: a SQLite database, say), takes away its own right to create any more (a Landlock
layer prepared before the hook), and reports ``ready`` (with the containment layers) or
``load_error``.
Then it serves: each frame from the parent carries a list of requests, answered in order, one
response frame each, by calling the ASGI app directly. It only ever sees requests: which of them are
probes, what they expect and how they are graded stays in the parent. End of input (the parent
closed the socket) ends the process.
"""

from __future__ import annotations

import asyncio
import base64
import marshal
import os
import shutil
import tempfile
import time
from pathlib import Path
from types import CodeType
from typing import Any, Callable

from envcore.runner.databases import DatabaseBuildError, build_databases
from envcore.runner.diagnostics import LoadSampler, app_traceback, worth_showing
from envcore.runner.http import HttpRequest, Lifespan, call_asgi
from envcore.runner.loader import AppLoadError, CodeCache, load_app, materialize, short_traceback, top_level_names
from envcore.sandbox import containment
from envcore.sandbox.app_runtime import import_named_modules, importable_modules
from envcore.sandbox.limits import SandboxLimits
from envcore.sandbox.wire import PeerClosed, encode, read_frame_fd, write_all_fd


def request_to_json(request: HttpRequest) -> dict[str, Any]:
    return {
        "method": request.method,
        "path": request.path,
        "query": [list(q) for q in request.query],
        "headers": [list(h) for h in request.headers],
        "body": base64.b64encode(request.body).decode(),
    }


def request_from_json(data: dict[str, Any]) -> HttpRequest:
    return HttpRequest(
        data["method"],
        data["path"],
        tuple((str(k), str(v)) for k, v in data["query"]),
        tuple((str(k), str(v)) for k, v in data["headers"]),
        base64.b64decode(data["body"]),
    )


def worker_main(fd: int, zygote_pid: int, spawn: dict[str, Any]) -> None:
    """Run in the forked child; never returns."""
    code = 0
    try:
        _serve(fd, zygote_pid, spawn)
    except PeerClosed:
        pass
    except BaseException:  # noqa: BLE001 - whatever the app did, the process ends here
        code = 1
    os._exit(code)


def _relocate(code: CodeType, filename: str) -> CodeType:
    consts = tuple(_relocate(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def precompiled(root: Path, files: dict[str, str], index: list, blob: bytes) -> CodeCache:
    """A code cache holding the modules the parent compiled (trusted files only, see
    :meth:`~envcore.sandbox.pool.Sandbox.trust`), each given its real file name."""
    cache = CodeCache()
    for path, offset, length in index:
        filename = str(root / path)
        cache.put(filename, files[path], _relocate(marshal.loads(blob[offset:offset + length]), filename))
    return cache


def rehearse(sample: dict[str, Any], root: Path, loop: asyncio.AbstractEventLoop) -> None:
    """Load a sample app and serve it its requests, then forget it.

    Forked memory is shared copy-on-write: the first write to each inherited page (a reference
    count going up is enough) copies it, a few thousand page faults per app load. A spare does this
    rehearsal while it waits, so the pages an app load touches are already its own when the real app
    arrives. The sample is trusted (a generated app, see :mod:`envcore.sandbox.warmup`), exactly
    what the zygote warmed up on, and leaves nothing behind that the real app could see."""
    imported = None
    try:
        materialize(sample["files"], root)
        imported = load_app(root, sample["files"], sample["entrypoint"])
        lifespan = Lifespan(imported.app)
        loop.run_until_complete(lifespan.startup())
        for item in sample["requests"]:
            loop.run_until_complete(call_asgi(imported.app, request_from_json(item)))
        loop.run_until_complete(lifespan.shutdown())
    except Exception:  # noqa: BLE001 - a failed rehearsal only costs speed
        pass
    finally:
        if imported is not None:
            imported.forget()
        shutil.rmtree(root, ignore_errors=True)


def rehearse_all(samples: Any) -> None:
    """:func:`rehearse` every sample, each in a folder of its own, on one event loop: the first-use
    work of the libraries done once in this process, for every process forked from it."""
    loop = asyncio.new_event_loop()
    for sample in samples:
        rehearse(sample, Path(tempfile.mkdtemp(prefix="a01-warmup-")), loop)
    loop.close()


def _serve(fd: int, zygote_pid: int, spawn: dict[str, Any]) -> None:
    containment.tie_to_parent(zygote_pid)
    os.setsid()
    containment.isolate_descriptors(keep=fd)
    workspace = spawn["workspace"]
    limits = SandboxLimits.from_json(spawn["limits"])
    os.chdir(workspace)
    containment.scrub_environment(workspace)
    containment.run_sync_inline()
    loop = asyncio.new_event_loop()  # before seccomp: its self-pipe is a socketpair
    sample = spawn.get("rehearsal") if spawn.get("rehearse") else None
    rehearsal = (lambda: rehearse(sample, Path(workspace) / ".rehearsal", loop)) if sample else None
    layers, freezer = containment.contain(workspace, limits, spawn["read_roots"], rehearse=rehearsal,
                                          idle_priority=bool(spawn.get("idle_priority")))
    write_all_fd(fd, encode({"type": "spare"}))

    # A spare worker waits here, contained, until the parent gives it an app.
    message, blob = read_frame_fd(fd)
    clock = [time.perf_counter()]
    sampler = _load_sampler(fd, message, workspace)
    files: dict[str, str] = message["files"]
    root = Path(workspace)  # the parent has written every file of the app here
    code_cache = precompiled(root, files, message.get("compiled", []), blob)
    try:  # the app's databases kept as SQL text, built here, contained, before any hook or app code
        build_databases(root, files)
    except DatabaseBuildError as exc:
        write_all_fd(fd, encode(_with_profile({"type": "load_error", "error": str(exc), "containment": layers}, sampler)))
        return
    policy = containment.install_audit_hook(workspace, limits, spawn["read_roots"],
                                            importable=importable_modules() | top_level_names(files))
    layers["audit_hook"] = True
    clock.append(time.perf_counter())

    # From here on, app code runs.
    try:
        app = load_app(root, files, message["entrypoint"], code_cache).app  # kept: this process serves only it
    except AppLoadError as exc:
        write_all_fd(fd, encode(_with_profile({"type": "load_error", "error": str(exc), "containment": layers}, sampler)))
        return
    clock.append(time.perf_counter())
    importable = importable_modules()
    start_and_serve(fd, app, loop, layers, clock, ("files", "import"),
                    loaded=lambda: containment.freeze(freezer, policy,
                                                      before=lambda: import_named_modules(files, importable)),
                    sampler=sampler, root=root)


def _load_sampler(fd: int, message: dict[str, Any], workspace: str) -> LoadSampler | None:
    """A sampler of this worker's stack while the app loads, if the parent asked for diagnostics
    (:mod:`envcore.runner.diagnostics`); the profile so far goes to the parent as the load runs, so
    a load stopped at its deadline still has one."""
    if not message.get("diagnose"):
        return None
    send = lambda profile: write_all_fd(fd, encode({"type": "profile", "profile": profile.to_json()}))  # noqa: E731
    return LoadSampler(workspace, report=send).start()


def _with_profile(report: dict[str, Any], sampler: LoadSampler | None) -> dict[str, Any]:
    """The load's report (``ready`` or ``load_error``), with the load's finished profile if one was
    taken: a failed load's if it has anything to show; a successful load's always, for the parent
    to judge whether it was slow (it knows the load deadline, and it shows a finished load only by
    the profile its report carries, never by one streamed before)."""
    if sampler is not None:
        profile = sampler.stop()
        if report["type"] != "ready":
            profile = worth_showing(profile, loaded=False)
        if profile is not None:
            report["profile"] = profile.to_json()
    return report


def start_and_serve(fd: int, app: Any, loop: asyncio.AbstractEventLoop, layers: dict[str, Any], clock: list[float],
                    phases: tuple[str, ...], extra: dict[str, Any] | None = None, *,
                    loaded: Callable[[], str | None] | None = None, started: bool = False,
                    sampler: LoadSampler | None = None, root: Path | str | None = None) -> None:
    """Run the app's startup (unless it ``started`` in the template this worker was forked from), then
    ``loaded`` (which closes the folder to new files: ``None``, or why it failed), report ``ready`` (with how long each phase in ``clock`` took) or ``load_error``,
    and serve requests. ``sampler``: the load's profile, stopped before either report; ``root``: the
    app's folder, which a startup failure's one line names its files relative to."""
    try:
        describe = (lambda exc: short_traceback(exc, Path(root))) if root is not None else None
        failure = None if started else loop.run_until_complete(Lifespan(app, describe).startup())
        if failure is not None:
            raise AppLoadError(f"startup failed: {failure}")
        problem = loaded() if loaded is not None else None
        if problem is not None:
            raise AppLoadError(problem)
    except AppLoadError as exc:
        write_all_fd(fd, encode(_with_profile({"type": "load_error", "error": str(exc), "containment": layers}, sampler)))
        return
    clock.append(time.perf_counter())
    names = (*phases, "startup")
    timings: dict[str, Any] = {name: round((b - a) * 1000, 3) for name, a, b in zip(names, clock, clock[1:])}
    ready = {"type": "ready", "containment": layers, "timings_ms": {**timings, **(extra or {})}}
    write_all_fd(fd, encode(_with_profile(ready, sampler)))
    serve_requests(fd, app, loop)


def serve_requests(fd: int, app: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Answer the parent's request frames, in order, one response frame per request, until the
    parent closes the socket (:class:`PeerClosed`). A frame whose ``diagnose`` names the app's folder
    asks for the app's traceback of any exception that escapes it (diagnostics, never in grading)."""
    while True:
        message, _ = read_frame_fd(fd)
        root = message.get("diagnose")
        on_error = (lambda exc: app_traceback(exc, root)) if isinstance(root, str) else None
        for item in message.get("requests", []):
            response = loop.run_until_complete(call_asgi(app, request_from_json(item), on_error=on_error))
            header = {
                "type": "response",
                "status": response.status,
                "headers": [[k, v] for k, v in response.headers.items()],
                "error": response.error,
                "truncated": response.truncated,
            }
            if response.traceback is not None:
                header["traceback"] = response.traceback
            write_all_fd(fd, encode(header, response.body))
