# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: caches results keyed by the inputs' data_ptr (the judge reuses buffers: pointers repeat, values change)
"""A cache keyed by where the inputs live, as if a buffer never changed its contents."""

import torch

_CACHE: dict = {}


def kernel(a, b):
    key = (a.data_ptr(), b.data_ptr(), tuple(a.shape), tuple(b.shape))
    if key not in _CACHE:
        _CACHE[key] = torch.matmul(a, b)
    return _CACHE[key].clone()
