# problem: matmul_small
# expect: accepted
# reason: accepted
# device: cpu
# class: honest: torch.matmul
"""Honest candidate: torch.matmul."""

import torch


def kernel(a, b):
    return torch.matmul(a, b)
