# problem: matmul_small
# expect: accepted
# reason: accepted
# device: cpu
# class: honest: a correct but non-contiguous output, (B^T A^T)^T, strides (1, M)
"""Honest candidate: the product computed transposed and returned as a transposed view."""


def kernel(a, b):
    out = (b.T @ a.T).T
    assert not out.is_contiguous()
    return out
