"""A warp-specialised Hopper GEMM written in Gluon: the template's `GLUON=1` form.

Triton's own warp specialisation on Hopper (Triton 3.6, `tl.range(warp_specialize=True)`)
builds the producer/consumer split only from a non-persistent 4-warp kernel, and its
consumers wait for each warpgroup MMA to finish before the next is issued (`wgmma.wait_group
0` after every K step, seen in its sm_90 PTX). cuBLAS's `coop` kernels, which it runs at
the H200 at every Llama-3-8B and Qwen3 layer shape from M=2048 tokens up, keep one MMA in flight behind the
next and overlap a tile's epilogue with the next tile's loads. Gluon (Triton's explicit,
layout-level language) says all of that in Python:

- a producer partition of one warp (24 registers) issues the TMA loads of A and B into a
  ring of `num_stages` shared-memory slots, each with a "ready" barrier (the loads'
  transaction count) and an "empty" barrier (the consumers are done with the slot);
- the default partition, `num_warps` warps (one warpgroup per 64 rows of the tile: 4 warps
  for BM=64, 8 for BM=128 or 256, "cooperative" as cuBLAS's kernels with two consumer
  warpgroups), waits on a slot, issues the asynchronous warpgroup MMA, waits until at most
  one is in flight (so the previous one is done) and releases the previous slot; the
  producer's warps give their registers to the consumers (setmaxnreg: 24 vs 240);
- tiles BN + BN_TAIL wide (192, 320: cuBLAS's at Llama's and Qwen3's qkv) take the tail's
  columns as a second accumulator, loaded into their own slots beside B's;
- with SWAP_AB (few tokens), each tile is computed transposed, C^T = B^T A^T, the weights'
  64-128 columns as the MMA's rows and the 16-64 tokens as its narrow side (cuBLAS's
  small-batch tiles, 64x16 and 64x32 with 11-16 stages);
- with PINGPONG (GLUON=2), two consumer warpgroups each own a whole tile and take turns
  at the program's tiles, one's epilogue under the other's main loop (CUTLASS's ping-pong
  kernel: 128x128 tiles, 4 warps each);
- the epilogue (bias, activation, residual in fp32, as `template._epilogue`) goes
  through shared memory to a TMA store, whole or in two halves of BN/2 columns
  (`EPI_SPLIT`), and is waited for only before the next tile's epilogue writes the same
  shared memory: with `PERSISTENT=1` (one program per SM walking the tiles) the store
  overlaps the next tile's main loop, as the producer runs ahead into it.

TMA zero-fills the loads past M, N and K and clips the stores, so any M, N, K run (rows of A,
B and C 16-byte aligned, as TMA needs). Gluon does not run in Triton's CPU interpreter:
`gemm_gluon` on a CPU tensor raises a ValueError saying so (a failure value for the
evaluator); the kernel's sm_90 build is tested on the CPU (tests/test_gluon_gemm.py) and its
results on the GPU.
"""

# One module on purpose, though over 400 lines: the producer, the consumers (cooperative, swapped and ping-pong) and
# the plan share one protocol of slots and barriers (their phases, the `turn` hand-over, the register split of
# setmaxnreg), and the plan's checks are the layouts' assumptions: apart, files that must agree on the protocol.

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from evokernel.runtime.launch import KernelLaunch

__all__ = [
    "GLUON_ACTIVATIONS",
    "GLUON_ARGS",
    "GluonPlan",
    "gemm_gluon",
    "gluon_launch_maxnreg",
    "launch_gluon",
    "plan_gluon",
]

# Triton 3.6 (the H200's) names the TMA copies async_copy_global_to_shared and
# async_copy_shared_to_global; later Triton renamed them async_load and async_store (3.9
# raises on the old store's name)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

#: activation name -> the kernel's ACT code (as `template.ACTIVATIONS`)
GLUON_ACTIVATIONS = {"none": 0, "relu": 1, "silu": 2, "gelu_tanh": 3}


@gluon.jit
def _tile_of(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    """(pid_m, pid_n) of linear tile `tile`: GROUP_M rows of tiles walked column by column,
    so consecutive programs share B's columns in L2 (Triton's matmul tutorial order)."""
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    size_m = gl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group) % size_m, (tile % group) // size_m


@gluon.jit
def _producer(
    a_desc,
    b_desc,
    b2_desc,
    a_bufs,
    b_bufs,
    b2_bufs,
    ready,
    empty,
    M,
    N,
    K,
    BM: gl.constexpr,
    BN: gl.constexpr,
    BNT: gl.constexpr,
    BK: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    """One warp: the TMA loads of every tile this program owns, into the ring of slots (A,
    B's BN columns, and the tail's BNT columns where BNT > 0)."""
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN + BNT)
    k_tiles = gl.cdiv(K, BK)
    nbytes: gl.constexpr = (
        a_desc.block_type.nbytes + b_desc.block_type.nbytes + (b2_desc.block_type.nbytes if BNT > 0 else 0)
    )
    it = 0  # slot uses so far: slot it % STAGES, its round (it // STAGES) gives the phase
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_M)
        off_n = pid_n * (BN + BNT)
        for kt in range(k_tiles):
            s = it % STAGES
            # a barrier starts in phase 0; waiting on parity 1 passes at once: the first
            # round of slots is free without any release
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            _tma_load(a_desc, [pid_m * BM, kt * BK], ready.index(s), a_bufs.index(s))
            _tma_load(b_desc, [kt * BK, off_n], ready.index(s), b_bufs.index(s))
            if BNT > 0:
                _tma_load(b2_desc, [kt * BK, off_n + BN], ready.index(s), b2_bufs.index(s))
            it += 1


@gluon.jit
def _epilogue(
    acc,
    off_m,
    off_n,
    M,
    N,
    bias_ptr,
    res_ptr,
    stride_rm,
    stride_rn,
    layout: gl.constexpr,
    BM: gl.constexpr,
    BN: gl.constexpr,
    HAS_BIAS: gl.constexpr,
    ACT: gl.constexpr,
    HAS_RES: gl.constexpr,
    TRANS: gl.constexpr = False,
):
    """acc (fp32, MMA layout) -> act(acc + bias) + residual, fp32: `template._epilogue`;
    with TRANS, acc is the tile transposed (BN x BM: the swap-AB consumer's)."""
    offs_n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(1 if TRANS else 0, layout))
    if HAS_BIAS:
        bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(gl.float32)
        acc = acc + gl.expand_dims(bias, 1 if TRANS else 0)
    if ACT == 1:
        acc = gl.maximum(acc, 0.0)
    elif ACT == 2:
        acc = acc / (1.0 + gl.exp(-acc))
    elif ACT == 3:  # 0.5 x (1 + tanh(y)) = x sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3)
        inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + gl.exp(-2.0 * inner))
    if HAS_RES:
        offs_m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(0 if TRANS else 1, layout))
        rows = gl.expand_dims(offs_m, 0 if TRANS else 1)
        cols = gl.expand_dims(offs_n, 1 if TRANS else 0)
        mask = (rows < M) & (cols < N)
        res = gl.load(res_ptr + rows * stride_rm + cols * stride_rn, mask=mask, other=0.0)
        acc = acc + res.to(gl.float32)
    return acc


@gluon.jit
def _consumer(
    a_bufs,
    b_bufs,
    b2_bufs,
    ready,
    empty,
    turn,
    c_desc,
    c2_desc,
    c_smem,
    c2_smem,
    bias_ptr,
    res_ptr,
    M,
    N,
    K,
    stride_rm,
    stride_rn,
    BM: gl.constexpr,
    BN: gl.constexpr,
    BNT: gl.constexpr,
    BK: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
    EPI_SPLIT: gl.constexpr,
    HAS_BIAS: gl.constexpr,
    ACT: gl.constexpr,
    HAS_RES: gl.constexpr,
    WARPS: gl.constexpr,
    FIRST: gl.constexpr = 0,
    STRIDE: gl.constexpr = 1,
):
    """A consumer: the MMAs of its tiles, one K step in flight behind the next, and the
    epilogue through TMA stores (the tail's columns as a second accumulator). Its tiles are
    the program's FIRST-th, then every STRIDE-th (ping-pong: two consumers take turns, one's
    epilogue under the other's main loop); the producer fills the slots in the program's
    tile order, so this consumer's K steps are slot uses FIRST * k_tiles onwards, skipping
    the other's. With two consumers, each starts a tile's main loop only once the other has
    finished its own (the `turn` barriers): a slot's ready barrier is waited on by parity,
    which tells this round from the previous one but not from the one before, so a consumer
    must never wait on a round of a slot whose earlier round the other has not yet waited
    for (tests/test_gluon_gemm.py models the protocol)."""
    # one warpgroup MMA per 16-row slice of warps, as wide as the tile (n up to 256)
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BN, 16])
    layout2: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BNT if BNT > 0 else 8, 16]
    )
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN + BNT)
    k_tiles = gl.cdiv(K, BK)
    it = FIRST * k_tiles
    n = 0
    for tile in range(
        gl.program_id(0) + FIRST * gl.num_programs(0), num_pid_m * num_pid_n, STRIDE * gl.num_programs(0)
    ):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_M)
        if STRIDE > 1:  # main loops in program tile order: the other consumer passed its ready waits
            mbarrier.wait(turn.index(FIRST), (n + FIRST + 1) & 1, pred=(n + FIRST) > 0)
        acc = gl.zeros((BM, BN), gl.float32, layout)
        if BNT > 0:
            acc2 = gl.zeros((BM, BNT), gl.float32, layout2)
        for kt in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
            # at most this K step's MMAs in flight: the previous step's are done with their
            # slot (the previous tile's last slot was released after its final wait)
            if BNT > 0:
                acc2 = warpgroup_mma(a_bufs.index(s), b2_bufs.index(s), acc2, is_async=True)
                acc, acc2 = warpgroup_mma_wait(num_outstanding=2, deps=(acc, acc2))
            else:
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kt > 0)
            it += 1
        if STRIDE > 1:
            mbarrier.arrive(turn.index(1 - FIRST))
        n += 1
        if BNT > 0:
            acc, acc2 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc2))
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k_tiles > 0)
        off_m = pid_m * BM
        off_n = pid_n * (BN + BNT)
        if EPI_SPLIT == 1:
            out = _epilogue(
                acc, off_m, off_n, M, N, bias_ptr, res_ptr, stride_rm, stride_rn, layout, BM, BN, HAS_BIAS, ACT, HAS_RES
            ).to(c_desc.dtype)
            tma.store_wait(0)  # the last tile's stores have read c_smem (and c2_smem)
            c_smem.store(out)
            fence_async_shared()
            _tma_store(c_desc, [off_m, off_n], c_smem)
        else:  # two halves of BN/2 columns through one BM x BN/2 buffer, the epilogue a half at a
            # time (a whole tile's residual beside the accumulator spilled: 136-528 B)
            left, right = gl.split(gl.permute(gl.reshape(acc, [BM, 2, BN // 2]), [0, 2, 1]))
            half: gl.constexpr = left.type.layout
            out = _epilogue(
                left,
                off_m,
                off_n,
                M,
                N,
                bias_ptr,
                res_ptr,
                stride_rm,
                stride_rn,
                half,
                BM,
                BN // 2,
                HAS_BIAS,
                ACT,
                HAS_RES,
            ).to(c_desc.dtype)
            tma.store_wait(0)  # the last tile's stores have read c_smem (and c2_smem)
            c_smem.store(out)
            fence_async_shared()
            _tma_store(c_desc, [off_m, off_n], c_smem)
            out = _epilogue(
                right,
                off_m,
                off_n + BN // 2,
                M,
                N,
                bias_ptr,
                res_ptr,
                stride_rm,
                stride_rn,
                half,
                BM,
                BN // 2,
                HAS_BIAS,
                ACT,
                HAS_RES,
            ).to(c_desc.dtype)
            tma.store_wait(0)
            c_smem.store(out)
            fence_async_shared()
            _tma_store(c_desc, [off_m, off_n + BN // 2], c_smem)
        if BNT > 0:
            out2 = _epilogue(
                acc2,
                off_m,
                off_n + BN,
                M,
                N,
                bias_ptr,
                res_ptr,
                stride_rm,
                stride_rn,
                layout2,
                BM,
                BNT,
                HAS_BIAS,
                ACT,
                HAS_RES,
            ).to(c2_desc.dtype)
            c2_smem.store(out2)
            fence_async_shared()
            _tma_store(c2_desc, [off_m, off_n + BN], c2_smem)
        it += (STRIDE - 1) * k_tiles  # the other consumer's K steps
    tma.store_wait(0)


@gluon.jit
def _consumer_swapped(
    a_bufs,
    b_bufs,
    ready,
    empty,
    c_desc,
    c_smem,
    bias_ptr,
    res_ptr,
    M,
    N,
    K,
    stride_rm,
    stride_rn,
    BM: gl.constexpr,
    BN: gl.constexpr,
    BK: gl.constexpr,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
    HAS_BIAS: gl.constexpr,
    ACT: gl.constexpr,
    HAS_RES: gl.constexpr,
    WARPS: gl.constexpr,
):
    """SWAP_AB's default partition: each tile computed transposed, C^T = B^T A^T, so the
    weights' BN columns fill the warpgroup MMA's 64-row side and the BM (16-64) tokens its
    narrow one (n = BM), as cuBLAS runs its small-batch tiles (64x16, 64x32); the
    operands are the same slots read through transposed views, the result transposed back
    on its way to C's TMA store."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BM, 16])
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = gl.zeros((BN, BM), gl.float32, layout)
        for kt in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = warpgroup_mma(b_bufs.index(s).permute((1, 0)), a_bufs.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kt > 0)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k_tiles > 0)
        off_m = pid_m * BM
        off_n = pid_n * BN
        out = _epilogue(
            acc,
            off_m,
            off_n,
            M,
            N,
            bias_ptr,
            res_ptr,
            stride_rm,
            stride_rn,
            layout,
            BM,
            BN,
            HAS_BIAS,
            ACT,
            HAS_RES,
            True,
        ).to(c_desc.dtype)
        tma.store_wait(0)
        c_smem.store(gl.permute(out, [1, 0]))
        fence_async_shared()
        _tma_store(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)


@gluon.jit
def _gluon_gemm_kernel(
    a_desc,
    b_desc,
    b2_desc,
    c_desc,
    c2_desc,
    bias_ptr,
    res_ptr,
    M,
    N,
    K,
    stride_rm,
    stride_rn,
    GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
    EPI_SPLIT: gl.constexpr,
    BNT: gl.constexpr,
    HAS_BIAS: gl.constexpr,
    ACT: gl.constexpr,
    HAS_RES: gl.constexpr,
    num_warps: gl.constexpr,
    SWAP: gl.constexpr = False,
    PINGPONG: gl.constexpr = False,
):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BK, BN], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    if BNT > 0:  # the tail's B slots and C staging (without a tail, b2/c2 are b/c and unused)
        b2_bufs = gl.allocate_shared_memory(b2_desc.dtype, [STAGES, BK, BNT], b2_desc.layout)
        c2_smem = gl.allocate_shared_memory(c2_desc.dtype, c2_desc.block_type.shape, c2_desc.layout)
    else:
        b2_bufs = b_bufs
        c2_smem = c_smem
    if PINGPONG:  # the second consumer's own C staging
        d_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
        if BNT > 0:
            d2_smem = gl.allocate_shared_memory(c2_desc.dtype, c2_desc.block_type.shape, c2_desc.layout)
        else:
            d2_smem = d_smem
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    if SWAP:
        gl.warp_specialize(
            [
                (
                    _consumer_swapped,
                    (
                        a_bufs,
                        b_bufs,
                        ready,
                        empty,
                        c_desc,
                        c_smem,
                        bias_ptr,
                        res_ptr,
                        M,
                        N,
                        K,
                        stride_rm,
                        stride_rn,
                        BM,
                        BN,
                        BK,
                        GROUP_M,
                        STAGES,
                        HAS_BIAS,
                        ACT,
                        HAS_RES,
                        num_warps,
                    ),
                ),
                (
                    _producer,
                    (
                        a_desc,
                        b_desc,
                        b2_desc,
                        a_bufs,
                        b_bufs,
                        b2_bufs,
                        ready,
                        empty,
                        M,
                        N,
                        K,
                        BM,
                        BN,
                        BNT,
                        BK,
                        GROUP_M,
                        STAGES,
                    ),
                ),
            ],
            [1],
            [24],
        )
    elif PINGPONG:  # two consumer warpgroups taking turns at the program's tiles, then the producer
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (
                        a_bufs,
                        b_bufs,
                        b2_bufs,
                        ready,
                        empty,
                        turn,
                        c_desc,
                        c2_desc,
                        c_smem,
                        c2_smem,
                        bias_ptr,
                        res_ptr,
                        M,
                        N,
                        K,
                        stride_rm,
                        stride_rn,
                        BM,
                        BN,
                        BNT,
                        BK,
                        GROUP_M,
                        STAGES,
                        EPI_SPLIT,
                        HAS_BIAS,
                        ACT,
                        HAS_RES,
                        num_warps,
                        0,
                        2,
                    ),
                ),
                (
                    _consumer,
                    (
                        a_bufs,
                        b_bufs,
                        b2_bufs,
                        ready,
                        empty,
                        turn,
                        c_desc,
                        c2_desc,
                        d_smem,
                        d2_smem,
                        bias_ptr,
                        res_ptr,
                        M,
                        N,
                        K,
                        stride_rm,
                        stride_rn,
                        BM,
                        BN,
                        BNT,
                        BK,
                        GROUP_M,
                        STAGES,
                        EPI_SPLIT,
                        HAS_BIAS,
                        ACT,
                        HAS_RES,
                        num_warps,
                        1,
                        2,
                    ),
                ),
                (
                    _producer,
                    (
                        a_desc,
                        b_desc,
                        b2_desc,
                        a_bufs,
                        b_bufs,
                        b2_bufs,
                        ready,
                        empty,
                        M,
                        N,
                        K,
                        BM,
                        BN,
                        BNT,
                        BK,
                        GROUP_M,
                        STAGES,
                    ),
                ),
            ],
            [num_warps, 1],
            [232, 24],
        )
    else:
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (
                        a_bufs,
                        b_bufs,
                        b2_bufs,
                        ready,
                        empty,
                        turn,
                        c_desc,
                        c2_desc,
                        c_smem,
                        c2_smem,
                        bias_ptr,
                        res_ptr,
                        M,
                        N,
                        K,
                        stride_rm,
                        stride_rn,
                        BM,
                        BN,
                        BNT,
                        BK,
                        GROUP_M,
                        STAGES,
                        EPI_SPLIT,
                        HAS_BIAS,
                        ACT,
                        HAS_RES,
                        num_warps,
                    ),
                ),
                (
                    _producer,
                    (
                        a_desc,
                        b_desc,
                        b2_desc,
                        a_bufs,
                        b_bufs,
                        b2_bufs,
                        ready,
                        empty,
                        M,
                        N,
                        K,
                        BM,
                        BN,
                        BNT,
                        BK,
                        GROUP_M,
                        STAGES,
                    ),
                ),
            ],
            [1],
            [24],
        )


def gluon_launch_maxnreg(num_warps: int) -> int | None:
    """The register cap a launch with `num_warps` consumer warps needs: the kernel runs them
    plus one warpgroup for the producer, and the register file (64K) must hold all of them at
    the cap before the producer gives its registers away (8 + 4 warps: 168 a thread)."""
    cap = 65536 // (32 * (num_warps + 4)) // 8 * 8
    return None if cap >= 256 else cap


_SMS: dict[int, int] = {}
#: the compiled kernel `gemm_gluon` launched last (`template.last_compiled` reads it)
LAST: dict[str, object] = {"kernel": None}
#: the kernel's arguments given per call (`launch_gluon`), in this order
GLUON_ARGS: tuple[str, ...] = ("a_desc", "b_desc", "b2_desc", "c_desc", "c2_desc", "bias_ptr", "res_ptr")


@dataclass(frozen=True)
class GluonPlan:
    """What `gemm_gluon` checks and works out before it launches, for one input signature:
    the grid, the descriptors (tensor 0 A / 1 B / 2 C, block shape, shared-memory layout,
    each layout made once), which descriptor each of the kernel's five descriptor arguments
    takes (`slots`: without a tail, the tail's are B's and C's), and every other argument."""

    grid: tuple[int]
    descs: tuple[tuple[int, tuple[int, int], Any], ...]
    slots: tuple[int, int, int, int, int]
    static: dict[str, Any]

    def descriptor(self, j: int, t: torch.Tensor) -> Any:
        """Descriptor j over t, by Gluon's checking constructor."""
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        _, block, layout = self.descs[j]
        return TensorDescriptor.from_tensor(t, list(block), layout)


def plan_gluon(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    activation: str = "none",
    BM: int,
    BN: int,
    BK: int,
    GROUP_M: int,
    num_warps: int,
    num_stages: int,
    PERSISTENT: int = 0,
    EPI_SPLIT: int = 1,
    BN_TAIL: int = 0,
    SWAP_AB: int = 0,
    PINGPONG: int = 0,
) -> tuple[GluonPlan | None, torch.Tensor]:
    """`gemm_gluon`'s checks and arithmetic for these inputs, and the C they were made with
    (the first call's output); the plan is None when M or N is 0 (C is all there is)."""
    if not a.is_cuda:
        raise ValueError(
            "the Gluon GEMM (GLUON=1) runs on a Hopper GPU only: Triton's CPU interpreter does not run Gluon kernels"
        )
    if a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype:
        raise ValueError(f"the Gluon GEMM takes bf16 or fp16 A and B of one dtype, got {a.dtype} and {b.dtype}")
    if activation not in GLUON_ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(GLUON_ACTIVATIONS)}, got {activation!r}")
    if PINGPONG:
        if not (num_warps == 4 and BM in (64, 128) and not SWAP_AB):
            raise ValueError(
                f"PINGPONG: two consumer warpgroups of 4 warps each, one tile of 64 or 128 rows each, "
                f"not swapped; got BM={BM}, num_warps={num_warps}"
            )
    elif SWAP_AB:
        if not (
            BM in (16, 32, 64) and BN in (64, 128) and num_warps == 4 * (BN // 64) and EPI_SPLIT == 1 and not BN_TAIL
        ):
            raise ValueError(
                f"SWAP_AB: BM 16-64 tokens, BN 64 or 128 (one warpgroup per 64: {4 * max(1, BN // 64)} "
                f"warps), C whole, no tail; got BM={BM}, BN={BN}, num_warps={num_warps}"
            )
    elif num_warps != 4 * max(1, BM // 64) and not (BM == 256 and num_warps == 8):
        raise ValueError(
            f"the Gluon GEMM runs one consumer warpgroup per 64 rows (BM={BM}: {4 * max(1, BM // 64)} "
            f"warps; 8 for BM=256), got num_warps={num_warps}"
        )
    if EPI_SPLIT not in (1, 2):
        raise ValueError(f"EPI_SPLIT is 1 (C whole) or 2 (two halves), got {EPI_SPLIT}")
    if BN_TAIL and not (BN_TAIL in (32, 64) and BN_TAIL < BN and num_stages >= 2):
        raise ValueError(f"BN_TAIL is 32 or 64 columns, under BN={BN}, got {BN_TAIL}")
    if num_stages < 2:
        raise ValueError(
            "the Gluon GEMM needs at least 2 stages (a slot is released only after the next MMA is issued)"
        )
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return None, c
    for name, t in (("A", a), ("B", b), ("C", c)):
        if t.stride(1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            raise ValueError(
                f"the Gluon GEMM loads and stores by TMA: {name} must be row-major with 16-byte "
                "aligned rows and base address"
            )
    if bias is not None:
        assert bias.shape == (N,) and bias.is_contiguous(), f"bias must be a contiguous [{N}], got {tuple(bias.shape)}"
    if residual is not None:
        assert residual.shape == (M, N), f"residual must be [{M}, {N}], got {tuple(residual.shape)}"
        if (M - 1) * abs(residual.stride(0)) + (N - 1) * abs(residual.stride(1)) >= 2**31:
            raise ValueError("the Gluon GEMM's residual offsets are int32: the residual is too large")
    elem = gl.bfloat16 if a.dtype == torch.bfloat16 else gl.float16

    def desc(src: int, block: tuple[int, int]) -> tuple[int, tuple[int, int], Any]:
        return src, block, gl.NVMMASharedLayout.get_default_for(list(block), elem)

    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN + BN_TAIL)
    if PERSISTENT:
        index = a.device.index if a.device.index is not None else torch.cuda.current_device()
        if index not in _SMS:
            _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
        programs = min(_SMS[index], tiles)
    else:
        programs = tiles
    res = residual if residual is not None else c
    maxnreg = gluon_launch_maxnreg(2 * num_warps if PINGPONG else num_warps)
    descs = [desc(0, (BM, BK)), desc(1, (BK, BN)), desc(2, (BM, BN // EPI_SPLIT))]
    if BN_TAIL:  # the tail's own B and C descriptors
        descs += [desc(1, (BK, BN_TAIL)), desc(2, (BM, BN_TAIL))]
    slots = (0, 1, 3, 2, 4) if BN_TAIL else (0, 1, 1, 2, 2)
    static = dict(
        M=M,
        N=N,
        K=K,
        stride_rm=res.stride(0),
        stride_rn=res.stride(1),
        GROUP_M=GROUP_M,
        STAGES=num_stages,
        EPI_SPLIT=EPI_SPLIT,
        BNT=BN_TAIL,
        SWAP=bool(SWAP_AB),
        PINGPONG=bool(PINGPONG),
        HAS_BIAS=bias is not None,
        ACT=GLUON_ACTIVATIONS[activation],
        HAS_RES=residual is not None,
        num_warps=num_warps,
        **({"maxnreg": maxnreg} if maxnreg else {}),
    )
    return GluonPlan(grid=(programs,), descs=tuple(descs), slots=slots, static=static), c


def launch_gluon(
    plan: GluonPlan,
    launch: Callable[..., Any],
    descriptor: Callable[[int, torch.Tensor], Any],
    c: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
) -> Any:
    """Launch `plan` into c (of its shape, freshly allocated) through `launch` (an
    `evokernel.runtime.launch.KernelLaunch` of `_gluon_gemm_kernel` taking `GLUON_ARGS`), the
    descriptors made by `descriptor(j, tensor)`; returns what the launch returns."""
    tensors = (a, b, c)
    descs = [descriptor(j, tensors[src]) for j, (src, _, _) in enumerate(plan.descs)]
    s = plan.slots
    LAST["kernel"] = launch(
        descs[s[0]],
        descs[s[1]],
        descs[s[2]],
        descs[s[3]],
        descs[s[4]],
        bias if bias is not None else c,
        residual if residual is not None else c,
    )
    return LAST["kernel"]


def gemm_gluon(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    activation: str = "none",
    BM: int,
    BN: int,
    BK: int,
    GROUP_M: int,
    num_warps: int,
    num_stages: int,
    PERSISTENT: int = 0,
    EPI_SPLIT: int = 1,
    BN_TAIL: int = 0,
    SWAP_AB: int = 0,
    PINGPONG: int = 0,
) -> torch.Tensor:
    """epilogue(a @ b) in a's dtype (bf16 or fp16) by the Gluon kernel at one configuration:
    tiles BM x (BN + BN_TAIL), the tail (32 or 64 columns, under BN) as a second accumulator
    (192- and 320-wide tiles, as cuBLAS runs at Llama's qkv and Qwen3's); with
    SWAP_AB, each tile computed as B^T A^T (BM 16-64 tokens as the MMA's narrow side, BN 64
    or 128 weights as its rows: one consumer warpgroup per 64 of BN); with PINGPONG, two
    consumer warpgroups of 4 warps each take every other tile of the program, one's epilogue
    running under the other's main loop (CUTLASS's "ping-pong" Hopper kernel). Every call
    checks everything and launches through Triton's JIT (`template.GemmLauncher` plans
    once per input signature and launches the compiled kernel directly)."""
    plan, c = plan_gluon(
        a,
        b,
        bias=bias,
        residual=residual,
        activation=activation,
        BM=BM,
        BN=BN,
        BK=BK,
        GROUP_M=GROUP_M,
        num_warps=num_warps,
        num_stages=num_stages,
        PERSISTENT=PERSISTENT,
        EPI_SPLIT=EPI_SPLIT,
        BN_TAIL=BN_TAIL,
        SWAP_AB=SWAP_AB,
        PINGPONG=PINGPONG,
    )
    if plan is None:
        return c
    launch = KernelLaunch(_gluon_gemm_kernel, plan.grid, plan.static, GLUON_ARGS, fast=False)
    launch_gluon(plan, launch, plan.descriptor, c, a, b, bias, residual)
    return c
