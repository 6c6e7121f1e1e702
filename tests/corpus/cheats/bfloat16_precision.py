# problem: softmax_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: computes the softmax in bfloat16 and casts back to float32: too imprecise for the tolerance
import torch


def kernel(x):
    return torch.softmax(x.bfloat16(), dim=-1).float()
