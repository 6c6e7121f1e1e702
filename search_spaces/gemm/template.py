"""A Triton GEMM template for Hopper, with a fusable epilogue, as a template over its config.

C[M, N] = epilogue(A[M, K] @ B[K, N]) with fp32 accumulation and C in A's dtype, where the
epilogue is, in this order: + bias[N] (optional), an activation (none, relu, silu, or gelu
with the tanh approximation), + residual[M, N] (optional). The genome (`PARAMS`):

- BM, BN, BK: the tile; GROUP_M: grouped ordering of the tiles (neighbouring programs share
  tiles of A and B in L2); num_warps, num_stages: warps per program, software pipeline depth;
- SPLIT_K: the K loop split over that many programs per tile, partial sums in an fp32
  workspace: parallelism for small M;
- SPLITK_FIXUP: how the partials are summed (with the epilogue). 0: by a second kernel;
  1: in the same kernel, by the last of a tile's programs to finish (see below), which saves
  the second launch and a pass over the workspace. No effect without split-K (the space
  rules that point out);
- PERSISTENT: one program per SM walking the tiles (the launch and tail costs of many small
  programs go away); otherwise one program per tile;
- TMA: A and B read through tensor descriptors (Hopper's bulk copy engine) instead of
  pointer loads; needs 16-byte aligned rows (else the call raises, a failure for the search);
- STREAM_K (optional gene, with PERSISTENT and without split-K): the persistent schedule
  takes whole tiles for as many full waves as it can, then deals the K steps of the rest
  (`stream_k_tiles`: the last partial wave plus one full wave, or every tile when there are
  no more than SMs) out evenly over all programs, so no SM idles through a partial last
  wave. A program's segment that covers a whole tile writes C; a partial one goes to the
  program's workspace slot and the tile's last contributor sums the slots in program
  order (the ticket scheme of the split-K fixup below), so results do not depend on timing;
- TMA_STORE (optional gene, with TMA and without split-K): C written through a tensor
  descriptor, in one bulk store per tile (1) or in two halves of BM x BN/2 (2), which halves
  the shared memory the store stages and leaves it to the pipeline (the epilogue subtiling
  of Triton's persistent-matmul tutorial); 0 writes C by pointers;
- WARP_SPEC: Triton's warp specialisation of the main loop (producer and consumer warps),
  where this Triton supports it on this GPU (a compile error otherwise). Triton 3.6 on Hopper
  builds it from the K loop of a non-persistent 4-warp kernel only: one producer warpgroup
  (TMA loads, 40 registers) and two consumer warpgroups of BM/2 rows (232 registers), 12
  warps in all, cuBLAS's cooperative kernels' structure; with 8 warps or persistent the
  kernel is the same as without (`gemm_space` keeps those out);
- num_ctas: programs per cluster (Hopper thread-block clusters); maxnreg: a cap on
  registers per thread (0: none).

The split-K fixup (SPLITK_FIXUP=1). Each program stores its fp32 partial tile in the
workspace, then (after a barrier, so every thread's stores precede it) takes a ticket on its
output tile's int32 counter with an acquire-release atomic add. Nobody waits: the program
that draws the last ticket (SPLIT_K - 1) knows every other partial is written and visible
(their releases precede its acquire), reads them past L1 (`.cg`, as L1 is not coherent
across SMs), its own included, in split order and by column chunks of at most 64 (so the
result is bitwise that of the second kernel's fixed-order sum, and a second whole fp32 tile
never sits in registers beside the first), applies the epilogue, writes C, and
sets the counter back to 0. The counters live in one zeroed buffer per device and stream,
grown when a call needs more and never cleared again: every call leaves each counter it
used at 0 (all of a tile's tickets are drawn before its last program resets it), and the
next call on the same stream starts after this kernel ends, so it finds them at 0. Calls on
different streams use different buffers; a kernel killed half way (a fault) leaves counters
set, but a fault loses the CUDA context and the buffer with it.

`gemm(a, b, bias=, residual=, activation=, **params)` runs one configuration, checking
everything and launching through Triton's JIT on every call (the reference path: 70-230 us
of host time a call on the H200, more than many of these kernels take on the GPU);
`GemmLauncher(params, activation=)(a, b, bias=None, residual=None)` runs the same plan and
kernels, bitwise, with the checks and the JIT's binding done once per input signature and
later calls launched through the compiled kernels' handles (`evokernel.runtime.launch`);
`candidate_source(params, epilogue=...)` writes the candidate module a search evaluates
(a `GemmLauncher` built at import from its literal CONFIG).
Everything runs in Triton's interpreter on the CPU too (where num_ctas, maxnreg and warp
specialisation have no effect), which is how the tests check every path.

>>> src = candidate_source(dict(DEFAULTS, BM=64))
>>> "def kernel(a, b):" in src and '"BM": 64' in src
True
>>> "def kernel(a, b, bias, residual):" in candidate_source(DEFAULTS, bias=True, residual=True, activation="silu")
True
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

from evokernel.judge.candidate import check_params
from evokernel.runtime.launch import KernelLaunch, quick_descriptor
from evokernel.search_spaces.matmul.template import grouped_tile

__all__ = [
    "ACTIVATIONS",
    "DEFAULTS",
    "PARAMS",
    "GemmLauncher",
    "candidate_source",
    "gemm",
    "last_compiled",
    "num_sms",
    "stream_k_tiles",
    "torch_source",
]

PARAMS: tuple[str, ...] = ("BM", "BN", "BK", "GROUP_M", "num_warps", "num_stages", "SPLIT_K", "SPLITK_FIXUP",
                           "PERSISTENT", "TMA", "WARP_SPEC", "num_ctas", "maxnreg")
#: A sensible configuration (Triton's matmul tutorial's Hopper default, no extras).
DEFAULTS: dict[str, int] = {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
                            "SPLIT_K": 1, "SPLITK_FIXUP": 0, "PERSISTENT": 0, "TMA": 0, "WARP_SPEC": 0,
                            "num_ctas": 1, "maxnreg": 0}
ACTIVATIONS: dict[str, int] = {"none": 0, "relu": 1, "silu": 2, "gelu_tanh": 3}
#: Genes a genome may carry beyond PARAMS (0 when absent): SWAP_AB, the transposed tile;
#: STREAM_K, the persistent schedule's last tiles split by K steps; TMA_STORE, C written
#: through a tensor descriptor (1) or in two halves (2); BN_TAIL, tiles BN + BN_TAIL wide;
#: A_REG, the tile's columns as 64-wide MMAs sharing each K step's A tile in registers;
#: GLUON, the tile run by the warp-specialised Gluon kernel (`search_spaces/gemm/template_gluon.py`:
#: 1 one or two consumer warpgroups on each tile, 2 two taking turns at tiles, "ping-pong").
OPTIONAL: tuple[str, ...] = ("SWAP_AB", "STREAM_K", "TMA_STORE", "BN_TAIL", "A_REG", "GLUON")


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn,
              HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr):
    """acc (fp32) -> act(acc + bias) + residual, still fp32."""
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:
        acc = acc * tl.sigmoid(acc)
    elif ACT == 3:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), tanh(y) = 2 sigmoid(2y) - 1
        inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc * tl.sigmoid(2.0 * inner)
    if HAS_RES:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        res = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn, mask=mask, other=0.0)
        acc = acc + res.to(tl.float32)
    return acc


@triton.jit
def _fixup(ws_ptr, counter_ptr, c_ptr, bias_ptr, res_ptr, pid_m, pid_n, M, N, stride_cm, stride_cn, stride_rm,
           stride_rn, BM: tl.constexpr, BN: tl.constexpr, SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr,
           ACT: tl.constexpr, HAS_RES: tl.constexpr):
    """After this split's partial is stored in the workspace: take a ticket on the tile's
    counter; the last of its SPLIT_K programs sums the partials in split order (as the second
    kernel does), by column chunks of at most 64 (a whole-tile sum beside a loaded partial
    spills at 128x256), applies the epilogue, writes C and resets the counter (the module
    docstring says why that is safe)."""
    tl.debug_barrier()  # all threads' partial stores come before the release of the ticket
    ticket = tl.atomic_add(counter_ptr, 1, sem="acq_rel")
    if ticket == SPLIT_K - 1:
        CN: tl.constexpr = BN if BN < 64 else 64
        offs_m = pid_m * BM + tl.arange(0, BM)
        plane = tl.cast(M, tl.int64) * N  # one split's partials
        for j in tl.static_range(BN // CN):
            offs_n = pid_n * BN + j * CN + tl.arange(0, CN)
            mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            w_ptrs = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
            total = tl.zeros((BM, CN), dtype=tl.float32)
            for s in tl.static_range(SPLIT_K):
                total += tl.load(w_ptrs + s * plane, mask=mask, other=0.0, cache_modifier=".cg")
            total = _epilogue(total, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn,
                              HAS_BIAS, ACT, HAS_RES)
            tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                     total.to(c_ptr.dtype.element_ty), mask=mask)
        tl.store(counter_ptr, 0)


@triton.jit
def _a_tile(a_ptr, a_desc, m0, kt, M, K, stride_am, stride_ak, BM: tl.constexpr, BK: tl.constexpr,
            TMA: tl.constexpr, EVEN_K: tl.constexpr):
    """A's rows [m0, m0 + BM) at K step kt: through its descriptor, or by pointers whose rows
    are computed here, inside the K loop (why: _k_step)."""
    if TMA:
        return a_desc.load([m0, kt * BK])
    rows = m0 + tl.arange(0, BM)
    ks = kt * BK + tl.arange(0, BK)
    ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    if EVEN_K:
        return tl.load(ptrs, mask=rows[:, None] < M, other=0.0)
    return tl.load(ptrs, mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)


@triton.jit
def _b_tile(b_ptr, b_desc, kt, n0, N, K, stride_bk, stride_bn, BK: tl.constexpr, BN: tl.constexpr,
            TMA: tl.constexpr, EVEN_K: tl.constexpr):
    """B's columns [n0, n0 + BN) at K step kt (b_desc's block is BK x BN)."""
    if TMA:
        return b_desc.load([kt * BK, n0])
    cols = n0 + tl.arange(0, BN)
    ks = kt * BK + tl.arange(0, BK)
    ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    if EVEN_K:
        return tl.load(ptrs, mask=cols[None, :] < N, other=0.0)
    return tl.load(ptrs, mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)


@triton.jit
def _k_step(acc, pid_m, pid_n, kt, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, TMA: tl.constexpr, EVEN_K: tl.constexpr,
            INPUT_PRECISION: tl.constexpr, SWAP_AB: tl.constexpr):
    """acc (BN x BM with SWAP_AB) plus the product of K step kt of output tile (pid_m, pid_n).

    Without TMA, the tile's rows and columns are computed in the K loop (`_a_tile`,
    `_b_tile`): the persistent kernel's flattened loop would otherwise carry them from tile to
    tile as loop values of unknown contiguity, and B (contiguous along N) then loads element by element, unpipelined
    (seen in the sm_90 TTGIR; the persistent form without TMA ran 0.29 ms against 0.032
    not persistent on the H200)."""
    a = _a_tile(a_ptr, a_desc, pid_m * BM, kt, M, K, stride_am, stride_ak, BM, BK, TMA, EVEN_K)
    b = _b_tile(b_ptr, b_desc, kt, pid_n * BN, N, K, stride_bk, stride_bn, BK, BN, TMA, EVEN_K)
    # (one return after the branch: Triton's code generator went on past a `return` inside
    # a constexpr `if` and type-checked the other dot against the swapped accumulator, so
    # every swap-AB kernel failed to compile, while the interpreter ran it)
    if SWAP_AB:
        acc = tl.dot(tl.trans(b), tl.trans(a), acc, input_precision=INPUT_PRECISION)
    else:
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def _acc(pid_m, pid_n, k_lo, k_hi, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
         BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, TMA: tl.constexpr, WS_K: tl.constexpr,
         EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, SWAP_AB: tl.constexpr):
    """The fp32 sum over K steps [k_lo, k_hi) of the output tile (pid_m, pid_n).

    SWAP_AB computes the tile transposed, C^T = B^T A^T: Hopper's warpgroup MMA takes 64 rows
    or more on its first operand and as few as 8 columns on its second, so with few tokens (a
    BM of 16-64) the weights' BN side fills the MMA's rows and the tokens its columns, instead
    of padding BM up to 64 (the swap-AB of CUTLASS-style small-batch GEMMs). The accumulator
    is transposed back before it is returned."""
    if SWAP_AB:
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in tl.range(k_lo, k_hi, warp_specialize=WS_K):
        acc = _k_step(acc, pid_m, pid_n, kt, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                      stride_bn, BM, BN, BK, TMA, EVEN_K, INPUT_PRECISION, SWAP_AB)
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


@triton.jit
def _acc_tail(pid_m, pid_n, k_tiles, a_ptr, b_ptr, a_desc, b_desc, b2_desc, M, N, K, stride_am, stride_ak, stride_bk,
              stride_bn, BM: tl.constexpr, BN: tl.constexpr, BNT: tl.constexpr, BK: tl.constexpr, TMA: tl.constexpr,
              WS_K: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """The fp32 sums of a BM x (BN + BNT) tile over all of K, as two accumulators (BM x BN and
    BM x BNT) fed by one A tile per K step: a tile width that is not a power of two (96, 160,
    192), which Triton's blocks cannot be but Hopper's MMA can (its N is any multiple of 8).
    The width picks how many tiles there are, so it picks how full the last wave is: N=6144
    in 192-wide tiles at M=512 is 128 tiles of 128 rows on 132 SMs, where 256-wide ones are
    96 (36 SMs idle) and 128-wide ones 192 (1.45 waves)."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    acc2 = tl.zeros((BM, BNT), dtype=tl.float32)
    m0 = pid_m * BM
    n0 = pid_n * (BN + BNT)
    for kt in tl.range(0, k_tiles, warp_specialize=WS_K):
        a = _a_tile(a_ptr, a_desc, m0, kt, M, K, stride_am, stride_ak, BM, BK, TMA, EVEN_K)
        b = _b_tile(b_ptr, b_desc, kt, n0, N, K, stride_bk, stride_bn, BK, BN, TMA, EVEN_K)
        b2 = _b_tile(b_ptr, b2_desc, kt, n0 + BN, N, K, stride_bk, stride_bn, BK, BNT, TMA, EVEN_K)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        acc2 = tl.dot(a, b2, acc2, input_precision=INPUT_PRECISION)
    return acc, acc2


@triton.jit
def _hold(a):
    """`a` as it is, computed in registers: an identity Triton cannot fold away, so the MMAs
    that use it take A from registers (loaded from shared memory once) instead of each
    reading the A tile from shared memory again."""
    if a.dtype.primitive_bitwidth == 16:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [a], dtype=a.dtype, is_pure=True, pack=2)
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [a], dtype=a.dtype, is_pure=True, pack=1)


@triton.jit
def _acc_areg(pid_m, pid_n, k_tiles, a_ptr, b_ptr, a_desc, b64_desc, M, N, K, stride_am, stride_ak, stride_bk,
              stride_bn, BM: tl.constexpr, W: tl.constexpr, BK: tl.constexpr, TMA: tl.constexpr, WS_K: tl.constexpr,
              EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, HOLD: tl.constexpr):
    """The fp32 sums of a BM x W tile (W = 128, 192 or 256) as W/64 accumulators of 64 columns,
    each K step's A tile held in registers and shared by their MMAs (A_REG=1). Two MMAs of
    different widths (the BN_TAIL form) each read A from shared memory, and Triton gives
    them different register layouts, so A cannot be shared there; 64-wide ones share one
    (the sm_90 TTGIR: one shared-memory load of A per K step). Per 128x192 K step of 64, the
    shared-memory reads go from ~80 KB (two MMAs reading A) to ~64 KB, what a single
    192-wide MMA would read. `HOLD` (on the GPU) keeps A in registers; the interpreter has no
    inline assembly and needs no such hint."""
    NACC: tl.constexpr = W // 64
    acc0 = tl.zeros((BM, 64), dtype=tl.float32)
    acc1 = tl.zeros((BM, 64), dtype=tl.float32)
    acc2 = tl.zeros((BM, 64), dtype=tl.float32)
    acc3 = tl.zeros((BM, 64), dtype=tl.float32)
    m0 = pid_m * BM
    n0 = pid_n * W
    for kt in tl.range(0, k_tiles, warp_specialize=WS_K):
        a = _a_tile(a_ptr, a_desc, m0, kt, M, K, stride_am, stride_ak, BM, BK, TMA, EVEN_K)
        if HOLD:
            a = _hold(a)
        acc0 = tl.dot(a, _b_tile(b_ptr, b64_desc, kt, n0, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K), acc0,
                      input_precision=INPUT_PRECISION)
        acc1 = tl.dot(a, _b_tile(b_ptr, b64_desc, kt, n0 + 64, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K),
                      acc1, input_precision=INPUT_PRECISION)
        if NACC > 2:
            acc2 = tl.dot(a, _b_tile(b_ptr, b64_desc, kt, n0 + 128, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K),
                          acc2, input_precision=INPUT_PRECISION)
        if NACC > 3:
            acc3 = tl.dot(a, _b_tile(b_ptr, b64_desc, kt, n0 + 192, N, K, stride_bk, stride_bn, BK, 64, TMA, EVEN_K),
                          acc3, input_precision=INPUT_PRECISION)
    return acc0, acc1, acc2, acc3


@triton.jit
def _store(acc, m0, n0, c_ptr, c_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm, stride_rn,
           BM: tl.constexpr, BN: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr,
           TMA_STORE: tl.constexpr):
    """C[m0:m0+BM, n0:n0+BN] = epilogue(acc): by pointers (TMA_STORE=0), through C's tensor
    descriptor in one bulk store (1), or in two BM x BN/2 halves (2: half the shared-memory
    staging of the store, the epilogue subtiling of Triton's persistent-matmul tutorial)."""
    offs_m = m0 + tl.arange(0, BM)
    offs_n = n0 + tl.arange(0, BN)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
    if TMA_STORE == 2:
        halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([m0, n0], left.to(c_desc.dtype))
        c_desc.store([m0, n0 + BN // 2], right.to(c_desc.dtype))
    elif TMA_STORE == 1:
        c_desc.store([m0, n0], acc.to(c_desc.dtype))
    else:
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def _tile(tile, a_ptr, b_ptr, c_ptr, a_desc, b_desc, c_desc, ws_ptr, counter_ptr, bias_ptr, res_ptr,
          M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm, stride_rn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr,
          FIXUP: tl.constexpr, TMA: tl.constexpr, WS_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
          HAS_RES: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, SWAP_AB: tl.constexpr,
          TMA_STORE: tl.constexpr, BNT: tl.constexpr = 0, b2_desc=None, c2_desc=None, AREG: tl.constexpr = False,
          HOLD: tl.constexpr = False):
    """One (tile, K split) of the output: its K range, then the epilogue and C, or the fp32
    partial sum into the workspace when K is split (and with FIXUP, the sum if it is last).
    With a tail (BNT > 0: tiles BN + BNT wide, no split-K) the two accumulators are stored
    side by side, the tail through its own descriptor when C goes by TMA. With AREG the
    tile's BN + BNT columns are 64-wide accumulators sharing A in registers, each stored
    through the 64-column descriptors (b2_desc, c2_desc)."""
    if AREG:
        W: tl.constexpr = BN + BNT
        pid_m, pid_n = grouped_tile(tile, tl.cdiv(M, BM), tl.cdiv(N, W), GROUP_M)
        acc0, acc1, acc2, acc3 = _acc_areg(pid_m, pid_n, tl.cdiv(K, BK), a_ptr, b_ptr, a_desc, b2_desc, M, N, K,
                                           stride_am, stride_ak, stride_bk, stride_bn, BM, W, BK, TMA, WS_K, EVEN_K,
                                           INPUT_PRECISION, HOLD)
        m0 = pid_m * BM
        n0 = pid_n * W
        TS: tl.constexpr = 1 if TMA_STORE else 0
        _store(acc0, m0, n0, c_ptr, c2_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm, stride_rn,
               BM, 64, HAS_BIAS, ACT, HAS_RES, TS)
        _store(acc1, m0, n0 + 64, c_ptr, c2_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm,
               stride_rn, BM, 64, HAS_BIAS, ACT, HAS_RES, TS)
        if W > 128:
            _store(acc2, m0, n0 + 128, c_ptr, c2_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm,
                   stride_rn, BM, 64, HAS_BIAS, ACT, HAS_RES, TS)
        if W > 192:
            _store(acc3, m0, n0 + 192, c_ptr, c2_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm,
                   stride_rn, BM, 64, HAS_BIAS, ACT, HAS_RES, TS)
    elif BNT > 0:
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN + BNT)
        pid_m, pid_n = grouped_tile(tile, tiles_m, tiles_n, GROUP_M)
        acc, acc2 = _acc_tail(pid_m, pid_n, tl.cdiv(K, BK), a_ptr, b_ptr, a_desc, b_desc, b2_desc, M, N, K,
                              stride_am, stride_ak, stride_bk, stride_bn, BM, BN, BNT, BK, TMA, WS_K, EVEN_K,
                              INPUT_PRECISION)
        n0 = pid_n * (BN + BNT)
        _store(acc, pid_m * BM, n0, c_ptr, c_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm,
               stride_rn, BM, BN, HAS_BIAS, ACT, HAS_RES, TMA_STORE)
        _store(acc2, pid_m * BM, n0 + BN, c_ptr, c2_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm,
               stride_rn, BM, BNT, HAS_BIAS, ACT, HAS_RES, 1 if TMA_STORE else 0)
    else:
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        split = tile % SPLIT_K
        pid_m, pid_n = grouped_tile(tile // SPLIT_K, tiles_m, tiles_n, GROUP_M)
        k_tiles = tl.cdiv(K, BK)
        per_split = tl.cdiv(k_tiles, SPLIT_K)
        k_lo = split * per_split
        k_hi = tl.minimum(k_lo + per_split, k_tiles)
        acc = _acc(pid_m, pid_n, k_lo, k_hi, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                   stride_bn, BM, BN, BK, TMA, WS_K, EVEN_K, INPUT_PRECISION, SWAP_AB)
        if SPLIT_K == 1:
            _store(acc, pid_m * BM, pid_n * BN, c_ptr, c_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn,
                   stride_rm, stride_rn, BM, BN, HAS_BIAS, ACT, HAS_RES, TMA_STORE)
        else:
            offs_m = pid_m * BM + tl.arange(0, BM)
            offs_n = pid_n * BN + tl.arange(0, BN)
            mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            w_ptrs = ws_ptr + split.to(tl.int64) * M * N + offs_m[:, None] * N + offs_n[None, :]
            tl.store(w_ptrs, acc, mask=mask)
            if FIXUP:
                _fixup(ws_ptr, counter_ptr + tile // SPLIT_K, c_ptr, bias_ptr, res_ptr, pid_m, pid_n, M, N,
                       stride_cm, stride_cn, stride_rm, stride_rn, BM, BN, SPLIT_K, HAS_BIAS, ACT, HAS_RES)


@triton.jit
def _sk_sum(ws_ptr, t, first_q, last_q, per, k_tiles, pid_m, pid_n, c_ptr, bias_ptr, res_ptr, M, N,
            stride_cm, stride_cn, stride_rm, stride_rn, BM: tl.constexpr, BN: tl.constexpr,
            HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr):
    """C[tile t] = epilogue(the sum of its contributors' partials), in program order, by column
    chunks of at most 64: a whole BM x BN fp32 sum beside the tile just loaded needs two
    accumulators' worth of registers (256 per thread at 128x256 on 8 warps), which spilled
    and made the stream-K kernel 1.5x slower than the plain persistent one on the H200)."""
    CN: tl.constexpr = BN if BN < 64 else 64
    rows = tl.arange(0, BM)
    offs_m = pid_m * BM + rows
    for j in tl.static_range(BN // CN):
        cols = j * CN + tl.arange(0, CN)
        local = rows[:, None] * BN + cols[None, :]
        part = tl.zeros((BM, CN), dtype=tl.float32)
        for q in range(first_q, last_q + 1):
            q_slot = tl.where(q * per >= t * k_tiles, 0, 1)  # q started inside this tile: its first
            part += tl.load(ws_ptr + (q * 2 + q_slot).to(tl.int64) * (BM * BN) + local, cache_modifier=".cg")
        offs_n = pid_n * BN + cols
        part = _epilogue(part, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, part.to(c_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def _stream_k(pid, num_programs, dp_tiles, sk_tiles, a_ptr, b_ptr, c_ptr, a_desc, b_desc, c_desc, ws_ptr,
              counter_ptr, bias_ptr, res_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
              stride_cn, stride_rm, stride_rn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              GROUP_M: tl.constexpr, TMA: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
              HAS_RES: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, SWAP_AB: tl.constexpr,
              TMA_STORE: tl.constexpr):
    """The stream-K phase: the K steps of the last `sk_tiles` tiles, dealt out evenly over the
    programs (see the module's doc), in one flat loop over this program's steps that Triton
    software-pipelines as it does the persistent tutorial's. Calls Z2 and Z3 ran two earlier
    forms 2-5x slower per K step than the plain persistent kernel: the sm_90 TTGIR showed
    their K loops unpipelined (each TMA load waited for before its MMA), because the loop
    held the tickets' atomic add and barrier (and, before that, sat inside a `while`). Where
    a segment ends (its tile's last K step, or the program's last step): a whole tile is
    written to C; a partial one is stored in this program's workspace slot (0:
    its first segment, 1: its last). Only a program's first and last segments can be
    partial, so after the loop it takes a ticket on at most two tiles' counters (no atomic,
    barrier or nested loop inside the pipelined loop); the last contributor of a tile sums
    every contributor's slot in program order (deterministic whoever is last), applies the
    epilogue, writes C and resets the counter."""
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_tiles = tl.cdiv(K, BK)
    total = sk_tiles * k_tiles
    per = tl.cdiv(total, num_programs)
    start = pid * per
    end = tl.minimum(start + per, total)
    local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    if SWAP_AB:
        acc = tl.zeros((BN, BM), dtype=tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    seg = start  # the first step of the current segment
    part_first = -1  # the tiles of this program's partial segments (its first, its last)
    part_last = -1
    for it in tl.range(start, end):
        t = it // k_tiles  # global step `it` is K step kt of stream-K tile t
        kt = it - t * k_tiles
        pid_m, pid_n = grouped_tile(dp_tiles + t, tiles_m, tiles_n, GROUP_M)
        acc = _k_step(acc, pid_m, pid_n, kt, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                      stride_bn, BM, BN, BK, TMA, EVEN_K, INPUT_PRECISION, SWAP_AB)
        if (kt == k_tiles - 1) | (it == end - 1):  # the segment ends here
            if SWAP_AB:
                out = tl.trans(acc)
            else:
                out = acc
            if (seg == t * k_tiles) & (kt == k_tiles - 1):  # the whole tile
                _store(out, pid_m * BM, pid_n * BN, c_ptr, c_desc, bias_ptr, res_ptr, M, N, stride_cm, stride_cn,
                       stride_rm, stride_rn, BM, BN, HAS_BIAS, ACT, HAS_RES, TMA_STORE)
            else:
                slot = tl.where(seg == start, 0, 1)
                tl.store(ws_ptr + (pid * 2 + slot).to(tl.int64) * (BM * BN) + local, out)
                if seg == start:
                    part_first = t
                else:
                    part_last = t
            acc = tl.zeros_like(acc)
            seg = it + 1
    # the tickets after the loop: an atomic or a barrier inside it stops Triton from
    # software-pipelining it (seen in the TTGIR for sm_90: each K step's TMA load waited for)
    tl.debug_barrier()  # every thread's partial stores come before the tickets
    for f in tl.static_range(2):
        t = part_first if f == 0 else part_last
        if t >= 0:
            first_q = (t * k_tiles) // per
            last_q = ((t + 1) * k_tiles - 1) // per
            ticket = tl.atomic_add(counter_ptr + t, 1, sem="acq_rel")
            if ticket == last_q - first_q:  # the last contributor: every other partial is stored
                pid_m, pid_n = grouped_tile(dp_tiles + t, tiles_m, tiles_n, GROUP_M)
                _sk_sum(ws_ptr, t, first_q, last_q, per, k_tiles, pid_m, pid_n, c_ptr, bias_ptr, res_ptr, M, N,
                        stride_cm, stride_cn, stride_rm, stride_rn, BM, BN, HAS_BIAS, ACT, HAS_RES)
                tl.store(counter_ptr + t, 0)


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, c_ptr, a_desc, b_desc, c_desc, ws_ptr, counter_ptr, bias_ptr, res_ptr,
                 M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm, stride_rn,
                 num_programs,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                 SPLIT_K: tl.constexpr, FIXUP: tl.constexpr, PERSISTENT: tl.constexpr, TMA: tl.constexpr,
                 WS_TILES: tl.constexpr, WS_K: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                 HAS_RES: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                 SWAP_AB: tl.constexpr = False, STREAM_K: tl.constexpr = False, sk_tiles=0,
                 TMA_STORE: tl.constexpr = 0, BNT: tl.constexpr = 0, b2_desc=None, c2_desc=None,
                 AREG: tl.constexpr = False, HOLD: tl.constexpr = False):
    if PERSISTENT:
        num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN + BNT) * SPLIT_K
        if STREAM_K:  # whole tiles first (the data-parallel phase), then the stream-K tiles
            num_tiles = num_tiles - sk_tiles
        for tile in tl.range(tl.program_id(0), num_tiles, num_programs, flatten=True, warp_specialize=WS_TILES):
            _tile(tile, a_ptr, b_ptr, c_ptr, a_desc, b_desc, c_desc, ws_ptr, counter_ptr, bias_ptr, res_ptr,
                  M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm, stride_rn,
                  BM, BN, BK, GROUP_M, SPLIT_K, FIXUP, TMA, WS_K, HAS_BIAS, ACT, HAS_RES, EVEN_K, INPUT_PRECISION,
                  SWAP_AB, TMA_STORE, BNT, b2_desc, c2_desc, AREG, HOLD)
        if STREAM_K:
            _stream_k(tl.program_id(0), num_programs, num_tiles, sk_tiles, a_ptr, b_ptr, c_ptr, a_desc, b_desc,
                      c_desc, ws_ptr, counter_ptr, bias_ptr, res_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                      stride_bn, stride_cm, stride_cn, stride_rm, stride_rn, BM, BN, BK, GROUP_M, TMA, HAS_BIAS, ACT,
                      HAS_RES, EVEN_K, INPUT_PRECISION, SWAP_AB, TMA_STORE)
    else:
        _tile(tl.program_id(0), a_ptr, b_ptr, c_ptr, a_desc, b_desc, c_desc, ws_ptr, counter_ptr, bias_ptr, res_ptr,
              M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_rm, stride_rn,
              BM, BN, BK, GROUP_M, SPLIT_K, FIXUP, TMA, WS_K, HAS_BIAS, ACT, HAS_RES, EVEN_K, INPUT_PRECISION,
              SWAP_AB, TMA_STORE, BNT, b2_desc, c2_desc, AREG, HOLD)


@triton.jit
def _splitk_reduce_kernel(ws_ptr, c_ptr, bias_ptr, res_ptr, M, N, stride_cm, stride_cn, stride_rm, stride_rn,
                          SPLIT_K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                          HAS_BIAS: tl.constexpr, ACT: tl.constexpr, HAS_RES: tl.constexpr):
    """C = epilogue(sum of the SPLIT_K fp32 partials), in a fixed order (deterministic)."""
    offs_m = tl.program_id(0) * BM + tl.arange(0, BM)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(ws_ptr + s * M * N + offs_m[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
    acc = _epilogue(acc, offs_m, offs_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, HAS_BIAS, ACT, HAS_RES)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=mask)


_SMS: dict[int, int] = {}


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of the GPU (4 on the CPU, for the interpreter)."""
    if device.type != "cuda":
        return 4
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def stream_k_tiles(tiles: int, programs: int) -> int:
    """How many of `tiles` output tiles the stream-K phase takes (the rest are whole tiles,
    `programs` at a time): all of them when there are no more tiles than programs (one wave,
    partly idle otherwise: 96 tiles of 128x256 at M=512, N=6144 on 132 SMs), else the last
    partial wave plus one full wave (so each program still gets at least a tile's worth of K
    steps), and none when the tiles fill whole waves.

    >>> stream_k_tiles(96, 132), stream_k_tiles(264, 132), stream_k_tiles(384, 132), stream_k_tiles(20, 132)
    (96, 0, 252, 20)
    """
    if tiles <= programs:
        return tiles
    rest = tiles % programs
    return rest + programs if rest else 0


_COUNTERS: dict[tuple[str, int | None, int], torch.Tensor] = {}


def _raw_stream(index: int | None) -> int:
    """The current CUDA stream's handle on device `index` (torch.cuda.current_stream(index)
    .cuda_stream, without making a Stream object: what Triton's launches read)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is not None and index is not None:
        return get(index)
    return torch.cuda.current_stream(index).cuda_stream


def _tile_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """The split-K fixup's per-tile ticket counters on this device and stream: zeroed once,
    left at zero by every call (see the module docstring)."""
    stream = _raw_stream(device.index) if device.type == "cuda" else 0
    key = (device.type, device.index, stream)
    counters = _COUNTERS.get(key)
    if counters is None or counters.numel() < tiles:
        counters = torch.zeros(max(tiles, 1024), device=device, dtype=torch.int32)
        _COUNTERS[key] = counters
    return counters


def _fits_int32(t: torch.Tensor, rows: int, cols: int) -> bool:
    return (rows * abs(t.stride(0)) + cols * abs(t.stride(1))) < 2**31


def _tma_ok(t: torch.Tensor) -> bool:
    return t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0


_LAST: dict[str, Any] = {"kernel": None}


def last_compiled() -> Any:
    """The compiled kernel `gemm` (or a `GemmLauncher`) launched last (registers: `.n_regs`,
    spills: `.n_spills`), or None (none yet, or the CPU interpreter). For probes: a lookup in
    Triton's kernel cache instead can read a stale entry (one kernel's register count
    reported for others)."""
    return _LAST["kernel"]


#: the main kernel's arguments given per call (then the plan's descriptors), and the reduction's
_TENSOR_ARGS: tuple[str, ...] = ("a_ptr", "b_ptr", "c_ptr", "ws_ptr", "counter_ptr", "bias_ptr", "res_ptr")
_REDUCE_ARGS: tuple[str, ...] = ("ws_ptr", "c_ptr", "bias_ptr", "res_ptr")
_DESCRIPTORS: tuple[str, ...] = ("a_desc", "b_desc", "c_desc", "b2_desc", "c2_desc")


@dataclass(frozen=True)
class _Plan:
    """How one configuration runs on one input signature (shapes, strides, dtypes, devices and
    pointer alignment of A, B, bias and residual): all that `gemm` checks and works out before
    it launches. A call then allocates C (and the workspace), makes its tensors' descriptors
    and launches. `descs`: (kernel argument, tensor 0 A / 1 B / 2 C, block shape);
    `counters`: the tile counters a call takes (0: none, C stands in); `gluon`: the Gluon
    kernel's own plan (`template_gluon.GluonPlan`) when GLUON is set."""

    shape: tuple[int, int]
    dtype: torch.dtype
    device: torch.device
    empty: bool = False
    ws: tuple[int, ...] | None = None
    counters: int = 0
    descs: tuple[tuple[str, int, tuple[int, int]], ...] = ()
    grid: tuple[int, ...] = ()
    static: Mapping[str, Any] = field(default_factory=dict)
    reduce_grid: tuple[int, int] | None = None
    reduce_static: Mapping[str, Any] = field(default_factory=dict)
    gluon: Any = None


def _plan(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
          activation: str, cfg: Mapping[str, int]) -> tuple[_Plan, torch.Tensor]:
    """`gemm`'s checks and arithmetic for these inputs at configuration `cfg` (every gene,
    `_genes`), and the C they were made with (the first call's output)."""
    assert a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0], f"shapes: {tuple(a.shape)} @ {tuple(b.shape)}"
    assert a.dtype == b.dtype and a.device == b.device, f"{a.dtype}/{a.device} vs {b.dtype}/{b.device}"
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    BM, BN, BK, SPLIT_K, PERSISTENT, TMA = (cfg[k] for k in ("BM", "BN", "BK", "SPLIT_K", "PERSISTENT", "TMA"))
    WARP_SPEC, num_ctas, maxnreg, SWAP_AB, STREAM_K = (cfg[k] for k in ("WARP_SPEC", "num_ctas", "maxnreg",
                                                                        "SWAP_AB", "STREAM_K"))
    TMA_STORE, BN_TAIL, A_REG, GLUON = cfg["TMA_STORE"], cfg["BN_TAIL"], cfg["A_REG"], cfg["GLUON"]
    if GLUON:
        from evokernel.search_spaces.gemm.space import GLUON_STORE, gluon_misfit  # (the space's rule)

        misfit = gluon_misfit(cfg) or (None if TMA_STORE in (1, 2) else GLUON_STORE)
        if misfit:
            raise ValueError(misfit)
        from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

        gplan, c = gluon_gemm.plan_gluon(a, b, bias=bias, residual=residual, activation=activation, BM=BM, BN=BN,
                                         BK=BK, GROUP_M=cfg["GROUP_M"], num_warps=cfg["num_warps"],
                                         num_stages=cfg["num_stages"], PERSISTENT=PERSISTENT, EPI_SPLIT=TMA_STORE,
                                         BN_TAIL=BN_TAIL, SWAP_AB=SWAP_AB, PINGPONG=int(GLUON == 2))
        return _Plan(shape=(c.shape[0], c.shape[1]), dtype=c.dtype, device=c.device, empty=gplan is None,
                     gluon=gplan), c
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return _Plan(shape=(M, N), dtype=a.dtype, device=a.device, empty=True), c
    if bias is not None:
        assert bias.shape == (N,) and bias.is_contiguous(), f"bias must be a contiguous [{N}], got {tuple(bias.shape)}"
    if residual is not None:
        assert residual.shape == (M, N), f"residual must be [{M}, {N}], got {tuple(residual.shape)}"
    if BN_TAIL and not (BN_TAIL in (16, 32, 64, 128) and BN_TAIL < BN and SPLIT_K == 1 and not SWAP_AB
                        and not STREAM_K):
        raise ValueError(f"BN_TAIL={BN_TAIL}: a tail of 16-128 columns, narrower than BN={BN}, without split-K, "
                         "swap-AB or stream-K")
    W = BN + BN_TAIL  # the tile's width
    if A_REG and not (W in (128, 192, 256) and SPLIT_K == 1 and not SWAP_AB and not STREAM_K):
        raise ValueError(f"A_REG: a tile 128, 192 or 256 columns wide (BN + BN_TAIL = {W}), without split-K, "
                         "swap-AB or stream-K")
    assert _fits_int32(a, M + BM, K + BK) and _fits_int32(b, K + BK, N + W) and _fits_int32(c, M + BM, N + W), (
        "tensors too large for the template's int32 offsets"
    )
    if TMA and not (_tma_ok(a) and _tma_ok(b)):
        raise ValueError("TMA needs row-major A and B with 16-byte aligned rows and base addresses")
    if TMA_STORE and not (TMA and SPLIT_K == 1):
        raise ValueError("TMA_STORE (C through a tensor descriptor) goes with TMA loads and no split-K")
    if TMA_STORE and not _tma_ok(c):
        raise ValueError("TMA_STORE needs C's rows 16-byte aligned")
    descs: list[tuple[str, int, tuple[int, int]]] = []
    if TMA:
        descs += [("a_desc", 0, (BM, BK)), ("b_desc", 1, (BK, BN))]
        if TMA_STORE:
            descs.append(("c_desc", 2, (BM, BN // 2 if TMA_STORE == 2 else BN)))
        if BN_TAIL or A_REG:  # the tail's (or, with A_REG, every 64-column chunk's) descriptors
            chunk = 64 if A_REG else BN_TAIL
            descs.append(("b2_desc", 1, (BK, chunk)))
            if TMA_STORE:
                descs.append(("c2_desc", 2, (BM, chunk)))
    if STREAM_K and not (PERSISTENT and SPLIT_K == 1 and not WARP_SPEC):
        raise ValueError("STREAM_K is a schedule of the persistent kernel without split-K or warp specialisation "
                         "(PERSISTENT=1, SPLIT_K=1, WARP_SPEC=0)")
    if K == 0:  # no K steps to deal out: the whole-tile schedule writes the epilogue of zeros
        STREAM_K = 0
    ws = (SPLIT_K, M, N) if SPLIT_K > 1 else None
    fixup = SPLIT_K > 1 and bool(cfg["SPLITK_FIXUP"])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, W) * SPLIT_K
    counters = tiles // SPLIT_K if fixup else 0
    programs = min(num_sms(a.device), tiles) if PERSISTENT else tiles
    sk_tiles = 0
    if STREAM_K:
        programs = num_sms(a.device)
        sk_tiles = stream_k_tiles(tiles, programs)
        if sk_tiles:  # (whole waves only: no partials, no workspace)
            ws = (programs, 2, BM, BN)
            counters = sk_tiles
    res = residual if residual is not None else c
    launch = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    if num_ctas != 1:
        launch["num_ctas"] = num_ctas
    if maxnreg:
        launch["maxnreg"] = maxnreg
    epi = {"HAS_BIAS": bias is not None, "ACT": ACTIVATIONS[activation], "HAS_RES": residual is not None}
    static: dict[str, Any] = dict(
        M=M, N=N, K=K, stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
        stride_cm=c.stride(0), stride_cn=c.stride(1), stride_rm=res.stride(0), stride_rn=res.stride(1),
        num_programs=programs, BM=BM, BN=BN, BK=BK, GROUP_M=cfg["GROUP_M"], SPLIT_K=SPLIT_K, FIXUP=fixup,
        PERSISTENT=bool(PERSISTENT), TMA=bool(TMA), WS_TILES=bool(WARP_SPEC) and bool(PERSISTENT),
        WS_K=bool(WARP_SPEC) and not PERSISTENT, EVEN_K=K % BK == 0,
        INPUT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32", SWAP_AB=bool(SWAP_AB),
        STREAM_K=bool(STREAM_K), sk_tiles=sk_tiles, TMA_STORE=int(TMA_STORE), BNT=int(BN_TAIL), AREG=bool(A_REG),
        HOLD=bool(A_REG) and a.is_cuda, **epi, **launch,
    )
    given = {name for name, _, _ in descs}
    static.update({name: None for name in _DESCRIPTORS if name not in given})
    reduce_grid = reduce_static = None
    if SPLIT_K > 1 and not fixup:
        RB, RN = 32, 128
        reduce_grid = (triton.cdiv(M, RB), triton.cdiv(N, RN))
        reduce_static = dict(M=M, N=N, stride_cm=c.stride(0), stride_cn=c.stride(1), stride_rm=res.stride(0),
                             stride_rn=res.stride(1), SPLIT_K=SPLIT_K, BM=RB, BN=RN, **epi, num_warps=4)
    return _Plan(shape=(M, N), dtype=a.dtype, device=a.device, ws=ws, counters=counters, descs=tuple(descs),
                 grid=(programs,), static=static, reduce_grid=reduce_grid, reduce_static=reduce_static or {}), c


class _Launches:
    """A plan's kernel launches and its tensors' descriptors. With `fast=False` (`gemm`) every
    launch goes through Triton's JIT and every descriptor through its checking constructor;
    with `fast=True` (`GemmLauncher`) the launches go through the compiled kernels' handles
    after the first call (`evokernel.runtime.launch.KernelLaunch`) and the descriptors are copies of
    the first call's, over this call's tensors (the plan checked their shapes and strides)."""

    __slots__ = ("_make", "_templates", "_ws", "fast", "main", "plan", "reduce")

    def __init__(self, plan: _Plan, *, fast: bool) -> None:
        self.plan = plan
        self.fast = fast
        self.main: KernelLaunch | None = None
        self.reduce: KernelLaunch | None = None
        self._make: Any = None
        self._ws: dict[tuple[int, int], torch.Tensor] = {}
        if plan.gluon is not None:
            from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

            g = plan.gluon
            self.main = KernelLaunch(gluon_gemm._gluon_gemm_kernel, g.grid, g.static, gluon_gemm.GLUON_ARGS, fast=fast)
            self._make = g.descriptor
        elif not plan.empty:
            self.main = KernelLaunch(_gemm_kernel, plan.grid, plan.static,
                                     _TENSOR_ARGS + tuple(name for name, _, _ in plan.descs), fast=fast)
            if plan.reduce_grid is not None:
                self.reduce = KernelLaunch(_splitk_reduce_kernel, plan.reduce_grid, plan.reduce_static, _REDUCE_ARGS,
                                           fast=fast)
            self._make = self._triton_descriptor
        self._templates: list[Any] = []

    def _direct(self, c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                residual: torch.Tensor | None) -> bool:
        """Launch through the compiled kernels' raw launches (`KernelLaunch.direct`, the
        plan's launches checked in one go), each descriptor given as its tensor (the plan's
        signature fixes their shapes and strides), the split-K workspace kept per stream and
        thread (every call writes all of it before the reduction reads it, in stream order);
        False, launching nothing, where a launch would not go that way (the caller launches as
        usual)."""
        d = self.main.direct(self.reduce) if self.reduce is not None else self.main.direct()
        if d is None:
            return False
        stream, raw = d[0], d[1]
        plan = self.plan
        g = plan.gluon
        if g is not None:
            from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

            tensors = (a, b, c)
            bases = [tensors[src] for src, _, _ in g.descs]
            s = g.slots
            raw(stream, (bases[s[0]], bases[s[1]], bases[s[2]], bases[s[3]], bases[s[4]],
                         bias if bias is not None else c, residual if residual is not None else c), True)
            _LAST["kernel"] = gluon_gemm.LAST["kernel"] = self.main._handle.compiled
            return True
        ws = c
        if plan.ws is not None:
            key = (stream, threading.get_ident())
            ws = self._ws.get(key)
            if ws is None:
                if len(self._ws) >= 8:
                    self._ws.clear()
                ws = self._ws[key] = torch.empty(plan.ws, device=plan.device, dtype=torch.float32)
        args = self._arguments(c, a, b, ws, bias, residual)
        raw(stream, args, True)
        if len(d) > 2:
            d[2](stream, (ws, c, args[5], args[6]))
        _LAST["kernel"] = self.main._handle.compiled
        return True

    def _arguments(self, c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, ws: torch.Tensor,
                   bias: torch.Tensor | None, residual: torch.Tensor | None) -> tuple:
        """The Triton kernel's dynamic arguments but its descriptors (a, b, c, the workspace,
        the fixup's counters, bias and residual, C standing in for those not given), then the
        tensor each of the plan's descriptors is over."""
        plan = self.plan
        counters = _tile_counters(plan.device, plan.counters) if plan.counters else c
        tensors = (a, b, c)
        return (a, b, c, ws, counters, bias if bias is not None else c, residual if residual is not None else c,
                *[tensors[src] for _, src, _ in plan.descs])

    def _triton_descriptor(self, j: int, t: torch.Tensor) -> Any:
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor.from_tensor(t, list(self.plan.descs[j][2]))

    def descriptor(self, j: int, t: torch.Tensor) -> Any:
        """Descriptor j of the plan over tensor t."""
        if j < len(self._templates):
            return quick_descriptor(self._templates[j], t)
        d = self._make(j, t)
        if self.fast and j == len(self._templates):
            self._templates.append(quick_descriptor(d, None))
        return d

    def __call__(self, c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                 residual: torch.Tensor | None) -> torch.Tensor:
        """C = epilogue(a @ b), into the caller's c (of the plan's shape, dtype and device)."""
        plan = self.plan
        if plan.empty:
            return c
        if self.fast and self._direct(c, a, b, bias, residual):
            return c
        if plan.gluon is not None:
            from evokernel.search_spaces.gemm import template_gluon as gluon_gemm

            _LAST["kernel"] = gluon_gemm.launch_gluon(plan.gluon, self.main, self.descriptor, c, a, b, bias, residual)
            return c
        ws = torch.empty(plan.ws, device=plan.device, dtype=torch.float32) if plan.ws is not None else c
        args = self._arguments(c, a, b, ws, bias, residual)
        descs = [self.descriptor(j, t) for j, t in enumerate(args[7:])]
        _LAST["kernel"] = self.main(*args[:7], *descs)
        if self.reduce is not None:
            self.reduce(ws, c, args[5], args[6])
        return c


def gemm(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
         residual: torch.Tensor | None = None, activation: str = "none",
         BM: int, BN: int, BK: int, GROUP_M: int, num_warps: int, num_stages: int, SPLIT_K: int = 1,
         SPLITK_FIXUP: int = 0, PERSISTENT: int = 0, TMA: int = 0, WARP_SPEC: int = 0, num_ctas: int = 1,
         maxnreg: int = 0, SWAP_AB: int = 0, STREAM_K: int = 0, TMA_STORE: int = 0,
         BN_TAIL: int = 0, A_REG: int = 0, GLUON: int = 0) -> torch.Tensor:
    """epilogue(a @ b) in a's dtype, with one configuration of the template (`SWAP_AB`: the
    tile computed as B^T A^T, for few tokens; `STREAM_K`: the persistent schedule's last
    tiles split by K steps over the programs; `BN_TAIL`: tiles BN + BN_TAIL wide; `GLUON`:
    the tile run by the warp-specialised Gluon kernel, C stored by TMA whole (TMA_STORE=1)
    or in halves (2); optional genes, see `gemm_space`).

    The reference path: every call checks everything and launches through Triton's JIT.
    `GemmLauncher` runs the same plan and kernels with the checks and the JIT's binding done
    once per input signature (bitwise the same results, a fraction of the host time)."""
    cfg = {"BM": BM, "BN": BN, "BK": BK, "GROUP_M": GROUP_M, "num_warps": num_warps, "num_stages": num_stages,
           "SPLIT_K": SPLIT_K, "SPLITK_FIXUP": SPLITK_FIXUP, "PERSISTENT": PERSISTENT, "TMA": TMA,
           "WARP_SPEC": WARP_SPEC, "num_ctas": num_ctas, "maxnreg": maxnreg, "SWAP_AB": SWAP_AB, "STREAM_K": STREAM_K,
           "TMA_STORE": TMA_STORE, "BN_TAIL": BN_TAIL, "A_REG": A_REG, "GLUON": GLUON}
    plan, c = _plan(a, b, bias, residual, activation, cfg)
    return _Launches(plan, fast=False)(c, a, b, bias, residual)


#: the optional genes' defaults (gemm's)
_GENE_DEFAULTS: dict[str, int] = {
    name: p.default for name, p in inspect.signature(gemm).parameters.items()
    if name in PARAMS + OPTIONAL and p.default is not inspect.Parameter.empty
}


def _genes(params: Mapping[str, int]) -> dict[str, int]:
    """Every gene of a configuration, the optional ones defaulted as `gemm` defaults them;
    TypeError for a missing or unknown one (as `gemm(**params)` raises)."""
    unknown = set(params) - set(PARAMS + OPTIONAL)
    missing = set(PARAMS) - set(_GENE_DEFAULTS) - set(params)
    if unknown or missing:
        raise TypeError(f"a GEMM configuration has the genes {list(PARAMS)} (and optionally {list(OPTIONAL)}); "
                        f"unknown: {sorted(unknown)}, missing: {sorted(missing)}")
    return {**_GENE_DEFAULTS, **{k: int(v) for k, v in params.items()}}


def _signature(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
               residual: torch.Tensor | None) -> tuple:
    """All a plan depends on, and all Triton specialises a launch on, of a call's inputs:
    shapes, strides, dtypes, devices, and whether each pointer is 16-byte aligned (C, the
    workspace and the counters are fresh allocations, always aligned)."""
    return (a.shape, a.stride(), a.dtype, a.get_device(), a.data_ptr() % 16 == 0,
            b.shape, b.stride(), b.dtype, b.get_device(), b.data_ptr() % 16 == 0,
            None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device(),
                                       bias.data_ptr() % 16 == 0),
            None if residual is None else (residual.shape, residual.stride(), residual.dtype, residual.get_device(),
                                           residual.data_ptr() % 16 == 0))


class GemmLauncher:
    """`gemm` at one configuration, for calling again and again at a host cost near
    `torch.matmul`'s: `GemmLauncher(params, activation=...)(a, b, bias=None, residual=None)`.

    The first call for an input signature (`_signature`: shapes, strides, dtypes, devices,
    pointer alignment, which of bias and residual are given) makes `gemm`'s plan, with all of
    its checks (a configuration or an input `gemm` refuses raises here the same error), and
    launches through Triton's JIT; later calls with that signature allocate C and launch the
    compiled kernels directly (`evokernel.runtime.launch`): on Triton 3.6 through the raw C launch,
    each descriptor's CUtensorMap kept per pointer and the split-K workspace per stream and
    thread (one buffer each, held by the launcher), elsewhere through the compiled kernel's
    launcher with the first call's descriptors copied over this call's tensors. The results are bitwise `gemm`'s. Where
    no compiled kernel can be launched directly (Triton's CPU interpreter, another Triton),
    every call goes through the JIT as `gemm` does. `stats()` counts plans and launches.

    >>> import torch
    >>> run = GemmLauncher(dict(DEFAULTS, BM=16, BN=32, BK=32), activation="relu")
    >>> run.stats()
    {'plans': 0, 'jit_launches': 0, 'fast_launches': 0}
    >>> run(torch.zeros(0, 8), torch.zeros(8, 8)).shape  # (no rows: nothing to launch)
    torch.Size([0, 8])
    >>> run.stats()
    {'plans': 1, 'jit_launches': 0, 'fast_launches': 0}
    """

    def __init__(self, params: Mapping[str, int], *, activation: str = "none") -> None:
        self.params = dict(params)
        self.activation = activation
        self._cfg = _genes(params)
        self._plans: dict[tuple, _Launches] = {}

    def __call__(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
        key = _signature(a, b, bias, residual)
        launches = self._plans.get(key)
        if launches is None:
            plan, c = _plan(a, b, bias, residual, self.activation, self._cfg)
            launches = _Launches(plan, fast=True)
            out = launches(c, a, b, bias, residual)
            self._plans[key] = launches  # (only once a call went through)
            return out
        plan = launches.plan
        return launches(torch.empty(plan.shape, dtype=plan.dtype, device=plan.device), a, b, bias, residual)

    def stats(self) -> dict[str, int]:
        """Plans made, and launches through the JIT and through the compiled handles."""
        runs = [x for p in self._plans.values() for x in (p.main, p.reduce) if x is not None]
        return {"plans": len(self._plans), "jit_launches": sum(x.jit_calls for x in runs),
                "fast_launches": sum(x.fast_calls for x in runs)}


_CANDIDATE = '''"""Candidate: the Hopper GEMM template at one configuration (generated)."""

from evokernel.search_spaces.gemm.template import GemmLauncher


CONFIG = {config}

# checked and planned once per input signature, then launched through the compiled kernel
_gemm = GemmLauncher(CONFIG{launcher})


def kernel({args}):
    return _gemm({call})
'''


def candidate_source(params: Mapping[str, int], *, bias: bool = False, residual: bool = False,
                     activation: str = "none") -> str:
    """The text of a candidate module running the template at `params` (a `GemmLauncher`
    built at import from its literal `CONFIG`, which the evaluator binds a genome into), with
    the problem's epilogue (its inputs are a, b, then bias and residual where present)."""
    check_params(params, PARAMS, optional=OPTIONAL)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    args = ["a", "b"] + (["bias"] if bias else []) + (["residual"] if residual else [])
    call = ["a", "b"] + (["bias=bias"] if bias else []) + (["residual=residual"] if residual else [])
    launcher = f", activation={activation!r}" if activation != "none" else ""
    config = ", ".join(f'"{k}": {int(params[k])}' for k in sorted(params))
    return _CANDIDATE.format(config="{" + config + "}", args=", ".join(args), call=", ".join(call),
                             launcher=launcher)


_TORCH = '''"""Baseline: torch.matmul (cuBLAS), then the epilogue in eager torch (generated)."""

import torch
import torch.nn.functional as F


def kernel({args}):
    x = torch.matmul(a, b)
{body}    return x
'''


def torch_source(*, bias: bool = False, residual: bool = False, activation: str = "none") -> str:
    """The baseline candidate a user would otherwise run: cuBLAS through torch.matmul, and
    the epilogue as separate eager torch ops (one kernel each).

    >>> print(torch_source(bias=True, activation="silu").split("def ")[1].strip())
    kernel(a, b, bias):
        x = torch.matmul(a, b)
        x = x + bias
        x = F.silu(x)
        return x
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    args = ["a", "b"] + (["bias"] if bias else []) + (["residual"] if residual else [])
    body = "    x = x + bias\n" if bias else ""
    body += {"none": "", "relu": "    x = torch.relu(x)\n", "silu": "    x = F.silu(x)\n",
             "gelu_tanh": "    x = F.gelu(x, approximate=\"tanh\")\n"}[activation]
    body += "    x = x + residual\n" if residual else ""
    return _TORCH.format(args=", ".join(args), body=body)
