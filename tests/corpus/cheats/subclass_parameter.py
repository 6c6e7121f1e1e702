# problem: softmax_small
# expect: rejected
# reason: not a plain torch.Tensor
# device: cpu
# class: returns a torch.nn.Parameter (a Tensor subclass) holding the right values
import torch


def kernel(x):
    return torch.nn.Parameter(torch.softmax(x, dim=-1), requires_grad=False)
