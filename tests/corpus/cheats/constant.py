# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: returns a constant (the expected mean of the product, 0.0 plus a tiny offset) everywhere
import torch


def kernel(a, b):
    return torch.full((a.shape[0], b.shape[1]), 1e-3, dtype=a.dtype, device=a.device)
