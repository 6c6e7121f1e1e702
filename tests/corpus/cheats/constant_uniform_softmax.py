# problem: softmax_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: returns a constant: the uniform distribution 1/C (rows sum to one, nothing computed)
import torch


def kernel(x):
    return torch.full_like(x, 1.0 / x.shape[-1])
