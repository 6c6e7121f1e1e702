"""An fp8 (e4m3) GEMM in Triton with per-tensor or per-block scales, as a template over its config.

    C[M, N] = (A_q[M, K] * a_scale) @ (B_q[N, K] * b_scale)^T, in bf16, fp32 accumulation

A_q is the activation, quantised per tensor (one fp32 scale) or per token and group of 128
along K (`a_scale` [M, K/128]: DeepSeek-V3's "1x128"); B_q is the weight in nn.Linear's
layout [N, K] (K contiguous, which Hopper's fp8 tensor cores want for both operands),
quantised per tensor or per 128x128 block (`b_scale` [N/128, K/128]). Per tensor, the two
scales multiply the fp32 accumulator once at the end; per block, each BK step's partial
product is scaled by its (row, K-group) and (N-block, K-group) scales before it is added,
so BK must divide the 128-wide groups (a constraint of `gemm_fp8_space`).

Genome (`PARAMS`): BM, BN, BK, GROUP_M, num_warps, num_stages, and SPLIT_K (the K loop
split over programs, partials summed in fp32 by atomics into a workspace and rounded by a
second small kernel; parallelism for skinny M, where an fp8 GEMM is a read of the weights).

>>> "def kernel(a, b, a_scale, b_scale):" in candidate_source(DEFAULTS)
True
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from evokernel.judge.candidate import check_params
from evokernel.search_spaces.matmul.template import grouped_tile

__all__ = ["PARAMS", "DEFAULTS", "GROUP", "gemm_fp8", "candidate_source", "scaled_mm_source", "quantize"]

PARAMS: tuple[str, ...] = ("BM", "BN", "BK", "GROUP_M", "num_warps", "num_stages", "SPLIT_K")
DEFAULTS: dict[str, int] = {
    "BM": 128,
    "BN": 128,
    "BK": 128,
    "GROUP_M": 8,
    "num_warps": 8,
    "num_stages": 3,
    "SPLIT_K": 1,
}
GROUP = 128  # the scales' group along K (and the weight blocks' size along N)
FP8_MAX = 448.0  # largest finite e4m3


@triton.jit
def _fp8_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    ws_ptr,
    as_ptr,
    bs_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    BLOCKWISE: tl.constexpr,
    G: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    pid = tl.program_id(0)
    split = tl.program_id(1)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    steps = tl.cdiv(K, BK)
    per_split = tl.cdiv(steps, SPLIT_K)
    lo = split * per_split
    hi = tl.minimum(lo + per_split, steps)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for step in range(lo, hi):
        k = step * BK + offs_k
        a = tl.load(
            a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
            mask=(offs_m[:, None] < M) & (k[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + offs_n[None, :] * stride_bn + k[:, None] * stride_bk,
            mask=(offs_n[None, :] < N) & (k[:, None] < K),
            other=0.0,
        )
        if BLOCKWISE:
            group = (step * BK) // G
            sa = tl.load(as_ptr + offs_m * stride_asm + group * stride_ask, mask=offs_m < M, other=0.0)
            sb = tl.load(bs_ptr + (offs_n // G) * stride_bsn + group * stride_bsk, mask=offs_n < N, other=0.0)
            acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
        else:
            acc = tl.dot(a, b, acc)
    if not BLOCKWISE:
        acc = acc * (tl.load(as_ptr) * tl.load(bs_ptr))
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        tl.store(
            c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask
        )
    else:
        tl.atomic_add(ws_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask)


@triton.jit
def _round_kernel(ws_ptr, c_ptr, M, N, stride_cm, stride_cn, BM: tl.constexpr, BN: tl.constexpr):
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.load(ws_ptr + offs_m[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
    tl.store(
        c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask
    )


def gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    BM: int,
    BN: int,
    BK: int,
    GROUP_M: int,
    num_warps: int,
    num_stages: int,
    SPLIT_K: int = 1,
) -> torch.Tensor:
    """C = (a * a_scale) @ (b * b_scale)^T for fp8 a [M, K], b [N, K]; scales per tensor
    (one element each) or per block (a_scale [M, K/128], b_scale [N/128, K/128])."""
    M, K = a.shape
    N, K2 = b.shape
    assert K == K2, f"a {tuple(a.shape)} and b {tuple(b.shape)} disagree on K"
    blockwise = a_scale.numel() > 1 or b_scale.numel() > 1
    if blockwise:
        assert a_scale.shape == (M, triton.cdiv(K, GROUP)) and b_scale.shape == (
            triton.cdiv(N, GROUP),
            triton.cdiv(K, GROUP),
        ), f"block scales: a_scale {tuple(a_scale.shape)}, b_scale {tuple(b_scale.shape)}"
        assert GROUP % BK == 0, f"BK={BK} must divide the scale group {GROUP}"
    c = torch.empty((M, N), device=a.device, dtype=out_dtype)
    ws = torch.zeros((M, N), device=a.device, dtype=torch.float32) if SPLIT_K > 1 else c
    a_s, b_s = a_scale.to(torch.float32), b_scale.to(torch.float32)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN), SPLIT_K)
    _fp8_gemm_kernel[grid](
        a,
        b,
        c,
        ws,
        a_s,
        b_s,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        a_s.stride(0) if blockwise else 0,
        a_s.stride(1) if blockwise else 0,
        b_s.stride(0) if blockwise else 0,
        b_s.stride(1) if blockwise else 0,
        BLOCKWISE=blockwise,
        G=GROUP,
        BM=BM,
        BN=BN,
        BK=BK,
        GROUP_M=GROUP_M,
        SPLIT_K=SPLIT_K,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if SPLIT_K > 1:
        _round_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](ws, c, M, N, c.stride(0), c.stride(1), BM=64, BN=64)
    return c


def quantize(x: torch.Tensor, *, blockwise: bool, weight: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """x (2-D, float) -> (e4m3 values, fp32 scales) such that values * scales ~ x: one scale
    per tensor, or per (row, 128 columns) for an activation, per 128x128 block for a weight."""
    x = x.float()
    if not blockwise:
        scale = (x.abs().amax().clamp(min=1e-12) / FP8_MAX).reshape(1)
        return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale
    rows, cols = x.shape
    gr = GROUP if weight else 1
    pr, pc = (-rows) % gr, (-cols) % GROUP
    padded = torch.nn.functional.pad(x, (0, pc, 0, pr))
    blocks = padded.reshape(padded.shape[0] // gr, gr, padded.shape[1] // GROUP, GROUP)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / FP8_MAX  # [rows/gr, cols/128]
    q = (blocks / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).reshape(padded.shape)[:rows, :cols]
    return q.contiguous().to(torch.float8_e4m3fn), scale.contiguous()


_CANDIDATE = '''"""Candidate: the fp8 GEMM template at one configuration (generated)."""

from evokernel.search_spaces.gemm.template_fp8 import gemm_fp8


CONFIG = {config}


def kernel(a, b, a_scale, b_scale):
    return gemm_fp8(a, b, a_scale, b_scale, **CONFIG)
'''


def candidate_source(params: Mapping[str, int]) -> str:
    """The text of a candidate module running `gemm_fp8` at `params`."""
    check_params(params, PARAMS)
    return _CANDIDATE.format(config="{" + ", ".join(f'"{k}": {int(params[k])}' for k in PARAMS) + "}")


_SCALED_MM = '''"""Baseline: torch._scaled_mm (cuBLASLt's fp8 GEMM) on the same inputs; block scales are
passed as they are where this torch and GPU take them (else the call fails: a failed cell)."""

import torch


def kernel(a, b, a_scale, b_scale):
    if a_scale.numel() == 1:
        return torch._scaled_mm(a, b.t(), scale_a=a_scale.float(), scale_b=b_scale.float(), out_dtype=torch.bfloat16)
    return torch._scaled_mm(a, b.t(), scale_a=a_scale.float(), scale_b=b_scale.float().t(), out_dtype=torch.bfloat16)
'''


def scaled_mm_source() -> str:
    """The baseline candidate: torch's fp8 GEMM (cuBLASLt)."""
    return _SCALED_MM
