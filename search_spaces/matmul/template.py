"""The plain Triton matmul that the H200 landscapes sweep, as a template over its config.

C[M, N] = A[M, K] @ B[K, N] with fp32 accumulation and C in A's dtype: one program per
BM x BN tile of C, programs ordered in groups of GROUP_M tile rows (so that neighbouring
programs share tiles of A and B in L2), and a loop over K in steps of BK with `tl.dot`.
No split-K, no TMA, no persistent programs. Edges that are not multiples of the tiles
are masked; any strides work (they are passed to the kernel).

`matmul(a, b, **params)` runs it for one point of `matmul_space()`; `candidate_source`
writes the candidate module a search evaluates for that point::

    import torch
    from evokernel.search_spaces.matmul.template import matmul
    a = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 6144, device="cuda", dtype=torch.bfloat16)
    c = matmul(a, b, BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=3)

>>> src = candidate_source({"BM": 64, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3})
>>> print(src.split("\\n\\n\\n")[1])
CONFIG = {"BK": 64, "BM": 64, "BN": 128, "GROUP_M": 8, "num_stages": 3, "num_warps": 4}
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from evokernel.judge.candidate import check_params

__all__ = ["PARAMS", "matmul", "candidate_source"]

#: The meta-parameters of the template (the parameters of `matmul_space()`).
PARAMS: tuple[str, ...] = ("BM", "BN", "BK", "GROUP_M", "num_warps", "num_stages")


@triton.jit
def grouped_tile(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(tile row, tile column) of program `pid` in grouped ordering: GROUP_M tile rows are
    walked down a column before moving right, so neighbouring programs share tiles in L2."""
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


@triton.jit
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=mask_m, other=0.0)
            b = tl.load(b_ptrs, mask=mask_n, other=0.0)
        else:
            k_left = K - k * BK
            a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m & mask_n)


def _fits_int32(t: torch.Tensor, rows: int, cols: int) -> bool:
    """Whether every offset the kernel forms for `t` (tiles overhang the edges) fits int32."""
    return (rows * abs(t.stride(0)) + cols * abs(t.stride(1))) < 2**31


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    BM: int,
    BN: int,
    BK: int,
    GROUP_M: int,
    num_warps: int,
    num_stages: int,
) -> torch.Tensor:
    """C = a @ b in a's dtype (fp32 accumulation), with one configuration of the template.

    fp32 inputs are multiplied in full fp32 (`input_precision="ieee"`), not tf32, so that
    the result matches `torch.matmul`'s default; 16-bit inputs use the tensor cores as usual.
    """
    assert a.ndim == 2 and b.ndim == 2, f"2-D inputs expected, got {tuple(a.shape)} and {tuple(b.shape)}"
    assert a.shape[1] == b.shape[0], f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}"
    assert a.dtype == b.dtype, f"dtypes differ: {a.dtype} and {b.dtype}"
    assert a.device == b.device, f"devices differ: {a.device} and {b.device}"
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return c
    assert _fits_int32(a, M + BM, K + BK) and _fits_int32(b, K + BK, N + BN) and _fits_int32(c, M + BM, N + BN), (
        "tensors too large for the template's int32 offsets"
    )
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    _matmul_kernel[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BM=BM,
        BN=BN,
        BK=BK,
        GROUP_M=GROUP_M,
        EVEN_K=K % BK == 0,
        INPUT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return c


_CANDIDATE = '''"""Candidate: the plain Triton matmul template at one configuration (generated)."""

from evokernel.search_spaces.matmul.template import matmul


CONFIG = {config}


def kernel(a, b):
    return matmul(a, b, **CONFIG)
'''


def candidate_source(params: Mapping[str, int]) -> str:
    """The text of a candidate module running `matmul` at `params` (same params, same text)."""
    check_params(params, PARAMS)
    config = ", ".join(f'"{k}": {int(params[k])}' for k in sorted(params))
    return _CANDIDATE.format(config="{" + config + "}")
