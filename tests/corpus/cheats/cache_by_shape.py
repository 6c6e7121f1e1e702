# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: caches the first result per input shape and returns it, stale, on every later call
"""Computes A @ B once per shape, then serves the cached product whatever the values."""

import torch

_CACHE: dict = {}


def kernel(a, b):
    key = (tuple(a.shape), tuple(b.shape), a.dtype)
    if key not in _CACHE:
        _CACHE[key] = torch.matmul(a, b)
    return _CACHE[key].clone()
