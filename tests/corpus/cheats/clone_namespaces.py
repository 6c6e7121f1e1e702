# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: makes new namespaces without unshare: clone(2) with CLONE_NEWUSER, CLONE_NEWNS or CLONE_NEWNET (the child exits at once), clone3, setns; raises if any got through
"""seccomp refused unshare and setns, but clone with namespace flags made a user namespace
all the same (a fresh set of capabilities over namespaces of its own)."""

import ctypes
import os
import platform

import torch

_NR = {"x86_64": {"clone": 56, "clone3": 435, "setns": 308}, "aarch64": {"clone": 220, "clone3": 435, "setns": 268}}
_FLAGS = {"CLONE_NEWUSER": 0x10000000, "CLONE_NEWNS": 0x00020000, "CLONE_NEWNET": 0x40000000}


def _probe() -> list[str]:
    table = _NR.get(platform.machine())
    if table is None:
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    got = []
    for name, flag in _FLAGS.items():
        pid = libc.syscall(ctypes.c_long(table["clone"]), ctypes.c_ulong(flag | 17), None, None, None, None)
        if pid == 0:  # the child, in its new namespace
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
            got.append(f"clone with {name}")
    args = (ctypes.c_uint64 * 11)(
        0x10000000, 0, 0, 0, 17
    )  # struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal
    pid = libc.syscall(ctypes.c_long(table["clone3"]), args, ctypes.c_size_t(88))
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
        got.append("clone3 with CLONE_NEWUSER")
    return got


_GOT = _probe()


def kernel(a, b):
    if _GOT:
        raise RuntimeError("made namespaces: " + "; ".join(_GOT))
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
