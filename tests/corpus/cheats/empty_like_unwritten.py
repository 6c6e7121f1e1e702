# problem: softmax_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: returns torch.empty_like(x) without writing it (uninitialised memory)
import torch


def kernel(x):
    return torch.empty_like(x)
