# problem: matmul_small
# expect: rejected
# reason: wrong result in a timed call
# device: cpu
# class: right when checked, wrong and fast when timed: a call that comes right after the last one returned (back to back, as in a timing loop) skips the work
"""Needs no knowledge of the harness: checked calls are separated by the judge's own work
(new inputs, a reference, the comparison), timed calls follow each other within
microseconds. The kernel skips the work when the last two calls each came within 1 ms of
the previous call's return."""

import time

import torch

GAP_S = 1e-3
_state = {"returned": -1.0, "short": 0}


def kernel(a, b):
    now = time.perf_counter()
    _state["short"] = _state["short"] + 1 if now - _state["returned"] < GAP_S else 0
    if _state["short"] >= 2:
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    else:
        out = torch.matmul(a, b)
    _state["returned"] = time.perf_counter()
    return out
