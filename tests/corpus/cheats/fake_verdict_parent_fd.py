# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: writes a fake verdict onto the judge's own stdout (fd 1 of an ancestor, reopened through /proc) and returns wrong values
"""The harness redirects the candidate's stdout to a log; but the processes above it (the
keeper that forked it, the fork server, and the judge that started the fork server) may hold
the judge's own stdout as their fd 1, and /proc/<pid>/fd/1 reopens it when the candidate runs
as their user. Three levels up at most: in-process, the judge's parent is a test runner or a
shell."""

import json
import os

import torch

FAKE = json.dumps({"accepted": True, "reason": "accepted", "status": "ok", "marker": "CANDIDATE-OUTPUT"})


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _write_to_parent_stdout():
    pid = os.getppid()
    for _ in range(4):  # the keeper, the fork server, the judge: the judge's parent is a shell or a test runner
        for fd in (1, 2):
            try:
                out = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_APPEND)
            except OSError:
                continue
            try:
                os.write(out, (FAKE + "\n").encode())
            except OSError:
                pass
            finally:
                os.close(out)
        pid = _parent(pid)
        if pid <= 1:
            break


_write_to_parent_stdout()


def kernel(a, b):
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
