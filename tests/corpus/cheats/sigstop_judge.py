# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: freezes the judge: SIGSTOP to every ancestor whose command line is the evokernel CLI's `check` (the judge's timeouts then never fire), then answers wrong
"""Where the candidate can see and signal the judge, SIGSTOP freezes `evokernel check
--timeout 10` for good. Only ancestors that are the CLI's `check` are signalled, so that
an in-process judge (a test runner) is never touched."""

import os
import signal

import torch


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _judges() -> list[int]:
    found, pid = [], os.getppid()
    while pid > 1 and len(found) < 64:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"evokernel.cli" in argv and b"check" in argv:
                found.append(pid)
        except OSError:
            break
        pid = _parent(pid)
    return found


def kernel(a, b):
    for pid in _judges():
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
