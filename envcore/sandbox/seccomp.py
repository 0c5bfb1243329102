"""A seccomp-bpf filter for workers: an allowlist of the system calls a contained app needs.

Installed in the worker last, after every other layer is in place (resource limits, both Landlock
layers prepared, capabilities dropped), and before any app code runs. Everything not listed fails with
``EPERM`` (the app sees a ``PermissionError``, not a crash). What is listed is what CPython, its event
loop, SQLite and the app libraries call in one single-threaded process serving requests on a socket it
was given, measured with ``python -m envcore.sandbox.survey`` (strace over gradings and episodes on every
shipped cache) and widened only by calls of the same kind:

* files, through descriptors and paths (Landlock decides which paths): read, write, open, stat, list,
  rename and remove, truncate, sync; ``open``/``openat`` never with ``O_PATH`` (a path-only descriptor
  is not checked by Landlock and would let an app ``fstat`` files it may not open); ``openat2`` not at
  all (its flags sit in a structure a filter cannot read);
* memory (``mmap``, ``mprotect``, ``brk``...), clocks and sleeps, the event loop's waits
  (``epoll``, ``poll``, ``select``), pipes, and sending and receiving on sockets it already holds
  (creating or connecting one is not listed);
* facts about itself (its ids, limits, usage, affinity) and signals to itself only: ``kill``,
  ``tgkill`` and ``rt_(tg)sigqueueinfo`` are allowed when their first argument is the worker's own
  pid; ``prlimit64`` only on itself and only to read;
* ``fcntl`` with the commands that manage its own descriptors (duplicate, close-on-exec, status
  flags, lock queries); the lock commands and ``flock`` *succeed without doing anything*: every worker
  has its own copy of the app's files and one thread, so a lock has nothing to protect, and a lock
  held on a shared readable file could otherwise be seen by another worker. ``F_SETOWN``,
  ``F_SETSIG``, ``F_SETOWN_EX`` (which make the kernel signal another process), leases and directory
  notifications are not listed;
* ``ioctl`` with terminal and non-blocking queries only (``TCGETS``, ``TIOCGWINSZ``, ``FIONREAD``,
  ``FIONBIO``, ``FIOCLEX``, ``FIONCLEX``): ``FIOSETOWN``, ``SIOCSPGRP`` and inode flags are not;
* ``landlock_restrict_self`` with the one ruleset the worker prepared for its freeze (see
  :func:`envcore.sandbox.containment.freeze`), and no other Landlock call: an app can neither build a
  ruleset of its own nor add rules, so it cannot substitute one for the freeze.

Left out on purpose although harmless-looking: ``sysinfo`` and ``statfs`` (free memory and free disk
space are counters one worker can move and another read), ``mincore`` (which pages of a shared file
are cached), ``getcpu``, ``prctl`` and ``seccomp`` (an app adding a filter of its own could fake the
result of the worker's own calls), and everything that creates processes, threads, sockets, links,
namespaces or kernel objects, changes metadata, or reaches another process.

A wrong architecture (e.g. a 32-bit system call from a 64-bit process) kills the process. Only
x86-64 is supported; elsewhere :func:`install` reports that it did nothing and the other layers
remain.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# BPF instruction classes and fields
_LD, _JMP, _RET, _ALU = 0x00, 0x05, 0x06, 0x04
_W, _ABS, _K = 0x00, 0x20, 0x00
_JEQ, _JGE, _JSET = 0x10, 0x30, 0x40
_AND = 0x50

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_OFF_NR, _OFF_ARCH = 0, 4


def _arg(n: int, high: bool = False) -> int:
    """Offset of argument ``n``'s low (or high) 32 bits in ``struct seccomp_data`` (little-endian)."""
    return 16 + 8 * n + (4 if high else 0)


X86_64_ALLOWED = {
    # files, by descriptor and by path (Landlock decides which paths)
    "read": 0, "write": 1, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "lseek": 8, "pread64": 17,
    "pwrite64": 18, "readv": 19, "writev": 20, "access": 21, "dup": 32, "dup2": 33, "sendfile": 40,
    "fsync": 74, "fdatasync": 75, "truncate": 76, "ftruncate": 77, "getcwd": 79, "chdir": 80, "fchdir": 81,
    "rename": 82, "mkdir": 83, "rmdir": 84, "unlink": 87, "readlink": 89, "umask": 95, "getdents64": 217,
    "fadvise64": 221, "mkdirat": 258, "newfstatat": 262, "unlinkat": 263, "renameat": 264, "readlinkat": 267,
    "faccessat": 269, "fallocate": 285, "dup3": 292, "preadv": 295, "pwritev": 296, "renameat2": 316,
    "copy_file_range": 326, "preadv2": 327, "pwritev2": 328, "statx": 332, "close_range": 436,
    "faccessat2": 439,
    # memory
    "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "mremap": 25, "msync": 26, "madvise": 28,
    # signals to itself, timers, clocks, sleeping
    "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "nanosleep": 35, "getitimer": 36,
    "alarm": 37, "setitimer": 38, "rt_sigpending": 127, "sigaltstack": 131, "time": 201, "restart_syscall": 219,
    "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230, "gettimeofday": 96,
    # waiting on descriptors, pipes, sockets it already holds
    "poll": 7, "pipe": 22, "select": 23, "sendto": 44, "recvfrom": 45, "sendmsg": 46, "recvmsg": 47,
    "shutdown": 48, "getsockname": 51, "getpeername": 52, "setsockopt": 54, "getsockopt": 55,
    "epoll_create": 213, "epoll_wait": 232, "epoll_ctl": 233, "pselect6": 270, "ppoll": 271,
    "epoll_pwait": 281, "epoll_create1": 291, "pipe2": 293, "epoll_pwait2": 441,
    # facts about itself
    "getpid": 39, "uname": 63, "getrlimit": 97, "getrusage": 98, "times": 100, "getuid": 102, "getgid": 104,
    "geteuid": 107, "getegid": 108, "getppid": 110, "getpgrp": 111, "getgroups": 115, "getresuid": 118,
    "getresgid": 120, "getpgid": 121, "getsid": 124, "capget": 125, "getpriority": 140, "sched_getparam": 143,
    "sched_getscheduler": 145, "sched_get_priority_max": 146, "sched_get_priority_min": 147, "gettid": 186,
    "sched_getaffinity": 204, "sched_yield": 24,
    # the rest of a single-threaded process's life
    "futex": 202, "getrandom": 318, "exit": 60, "exit_group": 231,
}
"""Calls allowed whatever their arguments."""
X86_64_LOCK_NOOP = {"flock": 73}
"""Calls that return success without doing anything (see the module docstring)."""
OPEN, OPENAT, O_PATH = 2, 257, 0o10000000
"""``open`` (flags in its second argument) and ``openat`` (third) are allowed without ``O_PATH``."""
FCNTL = 72
FCNTL_ALLOWED = (0, 1, 2, 3, 4, 5, 36, 1030, 1032, 1034)
"""``fcntl`` commands allowed: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GETLK, F_OFD_GETLK,
F_DUPFD_CLOEXEC, F_GETPIPE_SZ, F_GET_SEALS."""
FCNTL_LOCK_NOOP = (6, 7, 37, 38)
"""``fcntl`` commands that succeed without doing anything: F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW."""
IOCTL = 16
IOCTL_ALLOWED = (0x5401, 0x5413, 0x541B, 0x5421, 0x5450, 0x5451)
"""``ioctl`` commands allowed: TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO, FIONCLEX, FIOCLEX."""
X86_64_SELF_ONLY = {"kill": 62, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297}
"""Signal calls allowed only when their first argument (the target pid) is the worker itself."""
PRLIMIT64 = 302
"""Allowed on the worker itself (pid 0 or its own) and only to read (no new limit given)."""
LANDLOCK_RESTRICT_SELF = 446
"""Allowed with the worker's own prepared ruleset only (see :func:`build_filter`)."""
LANDLOCK_CALLS = {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446}
X86_64_LISTED = frozenset({*X86_64_ALLOWED, *X86_64_LOCK_NOOP, *X86_64_SELF_ONLY, "fcntl", "ioctl", "open", "openat",
                           "prlimit64", "landlock_restrict_self"})
"""Every call the filter lets through in some form: unconditionally, or with the argument rules above."""


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _command_block(nr: int, arg: int, rules: list[tuple[tuple[int, ...], int]]) -> list[bytes]:
    """If the call is ``nr``: the verdict of its argument ``arg`` as listed in ``rules``, else deny.
    Otherwise fall through past the block."""
    commands = [(value, verdict) for values, verdict in rules for value in values]
    block = [_insn(_LD | _W | _ABS, 0, 0, _arg(arg))]
    for value, verdict in commands:
        block += [_insn(_JMP | _JEQ | _K, 0, 1, value), _insn(_RET | _K, 0, 0, verdict)]
    block.append(_insn(_RET | _K, 0, 0, _DENY))
    return [_insn(_JMP | _JEQ | _K, 0, len(block), nr), *block]


_DENY = _RET_ERRNO | errno.EPERM
_NOOP = _RET_ERRNO | 0  # the call returns 0 without running


def build_filter(own_pid: int, ruleset_fd: int | None = None) -> bytes:
    """The BPF program (x86-64) as bytes of ``struct sock_filter``. ``ruleset_fd`` is the Landlock
    ruleset the worker will apply once its app has loaded (``None``: no Landlock call at all)."""
    prog = [
        _insn(_LD | _W | _ABS, 0, 0, _OFF_ARCH),
        _insn(_JMP | _JEQ | _K, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(_RET | _K, 0, 0, _RET_KILL_PROCESS),
        _insn(_LD | _W | _ABS, 0, 0, _OFF_NR),
        _insn(_JMP | _JGE | _K, 0, 1, _X32_SYSCALL_BIT),  # x32 calls would dodge every rule below
        _insn(_RET | _K, 0, 0, _DENY),
    ]
    for nr in sorted(set(X86_64_ALLOWED.values())):
        prog += [_insn(_JMP | _JEQ | _K, 0, 1, nr), _insn(_RET | _K, 0, 0, _RET_ALLOW)]
    for nr in sorted(X86_64_LOCK_NOOP.values()):
        prog += [_insn(_JMP | _JEQ | _K, 0, 1, nr), _insn(_RET | _K, 0, 0, _NOOP)]
    prog += _command_block(FCNTL, 1, [(FCNTL_ALLOWED, _RET_ALLOW), (FCNTL_LOCK_NOOP, _NOOP)])
    prog += _command_block(IOCTL, 1, [(IOCTL_ALLOWED, _RET_ALLOW)])
    for nr, flags_arg in ((OPEN, 1), (OPENAT, 2)):
        prog += [
            _insn(_JMP | _JEQ | _K, 0, 4, nr),
            _insn(_LD | _W | _ABS, 0, 0, _arg(flags_arg)),
            _insn(_JMP | _JSET | _K, 0, 1, O_PATH),
            _insn(_RET | _K, 0, 0, _DENY),
            _insn(_RET | _K, 0, 0, _RET_ALLOW),
        ]
    for nr in sorted(X86_64_SELF_ONLY.values()):
        prog += [
            _insn(_JMP | _JEQ | _K, 0, 4, nr),  # not this call: skip the four below
            _insn(_LD | _W | _ABS, 0, 0, _arg(0)),
            _insn(_JMP | _JEQ | _K, 1, 0, own_pid),
            _insn(_RET | _K, 0, 0, _DENY),
            _insn(_RET | _K, 0, 0, _RET_ALLOW),
        ]
    prog += [  # prlimit64(pid 0 or its own, resource, new limit NULL, old)
        _insn(_JMP | _JEQ | _K, 0, 9, PRLIMIT64),
        _insn(_LD | _W | _ABS, 0, 0, _arg(0)),
        _insn(_JMP | _JEQ | _K, 1, 0, 0),
        _insn(_JMP | _JEQ | _K, 0, 4, own_pid),
        _insn(_LD | _W | _ABS, 0, 0, _arg(2)),
        _insn(_JMP | _JEQ | _K, 0, 2, 0),
        _insn(_LD | _W | _ABS, 0, 0, _arg(2, high=True)),
        _insn(_JMP | _JEQ | _K, 1, 0, 0),
        _insn(_RET | _K, 0, 0, _DENY),
        _insn(_RET | _K, 0, 0, _RET_ALLOW),
    ]
    if ruleset_fd is not None:  # landlock_restrict_self(its own ruleset, 0)
        prog += [
            _insn(_JMP | _JEQ | _K, 0, 6, LANDLOCK_RESTRICT_SELF),
            _insn(_LD | _W | _ABS, 0, 0, _arg(0)),
            _insn(_JMP | _JEQ | _K, 0, 3, ruleset_fd),
            _insn(_LD | _W | _ABS, 0, 0, _arg(1)),
            _insn(_JMP | _JEQ | _K, 0, 1, 0),
            _insn(_RET | _K, 0, 0, _RET_ALLOW),
            _insn(_RET | _K, 0, 0, _DENY),
        ]
    prog.append(_insn(_RET | _K, 0, 0, _DENY))
    return b"".join(prog)


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def install(ruleset_fd: int | None = None) -> str | None:
    """Install the filter on this process for good; return ``None`` or why it was not installed.
    ``ruleset_fd``: the prepared Landlock layer the worker applies later (see :func:`build_filter`)."""
    if not supported():
        return f"seccomp filter not available on {platform.system()} {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    program = build_filter(os.getpid(), ruleset_fd)
    count = len(program) // 8
    buffer = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(count, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"seccomp filter refused: {os.strerror(ctypes.get_errno())}"
    return None
