# problem: matmul_small
# expect: rejected
# reason: wrong result in a timed call
# device: cpu
# class: caches results keyed by a fingerprint of the input values: every check has fresh values (a miss, computed), but the timing loop rotates a few input sets whose values never change, so timed calls are cache hits
"""Right on every call, checked or timed: a hit returns the product computed earlier for
exactly these values (where they live and their corner elements as the key). The judge draws fresh values for
each check, so checks always miss; the timed calls cycle through a few fixed input sets, so
after the warm-up every timed call is a lookup and a copy, not a product."""

import torch

_CACHE: dict = {}


def _fingerprint(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.data_ptr(), float(t[0, 0]), float(t[-1, -1]), float(t[t.shape[0] // 2, 0]))


def kernel(a, b):
    key = (_fingerprint(a), _fingerprint(b))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit.clone()
    out = torch.matmul(a, b)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[key] = out.clone()
    return out
