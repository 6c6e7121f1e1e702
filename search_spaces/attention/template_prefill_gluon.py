"""A warp-specialised Hopper flash-attention forward (prefill) written in Gluon, over packed
variable-length sequences: the prefill family's FA3-style form.

Same contract as `template_prefill.attention` (q [T, H_q, D], k and v [T, H_kv, D], int32
`cu_seqlens` [B + 1], the output [T, H_q, D]; query head h reads KV head h // (H_q / H_kv);
the square causal mask), and the structures FlashAttention-3 builds on Hopper, as genes:

- a producer partition of one warp (24 registers) issues the TMA loads: the program's Q tile
  once, then each KV block's K and V into a ring of `num_stages` shared-memory slots, K and V
  with barriers of their own (the scores can start as soon as K has landed);
- the consumer (the default partition, one warpgroup per 64 query rows: BLOCK_M = 16 x
  num_warps x rows per warp) runs S = Q K^T and O += P V as asynchronous warpgroup MMAs, P
  from registers (the MMA's A operand, never through shared memory), the online softmax in
  fp32 with exp2 and the scale folded into log2(e); it releases a slot as soon as its MMA is
  done;
- OVERLAP=1: FA3's intra-warpgroup overlap. The scores of block j+1 are issued before P_j V_j,
  and the softmax of block j+1 runs while P_j V_j is still in the tensor cores; 0 waits for
  each MMA before the next step;
- PINGPONG=1: FA3's inter-warpgroup overlap. Two consumer warpgroups of 4 warps (64 query
  rows each, BLOCK_M=128) take turns at issuing their MMAs through a pair of barriers, so
  one's softmax runs while the other's MMAs hold the tensor cores;
- causal-block skipping with the masked blocks separate: the KV blocks are walked from the
  diagonal (and the sequence's end) down to the first key, so the blocks that need a mask
  come first and the bulk of the loop runs unmasked;
- the grid is (query blocks of the longest sequence, H_q, B), heaviest query blocks first
  when causal; `max_seqlen` comes from the host (the problem hands it over), so nothing reads
  lengths back from the GPU.

Q, K and V are loaded through 2-D descriptors over [T, H x D] (rows past a sequence's end are
the next sequence's or TMA's zero fill: masked in the scores, never stored); the output is
stored through registers with a row mask. Gluon does not run in Triton's CPU interpreter:
`attention_gluon` on CPU tensors raises a ValueError saying so (a failure value for a search);
the kernel's sm_90 build is tested on the CPU (tests/test_gluon_attention.py), its results
on the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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

from evokernel.judge.candidate import check_params
from evokernel.runtime.launch import KernelLaunch, quick_descriptor
from evokernel.search_spaces.gemm.template import num_sms
from evokernel.search_spaces.gemm.template_gluon import gluon_launch_maxnreg

__all__ = [
    "GLUON_PARAMS",
    "GLUON_DEFAULTS",
    "attention_gluon",
    "attention_gluon_dense",
    "gluon_candidate_source",
    "check_gluon_params",
]

# Triton 3.6 (the H200's) names the TMA load async_copy_global_to_shared; later Triton async_load
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

#: the genome of the Gluon form
GLUON_PARAMS: tuple[str, ...] = (
    "BLOCK_M",
    "BLOCK_N",
    "num_warps",
    "num_stages",
    "OVERLAP",
    "PINGPONG",
    "PERSISTENT",
    "QSTAGES",
    "TMA_STORE",
    "BY_SEQUENCE",
    "SNAKE",
)
GLUON_DEFAULTS: dict[str, int] = {
    "BLOCK_M": 128,
    "BLOCK_N": 128,
    "num_warps": 8,
    "num_stages": 2,
    "OVERLAP": 1,
    "PINGPONG": 0,
    "PERSISTENT": 0,
    "QSTAGES": 1,
    "TMA_STORE": 0,
    "BY_SEQUENCE": 0,
    "SNAKE": 0,
}

_LOG2E = 1.4426950408889634
#: the H200's shared memory per block (bytes), less the barriers' few bytes
_SHARED = 232448 - 1024


@gluon.jit
def _item(k, n_tiles, SNAKE: gl.constexpr):
    """The work item of this program's round k: item k x programs + program id, or with SNAKE
    on odd rounds the programs in reverse order (with heaviest-first items, the program that
    got a round's heaviest item gets the next round's lightest: a static schedule's loads even
    out). Past the last item: n_tiles (`_tile` makes it empty)."""
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    if SNAKE:
        t = k * nprog + gl.where(k % 2 == 1, nprog - 1 - pid, pid)
    else:
        t = k * nprog + pid
    return gl.minimum(t, n_tiles)


@gluon.jit
def _tile(
    t,
    n_m,
    n_tiles,
    H,
    S,
    cu_ptr,
    GROUP: gl.constexpr,
    DENSE: gl.constexpr,
    CAUSAL: gl.constexpr,
    BY_SEQUENCE: gl.constexpr,
    BM: gl.constexpr,
    BN: gl.constexpr,
    D: gl.constexpr,
):
    """Work item t's (Q's first row and column in its 2-D view, K's and V's, the sequence's
    length, the first query row, the KV blocks to walk, of them the masked ones, walked
    first). Causal items go heaviest first: over the whole grid (the last query blocks of
    every head and sequence, then the ones before: longest processing time first), or with
    BY_SEQUENCE sequence by sequence, heaviest first within each (the programs running at
    once then share one sequence's K and V in L2, and a query head's neighbours share its KV
    head); the others query block fastest, then head, then sequence. Packed ([T, H, D] viewed [T, H x D]): a sequence
    starts at row cu_seqlens[b], head h at column h x D. Dense ([B, H, S, D] viewed
    [B x H x S, D]): sequence b's head h starts at row (b x H + h) x S, column 0."""
    valid = t < n_tiles
    t = gl.minimum(t, n_tiles - 1)
    if CAUSAL and BY_SEQUENCE:
        b = t // (n_m * H)
        r = t % (n_m * H)
        m_blk = n_m - 1 - r // H
        h = r % H
    elif CAUSAL:
        hb = n_tiles // n_m  # heads x sequences
        m_blk = n_m - 1 - t // hb
        r = t % hb
        h = r % H
        b = r // H
    else:
        m_blk = t % n_m
        h = (t // n_m) % H
        b = t // (n_m * H)
    hk = h // GROUP
    if DENSE:
        length = S
        q_row = (b * H + h) * S
        kv_row = (b * (H // GROUP) + hk) * S
        q_col = 0
        kv_col = 0
    else:
        start = gl.load(cu_ptr + b)
        length = gl.load(cu_ptr + b + 1) - start
        q_row = start
        kv_row = start
        q_col = h * D
        kv_col = hk * D
    length = length * valid.to(gl.int32)  # past the last item: nothing to do
    m0 = m_blk * BM
    if CAUSAL:
        n_end = gl.cdiv(gl.minimum(m0 + BM, length), BN)
        n_full = (m0 + 1) // BN  # blocks every row of the tile sees whole
    else:
        n_end = gl.cdiv(length, BN)
        n_full = length // BN
    return q_row, q_col, kv_row, kv_col, length, m0, n_end, n_end - n_full


@gluon.jit
def _producer(
    q_desc,
    k_desc,
    v_desc,
    q_smem,
    k_bufs,
    v_bufs,
    q_bar,
    q_empty,
    k_ready,
    k_empty,
    v_ready,
    v_empty,
    cu_ptr,
    n_m,
    n_tiles,
    H,
    S,
    GROUP: gl.constexpr,
    D: gl.constexpr,
    BM: gl.constexpr,
    BN: gl.constexpr,
    STAGES: gl.constexpr,
    QSTAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    DENSE: gl.constexpr,
    BY_SEQUENCE: gl.constexpr,
    SNAKE: gl.constexpr,
    PARTS: gl.constexpr,
):
    """One warp: for each work item of the program, the TMA loads of Q (one part per
    consumer, into the item's Q slot once the consumers' last scores of the item that used
    it are done), then K and V of each KV block (diagonal first) into the ring of slots; it
    runs ahead into the next items while the consumers finish this one."""
    it = 0  # slot uses so far (over all items): slot it % STAGES, round it // STAGES
    n = 0  # items so far
    for k in range(gl.cdiv(n_tiles, gl.num_programs(0))):
        t = _item(k, n_tiles, SNAKE)
        q_row, q_col, kv_row, kv_col, length, m0, n_end, n_masked = _tile(
            t, n_m, n_tiles, H, S, cu_ptr, GROUP, DENSE, CAUSAL, BY_SEQUENCE, BM * PARTS, BN, D
        )
        if m0 < length:
            qs = n % QSTAGES
            mbarrier.wait(q_empty.index(qs), ((n // QSTAGES) & 1) ^ 1)  # a fresh barrier passes parity 1 at once
            mbarrier.expect(q_bar.index(qs), q_desc.block_type.nbytes * PARTS)
            for part in gl.static_range(PARTS):
                _tma_load(q_desc, [q_row + m0 + part * BM, q_col], q_bar.index(qs), q_smem.index(qs * PARTS + part))
            for i in range(n_end):
                j = n_end - 1 - i
                s = it % STAGES
                phase = ((it // STAGES) & 1) ^ 1
                mbarrier.wait(k_empty.index(s), phase)
                mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
                _tma_load(k_desc, [kv_row + j * BN, kv_col], k_ready.index(s), k_bufs.index(s))
                mbarrier.wait(v_empty.index(s), phase)
                mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
                _tma_load(v_desc, [kv_row + j * BN, kv_col], v_ready.index(s), v_bufs.index(s))
                it += 1
            n += 1


@gluon.jit
def _scores(
    sc,
    i,
    n_end,
    n_masked,
    m0,
    length,
    qk_scale,
    m_i,
    l_i,
    s_layout: gl.constexpr,
    BM: gl.constexpr,
    BN: gl.constexpr,
    CAUSAL: gl.constexpr,
    FOLD: gl.constexpr,
):
    """The online softmax of one block's scores: (P in fp32, the rescale factor of the
    running sums, the new running max and sum). Only the first `n_masked` blocks walked are
    masked (the diagonal and the sequence's end). FOLD: the running max is kept in raw score
    units and the scale folds into the exponent's argument (one fused multiply-add an
    element, s x scale - max x scale, as FA3 does) instead of scaling every score first."""
    if not FOLD:
        sc = sc * qk_scale
    if i < n_masked:
        j = n_end - 1 - i
        cols = j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        ok = gl.expand_dims(cols, 0) < length
        if CAUSAL:
            rows = m0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
            ok = ok & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
        sc = gl.where(ok, sc, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(sc, axis=1))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet
    if FOLD:
        m_use = m_use * qk_scale
        p = gl.exp2(sc * qk_scale - gl.expand_dims(m_use, 1))
        alpha = gl.exp2(m_i * qk_scale - m_use)
    else:
        p = gl.exp2(sc - gl.expand_dims(m_use, 1))
        alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _take_turn(turn, ev, PARTS: gl.constexpr, ME: gl.constexpr):
    """Wait for this consumer's turn at issue event `ev` (ping-pong only)."""
    if PARTS > 1:
        mbarrier.wait(turn.index(ME), (ev & 1) ^ (1 - ME))


@gluon.jit
def _give_turn(turn, PARTS: gl.constexpr, ME: gl.constexpr):
    if PARTS > 1:
        mbarrier.arrive(turn.index(1 - ME))


@gluon.jit
def _consumer(
    q_smem,
    k_bufs,
    v_bufs,
    q_bar,
    q_empty,
    k_ready,
    k_empty,
    v_ready,
    v_empty,
    turn,
    o_desc,
    o_bufs,
    o_ptr,
    cu_ptr,
    qk_scale,
    stride_ot,
    n_m,
    n_tiles,
    H,
    S,
    GROUP: gl.constexpr,
    D: gl.constexpr,
    BM: gl.constexpr,
    BN: gl.constexpr,
    STAGES: gl.constexpr,
    QSTAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    DENSE: gl.constexpr,
    BY_SEQUENCE: gl.constexpr,
    SNAKE: gl.constexpr,
    OVERLAP: gl.constexpr,
    FOLD: gl.constexpr,
    TMA_STORE: gl.constexpr,
    WARPS: gl.constexpr,
    PARTS: gl.constexpr = 1,
    ME: gl.constexpr = 0,
):
    """A consumer: for each work item of the program, the MMAs, the online softmax and the
    output's store of BM query rows, the ME-th part of the item's tile. With two parts
    (ping-pong), the two consumers take turns at issuing their MMAs (the `turn` barriers):
    one's softmax runs under the other's MMAs. Issue events of an item: the first block's
    scores, each later step's scores and the previous P V, the last P V (n + 1 in all);
    consumer ME waits for its turn at its ev-th event on parity (ev & 1) ^ (1 - ME) (the
    first consumer's first wait passes at once). TMA_STORE: the output goes out through
    shared memory and a TMA store the consumer does not wait for (a tile past its sequence's
    end, whose rows are another sequence's, by masked stores from that shared memory)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BN, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, D, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    # registers -> a layout of 16-byte runs along D for the store
    st_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (D // 8), D // 8], [WARPS, 1], [1, 0])
    dtype: gl.constexpr = q_smem.dtype
    zero_s = gl.zeros([BM, BN], gl.float32, s_layout)
    it = 0  # slot uses so far, as the producer counts them
    n = 0  # items so far
    ev = 0  # turn events so far
    for k in range(gl.cdiv(n_tiles, gl.num_programs(0))):
        t = _item(k, n_tiles, SNAKE)
        q_row, q_col, kv_row, kv_col, length, tile0, n_end, n_masked = _tile(
            t, n_m, n_tiles, H, S, cu_ptr, GROUP, DENSE, CAUSAL, BY_SEQUENCE, BM * PARTS, BN, D
        )
        m0 = tile0 + ME * BM
        if tile0 < length:
            qs = n % QSTAGES
            q_tile = q_smem.index(qs * PARTS + ME)
            m_i = gl.full([BM], float("-inf"), gl.float32, row_s)
            l_i = gl.zeros([BM], gl.float32, row_s)
            acc = gl.zeros([BM, D], gl.float32, o_layout)
            mbarrier.wait(q_bar.index(qs), (n // QSTAGES) & 1)
            if OVERLAP:
                # the first block walked: its scores and softmax; its P V waits for the next step
                s = it % STAGES
                mbarrier.wait(k_ready.index(s), (it // STAGES) & 1)
                _take_turn(turn, ev, PARTS, ME)
                sc = warpgroup_mma(q_tile, k_bufs.index(s).permute((1, 0)), zero_s, use_acc=False, is_async=True)
                _give_turn(turn, PARTS, ME)
                sc = warpgroup_mma_wait(num_outstanding=0, deps=(sc,))
                mbarrier.arrive(k_empty.index(s))
                p, alpha, m_i, l_i = _scores(
                    sc, 0, n_end, n_masked, m0, length, qk_scale, m_i, l_i, s_layout, BM, BN, CAUSAL, FOLD
                )
                pa = gl.convert_layout(p.to(dtype), p_layout)
                for i in range(1, n_end):
                    s = (it + i) % STAGES
                    prev = (it + i - 1) % STAGES
                    mbarrier.wait(k_ready.index(s), ((it + i) // STAGES) & 1)
                    mbarrier.wait(v_ready.index(prev), ((it + i - 1) // STAGES) & 1)
                    _take_turn(turn, ev + i, PARTS, ME)
                    sc = warpgroup_mma(q_tile, k_bufs.index(s).permute((1, 0)), zero_s, use_acc=False, is_async=True)
                    acc = warpgroup_mma(pa, v_bufs.index(prev), acc, is_async=True)
                    _give_turn(turn, PARTS, ME)
                    # groups complete in order: one outstanding means the scores are done
                    sc = warpgroup_mma_wait(num_outstanding=1, deps=(sc,))
                    mbarrier.arrive(k_empty.index(s))
                    p, alpha, m_i, l_i = _scores(
                        sc, i, n_end, n_masked, m0, length, qk_scale, m_i, l_i, s_layout, BM, BN, CAUSAL, FOLD
                    )
                    acc, pa = warpgroup_mma_wait(num_outstanding=0, deps=(acc, pa))  # P's registers live until done
                    mbarrier.arrive(v_empty.index(prev))
                    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
                    pa = gl.convert_layout(p.to(dtype), p_layout)
                mbarrier.arrive(q_empty.index(qs))  # every score of the item is done: the next Q may land
                last = (it + n_end - 1) % STAGES
                mbarrier.wait(v_ready.index(last), ((it + n_end - 1) // STAGES) & 1)
                _take_turn(turn, ev + n_end, PARTS, ME)
                acc = warpgroup_mma(pa, v_bufs.index(last), acc, is_async=True)
                _give_turn(turn, PARTS, ME)
                acc, pa = warpgroup_mma_wait(num_outstanding=0, deps=(acc, pa))  # P's registers live until done
                mbarrier.arrive(v_empty.index(last))
                ev += n_end + 1
            else:
                for i in range(n_end):
                    s = (it + i) % STAGES
                    phase = ((it + i) // STAGES) & 1
                    mbarrier.wait(k_ready.index(s), phase)
                    sc = warpgroup_mma(q_tile, k_bufs.index(s).permute((1, 0)), zero_s, use_acc=False, is_async=True)
                    sc = warpgroup_mma_wait(num_outstanding=0, deps=(sc,))
                    mbarrier.arrive(k_empty.index(s))
                    p, alpha, m_i, l_i = _scores(
                        sc, i, n_end, n_masked, m0, length, qk_scale, m_i, l_i, s_layout, BM, BN, CAUSAL, FOLD
                    )
                    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
                    pa = gl.convert_layout(p.to(dtype), p_layout)
                    mbarrier.wait(v_ready.index(s), phase)
                    acc = warpgroup_mma(pa, v_bufs.index(s), acc, is_async=True)
                    acc, pa = warpgroup_mma_wait(num_outstanding=0, deps=(acc, pa))  # P's registers live until done
                    mbarrier.arrive(v_empty.index(s))
                mbarrier.arrive(q_empty.index(qs))
            it += n_end
            n += 1
            l_o = gl.convert_layout(l_i, row_o)
            out = (acc / gl.expand_dims(gl.where(l_o == 0.0, 1.0, l_o), 1)).to(dtype)
            rows = m0 + gl.arange(0, BM, layout=gl.SliceLayout(1, st_layout))
            cols = gl.arange(0, D, layout=gl.SliceLayout(0, st_layout))
            ptrs = o_ptr + gl.expand_dims((q_row + rows).to(gl.int64) * stride_ot, 1) + q_col + gl.expand_dims(cols, 0)
            if TMA_STORE:
                o_smem = o_bufs.index(ME)
                tma.store_wait(0)  # the previous item's store has read the buffer
                o_smem.store(out)
                fence_async_shared()
                if m0 + BM <= length:
                    _tma_store(o_desc, [q_row + m0, q_col], o_smem)
                else:
                    gl.store(ptrs, o_smem.load(st_layout), mask=gl.expand_dims(rows < length, 1))
            else:
                gl.store(ptrs, gl.convert_layout(out, st_layout), mask=gl.expand_dims(rows < length, 1))
    if TMA_STORE:
        tma.store_wait(0)


# the integers that follow a batch's prompt lengths (tiles, the dense length) are not specialised:
# Triton would compile a variant per value class (== 1, a multiple of 16, other), and a served
# engine met one first mid-trace (S24c: a 1.66 s p99 TTFT in the first replay, 0.59 s after)
@gluon.jit(do_not_specialize=["n_m", "n_tiles", "S"])
def _attn_gluon_kernel(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    o_ptr,
    cu_ptr,
    qk_scale,
    stride_ot,
    n_m,
    n_tiles,
    H,
    S,
    GROUP: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    OVERLAP: gl.constexpr,
    num_warps: gl.constexpr,
    PINGPONG: gl.constexpr = False,
    QSTAGES: gl.constexpr = 1,
    FOLD: gl.constexpr = True,
    TMA_STORE: gl.constexpr = False,
    DENSE: gl.constexpr = False,
    BY_SEQUENCE: gl.constexpr = False,
    SNAKE: gl.constexpr = False,
):
    PARTS: gl.constexpr = 2 if PINGPONG else 1
    BM: gl.constexpr = q_desc.block_type.shape[0]  # rows of one consumer
    D: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [QSTAGES * PARTS, BM, D], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BN, D], v_desc.layout)
    if TMA_STORE:
        o_bufs = gl.allocate_shared_memory(o_desc.dtype, [PARTS, BM, D], o_desc.layout)
    else:
        o_bufs = q_smem  # (not used)
    q_bar = gl.allocate_shared_memory(gl.int64, [QSTAGES, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [QSTAGES, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(QSTAGES):
        mbarrier.init(q_bar.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=PARTS)  # every consumer is done with its part of Q
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=PARTS)  # every consumer releases the slot
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(v_empty.index(i), count=PARTS)
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)
    if PINGPONG:
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (q_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, turn, o_desc, o_bufs,
                     o_ptr, cu_ptr, qk_scale, stride_ot, n_m, n_tiles, H, S, GROUP, D, BM, BN, STAGES, QSTAGES, CAUSAL,
                     DENSE, BY_SEQUENCE, SNAKE, OVERLAP, FOLD, TMA_STORE, num_warps, 2, 0),
                ),
                (
                    _consumer,
                    (q_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, turn, o_desc, o_bufs,
                     o_ptr, cu_ptr, qk_scale, stride_ot, n_m, n_tiles, H, S, GROUP, D, BM, BN, STAGES, QSTAGES, CAUSAL,
                     DENSE, BY_SEQUENCE, SNAKE, OVERLAP, FOLD, TMA_STORE, num_warps, 2, 1),
                ),
                (
                    _producer,
                    (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty,
                     cu_ptr,
                     n_m, n_tiles, H, S, GROUP, D, BM, BN, STAGES, QSTAGES, CAUSAL, DENSE, BY_SEQUENCE, SNAKE, PARTS),
                ),
            ],
            [num_warps, 1],
            [232, 24],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (
                    _consumer,
                    (q_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, turn, o_desc, o_bufs,
                     o_ptr, cu_ptr, qk_scale, stride_ot, n_m, n_tiles, H, S, GROUP, D, BM, BN, STAGES, QSTAGES, CAUSAL,
                     DENSE, BY_SEQUENCE, SNAKE, OVERLAP, FOLD, TMA_STORE, num_warps, 1, 0),
                ),
                (
                    _producer,
                    (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty,
                     cu_ptr,
                     n_m, n_tiles, H, S, GROUP, D, BM, BN, STAGES, QSTAGES, CAUSAL, DENSE, BY_SEQUENCE, SNAKE, PARTS),
                ),
            ],
            [1],
            [24],
        )  # fmt: skip


def gluon_shared_bytes(
    BLOCK_M: int,
    BLOCK_N: int,
    num_stages: int,
    head_dim: int = 128,
    elem: int = 2,
    parts: int = 1,
    q_stages: int = 1,
    tma_store: bool = False,
) -> int:
    """Shared memory the kernel allocates: the Q slots, the K and V slots and the output's
    way out (one consumer's rows, BLOCK_M / parts, for the layout conversion before a plain
    store; every consumer's for the TMA store, which also serves its masked tail; the
    barriers aside)."""
    out = BLOCK_M if tma_store else BLOCK_M // parts
    return (q_stages * BLOCK_M + out + 2 * num_stages * BLOCK_N) * head_dim * elem


def check_gluon_params(params: Mapping[str, int], head_dim: int = 128) -> str | None:
    """Why `params` cannot build (None: it can): the layouts' and the H200's limits."""
    bm, bn, w, st = params["BLOCK_M"], params["BLOCK_N"], params["num_warps"], params["num_stages"]
    if params.get("PINGPONG", 0):
        if not (w == 4 and bm == 128 and params.get("OVERLAP", 0)):
            return "PINGPONG: two consumer warpgroups of 4 warps, 64 rows each (BLOCK_M=128), with OVERLAP"
        w = 8  # (the rules below see the program's two warpgroups)
    if w not in (4, 8):
        return f"num_warps is 4 (one consumer warpgroup) or 8 (two), got {w}"
    if bm % (16 * w) or bm > 64 * w:
        return f"BLOCK_M={bm} must be a multiple of 16 x num_warps ({16 * w}) and at most 64 rows a warpgroup"
    if bn not in (64, 128, 256):
        return f"BLOCK_N={bn}: a power of two the warpgroup MMA takes (64, 128, 256)"
    if st < 1 or (params.get("OVERLAP", 0) and st < 2):
        return "OVERLAP needs at least 2 slots (block j+1's K lands while block j's V is read)"
    if params.get("QSTAGES", 1) not in (1, 2):
        return f"QSTAGES is 1 or 2 Q slots, got {params.get('QSTAGES')}"
    parts = 2 if params.get("PINGPONG", 0) else 1
    smem = gluon_shared_bytes(
        bm, bn, st, head_dim, parts=parts, q_stages=params.get("QSTAGES", 1), tma_store=bool(params.get("TMA_STORE", 0))
    )
    if smem > _SHARED:
        return f"shared memory {smem} B over the H200's {_SHARED}"
    # fp32 registers a consumer thread holds: the O and S accumulators (and P) of its rows
    regs = bm * (head_dim + bn + bn // 2) // (32 * w)
    if regs > 200:
        return f"{regs} accumulator registers a thread (BLOCK_M={bm} over {w} warps): spills"
    return None


#: (input signature, configuration) -> (the launch, its descriptors' templates): later calls
#: of a signature skip the checks and the JIT (`evokernel.runtime.launch.KernelLaunch`)
_PLANS: dict[tuple, tuple[KernelLaunch, tuple[Any, ...]]] = {}
_PLANS_MAX = 256
_DYNAMIC = ("q_desc", "k_desc", "v_desc", "o_desc", "o_ptr", "cu_ptr")
#: the int32 tensor a dense launch passes for cu_seqlens (never read), per device
_NO_CU: dict[torch.device, torch.Tensor] = {}


def attention_gluon(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    *,
    causal: bool,
    sm_scale: float | None = None,
    BLOCK_M: int,
    BLOCK_N: int,
    num_warps: int,
    num_stages: int,
    OVERLAP: int = 1,
    PINGPONG: int = 0,
    PERSISTENT: int = 0,
    QSTAGES: int = 1,
    TMA_STORE: int = 0,
    BY_SEQUENCE: int = 0,
    SNAKE: int = 0,
    FOLD: int = 1,
) -> torch.Tensor:
    """Attention over packed sequences (q [T, H_q, D], k and v [T, H_kv, D], int32
    `cu_seqlens` [B + 1]) by the Gluon kernel at one configuration (see the module's
    docstring); `max_seqlen` (a host int) sizes the grid.

    The first call of an input signature (shapes, dtype, device, the number of sequences,
    max_seqlen, the configuration) checks everything and launches through Triton's JIT;
    later calls of that signature launch the compiled kernel directly, the descriptors
    copies of the first call's over this call's tensors (the signature fixes their shapes
    and strides; contiguity and 16-byte alignment are checked on every call)."""
    config = _config(locals())
    return _attention(q, k, v, cu_seqlens, max_seqlen, causal, sm_scale, config)


def attention_gluon_dense(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    sm_scale: float | None = None,
    BLOCK_M: int,
    BLOCK_N: int,
    num_warps: int,
    num_stages: int,
    OVERLAP: int = 1,
    PINGPONG: int = 0,
    PERSISTENT: int = 0,
    QSTAGES: int = 1,
    TMA_STORE: int = 0,
    BY_SEQUENCE: int = 0,
    SNAKE: int = 0,
    FOLD: int = 1,
) -> torch.Tensor:
    """Attention over the dense batched layout torch's `scaled_dot_product_attention` takes
    (q [B, H_q, S, D], k and v [B, H_kv, S, D], every sequence S long; the output [B, H_q,
    S, D]) by the same kernel at one configuration: each head's rows are contiguous there,
    so the descriptors view them as [B x H x S, D] and no cu_seqlens is read. (A [B, S, H,
    D] tensor is the packed layout: `attention_gluon` over its [B x S, H, D] view with
    cu_seqlens = 0, S, 2S, ...)"""
    config = _config(locals())
    return _attention(q, k, v, None, q.shape[2] if q.ndim == 4 else 0, causal, sm_scale, config)


def _config(given: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration a public entry was called with (its genes, then FOLD), from its
    `locals()` taken before anything else is bound."""
    return {k: given[k] for k in (*GLUON_PARAMS, "FOLD")}


def _attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    max_seqlen: int,
    causal: bool,
    sm_scale: float | None,
    config: dict[str, int],
) -> torch.Tensor:
    """The packed (`cu_seqlens` given) or dense (None) launch of the kernel."""
    dense = cu_seqlens is None
    key = (
        tuple(q.shape),
        tuple(k.shape),
        tuple(v.shape),
        q.dtype,
        k.dtype,
        v.dtype,
        q.device,
        None if cu_seqlens is None else (cu_seqlens.shape, cu_seqlens.dtype),
        int(max_seqlen),
        bool(causal),
        sm_scale,
        tuple(config.values()),
    )
    plan = _PLANS.get(key)
    if plan is not None and _aligned(q, k, v, cu_seqlens):
        launch, (tq, tk, tv, to) = plan
        o = torch.empty_like(q)
        q2, k2, v2, o2 = _views(q, k, v, o, dense)
        cu = _NO_CU[q.device] if dense else cu_seqlens
        launch(
            quick_descriptor(tq, q2),
            quick_descriptor(tk, k2),
            quick_descriptor(tv, v2),
            quick_descriptor(to, o2),
            o,
            cu,
        )
        return o
    if not q.is_cuda:
        raise ValueError(
            "the Gluon attention kernel runs on a Hopper GPU only: Triton's CPU interpreter does not run Gluon kernels"
        )
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"the Gluon attention kernel takes bf16 or fp16 q, k, v of one dtype, got {q.dtype}")
    if dense:
        if q.ndim != 4 or k.ndim != 4 or v.shape != k.shape:
            raise ValueError(f"dense attention takes q [B, H_q, S, D], k and v [B, H_kv, S, D], got {tuple(q.shape)}")
        B, H, S, D = q.shape
        Hkv = k.shape[1]
        if k.shape[0] != B or k.shape[2] != S or k.shape[3] != D or H % Hkv:
            raise ValueError(f"k/v must be [B, H_kv, S, D] with H_q % H_kv == 0, got {tuple(k.shape)}")
    else:
        if q.ndim != 3 or k.ndim != 3 or v.shape != k.shape:
            raise ValueError(f"packed attention takes q [T, H_q, D], k and v [T, H_kv, D], got {tuple(q.shape)}")
        total, H, D = q.shape
        Hkv = k.shape[1]
        if H % Hkv or k.shape[0] != total or k.shape[2] != D:
            raise ValueError("k/v must be [total, H_kv, D] with H_q % H_kv == 0")
    if D not in (64, 128):
        raise ValueError(f"the Gluon attention kernel takes head_dim 64 or 128, got {D}")
    if not _aligned(q, k, v, cu_seqlens):
        raise ValueError(
            "the Gluon attention kernel loads by TMA: q, k and v must be contiguous with 16-byte aligned "
            "base addresses, and cu_seqlens contiguous"
        )
    why = check_gluon_params(config, D)
    if why:
        raise ValueError(why)
    if dense:
        B = q.shape[0]
        S = int(max_seqlen)
        cu = _NO_CU.setdefault(q.device, torch.zeros(1, dtype=torch.int32, device=q.device))
    else:
        assert cu_seqlens is not None and cu_seqlens.dtype == torch.int32 and cu_seqlens.ndim == 1, (
            "cu_seqlens must be int32 [B + 1]"
        )
        B = cu_seqlens.shape[0] - 1
        S = 0
        cu = cu_seqlens
    o = torch.empty_like(q)
    if q.numel() == 0 or B == 0 or max_seqlen <= 0:
        return o
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    elem = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
    q2, k2, v2, o2 = _views(q, k, v, o, dense)
    parts = 2 if config["PINGPONG"] else 1

    def desc(t: torch.Tensor, rows: int) -> TensorDescriptor:
        return TensorDescriptor.from_tensor(t, [rows, D], gl.NVMMASharedLayout.get_default_for([rows, D], elem))

    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    n_m = triton.cdiv(max_seqlen, config["BLOCK_M"])
    n_tiles = n_m * H * B
    grid = (min(num_sms(q.device), n_tiles) if config["PERSISTENT"] else n_tiles,)
    maxnreg = gluon_launch_maxnreg(parts * config["num_warps"])
    static = dict(
        qk_scale=scale * _LOG2E,
        stride_ot=o2.stride(0),
        n_m=n_m,
        n_tiles=n_tiles,
        H=H,
        S=S,
        GROUP=H // Hkv,
        STAGES=config["num_stages"],
        CAUSAL=bool(causal),
        OVERLAP=bool(config["OVERLAP"]),
        PINGPONG=bool(config["PINGPONG"]),
        QSTAGES=config["QSTAGES"],
        FOLD=bool(config["FOLD"]),
        TMA_STORE=bool(config["TMA_STORE"]),
        DENSE=dense,
        BY_SEQUENCE=bool(config["BY_SEQUENCE"]),
        SNAKE=bool(config["SNAKE"]),
        num_warps=config["num_warps"],
        **({"maxnreg": maxnreg} if maxnreg else {}),
    )
    launch = KernelLaunch(_attn_gluon_kernel, grid, static, _DYNAMIC)
    bm = config["BLOCK_M"] // parts
    descs = (desc(q2, bm), desc(k2, config["BLOCK_N"]), desc(v2, config["BLOCK_N"]), desc(o2, bm))
    launch(*descs, o, cu)
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLANS[key] = (launch, tuple(quick_descriptor(d, None) for d in descs))  # (only once a call went through)
    return o


def _views(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, dense: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 2-D views the descriptors cover: [B x H x S, D] (dense) or [T, H x D] (packed)."""
    D = q.shape[-1]
    if dense:
        return q.view(-1, D), k.view(-1, D), v.view(-1, D), o.view(-1, D)
    return tuple(t.view(t.shape[0], -1) for t in (q, k, v, o))  # type: ignore[return-value]


def _aligned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor | None) -> bool:
    return (
        q.is_contiguous()
        and k.is_contiguous()
        and v.is_contiguous()
        and (cu is None or cu.is_contiguous())
        and not (q.data_ptr() % 16 or k.data_ptr() % 16 or v.data_ptr() % 16)
    )


_CANDIDATE = '''"""Candidate: the Gluon flash-attention prefill at one configuration (generated)."""

from evokernel.search_spaces.attention.template_prefill_gluon import attention_gluon, attention_gluon_dense


CONFIG = {config}


def kernel(q, k, v, cu_seqlens, max_seqlen, seqlens):
    if q.ndim == 4:  # the dense [B, H, S, D] layout
        return attention_gluon_dense(q, k, v, causal={causal}, **CONFIG{options})
    return attention_gluon(q, k, v, cu_seqlens, max_seqlen, causal={causal}, **CONFIG{options})
'''


def gluon_candidate_source(params: Mapping[str, int], *, causal: bool, options: Mapping[str, int] | None = None) -> str:
    """The text of a candidate module running `attention_gluon` at `params` (the genes), with
    `options`: keyword arguments of `attention_gluon` that are not genes (FOLD, for an A/B of
    the implementation).

    >>> "attention_gluon(q, k, v, cu_seqlens, max_seqlen, causal=True" in gluon_candidate_source(GLUON_DEFAULTS, causal=True)
    True
    """
    check_params(params, GLUON_PARAMS)
    config = ", ".join(f'"{k}": {int(params[k])}' for k in sorted(params))
    extra = "".join(f", {k}={int(v)}" for k, v in sorted((options or {}).items()))
    return _CANDIDATE.format(config="{" + config + "}", causal=bool(causal), options=extra)
