# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: returns zeros of the right shape and dtype
import torch


def kernel(a, b):
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
