# problem: softmax_small
# expect: accepted
# reason: accepted
# device: cpu
# class: honest: torch.softmax over the last dimension
"""Honest candidate: torch.softmax over the last dimension."""

import torch


def kernel(x):
    return torch.softmax(x, dim=-1)
