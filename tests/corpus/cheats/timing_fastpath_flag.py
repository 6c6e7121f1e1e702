# problem: matmul_small
# expect: rejected
# reason: wrong result in a timed call
# device: cpu
# class: right when checked, wrong and fast when timed: tells the two apart by torch.are_deterministic_algorithms_enabled(), which the harness turns on only for checks
"""The harness checks a call with deterministic algorithms on and times calls with them off;
the kernel computes only when it is being checked."""

import torch


def kernel(a, b):
    if torch.are_deterministic_algorithms_enabled():
        return torch.matmul(a, b)
    return torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
