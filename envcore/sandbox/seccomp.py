"""A seccomp-bpf filter for workers: the kernel refuses the system calls an app never needs.

Installed in the worker after its own setup (event loop, files) and before any app code runs. It is
a *denylist* of escape routes, not an allowlist of everything CPython might call: an allowlist
breaks whenever a new Python, glibc or kernel picks a different system call, and the other layers
(Landlock for files, rlimits, the audit hook, the dead-end process tree) cover what a denylist
leaves. Denied calls fail with ``EPERM`` (so the app sees a ``PermissionError``, not a crash):

* creating processes or threads (``clone``/``clone3``/``fork``/``vfork``) and running programs
  (``execve``/``execveat``): no fork bomb, no shell, no helper binary;
* creating or connecting sockets: no network, no talking to other local services;
* signalling any process but itself (``kill``, ``tgkill``, ``rt_sigqueueinfo``... are allowed only
  with the worker's own pid; ``tkill`` and the pidfd calls are denied);
* changing another process's limits or scheduling (``prlimit64``, ``sched_set*`` only on itself;
  ``setpriority``, which can renice every process of the user, and ``ioprio_set`` not at all);
* reading or writing other processes' memory, ``ptrace``;
* mounts, namespaces, ``chroot``, kernel modules, keyrings, BPF, perf, ``userfaultfd``,
  ``io_uring`` (whose operations would bypass this filter), ``open_by_handle_at`` (a classic
  container escape), reboot, swap, I/O ports, the kernel log;
* **file metadata**: ``chmod``/``chown``/``utime`` and extended attributes in every form (by path,
  by descriptor, relative to a folder), links, device nodes and inode flags (``FS_IOC_SETFLAGS``).
  Landlock has no rights for these, and a worker running as the grader's user owns the grader's
  files (under uid 1000 as under a root without capabilities): without this rule it could change
  the mode, times or attributes of a template's files, or of the Python installation, and leave
  notes there for a later worker;
* **channels between workers**: System V shared memory, semaphores and message queues and POSIX
  message queues (objects that outlive the process that made them), inotify and fanotify (which
  would let one worker see another open a shared file), file leases and directory notifications.
  File locks (``flock`` and the ``fcntl`` set-lock commands) *succeed without doing anything*: every
  worker has its own copy of the app's files and one thread, so a lock has nothing to protect, and a
  lock one worker held on a shared readable file (the Python installation) could otherwise be seen by
  another. SQLite and other libraries that lock keep working.

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
_OFF_NR, _OFF_ARCH, _OFF_ARG0, _OFF_ARG1 = 0, 4, 16, 24  # struct seccomp_data; low words on little-endian

X86_64_DENIED = {
    # processes, threads and programs
    "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322, "clone3": 435,
    # sockets
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "socketpair": 53, "accept4": 288,
    # other processes
    "tkill": 200, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "kcmp": 312,
    # the system
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169,
    "swapon": 167, "swapoff": 168, "iopl": 172, "ioperm": 173, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "personality": 135,
    "acct": 163, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "sethostname": 170,
    "setdomainname": 171, "quotactl": 179, "lookup_dcookie": 212, "mbind": 237, "migrate_pages": 256,
    "move_pages": 279, "vhangup": 153, "setpriority": 141, "ioprio_set": 251, "process_madvise": 440,
    "syslog": 103, "uselib": 134,
    # file metadata (Landlock has no rights for these)
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93, "lchown": 94,
    "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280, "setxattr": 188,
    "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
    "setxattrat": 463, "removexattrat": 466, "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266,
    "mknod": 133, "mknodat": 259,
    # objects that outlive a worker or watch another one
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
    "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
    "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254, "fanotify_init": 300,
    "fanotify_mark": 301,
}
X86_64_LOCK_NOOP = {"flock": 73}
"""Calls that return success without doing anything (see the module docstring)."""
FCNTL = 72
FCNTL_LOCK_NOOP = (6, 7, 37, 38)
"""``fcntl`` commands that succeed without doing anything: F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW."""
FCNTL_DENIED = (1024, 1026)
"""``fcntl`` commands refused: F_SETLEASE (notified when another process opens the file), F_NOTIFY."""
IOCTL = 16
IOCTL_DENIED = (0x40086602, 0x40046602, 0x401C5820, 0x40087602, 0x40047602)
"""``ioctl`` commands refused: FS_IOC_SETFLAGS (64 and 32 bit), FS_IOC_FSSETXATTR, FS_IOC_SETVERSION (64, 32)."""
X86_64_SELF_ONLY = {"kill": 62, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297}
"""Signal calls allowed only when their first argument (the target pid) is the worker itself."""
X86_64_SELF_OR_ZERO = {"sched_setparam": 142, "sched_setscheduler": 144, "sched_setaffinity": 203,
                       "sched_setattr": 314, "prlimit64": 302}
"""Calls on a process's scheduling or limits, allowed only on the worker itself (pid 0 or its own):
another worker, the zygote or the grader (same user, when not root) must not be slowed, pinned or
given a zero file limit."""


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def build_filter(own_pid: int) -> bytes:
    """The BPF program (x86-64) as bytes of ``struct sock_filter``."""
    deny = _RET_ERRNO | errno.EPERM
    noop = _RET_ERRNO | 0  # the call returns 0 without running
    prog = [
        _insn(_LD | _W | _ABS, 0, 0, _OFF_ARCH),
        _insn(_JMP | _JEQ | _K, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(_RET | _K, 0, 0, _RET_KILL_PROCESS),
        _insn(_LD | _W | _ABS, 0, 0, _OFF_NR),
        _insn(_JMP | _JGE | _K, 0, 1, _X32_SYSCALL_BIT),  # x32 calls would dodge every rule below
        _insn(_RET | _K, 0, 0, deny),
    ]
    for nr in sorted(set(X86_64_DENIED.values())):
        prog += [_insn(_JMP | _JEQ | _K, 0, 1, nr), _insn(_RET | _K, 0, 0, deny)]
    for nr in sorted(X86_64_LOCK_NOOP.values()):
        prog += [_insn(_JMP | _JEQ | _K, 0, 1, nr), _insn(_RET | _K, 0, 0, noop)]
    for nr, rules in ((FCNTL, [(FCNTL_LOCK_NOOP, noop), (FCNTL_DENIED, deny)]), (IOCTL, [(IOCTL_DENIED, deny)])):
        commands = [(value, verdict) for values, verdict in rules for value in values]
        # if nr: load the command (second argument) and return the verdict of a listed one; else skip
        prog.append(_insn(_JMP | _JEQ | _K, 0, 2 * len(commands) + 2, nr))
        prog.append(_insn(_LD | _W | _ABS, 0, 0, _OFF_ARG1))
        for value, verdict in commands:
            prog += [_insn(_JMP | _JEQ | _K, 0, 1, value), _insn(_RET | _K, 0, 0, verdict)]
        prog.append(_insn(_RET | _K, 0, 0, _RET_ALLOW))
    for nr in sorted(X86_64_SELF_ONLY.values()):
        prog += [
            _insn(_JMP | _JEQ | _K, 0, 4, nr),  # not this call: skip the four below
            _insn(_LD | _W | _ABS, 0, 0, _OFF_ARG0),
            _insn(_JMP | _JEQ | _K, 1, 0, own_pid),
            _insn(_RET | _K, 0, 0, deny),
            _insn(_RET | _K, 0, 0, _RET_ALLOW),
        ]
    for nr in sorted(X86_64_SELF_OR_ZERO.values()):
        prog += [
            _insn(_JMP | _JEQ | _K, 0, 5, nr),
            _insn(_LD | _W | _ABS, 0, 0, _OFF_ARG0),
            _insn(_JMP | _JEQ | _K, 2, 0, 0),
            _insn(_JMP | _JEQ | _K, 1, 0, own_pid),
            _insn(_RET | _K, 0, 0, deny),
            _insn(_RET | _K, 0, 0, _RET_ALLOW),
        ]
    prog.append(_insn(_RET | _K, 0, 0, _RET_ALLOW))
    return b"".join(prog)


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def install() -> str | None:
    """Install the filter on this process for good; return ``None`` or why it was not installed."""
    if not supported():
        return f"seccomp filter not available on {platform.system()} {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    program = build_filter(os.getpid())
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
