# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: kills the judge (an ancestor: the `evokernel check` process) with SIGKILL before returning a wrong answer
"""If the candidate runs as the judge's user, it may signal it. To stay harmless
when the corpus is judged in-process (by a test runner or a benchmark script), it only
signals an ancestor whose command line is the evokernel CLI's `check`."""

import os
import signal

import torch


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("PPid:"):
                    return int(line.split()[1])
    except OSError:  # not visible (a PID namespace)
        pass
    return 0


def _judge() -> int | None:
    pid = os.getppid()
    for _ in range(8):  # up its ancestors (a keeper, the fork server, the judge)
        pid = _ppid(pid)
        if pid <= 1:
            return None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return None
        if b"evokernel.cli" in argv and b"check" in argv:
            return pid
    return None


def kernel(a, b):
    pid = _judge()
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # not allowed: the sandbox runs it as another user
            pass
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
