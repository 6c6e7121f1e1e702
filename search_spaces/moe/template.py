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
and num_stages (`PARAMS`; the down GEMM's carry a `down_` prefix); when the two BLOCK_SIZE_M differ the pairs are aligned twice.

A structural gene, `GEMV` (optional in every form; 0 when absent), takes the small-batch
path instead: no alignment at all (the dozen small ops that sort and pad the pairs cost
more than the GEMMs when a decode batch routes a few tokens), two kernels only:

1'. up: one program per (pair, BLOCK_SIZE_N columns of I): gate and up rows of the pair's
    expert against the token's x, reduced over H in BLOCK_SIZE_K steps, SiLU-and-multiply
    in fp32 in registers -> act [M*top_k, I];
2'. down: one program per (token, down_BLOCK_SIZE_N columns of H): the weighted sum over
    the token's top_k experts of act[p] . W2[e_p], written once (no cache, no sum kernel).

Every weight row is read once per pair that needs it, so it pays while pairs rarely share
an expert (small M); BLOCK_SIZE_M and GROUP_SIZE_M mean nothing there. `GEMV=2` runs step 2'
per pair instead (one program per (pair, columns of H), top_k times the programs of a
token's step 2', which at one token leaves most of the 132 SMs idle), writing w_p * W2[e_p]
. act[p] in x's dtype, then sums over the top_k (three kernels).

A second structural gene, `FUSE_SILU` (optional, 0 when absent; GEMM path, not fp8), fuses
step 3 into step 2: a program of the up GEMM loads the gate rows and the up rows of its
BLOCK_SIZE_N columns of I (two B tiles per K step, two fp32 accumulators) and stores
silu(gate) * up, [M*top_k, I]; the [M*top_k, 2I] intermediate is never written, nor read
back, and a launch is saved. It costs twice the B tile in shared memory and twice the
accumulator registers (`moe_space(fuse_silu=True)` constrains both). SGLang's kernel has
no such structure: a genome with it exports to the plugin package, not to SGLang's files.

fp8 w8a8 (e4m3), on when `w1.dtype` is `torch.float8_e4m3fn` (SGLang's `use_fp8_w8a8`, its
semantics written here, not copied). x stays bf16/fp16/fp32; quantising the activations is
part of the call, dynamically, in one of the two modes serving engines use:

- per tensor (`block_shape=None`): `w1_scale`, `w2_scale` hold one fp32 scale per expert
  ([E]); x gets one scale for the whole [M, H] tensor, s = max(amax|x|, 1e-12) / 448, computed
  inside the call (an amax pass with an atomic max, then a quantise pass). The GEMM
  accumulates q_x . q_w over all of K and multiplies by s_x * s_w[e] once at the end;
- per block (`block_shape=[128, 128]`, DeepSeek-V3's scheme): the weights are quantised per
  128x128 block (`w1_scale` [E, 2I/128, H/128], `w2_scale` [E, H/128, I/128]); x per token
  and 128-column group (s [M, H/128], one pass). Each BLOCK_SIZE_K step's partial product
  is scaled by its rows' and columns' (K-group) scales before it is added to the fp32
  accumulator, so BLOCK_SIZE_K must divide 128 (a constraint of `moe_space(fp8="block")`);
  any BLOCK_SIZE_N works (a column's block scale is looked up per column, or once per tile
  when the tile lies in one 128-row block).

Either way the up GEMM writes cache1 in x's dtype (as the bf16 path), SiLU-and-mul is fused
with the re-quantisation of the intermediate (computed in fp32 from cache1, quantised the
same way as x: per tensor over all M*top_k rows with a second pass, or per pair and
128-column group of I), and the down GEMM reads the e4m3 intermediate. e4m3 rounding is
done in fp32 arithmetic (round-to-nearest-even, then an exact conversion), so the CPU
interpreter, whose fp32->fp8 cast mishandles mantissa carries, agrees with torch. The
output is in x's dtype. The GEMV path is bf16/fp16/fp32 only (fp8 raises ValueError).

>>> sorted(PARAMS)[:3]
['BLOCK_SIZE_K', 'BLOCK_SIZE_M', 'BLOCK_SIZE_N']
"""

# One module on purpose, though over 400 lines: `fused_moe` runs its steps as one call (alignment, the GEMM or GEMV
# kernels, SiLU-and-mul, fp8 quantisation) and every step's kernels launch through one `LaunchCache` (`_LAUNCHES`,
# which the launch tests swap to compare the JIT path with direct launches); the module docstring's steps are its
# seams, each a few kernels and the host function that runs them.

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from evokernel.judge.candidate import check_integers
from evokernel.runtime.launch import LaunchCache
from evokernel.search_spaces.gemm.template_fp8 import FP8_MAX, GROUP
from evokernel.search_spaces.matmul.template import grouped_tile

__all__ = [
    "PARAMS",
    "GEMM_KEYS",
    "FORMS",
    "STRUCTURE",
    "FP8_MODES",
    "fused_moe",
    "align_block_size",
    "align_block_size_torch",
    "candidate_source",
    "split_config",
]

#: fp8 scale modes: one scale per tensor (per expert for the weights), or DeepSeek-V3's blocks.
FP8_MODES: tuple[str, ...] = ("tensor", "block")
_EPS = 1e-12  # the smallest amax a scale is computed from (as `gemm.template_fp8.quantize`)
#: the module's kernel launches, through their compiled handles after the first of each signature
_LAUNCHES = LaunchCache()

#: Per-GEMM config keys, as SGLang's tuned config files name them.
GEMM_KEYS: tuple[str, ...] = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
#: The genome: the up GEMM's keys, then the down GEMM's with a `down_` prefix.
PARAMS: tuple[str, ...] = GEMM_KEYS + tuple(f"down_{k}" for k in GEMM_KEYS)


#: The genome forms `candidate_source` takes: both GEMMs in full; the down GEMM without its
#: own BLOCK_SIZE_M (it shares the up GEMM's, as in SGLang, where both GEMMs read one
#: alignment of the pairs); one config for both.
_BASE_FORMS = (frozenset(PARAMS), frozenset(PARAMS) - {"down_BLOCK_SIZE_M"}, frozenset(GEMM_KEYS))
#: Structural genes, each optional (0 when absent): GEMV (the small-batch path) and
#: FUSE_SILU (SiLU-and-multiply in the up GEMM's epilogue).
STRUCTURE: tuple[str, ...] = ("GEMV", "FUSE_SILU")
FORMS: tuple[frozenset[str], ...] = tuple(
    f | extra
    for f in _BASE_FORMS
    for extra in (frozenset(), frozenset({"GEMV"}), frozenset({"FUSE_SILU"}), frozenset(STRUCTURE))
)


def split_config(params: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(up config, down config) from a genome's params in any of the FORMS: a missing down
    key takes the up GEMM's value."""
    up = {k: int(params[k]) for k in GEMM_KEYS}
    return up, {k: int(params.get(f"down_{k}", up[k])) for k in GEMM_KEYS}


@triton.jit
def _moe_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    weights_ptr,
    sorted_ptr,
    expert_ptr,
    total_ptr,
    as_ptr,
    bs_ptr,
    N,
    K,
    EM,
    num_valid,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bse,
    stride_bsn,
    stride_bsk,
    A_DIV: tl.constexpr,
    MUL_WEIGHT: tl.constexpr,
    QUANT: tl.constexpr,
    GROUP_N: tl.constexpr,
    GROUP_K: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
    EVEN_K: tl.constexpr,
    GATED: tl.constexpr = False,
):
    """C[p, :] = (w_p *) A[p // A_DIV, :] @ B[e_p]^T for the sorted pairs p of one block.

    QUANT 0: A and B in a 16/32-bit float; 1: e4m3 with one scale for A (as_ptr[0]) and one
    per expert for B (bs_ptr[e]); 2: e4m3 with A scaled per row and GROUP_K columns, B per
    GROUP_N x GROUP_K block (BLOCK_SIZE_K divides GROUP_K).

    GATED (QUANT 0 only): B holds 2N rows per expert, gate rows then up rows; a program
    computes both halves of its N columns, A @ Bg^T and A @ Bu^T, and stores
    silu(gate) * up (fp32 in registers): SiLU-and-multiply fused into the up GEMM, so the
    [pairs, 2N] intermediate is never written or read back."""
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

    if QUANT == 2:
        as_row = as_ptr + (pair // A_DIV).to(tl.int64) * stride_asm
        if BLOCK_SIZE_N > GROUP_N:  # the tile spans several weight blocks: a scale per column
            bs_col = bs_ptr + expert * stride_bse + (offs_n // GROUP_N) * stride_bsn
        else:  # the tile lies in one block
            bs_col = bs_ptr + expert * stride_bse + (pid_n * BLOCK_SIZE_N // GROUP_N) * stride_bsn

    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    if GATED:
        acc_up = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        up_rows = N.to(tl.int64) * stride_bn  # the up half starts N rows after the gate half
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)
            if GATED:
                b_up = tl.load(b_ptrs + up_rows, mask=mask_n[None, :], other=0.0)
        else:
            k_left = K - k * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
            if GATED:
                b_up = tl.load(b_ptrs + up_rows, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
        if GATED:
            acc = tl.dot(a, b, acc)
            acc_up = tl.dot(a, b_up, acc_up)
        elif QUANT == 2:
            group = (k * BLOCK_SIZE_K) // GROUP_K
            sa = tl.load(as_row + group * stride_ask, mask=valid, other=0.0)
            if BLOCK_SIZE_N > GROUP_N:
                sb = tl.load(bs_col + group * stride_bsk, mask=mask_n, other=0.0)
                acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
            else:
                sb = tl.load(bs_col + group * stride_bsk)
                acc += tl.dot(a, b) * (sa[:, None] * sb)
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if QUANT == 1:
        acc = acc * (tl.load(as_ptr) * tl.load(bs_ptr + expert * stride_bse))
    if GATED:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    if MUL_WEIGHT:
        w = tl.load(weights_ptr + pair, mask=valid, other=0.0)
        acc = acc * w[:, None]
    c_ptrs = c_ptr + pair.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & mask_n[None, :])


@triton.jit
def _round_e4m3(v):
    """v (fp32, within +-448) rounded to the nearest e4m3 value, ties to even, still in fp32:
    3 mantissa bits for normal values (the carry may raise the exponent), multiples of 2^-9
    below 2^-6 (e4m3's subnormals). Converting the result to e4m3 is then exact."""
    bits = v.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576  # keep sign, exponent, 3 mantissa bits
    normal = bits.to(tl.float32, bitcast=True)
    tiny = (v + 24576.0) - 24576.0  # 1.5 * 2^14: its fp32 spacing is 2^-9
    return tl.where(tl.abs(v) < 0.015625, tiny, normal)


@triton.jit
def _act_quant_kernel(
    src_ptr,
    q_ptr,
    s_ptr,
    amax_ptr,
    N,
    stride_src,
    stride_q,
    stride_sm,
    GATED: tl.constexpr,
    PASS: tl.constexpr,
    COLS: tl.constexpr,
    FP8: tl.constexpr,
    EPS: tl.constexpr,
):
    """One row, COLS columns of an activation to e4m3, values v in fp32 (GATED: v =
    silu(src[:, :N]) * src[:, N:], SiLU-and-mul fused in).

    PASS 0: atomic max of |v| into amax_ptr[0]; 1: quantise with the tensor scale
    max(amax, EPS) / FP8 (stored at s_ptr[0] by the first program); 2: quantise with this
    row and column group's own scale, stored at s_ptr[row, group]."""
    row = tl.program_id(0).to(tl.int64)
    grp = tl.program_id(1)
    cols = grp * COLS + tl.arange(0, COLS)
    mask = cols < N
    v = tl.load(src_ptr + row * stride_src + cols, mask=mask, other=0.0).to(tl.float32)
    if GATED:
        u = tl.load(src_ptr + row * stride_src + N + cols, mask=mask, other=0.0).to(tl.float32)
        v = v * tl.sigmoid(v) * u
    if PASS == 0:
        tl.atomic_max(amax_ptr, tl.max(tl.abs(v), axis=0))
    else:
        if PASS == 1:
            scale = tl.maximum(tl.load(amax_ptr), EPS) / FP8
            if (row == 0) & (grp == 0):
                tl.store(s_ptr, scale)
        else:
            scale = tl.maximum(tl.max(tl.abs(v), axis=0), EPS) / FP8
            tl.store(s_ptr + row * stride_sm + grp, scale)
        q = _round_e4m3(tl.clamp(tl.div_rn(v, scale), -FP8, FP8))
        tl.store(q_ptr + row * stride_q + cols, q.to(q_ptr.dtype.element_ty), mask=mask)


def _quantize_act(a: torch.Tensor, block_k: int | None, gated: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 values, fp32 scales) of an activation [rows, N] (gated: of silu(a[:, :N/2]) *
    a[:, N/2:]); scales of shape [1] (block_k None: per tensor, two passes) or [rows,
    cdiv(N, block_k)]."""
    rows, n = a.shape[0], a.shape[1] // 2 if gated else a.shape[1]
    q = torch.empty((rows, n), device=a.device, dtype=torch.float8_e4m3fn)
    if block_k is None:
        cols = min(1024, triton.next_power_of_2(n))
        amax = torch.zeros(1, device=a.device, dtype=torch.float32)
        scale = torch.empty(1, device=a.device, dtype=torch.float32)
        for pass_ in (0, 1):
            _LAUNCHES(
                _act_quant_kernel,
                (rows, triton.cdiv(n, cols)),
                a,
                q,
                scale,
                amax,
                n,
                a.stride(0),
                q.stride(0),
                0,
                GATED=gated,
                PASS=pass_,
                COLS=cols,
                FP8=FP8_MAX,
                EPS=_EPS,
            )
        return q, scale
    scale = torch.empty((rows, triton.cdiv(n, block_k)), device=a.device, dtype=torch.float32)
    _LAUNCHES(
        _act_quant_kernel,
        (rows, scale.shape[1]),
        a,
        q,
        scale,
        scale,
        n,
        a.stride(0),
        q.stride(0),
        scale.stride(0),
        GATED=gated,
        PASS=2,
        COLS=block_k,
        FP8=FP8_MAX,
        EPS=_EPS,
    )
    return q, scale


@triton.jit
def _gemv_up_kernel(
    x_ptr,
    w1_ptr,
    act_ptr,
    ids_ptr,
    H,
    I,
    stride_xm,
    stride_we,
    stride_wn,
    stride_wk,
    stride_am,
    TOP_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """act[p, n] = silu(Wg[e_p, n] . x[t_p]) * (Wu[e_p, n] . x[t_p]) for one pair p."""
    p = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < I
    expert = tl.load(ids_ptr + p).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    x_row = x_ptr + (p // TOP_K).to(tl.int64) * stride_xm
    g_rows = w1_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None] * stride_wn
    u_rows = g_rows + I * stride_wn
    # per-lane partial products, reduced across the tile's K lanes once after the loop (a
    # reduction per step puts a shuffle tree between consecutive loads of the weights)
    acc_g = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
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
        acc_g += wg * x[None, :]
        acc_u += wu * x[None, :]
    g = tl.sum(acc_g, axis=1)
    act = g * tl.sigmoid(g) * tl.sum(acc_u, axis=1)
    tl.store(act_ptr + p.to(tl.int64) * stride_am + offs_n, act.to(act_ptr.dtype.element_ty), mask=mask_n)


@triton.jit
def _rows_dot(a_row, w_rows, mask_n, I, stride_wk, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """W2[e, n] . act[p] for BLOCK_N rows n of one expert (w_rows) and one pair's act (a_row),
    reduced over I in BLOCK_K steps, in fp32: the body of both down GEMVs."""
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)  # reduced once, after the loop
    for k in range(0, tl.cdiv(I, BLOCK_K)):
        kk = k * BLOCK_K + offs_k
        if EVEN_K:
            a = tl.load(a_row + kk).to(tl.float32)
            w = tl.load(w_rows + kk[None, :] * stride_wk, mask=mask_n[:, None], other=0.0).to(tl.float32)
        else:
            a = tl.load(a_row + kk, mask=kk < I, other=0.0).to(tl.float32)
            w = tl.load(w_rows + kk[None, :] * stride_wk, mask=mask_n[:, None] & (kk[None, :] < I), other=0.0).to(
                tl.float32
            )
        acc += w * a[None, :]
    return tl.sum(acc, axis=1)


@triton.jit
def _gemv_down_kernel(
    act_ptr,
    w2_ptr,
    out_ptr,
    ids_ptr,
    weights_ptr,
    H,
    I,
    stride_am,
    stride_we,
    stride_wn,
    stride_wk,
    stride_om,
    TOP_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """out[t, n] = sum_j w_tj * (W2[e_tj, n] . act[t*top_k + j]) for one token t."""
    t = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for j in tl.static_range(TOP_K):
        p = t * TOP_K + j
        expert = tl.load(ids_ptr + p).to(tl.int64)
        weight = tl.load(weights_ptr + p)
        a_row = act_ptr + p.to(tl.int64) * stride_am
        w_rows = w2_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None] * stride_wn
        acc += weight * _rows_dot(a_row, w_rows, mask_n, I, stride_wk, BLOCK_N, BLOCK_K, EVEN_K)
    tl.store(out_ptr + t.to(tl.int64) * stride_om + offs_n, acc.to(out_ptr.dtype.element_ty), mask=mask_n)


@triton.jit
def _gemv_down_pairs_kernel(
    act_ptr,
    w2_ptr,
    out_ptr,
    ids_ptr,
    weights_ptr,
    H,
    I,
    stride_am,
    stride_we,
    stride_wn,
    stride_wk,
    stride_om,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    """out[p, n] = w_p * (W2[e_p, n] . act[p]) for one pair p: the down GEMV spread over the
    pairs as well as the columns (GEMV=2), so that one token's top_k experts run on top_k
    times more programs; a sum over the top_k follows."""
    p = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < H
    expert = tl.load(ids_ptr + p).to(tl.int64)
    a_row = act_ptr + p.to(tl.int64) * stride_am
    w_rows = w2_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None] * stride_wn
    acc = tl.load(weights_ptr + p) * _rows_dot(a_row, w_rows, mask_n, I, stride_wk, BLOCK_N, BLOCK_K, EVEN_K)
    tl.store(out_ptr + p.to(tl.int64) * stride_om + offs_n, acc.to(out_ptr.dtype.element_ty), mask=mask_n)


def _fused_moe_gemv(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    weights: torch.Tensor,
    topk_ids: torch.Tensor,
    up: Mapping[str, int],
    down: Mapping[str, int],
    per_pair: bool = False,
) -> torch.Tensor:
    M, H = x.shape
    inter = w1.shape[1] // 2
    top_k = topk_ids.shape[1]
    ids = topk_ids.reshape(-1).contiguous()
    act = torch.empty((M * top_k, inter), device=x.device, dtype=torch.float32)
    bn, bk = up["BLOCK_SIZE_N"], up["BLOCK_SIZE_K"]
    _LAUNCHES(
        _gemv_up_kernel,
        (M * top_k, triton.cdiv(inter, bn)),
        x,
        w1,
        act,
        ids,
        H,
        inter,
        x.stride(0),
        w1.stride(0),
        w1.stride(1),
        w1.stride(2),
        act.stride(0),
        TOP_K=top_k,
        BLOCK_N=bn,
        BLOCK_K=bk,
        EVEN_K=H % bk == 0,
        num_warps=up["num_warps"],
        num_stages=up["num_stages"],
    )
    bn, bk = down["BLOCK_SIZE_N"], down["BLOCK_SIZE_K"]
    if per_pair:
        parts = torch.empty((M * top_k, H), device=x.device, dtype=x.dtype)
        _LAUNCHES(
            _gemv_down_pairs_kernel,
            (M * top_k, triton.cdiv(H, bn)),
            act,
            w2,
            parts,
            ids,
            weights,
            H,
            inter,
            act.stride(0),
            w2.stride(0),
            w2.stride(1),
            w2.stride(2),
            parts.stride(0),
            BLOCK_N=bn,
            BLOCK_K=bk,
            EVEN_K=inter % bk == 0,
            num_warps=down["num_warps"],
            num_stages=down["num_stages"],
        )
        return parts.view(M, top_k, H).sum(dim=1)
    out = torch.empty((M, H), device=x.device, dtype=x.dtype)
    _LAUNCHES(
        _gemv_down_kernel,
        (M, triton.cdiv(H, bn)),
        act,
        w2,
        out,
        ids,
        weights,
        H,
        inter,
        act.stride(0),
        w2.stride(0),
        w2.stride(1),
        w2.stride(2),
        out.stride(0),
        TOP_K=top_k,
        BLOCK_N=bn,
        BLOCK_K=bk,
        EVEN_K=inter % bk == 0,
        num_warps=down["num_warps"],
        num_stages=down["num_stages"],
    )
    return out


_ALIGN_CHUNK = 1024  # pairs (and buffer slots) one step of the alignment kernels handles


@triton.jit
def _align_count_kernel(
    ids_ptr,
    sorted_ptr,
    expert_ids_ptr,
    total_ptr,
    cursor_ptr,
    pairs,
    upper,
    E: tl.constexpr,
    EP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCKS: tl.constexpr,
):
    # one program: count the pairs per expert, pad each count to BLOCK_M, scan, then write
    # each block's expert (-1 past the total), the total, each expert's first slot (the
    # cursor the scatter kernel advances) and the padding id into every slot
    experts = tl.arange(0, EP)
    counts = tl.zeros([EP], dtype=tl.int32)
    for start in range(0, pairs, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + offs, mask=offs < pairs, other=0).to(tl.int32)
        counts += tl.histogram(e, EP)
        # masked lanes were counted as expert 0: take them back (no histogram mask in every Triton)
        counts -= tl.where(experts == 0, tl.maximum(start + CHUNK - pairs, 0), 0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    tl.store(cursor_ptr + experts, ends - padded)
    tl.store(total_ptr, tl.sum(padded, 0))
    nblocks = upper // BLOCK_M
    for b0 in range(0, nblocks, BLOCKS):
        blocks = b0 + tl.arange(0, BLOCKS)
        ex = tl.sum((ends[None, :] <= (blocks * BLOCK_M)[:, None]).to(tl.int32), axis=1)
        tl.store(expert_ids_ptr + blocks, tl.where(ex < E, ex, -1), mask=blocks < nblocks)
    for s0 in range(0, upper, CHUNK):
        offs = s0 + tl.arange(0, CHUNK)
        tl.store(sorted_ptr + offs, tl.zeros([CHUNK], dtype=tl.int32) + pairs, mask=offs < upper)


@triton.jit
def _align_scatter_kernel(ids_ptr, sorted_ptr, cursor_ptr, pairs, CHUNK: tl.constexpr):
    # each pair takes the next slot of its expert's run (atomically: the order within a run is
    # not fixed, and need not be: every row of a block is computed on its own)
    offs = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    m = offs < pairs
    e = tl.load(ids_ptr + offs, mask=m, other=0).to(tl.int32)
    pos = tl.atomic_add(cursor_ptr + e, 1, mask=m)
    tl.store(sorted_ptr + pos, offs, mask=m)


def _aligned_sizes(pairs: int, num_experts: int, block_m: int) -> int:
    upper = pairs + num_experts * (block_m - 1)
    return -(-upper // block_m) * block_m


def align_block_size(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted pair ids, expert of each block, number of padded pairs as a 1-element tensor).

    Buffers are sized by the upper bound `pairs + E * (block_m - 1)`; blocks past the real
    total hold expert -1 and padding ids, and the kernel skips them. No host sync. Two
    Triton kernels (count, pad, scan and fill in one program; an atomic scatter of the pairs)
    on a GPU or in Triton's interpreter; plain torch ops otherwise (`align_block_size_torch`,
    where a pair's place within its expert's run is its order, not the scatter's)."""
    if not (topk_ids.is_cuda or _interpreted()):
        return align_block_size_torch(topk_ids, num_experts, block_m)
    flat = topk_ids.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    pairs = flat.numel()
    dev = flat.device
    upper = _aligned_sizes(pairs, num_experts, block_m)
    ep = triton.next_power_of_2(max(num_experts, 2))
    sorted_ids = torch.empty((upper,), dtype=torch.int32, device=dev)
    expert_ids = torch.empty((upper // block_m,), dtype=torch.int32, device=dev)
    total = torch.empty((1,), dtype=torch.int32, device=dev)
    cursor = torch.empty((ep,), dtype=torch.int32, device=dev)
    blocks = max(16, min(128, 8192 // ep))
    _LAUNCHES(
        _align_count_kernel,
        (1,),
        flat,
        sorted_ids,
        expert_ids,
        total,
        cursor,
        pairs,
        upper,
        E=num_experts,
        EP=ep,
        BLOCK_M=block_m,
        CHUNK=_ALIGN_CHUNK,
        BLOCKS=blocks,
        num_warps=4,
    )
    _LAUNCHES(
        _align_scatter_kernel,
        (triton.cdiv(pairs, _ALIGN_CHUNK),),
        flat,
        sorted_ids,
        cursor,
        pairs,
        CHUNK=_ALIGN_CHUNK,
        num_warps=4,
    )
    return sorted_ids, expert_ids, total


def _interpreted() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET") == "1"


def align_block_size_torch(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`align_block_size` in plain torch ops (about 18 launches, where the kernels take two:
    for CPU callers, and the kernels' reference in the tests)."""
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
    upper = _aligned_sizes(pairs, num_experts, block_m)
    sorted_ids = torch.full((upper,), pairs, dtype=torch.int32, device=dev)
    sorted_ids[position] = order.to(torch.int32)
    block_starts = torch.arange(0, upper, block_m, device=dev)
    expert_ids = torch.searchsorted(ends, block_starts, right=True)
    expert_ids = torch.where(expert_ids < num_experts, expert_ids, -1).to(torch.int32)
    total = ends[-1:].to(torch.int32)
    return sorted_ids, expert_ids, total


@triton.jit
def _silu_mul_kernel(src_ptr, dst_ptr, I, stride_src, stride_dst, BLOCK: tl.constexpr):
    # dst[p, :] = silu(src[p, :I]) * src[p, I:], in fp32, one program per (pair, BLOCK columns)
    p = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < I
    g = tl.load(src_ptr + p * stride_src + offs, mask=m, other=0.0).to(tl.float32)
    u = tl.load(src_ptr + p * stride_src + I + offs, mask=m, other=0.0).to(tl.float32)
    out = g / (1.0 + tl.exp(-g)) * u
    tl.store(dst_ptr + p * stride_dst + offs, out.to(dst_ptr.dtype.element_ty), mask=m)


def _silu_mul(cache1: torch.Tensor, inter: int) -> torch.Tensor:
    """silu(cache1[:, :I]) * cache1[:, I:], one launch (torch takes two)."""
    pairs = cache1.shape[0]
    out = torch.empty((pairs, inter), device=cache1.device, dtype=cache1.dtype)
    block = min(1024, triton.next_power_of_2(inter))
    _LAUNCHES(
        _silu_mul_kernel,
        (pairs, triton.cdiv(inter, block)),
        cache1,
        out,
        inter,
        cache1.stride(0),
        out.stride(0),
        BLOCK=block,
        num_warps=4,
    )
    return out


def _gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    weights: torch.Tensor,
    aligned: tuple,
    a_div: int,
    mul_weight: bool,
    cfg: Mapping[str, int],
    a_scale: torch.Tensor | None = None,
    b_scale: torch.Tensor | None = None,
    block_shape: tuple[int, int] | None = None,
    gated: bool = False,
) -> None:
    sorted_ids, expert_ids, total = aligned
    N, K = b.shape[1] // (2 if gated else 1), b.shape[2]
    EM = sorted_ids.numel()
    bm, bn = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"]
    grid = (triton.cdiv(EM, bm) * triton.cdiv(N, bn),)
    quant = 0 if a_scale is None else 1 if block_shape is None else 2
    sa = a if a_scale is None else a_scale
    sb = b if b_scale is None else b_scale
    a_strides = (a_scale.stride(0), a_scale.stride(1)) if quant == 2 else (0, 0)
    b_strides = (
        (b_scale.stride(0), b_scale.stride(1), b_scale.stride(2))
        if quant == 2
        else (b_scale.stride(0), 0, 0)
        if quant == 1
        else (0, 0, 0)
    )
    group_n, group_k = block_shape or (1, 1)
    _LAUNCHES(
        _moe_gemm_kernel,
        grid,
        a,
        b,
        c,
        weights,
        sorted_ids,
        expert_ids,
        total,
        sa,
        sb,
        N,
        K,
        EM,
        c.shape[0],
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        b.stride(2),
        c.stride(0),
        c.stride(1),
        *a_strides,
        *b_strides,
        A_DIV=a_div,
        MUL_WEIGHT=mul_weight,
        QUANT=quant,
        GROUP_N=group_n,
        GROUP_K=group_k,
        BLOCK_SIZE_M=bm,
        BLOCK_SIZE_N=bn,
        BLOCK_SIZE_K=cfg["BLOCK_SIZE_K"],
        GROUP_SIZE_M=cfg["GROUP_SIZE_M"],
        EVEN_K=K % cfg["BLOCK_SIZE_K"] == 0,
        GATED=gated,
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )


def _check_fp8(
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scale: torch.Tensor | None,
    w2_scale: torch.Tensor | None,
    block_shape,
    up: Mapping[str, int],
    down: Mapping[str, int],
    gemv: bool,
) -> tuple[int, int] | None:
    """The fp8 call's block shape (None: per tensor), or ValueError saying what is wrong."""
    if gemv:
        raise ValueError(
            "fp8 weights take the GEMM path: the small-batch GEMV path is bf16/fp16/fp32 only (call with gemv=False)"
        )
    if w2.dtype != torch.float8_e4m3fn:
        raise ValueError(f"w1 is float8_e4m3fn but w2 is {w2.dtype}")
    if w1_scale is None or w2_scale is None:
        raise ValueError("fp8 weights need w1_scale and w2_scale")
    E, two_i, H = w1.shape
    if block_shape is None:
        if w1_scale.numel() != E or w2_scale.numel() != E or w1_scale.dim() == 3 or w2_scale.dim() == 3:
            raise ValueError(
                f"per-tensor scales are one per expert ([{E}]), got w1_scale {tuple(w1_scale.shape)}, "
                f"w2_scale {tuple(w2_scale.shape)} (block scales need block_shape=[128, 128])"
            )
        return None
    bn, bk = (int(v) for v in block_shape)
    if bn <= 0 or bk <= 0 or bk & (bk - 1):
        raise ValueError(f"block_shape [{bn}, {bk}]: both positive, the K group a power of two")
    inter = two_i // 2
    want1 = (E, triton.cdiv(two_i, bn), triton.cdiv(H, bk))
    want2 = (E, triton.cdiv(H, bn), triton.cdiv(inter, bk))
    if tuple(w1_scale.shape) != want1 or tuple(w2_scale.shape) != want2:
        raise ValueError(
            f"block scales for block_shape [{bn}, {bk}]: w1_scale {want1}, w2_scale {want2}, got "
            f"{tuple(w1_scale.shape)}, {tuple(w2_scale.shape)}"
        )
    for name, cfg in (("up", up), ("down", down)):
        if bk % cfg["BLOCK_SIZE_K"]:
            raise ValueError(f"{name} BLOCK_SIZE_K={cfg['BLOCK_SIZE_K']} must divide the scale group {bk}")
    return bn, bk


def fused_moe(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    up: Mapping[str, int],
    down: Mapping[str, int],
    gemv: bool | int = False,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    block_shape: tuple[int, int] | list[int] | None = None,
    fuse_silu: bool = False,
) -> torch.Tensor:
    """The MoE layer's output [M, H] in x's dtype, with the up and down GEMMs at their configs
    (`gemv`: the small-batch path, 1 or True with the down GEMV per token, 2 per pair then a
    sum over the top_k; `fuse_silu`: SiLU-and-multiply in the up GEMM's epilogue;
    e4m3 weights with their scales: fp8 w8a8, per tensor or, with `block_shape`, per block;
    see the module's doc)."""
    if fuse_silu and (gemv or w1.dtype == torch.float8_e4m3fn):
        raise ValueError(
            "fuse_silu is a structure of the bf16/fp16/fp32 GEMM path (the GEMV path fuses "
            "SiLU already; fp8 fuses it with the re-quantisation)"
        )
    M, H = x.shape
    E, two_i, H1 = w1.shape
    assert H1 == H and w2.shape == (E, H, two_i // 2), (
        f"shapes: x {tuple(x.shape)} w1 {tuple(w1.shape)} w2 {tuple(w2.shape)}"
    )
    assert topk_ids.shape == topk_weights.shape and topk_ids.shape[0] == M
    top_k = topk_ids.shape[1]
    pairs = M * top_k
    inter = two_i // 2
    weights = topk_weights.reshape(-1).to(torch.float32)
    if w1.dtype == torch.float8_e4m3fn:
        block = _check_fp8(w1, w2, w1_scale, w2_scale, block_shape, up, down, gemv)
        s1, s2 = w1_scale.to(torch.float32), w2_scale.to(torch.float32)
        if block is None:
            s1, s2 = s1.reshape(E), s2.reshape(E)
        return _fused_moe_fp8(x, w1, w2, s1, s2, weights, topk_ids, up, down, block)
    if gemv:
        return _fused_moe_gemv(x, w1, w2, weights, topk_ids, up, down, per_pair=int(gemv) == 2)
    aligned_up = align_block_size(topk_ids, E, up["BLOCK_SIZE_M"])
    aligned_down = (
        aligned_up
        if down["BLOCK_SIZE_M"] == up["BLOCK_SIZE_M"]
        else align_block_size(topk_ids, E, down["BLOCK_SIZE_M"])
    )
    if fuse_silu:
        cache2 = torch.empty((pairs, inter), device=x.device, dtype=x.dtype)
        _gemm(x, w1, cache2, weights, aligned_up, top_k, False, up, gated=True)
    else:
        cache1 = torch.empty((pairs, two_i), device=x.device, dtype=x.dtype)
        _gemm(x, w1, cache1, weights, aligned_up, top_k, False, up)
        cache2 = (
            _silu_mul(cache1, inter) if (x.is_cuda or _interpreted()) else F.silu(cache1[:, :inter]) * cache1[:, inter:]
        )
    cache3 = torch.empty((pairs, H), device=x.device, dtype=x.dtype)
    _gemm(cache2, w2, cache3, weights, aligned_down, 1, True, down)
    return cache3.view(M, top_k, H).sum(dim=1)


def _register_op() -> None:
    """`torch.ops.evokernel.fused_moe`: `fused_moe` (bf16/fp16/fp32 path) as a custom op with
    a shape-only fake, so that torch.compile sees one opaque op instead of tracing into the
    alignment and the launches (a graph break each), and compiles the rest of a block around
    it: a compiled decoder layer keeps evokernel's fused MoE inside (examples/models)."""
    try:
        torch.ops.evokernel.fused_moe  # noqa: B018  (registered already: the module was loaded twice)
        return
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("evokernel::fused_moe", mutates_args=())
    def fused_moe_op(
        x: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        up: list[int],
        down: list[int],
        gemv: int = 0,
        fuse_silu: bool = False,
    ) -> torch.Tensor:
        return fused_moe(
            x,
            w1,
            w2,
            topk_weights,
            topk_ids,
            up=dict(zip(GEMM_KEYS, up)),
            down=dict(zip(GEMM_KEYS, down)),
            gemv=gemv,
            fuse_silu=fuse_silu,
        )

    @fused_moe_op.register_fake
    def _(x, w1, w2, topk_weights, topk_ids, up, down, gemv=0, fuse_silu=False):  # type: ignore[no-untyped-def]
        return torch.empty_like(x)


_register_op()


def _fused_moe_fp8(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    weights: torch.Tensor,
    topk_ids: torch.Tensor,
    up: Mapping[str, int],
    down: Mapping[str, int],
    block: tuple[int, int] | None,
) -> torch.Tensor:
    M, H = x.shape
    E, two_i, _ = w1.shape
    top_k = topk_ids.shape[1]
    pairs = M * top_k
    group_k = None if block is None else block[1]
    aligned_up = align_block_size(topk_ids, E, up["BLOCK_SIZE_M"])
    aligned_down = (
        aligned_up
        if down["BLOCK_SIZE_M"] == up["BLOCK_SIZE_M"]
        else align_block_size(topk_ids, E, down["BLOCK_SIZE_M"])
    )
    x_q, x_s = _quantize_act(x.contiguous(), group_k, gated=False)
    cache1 = torch.empty((pairs, two_i), device=x.device, dtype=x.dtype)
    _gemm(x_q, w1, cache1, weights, aligned_up, top_k, False, up, x_s, w1_scale, block)
    act_q, act_s = _quantize_act(cache1, group_k, gated=True)  # SiLU-and-mul, then e4m3
    cache3 = torch.empty((pairs, H), device=x.device, dtype=x.dtype)
    _gemm(act_q, w2, cache3, weights, aligned_down, 1, True, down, act_s, w2_scale, block)
    return cache3.view(M, top_k, H).sum(dim=1)


_CANDIDATE = '''"""Candidate: the fused-MoE template at one configuration of its two GEMMs (generated)."""

from evokernel.search_spaces.moe.template import fused_moe


UP = {up}
DOWN = {down}


def kernel(x, w1, w2, topk_weights, topk_ids):
    return fused_moe(x, w1, w2, topk_weights, topk_ids, up=UP, down=DOWN{gemv})
'''


_CANDIDATE_FP8 = '''"""Candidate: the fused-MoE template, fp8 w8a8 ({mode} scales), at one configuration of its
two GEMMs (generated)."""

from evokernel.search_spaces.moe.template import fused_moe


UP = {up}
DOWN = {down}
BLOCK_SHAPE = {block}


def kernel(x, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids):
    return fused_moe(x, w1, w2, topk_weights, topk_ids, up=UP, down=DOWN, w1_scale=w1_scale, w2_scale=w2_scale,
                     block_shape=BLOCK_SHAPE)
'''


def candidate_source(params: Mapping[str, int], fp8: str | None = None) -> str:
    """The text of a candidate module running `fused_moe` at `params`: `kernel(x, w1, w2,
    topk_weights, topk_ids)`, or with `fp8` ("tensor" or "block": 128x128 blocks) `kernel(x,
    w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)`, the inputs of
    `problems/moe_fp8.py`.

    >>> src = candidate_source(dict.fromkeys(GEMM_KEYS, 64), fp8="block")
    >>> "def kernel(x, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids):" in src, "BLOCK_SHAPE = [128, 128]" in src
    (True, True)
    """
    if fp8 is not None and fp8 not in FP8_MODES:
        raise ValueError(f"fp8 must be None or one of {FP8_MODES}, got {fp8!r}")
    if fp8 is not None and params.get("GEMV"):
        raise ValueError("fp8 candidates take the GEMM path: the GEMV structure is bf16/fp16/fp32 only")
    if fp8 is not None and params.get("FUSE_SILU"):
        raise ValueError("fp8 candidates fuse SiLU with the re-quantisation: FUSE_SILU is bf16/fp16/fp32 only")
    if params.get("GEMV") and params.get("FUSE_SILU"):
        raise ValueError("GEMV and FUSE_SILU are two structures: the GEMV path fuses SiLU already")
    if frozenset(params) not in FORMS:
        raise ValueError(
            f"params must be exactly {sorted(PARAMS)} (down_BLOCK_SIZE_M, or every down_ key, may be "
            f"left out; GEMV and FUSE_SILU may be added), got {sorted(params)}"
        )
    check_integers(params)
    up, down = split_config(params)
    fmt = lambda d: "{" + ", ".join(f'"{k}": {d[k]}' for k in GEMM_KEYS) + "}"  # noqa: E731
    if fp8 is not None:
        return _CANDIDATE_FP8.format(
            mode=fp8, up=fmt(up), down=fmt(down), block=f"[{GROUP}, {GROUP}]" if fp8 == "block" else "None"
        )
    flags = ({0: "", 1: ", gemv=True", 2: ", gemv=2"}[int(params.get("GEMV", 0))]) + (
        ", fuse_silu=True" if params.get("FUSE_SILU") else ""
    )
    return _CANDIDATE.format(up=fmt(up), down=fmt(down), gemv=flags)
