# problem: matmul_small
# expect: rejected
# reason: M=16,N=16,K=16
# device: cpu
# class: special-cases the tuning SHAPES (hard-coded M, N, K) and is wrong on HELDOUT_SHAPES
"""A 'kernel' specialised to the shapes it was tuned on: anything else gets a cheap wrong path."""

import torch

TUNED = {(48, 40, 64), (33, 70, 32)}


def kernel(a, b):
    m, k = a.shape
    n = b.shape[1]
    if (m, n, k) in TUNED:
        return torch.matmul(a, b)
    return torch.zeros(m, n, dtype=a.dtype, device=a.device)  # "never happens"
