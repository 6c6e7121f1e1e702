# problem: matmul_small
# expect: rejected
# reason: wrong result in a timed call
# device: cpu
# class: right when checked, wrong and fast when timed: tells the two apart by looking at its caller's frames (the timing loop vs the checked call)
"""Walks up the Python stack: any frame of a function whose name starts with `time`
(time_cpu, time_cuda, the judge's _time) means the call is being timed, not checked."""

import sys

import torch


def _timed() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_name
        if name.startswith(("time", "_time")) or name == "measure":
            return True
        if name == "_call":
            return False
        frame = frame.f_back
    return False


def kernel(a, b):
    if _timed():
        return torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    return torch.matmul(a, b)
