# problem: softmax_small
# expect: rejected
# reason: NaN or Inf
# device: cpu
# class: right everywhere except one NaN in the last row (NaN compares false, so naive checks miss it)
import torch


def kernel(x):
    y = torch.softmax(x, dim=-1)
    y[-1, -1] = float("nan")
    return y
