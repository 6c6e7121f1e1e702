# problem: matmul_small
# expect: accepted
# reason: accepted
# device: cpu
# class: honest: allocates its output and a scratch buffer with torch.empty and fully overwrites both (16-row blocks, K in two halves)
"""Honest candidate: torch.empty is fine when every element is written before it is read."""

import torch


def kernel(a, b):
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    scratch = torch.empty(16, n, dtype=a.dtype, device=a.device)
    half = k // 2
    for i in range(0, m, 16):
        rows = slice(i, min(i + 16, m))
        r = rows.stop - rows.start
        torch.matmul(a[rows, :half], b[:half], out=scratch[:r])
        torch.addmm(scratch[:r], a[rows, half:], b[half:], out=out[rows])
    return out
