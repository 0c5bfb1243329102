"""Landlock for workers: the kernel limits which files the app can touch, whatever Python does.

Landlock (Linux 5.13+) lets an unprivileged process give up rights for good. A worker keeps:

* read access to the Python installation (standard library, site-packages, compiled modules) and
  the system's shared-library folders, so that an app may still import a module nobody imported
  before it;
* full access, except executing and making devices, pipes, sockets or links, to its own workspace;
  once the app's files are written, a second layer takes away creating files and folders there too,
  so no app can fill a disk, whatever it does to the Python-level checks.

Everything else is refused by the kernel: the scenario cache with its hidden probes and reference
fixes, the project's source, ``/proc`` (other processes, the environment of the parent), ``/etc``,
home folders. On kernels with Landlock ABI 4 or later the worker also loses TCP bind and connect,
and on ABI 6 or later it can no longer signal processes outside its domain or reach abstract unix
sockets. :func:`restrict` reports what it could apply; a kernel without Landlock leaves the audit
hook (see :mod:`envcore.sandbox.audit`) as the file-access guard, and the report says so.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Iterable

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on x86-64 and arm64
_SYS_OPENAT = 257 if platform.machine() in ("x86_64", "AMD64") else 56
_AT_FDCWD = -100
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}

READ_ONLY = READ_FILE | READ_DIR
WORKSPACE = WRITE_FILE | READ_FILE | READ_DIR | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | TRUNCATE
FROZEN_WORKSPACE = WRITE_FILE | READ_FILE | READ_DIR | REMOVE_DIR | REMOVE_FILE | TRUNCATE
"""The workspace once the app's files are in: existing files may be written, nothing may be created."""

SHARED_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version, 0 if Landlock is unavailable."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def restrict(
    read_only: Iterable[str], read_write: Iterable[str], *, workspace_access: int = WORKSPACE
) -> tuple[int, str | None]:
    """Restrict this process for good; return (ABI used, ``None`` or why nothing was applied).

    Each call adds a layer; a process keeps only the rights every layer grants, so a later call
    can narrow (never widen) what an earlier one allowed."""
    layer, problem = prepare(read_only, read_write, workspace_access=workspace_access)
    if layer is None:
        return 0, problem
    problem = layer.apply()
    return (0, problem) if problem else (layer.abi, None)


class PreparedLayer:
    """A Landlock layer built now and applied later, with one system call and no new ``ctypes``
    objects: a worker prepares the layer that freezes its folder before its seccomp filter and its
    audit hook (the filter refuses creating rulesets; the hook refuses ``ctypes``) and applies it once
    the app has loaded (see :mod:`envcore.sandbox.worker`). The audit hook lets exactly that call
    through (:attr:`function_address`, see :meth:`envcore.sandbox.audit.AuditPolicy.permit_call`), and
    the filter lets ``landlock_restrict_self`` through for this ruleset only.

    :meth:`creates_files` is the worker's check on its own freeze, prepared the same way: it tries to
    create a file in the folder with a raw ``openat`` (past any Python-level patching an app may have
    left), which must fail once the layer is on."""

    def __init__(self, abi: int, ruleset: int, libc: ctypes.CDLL, probe_folder: str | None = None,
                 probe_read: str | None = None) -> None:
        self.abi, self.ruleset = abi, ruleset
        self.folder: str | None = None
        """The folder the layer seals (set by its maker)."""
        self._syscall = libc.syscall
        self._args = (ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0))
        self.function_address = ctypes.cast(self._syscall, ctypes.c_void_p).value or 0
        self._probe_path = None
        if probe_folder is not None:
            name = os.path.join(probe_folder, f".a01-freeze-check-{os.urandom(8).hex()}")
            self._probe_path = name
            self._probe_args = (ctypes.c_long(_SYS_OPENAT), ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(os.fsencode(name)),
                                ctypes.c_int(os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC), ctypes.c_int(0o600))
        self._read_args = None
        if probe_read is not None:
            self._read_args = (ctypes.c_long(_SYS_OPENAT), ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(os.fsencode(probe_read)),
                               ctypes.c_int(os.O_RDONLY | os.O_CLOEXEC), ctypes.c_int(0))

    def apply(self) -> str | None:
        """Restrict this process with the layer; ``None``, or why it could not be applied."""
        try:
            if self._syscall(*self._args) != 0:
                return f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}"
            return None
        finally:
            try:
                os.close(self.ruleset)
            except OSError:
                pass

    def creates_files(self) -> str | None:
        """After :meth:`apply`: ``None`` if creating a file in the folder fails as it must, else what
        happened (the file, if one was made, is removed)."""
        if self._probe_path is None:
            return None
        fd = self._syscall(*self._probe_args)
        if fd < 0:  # refused (reading errno would take a ctypes call the audit hook refuses)
            return None
        os.close(fd)
        os.unlink(self._probe_path)
        return "a file could still be created in the app's folder"

    def reads_outside(self) -> str | None:
        """After :meth:`apply`: ``None`` if reading a file outside the folder (one of the Python
        installation's) fails as it must, else what happened."""
        if self._read_args is None:
            return None
        fd = self._syscall(*self._read_args)
        if fd < 0:
            return None
        os.close(fd)
        return "a file outside the app's folder could still be read"


def prepare(
    read_only: Iterable[str], read_write: Iterable[str], *, workspace_access: int = WORKSPACE,
    probe_folder: str | None = None, probe_read: str | None = None,
) -> tuple[PreparedLayer | None, str | None]:
    """Build a layer (and set ``no_new_privs``, which applying one needs) without applying it:
    (the layer, ``None``) or (``None``, why not). ``probe_folder``: where the layer's
    :meth:`~PreparedLayer.creates_files` check tries to create a file; ``probe_read``: a file outside it
    that its :meth:`~PreparedLayer.reads_outside` check tries to read."""
    abi = abi_version()
    if abi < 1:
        return None, "Landlock is not available in this kernel"
    handled_fs = _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]
    attr = _RulesetAttr(handled_fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return None, f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}"
    ruleset = int(ruleset)
    try:
        for paths, access in ((read_only, READ_ONLY), (read_write, workspace_access)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # a folder this system does not have
                try:
                    is_dir = os.path.isdir(path)
                    rule = _PathBeneathAttr((access & handled_fs) if is_dir else (access & handled_fs & (READ_FILE | WRITE_FILE | TRUNCATE)), fd)
                    if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                    ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                        os.close(ruleset)
                        return None, f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}"
                finally:
                    os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            os.close(ruleset)
            return None, f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    except BaseException:
        os.close(ruleset)
        raise
    return PreparedLayer(abi, ruleset, libc, probe_folder, probe_read), None
