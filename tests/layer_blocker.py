"""Run a command on a platform that blocks sandbox layers, as some container runtimes do.

``python tests/layer_blocker.py --block landlock[,seccomp] -- COMMAND...`` installs a seccomp filter
on itself that answers the Landlock system calls with ``ENOSYS`` (what an older Docker's default
profile does: the kernel seems to lack Landlock) and, with ``seccomp``, refuses installing a further
filter with ``EINVAL`` (a platform without seccomp filters), then executes the command, which
inherits the filter and everything it starts. Used by the tests that check a missing layer is
reported and refused, on a machine that has every layer. x86-64 Linux only.

It stands alone (the standard library only, no import of the project) on purpose: the container
check mounts it into the image and runs it there, before anything of the app is on the path. So it
writes its few BPF instructions and the two ``prctl`` calls itself, as
:func:`envcore.sandbox.seccomp.install` does for the worker's filter.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import struct
import sys

_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_AUDIT_ARCH_X86_64 = 0xC000003E
_LANDLOCK_CALLS = (444, 445, 446)  # create_ruleset, add_rule, restrict_self
_SECCOMP, _PRCTL, _PR_SET_SECCOMP = 317, 157, 22


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def build(block: set[str]) -> bytes:
    refused: list[tuple[int, int]] = []  # (system call, errno)
    if "landlock" in block:
        refused += [(nr, errno.ENOSYS) for nr in _LANDLOCK_CALLS]
    if "seccomp" in block:
        refused.append((_SECCOMP, errno.EINVAL))
    program = [_insn(_LD_W_ABS, 0, 0, 4), _insn(_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64), _insn(_RET_K, 0, 0, _RET_ALLOW),
               _insn(_LD_W_ABS, 0, 0, 0)]
    for nr, code in refused:
        program += [_insn(_JEQ_K, 0, 1, nr), _insn(_RET_K, 0, 0, _RET_ERRNO | code)]
    if "seccomp" in block:  # prctl(PR_SET_SECCOMP, ...): the first argument's low word
        program += [_insn(_JEQ_K, 0, 3, _PRCTL), _insn(_LD_W_ABS, 0, 0, 16), _insn(_JEQ_K, 0, 1, _PR_SET_SECCOMP),
                    _insn(_RET_K, 0, 0, _RET_ERRNO | errno.EINVAL)]
    program.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(program)


def install(block: set[str]) -> None:
    program = build(block)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS) failed")
    if libc.prctl(_PR_SET_SECCOMP, 2, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "installing the blocking filter failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", required=True, help="landlock, seccomp or both, comma-separated")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    block = {part.strip() for part in args.block.split(",") if part.strip()}
    if not command or not block <= {"landlock", "seccomp"}:
        parser.error("give --block landlock[,seccomp] and a command after --")
    install(block)
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main())
