"""The worker's audit-hook policy: Python-level refusals with clear messages.

CPython raises an *audit event* before sensitive operations (``open``, ``os.system``,
``socket.__new__``, ``ctypes.dlopen``, ``import``...); a hook installed with ``sys.addaudithook``
cannot be removed and may veto an event by raising. The worker installs :class:`AuditPolicy` as
the last step before app code runs. It refuses:

* file access outside the workspace (reads are also allowed inside the Python installation, so an
  app may import a module nobody imported before), links and symlinks, and more than
  ``max_new_files`` newly created files, folders and SQLite databases while the app loads (once it
  has loaded, where Landlock is available, the kernel refuses creating any, see
  :func:`envcore.sandbox.containment.prepare_freeze`);
* processes and programs (``os.system``, ``os.exec*``, ``os.fork``, ``subprocess``, ``pty``),
  signals (``os.kill``), sockets, name lookups and every network client of the standard library
  where it connects (:data:`NETWORK_EVENTS`): a refusal is a ``PermissionError``, an ``OSError`` like
  any network failure, raised at once, so an app's own error handling for a service that cannot be
  reached runs as it would anywhere;
* ``ctypes`` in any form, SQLite extension loading, ``fcntl.ioctl``, changing resource limits,
  installing audit hooks, and the garbage collector's object walks;
* importing modules that exist only to do the above (``ctypes``, ``_posixsubprocess``,
  ``multiprocessing``...).

Audit hooks are **not** a security boundary on their own: pure-Python tricks can reach objects the
hook relies on, and C code does not raise events. They are the first of several layers and the one
that explains itself; the kernel layers (:mod:`~envcore.sandbox.seccomp`,
:mod:`~envcore.sandbox.landlock`, resource limits) hold even when this one is bypassed. Nothing
secret lives in a worker in the first place: it is forked from a zygote that never sees probes,
reference fixes or the grader's memory.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterable

NETWORK_EVENTS = frozenset({
    "http.client.connect", "ftplib.connect", "smtplib.connect", "poplib.connect", "imaplib.open",
    "nntplib.connect", "telnetlib.Telnet.open",
})
"""Where a network client of the standard library connects. Refused there, at the connection, and
not sooner (``urllib.request.urlopen`` raises no refusal of its own): each client's own error handling
is around its connection, so an app's ``except URLError`` or ``except requests.ConnectionError``
meets the refusal as it would meet a network that is down."""
NETWORK_PREFIXES = ("socket.",)
"""Every socket event: creating, binding, connecting, name lookups (``socket.getaddrinfo``)."""
NOT_NETWORK_EVENTS = frozenset({"socket.gethostname"})
"""Socket events that reach no network: the machine's name, which ``os.uname()`` gives anyway (mail
libraries ask it for a message id, resolvers for their search domain)."""
DENIED_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "os.link", "os.symlink", "subprocess.Popen", "pty.spawn", "signal.pthread_kill", "fcntl.ioctl",
    "resource.setrlimit", "resource.prlimit", "sys.addaudithook", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "sqlite3.enable_load_extension", "sqlite3.load_extension", "webbrowser.open",
    "os.startfile", "winreg.ConnectRegistry",
})
DENIED_PREFIXES = ("ctypes.", "_winapi.", "msvcrt.")
DENIED_MODULES = frozenset({
    "ctypes", "_ctypes", "_posixsubprocess", "subprocess", "multiprocessing", "_multiprocessing", "pty",
    "_xxsubinterpreters", "_testcapi", "_testinternalcapi",
})
"""Modules whose only use in an app would be an escape (importing a network or file module is
fine: using it raises the events above)."""
WRITE_PATH_EVENTS = {  # event -> positions of path arguments to check for writing
    "os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.truncate": (0,),
    "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,), "os.chflags": (0,), "os.setxattr": (0,),
    "os.removexattr": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copymode": (1,),
    "shutil.copystat": (1,), "shutil.copytree": (1,), "shutil.move": (0, 1), "shutil.chown": (0,),
    "shutil.make_archive": (0,), "shutil.unpack_archive": (1,), "tempfile.mkstemp": (0,),
    "tempfile.mkdtemp": (0,),
}
READ_PATH_EVENTS = {
    "os.listdir": (0,), "os.scandir": (0,), "os.chdir": (0,), "os.getxattr": (0,), "os.listxattr": (0,),
    "shutil.copyfile": (0,), "shutil.copytree": (0,), "shutil.unpack_archive": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxViolation(PermissionError):
    """Raised inside the worker when the policy refuses an operation."""


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + os.sep) for root in roots)


class AuditPolicy:
    """Decides audit events for one worker. :meth:`decide` is pure apart from the file counter."""

    __slots__ = ("importable", "max_new_files", "new_files", "permitted_call", "read_roots", "workspace")

    def __init__(self, workspace: str, read_roots: Iterable[str], max_new_files: int, *, writable: bool = True,
                 importable: frozenset[str] | None = None) -> None:
        self.importable = importable
        """Top-level modules the app may import (its own, the standard library, the app libraries);
        ``None``: any the installation has."""
        here = (os.path.abspath(workspace),)
        self.workspace = here if writable else ()
        """Where the app may write: its workspace, or nowhere when the workspace is shared read-only."""
        self.read_roots = tuple(os.path.abspath(r) for r in read_roots) + here
        self.max_new_files = max_new_files
        self.new_files = 0
        self.permitted_call: int | None = None
        """The one foreign function the worker itself may call right now (see :meth:`permit_call`)."""

    def permit_call(self, address: int, call: Callable[[], Any]) -> Any:
        """Run ``call`` (the worker's own code, no app code in between) with ``ctypes`` calls to the
        function at ``address`` allowed, and only while it runs: how the worker applies the Landlock
        layer it prepared before the hook (:class:`envcore.sandbox.landlock.PreparedLayer`)."""
        self.permitted_call = address
        try:
            return call()
        finally:
            self.permitted_call = None

    def _path(self, value: Any) -> str | None:
        """An absolute path for a path-like argument, ``None`` for an open descriptor."""
        if value is None or isinstance(value, int):
            return None
        try:
            path = os.fsdecode(os.fspath(value))
        except TypeError:
            return "<not a path>"
        return os.path.abspath(path)

    def _may_write(self, value: Any) -> str | None:
        path = self._path(value)
        if path is not None and not _under(path, self.workspace):
            if not self.workspace:
                return f"this app's files are read-only: {path}"
            return f"writing outside the workspace is not allowed: {path}"
        return None

    def _may_read(self, value: Any) -> str | None:
        path = self._path(value)
        if path is not None and not _under(path, self.read_roots):
            return f"reading outside the workspace is not allowed: {path}"
        return None

    def _count_new(self, value: Any, weight: int = 1) -> str | None:
        target = self._path(value)
        if target is not None and not os.path.exists(target):
            self.new_files += weight
            if self.new_files > self.max_new_files:
                return f"the app may create at most {self.max_new_files} files and folders"
        return None

    def decide(self, event: str, args: tuple[Any, ...]) -> str | None:
        """``None`` to allow ``event``, else the reason it is refused."""
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = bool((flags or 0) & _WRITE_FLAGS) or (isinstance(mode, str) and any(c in mode for c in "wax+"))
            reason = self._may_write(path) if writing else self._may_read(path)
            if reason is None and writing and (flags or 0) & os.O_CREAT:
                if mode is None and isinstance(path, (str, bytes)) and not os.path.isabs(path):
                    # os.open with a relative path may be relative to a dir_fd this event does not show
                    return "os.open(..., O_CREAT) needs an absolute path in the sandbox"
                return self._count_new(path)
            return reason
        if event == "os.mkdir":
            return self._may_write(args[0] if args else None) or self._count_new(args[0] if args else None)
        if event == "ctypes.call_function" and self.permitted_call is not None and args and args[0] == self.permitted_call:
            return None
        if event in NETWORK_EVENTS or (event.startswith(NETWORK_PREFIXES) and event not in NOT_NETWORK_EVENTS):
            return f"no network in the sandbox ({event} refused)"
        if event in DENIED_EVENTS or event.startswith(DENIED_PREFIXES):
            return f"{event} is not allowed in the sandbox"
        if event == "import":
            name = str(args[0]) if args else ""
            if name in DENIED_MODULES or name.split(".")[0] in DENIED_MODULES:
                return f"importing {name} is not allowed in the sandbox"
            return None
        if event == "sqlite3.connect":
            database = os.fsdecode(args[0]) if args and isinstance(args[0], (str, bytes)) else ""
            if database in ("", ":memory:") or database.startswith("file::memory:"):
                return None
            target = database.removeprefix("file:").split("?")[0]
            return self._may_write(target) or self._count_new(target, weight=3)  # the file and its journals
        for index in WRITE_PATH_EVENTS.get(event, ()):
            if index < len(args) and (reason := self._may_write(args[index])):
                return reason
        for index in READ_PATH_EVENTS.get(event, ()):
            if index < len(args) and (reason := self._may_read(args[index])):
                return reason
        return None

    def import_refusal(self, event: str, args: tuple[Any, ...]) -> str | None:
        """Why importing a module that is not the app's, the standard library's or an app library's
        is refused (``None`` if it is not refused). Raised as a ``ModuleNotFoundError``, so code written for an optional library (``try: import ujson``)
        behaves as where it is not installed."""
        if event != "import" or self.importable is None or not args:
            return None
        top = str(args[0]).partition(".")[0]
        if not top or top in self.importable:
            return None
        return (f"No module named {top!r} for apps: an app may import its own modules, the standard library and "
                "the libraries listed under 'What an app may import' in docs/bundle-format.md")

    def install(self) -> "AuditPolicy":
        decide, refuse_import = self.decide, self.import_refusal

        def hook(event: str, args: tuple[Any, ...]) -> None:
            reason = decide(event, args)
            if reason is not None:
                raise SandboxViolation(reason)
            reason = refuse_import(event, args)
            if reason is not None:
                raise ModuleNotFoundError(reason, name=str(args[0]))

        sys.addaudithook(hook)
        return self
