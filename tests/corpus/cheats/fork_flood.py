# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: starts 700 processes at once (each a `cat` waiting on a pipe, gone when it closes); raises if more than 512 started (the sandbox's process limit, which the kernel does not apply to the host's root)
"""3,000 processes appeared in seconds where the candidate's root was the host's root (exempt
from RLIMIT_NPROC). Here the flood stops at 700 and every child exits when the pipe closes."""

import os

import torch


def _flood(n: int = 700) -> int:
    r, w = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_CLOSE, w)]
    children = []
    try:
        for _ in range(n):  # `cat` reading the pipe: each waits until it closes
            try:
                children.append(os.posix_spawn("/bin/cat", ["cat"], {}, file_actions=actions))
            except OSError:
                break
    finally:
        os.close(w)
        os.close(r)
        for pid in children:
            os.waitpid(pid, 0)
    return len(children)


_STARTED = _flood()


def kernel(a, b):
    if _STARTED > 512:
        raise RuntimeError(f"started {_STARTED} processes")
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
