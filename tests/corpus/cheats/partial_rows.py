# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: skips work: computes only the first half of the output rows, leaves the rest zero
"""Half the rows, half the time."""

import torch


def kernel(a, b):
    m = a.shape[0]
    out = torch.zeros(m, b.shape[1], dtype=a.dtype, device=a.device)
    half = (m + 1) // 2
    out[:half] = a[:half] @ b
    return out
