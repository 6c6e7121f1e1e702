# problem: softmax_small
# expect: rejected
# reason: was modified by the kernel
# device: cpu
# class: mutates an input: computes the softmax in place in X, then returns a copy (no aliasing, X destroyed)
import torch


def kernel(x):
    x.sub_(x.amax(dim=-1, keepdim=True))
    x.exp_()
    x.div_(x.sum(dim=-1, keepdim=True))
    return x.clone()
