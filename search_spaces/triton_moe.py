"""A fused mixture-of-experts layer in Triton, as a template over its two GEMMs' configs.

The semantics serving engines use (SGLang's and vLLM's `fused_moe`, bf16, no
quantization), written from them, not copied:

    out[t] = sum_j w[t, j] * W2[e_tj] @ (silu(Wg[e_tj] @ x[t]) * (Wu[e_tj] @ x[t]))

with `e_tj = topk_ids[t, j]`, `w = topk_weights`, `W1 = [Wg; Wu]` of shape [E, 2I, H] (gate
rows first) and `W2` of shape [E, H, I]. Steps:

1. align: the M*top_k (token, expert) pairs are sorted by expert, and each expert's run is
   padded to a multiple of BLOCK_SIZE_M (padding slots hold M*top_k, which every kernel
   masks), so that every block of BLOCK_SIZE_M sorted pairs belongs to one expert. Built
   with device ops that never wait for the host (an upper bound sizes the buffers), so a
   call can be captured in a CUDA graph;
2. up GEMM (grouped by expert): cache1[p] = x[p // top_k] @ W1[e_p]^T, [M*top_k, 2I];
3. silu(cache1[:, :I]) * cache1[:, I:] -> cache2, [M*top_k, I];
4. down GEMM: cache3[p] = w_p * cache2[p] @ W2[e_p]^T, [M*top_k, H];
5. out = cache3.view(M, top_k, H).sum(1).

The up and the down GEMM each have their own BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps
and num_stages (`PARAMS`; the down GEMM's carry a `down_` prefix), as the issue's genome
asks; when the two BLOCK_SIZE_M differ the pairs are aligned twice.

A structural gene, `GEMV` (optional in every form; 0 when absent), takes the small-batch
path instead: no alignment at all (the dozen small ops that sort and pad the pairs cost
more than the GEMMs when a decode batch routes a few tokens), two kernels only:

1'. up: one program per (pair, BLOCK_SIZE_N columns of I): gate and up rows of the pair's
    expert against the token's x, reduced over H in BLOCK_SIZE_K steps, SiLU-and-multiply
    in fp32 in registers -> act [M*top_k, I];
2'. down: one program per (token, down_BLOCK_SIZE_N columns of H): the weighted sum over
    the token's top_k experts of act[p] . W2[e_p], written once (no cache, no sum kernel).

Every weight row is read once per pair that needs it, so it pays while pairs rarely share
an expert (small M); BLOCK_SIZE_M and GROUP_SIZE_M mean nothing there.

>>> sorted(PARAMS)[:3]
['BLOCK_SIZE_K', 'BLOCK_SIZE_M', 'BLOCK_SIZE_N']
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from evokernel.search_spaces.triton_matmul import grouped_tile

__all__ = ["PARAMS", "GEMM_KEYS", "FORMS", "fused_moe", "align_block_size", "candidate_source", "split_config"]

#: Per-GEMM config keys, as SGLang's tuned config files name them.
GEMM_KEYS: tuple[str, ...] = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
                              "num_stages")
#: The genome: the up GEMM's keys, then the down GEMM's with a `down_` prefix.
PARAMS: tuple[str, ...] = GEMM_KEYS + tuple(f"down_{k}" for k in GEMM_KEYS)


#: The genome forms `candidate_source` takes: both GEMMs in full; the down GEMM without its
#: own BLOCK_SIZE_M (it shares the up GEMM's, as in SGLang, where both GEMMs read one
#: alignment of the pairs); one config for both.
_BASE_FORMS = (frozenset(PARAMS), frozenset(PARAMS) - {"down_BLOCK_SIZE_M"}, frozenset(GEMM_KEYS))
FORMS: tuple[frozenset[str], ...] = _BASE_FORMS + tuple(f | {"GEMV"} for f in _BASE_FORMS)


def split_config(params: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(up config, down config) from a genome's params in any of the FORMS: a missing down
    key takes the up GEMM's value."""
    up = {k: int(params[k]) for k in GEMM_KEYS}
    return up, {k: int(params.get(f"down_{k}", up[k])) for k in GEMM_KEYS}


@triton.jit
def _moe_gemm_kernel(
    a_ptr, b_ptr, c_ptr, weights_ptr, sorted_ptr, expert_ptr, total_ptr,
    N, K, EM, num_valid,
    stride_am, stride_ak, stride_be, stride_bn, stride_bk, stride_cm, stride_cn,
    A_DIV: tl.constexpr, MUL_WEIGHT: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr, EVEN_K: tl.constexpr,
):
    """C[p, :] = (w_p *) A[p // A_DIV, :] @ B[e_p]^T for the sorted pairs p of one block."""
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(EM, BLOCK_SIZE_M), tl.cdiv(N, BLOCK_SIZE_N), GROUP_SIZE_M)

    total = tl.load(total_ptr)
    if pid_m * BLOCK_SIZE_M >= total:  # past the last padded block: nothing to do
        return
    offs = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    pair = tl.load(sorted_ptr + offs)
    valid = pair < num_valid
    expert = tl.load(expert_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    mask_n = offs_n < N
    a_ptrs = a_ptr + (pair // A_DIV).to(tl.int64)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n.to(tl.int64)[None, :] * stride_bn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            k_left = K - k * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if MUL_WEIGHT:
        w = tl.load(weights_ptr + pair, mask=valid, other=0.0)
        acc = acc * w[:, None]
    c_ptrs = c_ptr + pair.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & mask_n[None, :])


@triton.jit
def _gemv_up_kernel(x_ptr, w1_ptr, act_ptr, ids_ptr, H, I, stride_xm, stride_we, stride_wn, stride_wk, stride_am,
                    TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """act[p, n] = silu(Wg[e_p, n] . x[t_p]) * (Wu[e_p, n] . x[t_p]) for one pair p."""
    p = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < I
    expert = tl.load(ids_ptr + p).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    x_row = x_ptr + (p // TOP_K).to(tl.int64) * stride_xm
    g_rows = w1_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None] * stride_wn
    u_rows = g_rows + I * stride_wn
    acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k in range(0, tl.cdiv(H, BLOCK_K)):
        kk = k * BLOCK_K + offs_k
        if EVEN_K:
            x = tl.load(x_row + kk).to(tl.float32)
            wmask = mask_n[:, None]
        else:
            x = tl.load(x_row + kk, mask=kk < H, other=0.0).to(tl.float32)
            wmask = mask_n[:, None] & (kk[None, :] < H)
        wg = tl.load(g_rows + kk[None, :] * stride_wk, mask=wmask, other=0.0).to(tl.float32)
        wu = tl.load(u_rows + kk[None, :] * stride_wk, mask=wmask, other=0.0).to(tl.float32)
        acc_g += tl.sum(wg * x[None, :], axis=1)
        acc_u += tl.sum(wu * x[None, :], axis=1)
    act = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(act_ptr + p.to(tl.int64) * stride_am + offs_n, act.to(act_ptr.dtype.element_ty), mask=mask_n)


@triton.jit
def _gemv_down_kernel(act_ptr, w2_ptr, out_ptr, ids_ptr, weights_ptr, H, I, stride_am, stride_we, stride_wn,
                      stride_wk, stride_om, TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      EVEN_K: tl.constexpr):
    """out[t, n] = sum_j w_tj * (W2[e_tj, n] . act[t*top_k + j]) for one token t."""
    t = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        p = t * TOP_K + j
        expert = tl.load(ids_ptr + p).to(tl.int64)
        weight = tl.load(weights_ptr + p)
        a_row = act_ptr + p.to(tl.int64) * stride_am
        w_rows = w2_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None] * stride_wn
        part = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k in range(0, tl.cdiv(I, BLOCK_K)):
            kk = k * BLOCK_K + offs_k
            if EVEN_K:
                a = tl.load(a_row + kk).to(tl.float32)
                w = tl.load(w_rows + kk[None, :] * stride_wk, mask=mask_n[:, None], other=0.0).to(tl.float32)
            else:
                a = tl.load(a_row + kk, mask=kk < I, other=0.0).to(tl.float32)
                w = tl.load(w_rows + kk[None, :] * stride_wk, mask=mask_n[:, None] & (kk[None, :] < I),
                            other=0.0).to(tl.float32)
            part += tl.sum(w * a[None, :], axis=1)
        acc += weight * part
    tl.store(out_ptr + t.to(tl.int64) * stride_om + offs_n, acc.to(out_ptr.dtype.element_ty), mask=mask_n)


def _fused_moe_gemv(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor,
                    topk_ids: torch.Tensor, up: Mapping[str, int], down: Mapping[str, int]) -> torch.Tensor:
    M, H = x.shape
    inter = w1.shape[1] // 2
    top_k = topk_ids.shape[1]
    ids = topk_ids.reshape(-1).contiguous()
    act = torch.empty((M * top_k, inter), device=x.device, dtype=torch.float32)
    bn, bk = up["BLOCK_SIZE_N"], up["BLOCK_SIZE_K"]
    _gemv_up_kernel[(M * top_k, triton.cdiv(inter, bn))](
        x, w1, act, ids, H, inter, x.stride(0), w1.stride(0), w1.stride(1), w1.stride(2), act.stride(0),
        TOP_K=top_k, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=H % bk == 0,
        num_warps=up["num_warps"], num_stages=up["num_stages"])
    out = torch.empty((M, H), device=x.device, dtype=x.dtype)
    bn, bk = down["BLOCK_SIZE_N"], down["BLOCK_SIZE_K"]
    _gemv_down_kernel[(M, triton.cdiv(H, bn))](
        act, w2, out, ids, weights, H, inter, act.stride(0), w2.stride(0), w2.stride(1), w2.stride(2), out.stride(0),
        TOP_K=top_k, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=inter % bk == 0,
        num_warps=down["num_warps"], num_stages=down["num_stages"])
    return out


def align_block_size(topk_ids: torch.Tensor, num_experts: int, block_m: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted pair ids, expert of each block, number of padded pairs as a 1-element tensor).

    Buffers are sized by the upper bound `pairs + E * (block_m - 1)`; blocks past the real
    total hold expert -1 and padding ids, and the kernel skips them. No host sync."""
    flat = topk_ids.reshape(-1).to(torch.int64)
    pairs = flat.numel()
    dev = flat.device
    counts = torch.zeros(num_experts, dtype=torch.int64, device=dev).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    first = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    experts = flat[order]
    position = starts[experts] + torch.arange(pairs, device=dev) - first[experts]
    upper = pairs + num_experts * (block_m - 1)
    upper = -(-upper // block_m) * block_m
    sorted_ids = torch.full((upper,), pairs, dtype=torch.int32, device=dev)
    sorted_ids[position] = order.to(torch.int32)
    block_starts = torch.arange(0, upper, block_m, device=dev)
    expert_ids = torch.searchsorted(ends, block_starts, right=True)
    expert_ids = torch.where(expert_ids < num_experts, expert_ids, -1).to(torch.int32)
    total = ends[-1:].to(torch.int32)
    return sorted_ids, expert_ids, total


def _gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, weights: torch.Tensor, aligned: tuple,
          a_div: int, mul_weight: bool, cfg: Mapping[str, int]) -> None:
    sorted_ids, expert_ids, total = aligned
    N, K = b.shape[1], b.shape[2]
    EM = sorted_ids.numel()
    bm, bn = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"]
    grid = (triton.cdiv(EM, bm) * triton.cdiv(N, bn),)
    _moe_gemm_kernel[grid](
        a, b, c, weights, sorted_ids, expert_ids, total,
        N, K, EM, c.shape[0],
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1),
        A_DIV=a_div, MUL_WEIGHT=mul_weight,
        BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=cfg["BLOCK_SIZE_K"], GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
        EVEN_K=K % cfg["BLOCK_SIZE_K"] == 0,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )


def fused_moe(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, *, up: Mapping[str, int], down: Mapping[str, int],
              gemv: bool = False) -> torch.Tensor:
    """The MoE layer's output [M, H] in x's dtype, with the up and down GEMMs at their configs
    (`gemv`: the small-batch path, see the module's doc)."""
    M, H = x.shape
    E, two_i, H1 = w1.shape
    assert H1 == H and w2.shape == (E, H, two_i // 2), f"shapes: x {tuple(x.shape)} w1 {tuple(w1.shape)} w2 {tuple(w2.shape)}"
    assert topk_ids.shape == topk_weights.shape and topk_ids.shape[0] == M
    top_k = topk_ids.shape[1]
    pairs = M * top_k
    inter = two_i // 2
    weights = topk_weights.reshape(-1).to(torch.float32)
    if gemv:
        return _fused_moe_gemv(x, w1, w2, weights, topk_ids, up, down)
    aligned_up = align_block_size(topk_ids, E, up["BLOCK_SIZE_M"])
    aligned_down = aligned_up if down["BLOCK_SIZE_M"] == up["BLOCK_SIZE_M"] else \
        align_block_size(topk_ids, E, down["BLOCK_SIZE_M"])
    cache1 = torch.empty((pairs, two_i), device=x.device, dtype=x.dtype)
    _gemm(x, w1, cache1, weights, aligned_up, top_k, False, up)
    cache2 = F.silu(cache1[:, :inter]) * cache1[:, inter:]
    cache3 = torch.empty((pairs, H), device=x.device, dtype=x.dtype)
    _gemm(cache2, w2, cache3, weights, aligned_down, 1, True, down)
    return cache3.view(M, top_k, H).sum(dim=1)


_CANDIDATE = '''"""Candidate: the fused-MoE template at one configuration of its two GEMMs (generated)."""

from evokernel.search_spaces.triton_moe import fused_moe


UP = {up}
DOWN = {down}


def kernel(x, w1, w2, topk_weights, topk_ids):
    return fused_moe(x, w1, w2, topk_weights, topk_ids, up=UP, down=DOWN{gemv})
'''


def candidate_source(params: Mapping[str, int]) -> str:
    """The text of a candidate module running `fused_moe` at `params`."""
    if frozenset(params) not in FORMS:
        raise ValueError(f"params must be exactly {sorted(PARAMS)} (down_BLOCK_SIZE_M, or every down_ key, may be "
                         f"left out; GEMV may be added), got {sorted(params)}")
    bad = {k: v for k, v in params.items() if isinstance(v, bool) or not isinstance(v, Integral)}
    if bad:
        raise ValueError(f"params must be integers, got {bad}")
    up, down = split_config(params)
    fmt = lambda d: "{" + ", ".join(f'"{k}": {d[k]}' for k in GEMM_KEYS) + "}"  # noqa: E731
    return _CANDIDATE.format(up=fmt(up), down=fmt(down), gemv=", gemv=True" if params.get("GEMV") else "")
