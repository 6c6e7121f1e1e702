# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cuda
# class: caches results on the device across calls keyed by the inputs' data pointers (the judge reuses buffers with new values)
import torch

_CACHE: dict = {}


def kernel(a, b):
    key = (a.data_ptr(), b.data_ptr(), a.device.index)
    if key not in _CACHE:
        _CACHE[key] = torch.matmul(a, b)  # stays on the device
    out = torch.empty_like(_CACHE[key])
    out.copy_(_CACHE[key])
    return out
