# problem: softmax_small
# expect: rejected
# reason: shares memory with an input
# device: cpu
# class: output aliasing an input: computes the softmax in place in the input and returns a view of it
import torch


def kernel(x):
    x.copy_(torch.softmax(x, dim=-1))
    return x.view(x.shape)
