"""Candidate: the plain Triton matmul template at one configuration (generated)."""

from evokernel.search_spaces.triton_matmul import matmul


CONFIG = {"BK": 32, "BM": 32, "BN": 32, "GROUP_M": 8, "num_stages": 2, "num_warps": 4}


def kernel(a, b):
    return matmul(a, b, **CONFIG)
