"""Honest candidate: torch.matmul."""

import torch


def kernel(a, b):
    return torch.matmul(a, b)
