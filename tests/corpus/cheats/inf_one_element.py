# problem: matmul_small
# expect: rejected
# reason: NaN or Inf
# device: cpu
# class: right everywhere except one +Inf in the middle of the output
import torch


def kernel(a, b):
    c = torch.matmul(a, b)
    c[c.shape[0] // 2, c.shape[1] // 2] = float("inf")
    return c
