"""A Triton split-KV (flash-decoding) attention over a paged KV cache, as a template over its
config.

One new token per sequence attends to its whole context: q [B, H_q, D]; the caches
k_cache and v_cache [num_pages, PAGE, H_kv, D] hold every sequence's keys and values in
pages of PAGE tokens; `block_table` [B, max_pages] int32 names sequence b's pages in order
(token t of b is slot t % PAGE of page block_table[b, t // PAGE]); `context_lens` [B] int32
are the tokens each sequence attends to (>= 1). The output is [B, H_q, D] in q's dtype.
H_q is a multiple of H_kv (grouped-query attention): one program handles all H_q / H_kv
query heads of a KV head (padded to at least 16 rows, so the scores are one `tl.dot` and
each K/V tile is read once for the whole group: the decode win on tensor-core GPUs).

Two stages. Stage 1: each (split, KV head, sequence) program runs the online softmax over
its share of the sequence's keys (the context cut into NUM_SPLITS ranges, each a multiple
of BLOCK_N) and writes a partial output and its log-sum-exp (base 2) in fp32. Stage 2
combines each query head's splits with the usual max-shifted weights.

The genome (`PARAMS`, and `OPTIONAL`):

- NUM_SPLITS: 1, 2, 4, ..., 128 KV splits, or 0 for "auto": enough splits for about two
  programs per SM given B x H_kv programs, at most one per 256 keys of the longest context
  the block table can name, at most 64. One split writes the output directly (no stage 2);
- BLOCK_N: keys per step of the KV loop; num_warps, num_stages: of stage 1;
- PREFETCH (optional, 0 where absent): 1 loads each step's slot indices one step ahead. The
  K/V loads are gathers through those indices; loaded in the same step, Triton's pipeliner
  gives the gathers one buffer whatever num_stages says (sm_90: the same shared memory at 2, 3
  and 4 stages), so a program keeps one K/V tile in flight; fetched a step ahead, num_stages
  3 and 4 keep two and three (session 23; on the H200 no search kept it: session 24). 2
  (session 26) loads them two steps ahead and asks L2 (`prefetch.global.L2`) for the next
  tile's K/V rows at the start of each step, from indices already in registers: the next tile
  streams from DRAM while this one is read and computed, with no second shared-memory buffer
  (sm_90 compiles of the b1-b8 winners hold one K/V tile, so a program reads one tile at a
  time and waits on each: Nsight Compute found the split kernel's warps stalled on L1TEX
  loads, the DRAM 63-76% busy, session 25). Untimed;
- PDL (optional, 0 where absent), three bits of programmatic dependent launches (sm_90+;
  nothing on the CPU interpreter or before sm_90). Bit 1 (session 24): the separate reduce
  kernel is stage 1's dependent (stage 1 lets it launch once its last programs have started,
  its programs wait for stage 1's results in `griddepcontrol.wait`), so the reduction's launch
  and ramp overlap stage 1's tail; nothing where there is no separate reduce kernel (REDUCE=1,
  one split). Bit 2 (session 25): stage 1 itself is the dependent of whatever kernel precedes
  it on the stream (an engine's previous layer, the previous call), its programs waiting in
  `griddepcontrol.wait` before their first read, so its launch and the scheduling of its
  programs overlap that kernel's tail. Bit 4 (with bit 2, session 25): before the wait, each
  program reads its sequence's length and its first tile's indices and asks L2 for that tile's
  keys and values (a prefetch: no registers, and L2 is where the other kernel's writes land, so
  the cache's newest token is safe), so the chain of dependent loads that starts every program
  runs while that kernel finishes. Correct where the kernel before attention does not write the
  lengths or the indices (a decode step in SGLang: they are set before its graph replays; the
  kernel before is `set_kv_buffer`). On the H200 bit 1 paid 4% at b1 x 32768 in graph replay
  and nothing at b4-b32 (session 25); bits 2 and 4 are untimed;
- REDUCE: how splits are combined (both read a query head's splits up to 8 per warp a load,
  unrolled: `_combine_head`; before sessions 22 (REDUCE=0) and 23 (REDUCE=1) they looped over
  the splits one load at a time, which the recorded H200 landscapes and figures timed: on the
  12-layer engine at b1 x 32768 that reduce took 7.5 us of every layer's 34 us). 0: a
  separate reduce kernel, one program per sequence, query head and block of columns
  (`reduce_block_d`: the whole head unless B x H_q programs leave SMs idle), launched after
  stage 1. 1: in stage 1 itself, by the last program of a (sequence, KV head) to finish: each program bumps an atomic counter after writing its
  partial (release), and the one that sees NUM_SPLITS - 1 (acquire) reads all partials,
  writes the output and resets the counter (a buffer kept zeroed between calls, so no
  memset either); it combines the group's query heads several a load where a [heads, splits,
  D] tile fits (`group_heads`), else one head after another. No second launch; the price is
  the atomics and a tail on a few programs (session 24, graph-replayed: 7% slower than the
  separate kernel at 4 x 16384, level at 8 x 8192 to 32 x 4096).

`decode(q, k_cache, v_cache, block_table, context_lens, **params)` runs one configuration;
`candidate_source(params)` writes the candidate a search evaluates; `sglang_default_params()`
is SGLang's Triton decode backend's default (8 KV splits, BLOCK_N 32, 4 warps, 2 stages, a
separate reduce kernel); `sdpa_gathered_source()` the torch baseline. All of it runs in
Triton's interpreter on the CPU too, which is how the tests check every path.

>>> src = candidate_source(sglang_default_params())
>>> "def kernel(q, k_cache, v_cache, block_table, context_lens):" in src and '"NUM_SPLITS": 8' in src
True
"""

# One module on purpose, though over 400 lines: the split-KV kernel, its reduction, the split heuristic and the
# candidate and baseline sources render one template; the two kernels share the partials' layout.

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from evokernel.judge.candidate import check_params
from evokernel.runtime.launch import LaunchCache
from evokernel.search_spaces.gemm.template import num_sms

__all__ = [
    "PARAMS",
    "OPTIONAL",
    "DEFAULTS",
    "decode_slots",
    "decode",
    "auto_splits",
    "candidate_source",
    "sglang_default_params",
    "sdpa_gathered_source",
]

PARAMS: tuple[str, ...] = ("NUM_SPLITS", "BLOCK_N", "num_warps", "num_stages", "REDUCE")
#: genes a configuration may leave out (0 where absent: what configurations before them ran)
OPTIONAL: tuple[str, ...] = ("PREFETCH", "PDL")
#: SGLang's Triton decode backend's defaults (`triton_attention_num_kv_splits` = 8; grouped
#: stage 1 with BLOCK_N 32, 4 warps, 2 stages; a separate stage-2 kernel).
DEFAULTS: dict[str, int] = {
    "NUM_SPLITS": 8,
    "BLOCK_N": 32,
    "num_warps": 4,
    "num_stages": 2,
    "REDUCE": 0,
    "PREFETCH": 0,
    "PDL": 0,
}


def sglang_default_params() -> dict[str, int]:
    """SGLang's Triton decode defaults as a point of the genome (a copy of DEFAULTS)."""
    return dict(DEFAULTS)


@triton.jit
def _combine_head(
    b,
    h,
    d0,
    part_o_ptr,
    part_lse_ptr,
    o_ptr,
    H,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLITS: tl.constexpr,
    CHUNK: tl.constexpr,
    VOLATILE: tl.constexpr,
):
    """Columns d0 .. d0 + BLOCK_D of the output of query head h of sequence b from its SPLITS
    partial outputs and log-sum-exps (base 2; -inf for an empty split), CHUNK splits a load
    (SPLITS x BLOCK_D fp32 in SPLITS / CHUNK loads, unrolled, so the program waits for memory
    about once rather than once per split)."""
    offs_d = d0 + tl.arange(0, BLOCK_D)
    row = (b * H + h).to(tl.int64) * SPLITS
    m = tl.full([1], float("-inf"), tl.float32)
    l = tl.zeros([1], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for c in tl.static_range(0, SPLITS, CHUNK):
        offs_s = c + tl.arange(0, CHUNK)
        smask = offs_s < SPLITS
        lse = tl.load(part_lse_ptr + row + offs_s, mask=smask, other=float("-inf"), volatile=VOLATILE)
        part = tl.load(
            part_o_ptr + (row + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
            mask=smask[:, None],
            other=0.0,
            volatile=VOLATILE,
        )
        m_new = tl.maximum(m, tl.max(lse, 0))
        base = tl.where(m_new > float("-inf"), m_new, 0.0)  # every split so far empty: weights 0, not nan
        alpha = tl.exp2(m - base)
        w = tl.where(lse > float("-inf"), tl.exp2(lse - base), 0.0)
        acc = acc * alpha + tl.sum(w[:, None] * part, 0)
        l = l * alpha + tl.sum(w, 0)
        m = m_new
    out = acc / tl.where(l > 0, l, 1.0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_d, out.to(o_ptr.dtype.element_ty))


@triton.jit
def _combine_group(
    b,
    h0,
    part_o_ptr,
    part_lse_ptr,
    o_ptr,
    H,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    SPLITS: tl.constexpr,
    SPLITS_P2: tl.constexpr,
    HEADS: tl.constexpr,
):
    """The outputs of query heads h0 .. h0 + GROUP of sequence b from their partials, HEADS heads
    a load: a [HEADS, SPLITS, HEAD_DIM] fp32 tile (a group's rows are contiguous), the GROUP /
    HEADS loads independent of each other (unrolled), read past L1 (other programs wrote them)."""
    offs_g = tl.arange(0, HEADS)
    offs_s = tl.arange(0, SPLITS_P2)
    offs_d = tl.arange(0, HEAD_DIM)
    smask = offs_s < SPLITS
    for c in tl.static_range(0, GROUP, HEADS):
        hh = c + offs_g
        hmask = hh < GROUP
        rows = (b * H + h0 + hh).to(tl.int64) * SPLITS
        m2 = hmask[:, None] & smask[None, :]
        lse = tl.load(
            part_lse_ptr + rows[:, None] + offs_s[None, :], mask=m2, other=float("-inf"), cache_modifier=".cg"
        )
        part = tl.load(
            part_o_ptr + (rows[:, None, None] + offs_s[None, :, None]) * HEAD_DIM + offs_d[None, None, :],
            mask=m2[:, :, None],
            other=0.0,
            cache_modifier=".cg",
        )
        m = tl.max(lse, 1)
        base = tl.where(m > float("-inf"), m, 0.0)  # every split empty: weights 0, not nan
        w = tl.where(lse > float("-inf"), tl.exp2(lse - base[:, None]), 0.0)
        l = tl.sum(w, 1)
        acc = tl.sum(w[:, :, None] * part, 1)
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
        o_ptrs = o_ptr + b * stride_ob + (h0 + hh)[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=hmask[:, None])


@triton.jit
def _prefetch_l2(ptrs):
    """Ask L2 for the lines at `ptrs` (`prefetch.global.L2`: a hint, nothing loaded to registers)."""
    tl.inline_asm_elementwise(
        "prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def _prefetch_tile(
    k_ptr,
    v_ptr,
    bt_ptr,
    first,
    offs,
    hi,
    kv_head,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    PAGE: tl.constexpr,
    LINES: tl.constexpr,
    LINE: tl.constexpr,
):
    """Ask L2 for a tile's K and V rows: tokens `offs` (those from `hi` on ask for the cache's
    first line, harmlessly) of the KV head, their slots read from the indices at bt_ptr + first;
    LINES lines of LINE elements a row (128 bytes each: a 128-wide bf16 head is two)."""
    mask = offs < hi
    page = tl.load(bt_ptr + first + offs // PAGE, mask=mask, other=0).to(tl.int64)
    lines = tl.arange(0, LINES) * LINE
    row_k = tl.where(mask, page * stride_kp + (offs % PAGE) * stride_ks + kv_head * stride_kh, 0)
    row_v = tl.where(mask, page * stride_vp + (offs % PAGE) * stride_vs + kv_head * stride_vh, 0)
    _prefetch_l2(k_ptr + row_k[:, None] + lines[None, :])
    _prefetch_l2(v_ptr + row_v[:, None] + lines[None, :])


@triton.jit
def _stamp(timeline_ptr, row, t_start, t_mid):
    """A program's row of the timeline (TIMELINE=1; inline PTX, so not on the interpreter):
    [start, mid, end] in ns of the GPU's global timer, and the SM it ran on."""
    t_end = tl.extra.cuda.globaltimer()
    tl.store(timeline_ptr + row * 4, t_start)
    tl.store(timeline_ptr + row * 4 + 1, t_mid)
    tl.store(timeline_ptr + row * 4 + 2, t_end)
    tl.store(timeline_ptr + row * 4 + 3, tl.extra.cuda.smid().to(tl.int64))


@triton.jit
def _split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    lens_ptr,
    o_ptr,
    part_o_ptr,
    part_lse_ptr,
    count_ptr,
    timeline_ptr,
    qk_scale,
    H,
    H_kv,
    stride_qb,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    stride_bt,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,
    REDUCE: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    SLOTS: tl.constexpr = False,
    CHUNK: tl.constexpr = 8,
    PREFETCH: tl.constexpr = 0,
    GROUP_HEADS: tl.constexpr = 0,
    SPLITS_P2: tl.constexpr = 1,
    PDL: tl.constexpr = 0,
    WAIT: tl.constexpr = 0,
    EARLY: tl.constexpr = 0,
    L2_HINTS: tl.constexpr = 0,
    L2_LINES: tl.constexpr = 2,
    L2_LINE: tl.constexpr = 64,
    TIMELINE: tl.constexpr = 0,
):
    """Stage 1: the online softmax of one (split, KV head, sequence) over its keys. SLOTS:
    the serving engine's token-slot layout instead of the block table (bt_ptr holds every
    sequence's slots back to back, lens_ptr their offsets, sequence b's from lens_ptr[b] to
    lens_ptr[b + 1]; the caches are [slots, 1, H_kv, D]). WAIT: launched as the dependent of the
    kernel before it, so wait for that kernel's results before reading anything; with EARLY, read
    the lengths and the first tile's indices first and ask L2 for that tile's keys and values
    (`_prefetch_l2`: a hint, no registers; L2 is where the other kernel's writes land, so nothing
    stale is fetched), then wait, then read q and run the loop (its first loads meet L2).
    PREFETCH=1: each step's slot indices loaded a step ahead; 2: two steps ahead, and each step
    asks L2 for the next tile's rows (indices already in registers: no wait) before it loads its
    own, so the next tile streams from DRAM while this one is read and computed, without a
    second shared-memory buffer. L2_HINTS=0 leaves the prefetch instructions out (inline PTX:
    Triton's interpreter has none; what is computed is the same). TIMELINE: each program writes
    its row of `timeline_ptr` (`_stamp`: start, end of its KV loop, end, SM)."""
    split = tl.program_id(0)
    kv_head = tl.program_id(1)
    b = tl.program_id(2)
    if TIMELINE:
        t_start = tl.extra.cuda.globaltimer()
    if WAIT and not EARLY:  # q, the cache and the indices may come from the kernel we were launched beside
        tl.extra.cuda.gdc_wait()
    if PDL:  # the reduce kernel may launch once every program here has started (it waits for our results)
        tl.extra.cuda.gdc_launch_dependents()
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM)
    hmask = offs_h < GROUP
    heads = kv_head * GROUP + offs_h
    if SLOTS:
        first = tl.load(lens_ptr + b).to(tl.int64)
        length = tl.load(lens_ptr + b + 1) - tl.load(lens_ptr + b)
    else:
        first = (b * stride_bt).to(tl.int64)
        length = tl.load(lens_ptr + b)
    per_split = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(length, lo + per_split)
    if EARLY:  # the first tile's K/V rows asked of L2 while the kernel before us finishes
        _prefetch_tile(k_ptr, v_ptr, bt_ptr, first, lo + tl.arange(0, BLOCK_N), hi, kv_head, stride_kp, stride_ks,
                       stride_kh, stride_vp, stride_vs, stride_vh, PAGE, L2_LINES, L2_LINE)  # fmt: skip
        if WAIT:
            tl.extra.cuda.gdc_wait()
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=hmask[:, None], other=0.0)
    m = tl.full([BLOCK_H], -1.0e30, tl.float32)
    l = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    if PREFETCH:  # the first tile's pages here; each step then loads the next tile's
        offs_f = lo + tl.arange(0, BLOCK_N)
        page_next = tl.load(bt_ptr + first + offs_f // PAGE, mask=offs_f < hi, other=0).to(tl.int64)
        if PREFETCH == 2 and L2_HINTS:  # the second tile asked of L2 now (each step asks for the one after next)
            _prefetch_tile(k_ptr, v_ptr, bt_ptr, first, offs_f + BLOCK_N, hi, kv_head, stride_kp, stride_ks,
                           stride_kh, stride_vp, stride_vs, stride_vh, PAGE, L2_LINES, L2_LINE)  # fmt: skip
    for n0 in tl.range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        nmask = offs_n < hi
        if PREFETCH:
            page = page_next
            offs_f = offs_n + BLOCK_N
            page_next = tl.load(bt_ptr + first + offs_f // PAGE, mask=offs_f < hi, other=0).to(tl.int64)
        else:
            page = tl.load(bt_ptr + first + offs_n // PAGE, mask=nmask, other=0).to(tl.int64)
        slot = offs_n % PAGE
        k = tl.load(
            k_ptr + (page * stride_kp + slot * stride_ks + kv_head * stride_kh)[:, None] + offs_d[None, :],
            mask=nmask[:, None],
            other=0.0,
        )
        v = tl.load(
            v_ptr + (page * stride_vp + slot * stride_vs + kv_head * stride_vh)[:, None] + offs_d[None, :],
            mask=nmask[:, None],
            other=0.0,
        )
        qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * qk_scale
        qk = tl.where(nmask[None, :], qk, float("-inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
        m = m_new
        if PREFETCH == 2 and L2_HINTS:  # the tile after next asked of L2: it streams during the next step
            _prefetch_tile(k_ptr, v_ptr, bt_ptr, first, offs_n + 2 * BLOCK_N, hi, kv_head, stride_kp, stride_ks,
                           stride_kh, stride_vp, stride_vs, stride_vh, PAGE, L2_LINES, L2_LINE)  # fmt: skip
    if TIMELINE:
        t_loop = tl.extra.cuda.globaltimer()
    if SPLITS == 1:
        out = acc / tl.where(l > 0, l, 1.0)[:, None]
        o_ptrs = o_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=hmask[:, None])
    else:
        rows = (b * H + heads).to(tl.int64) * SPLITS + split
        part = acc / tl.where(l > 0, l, 1.0)[:, None]
        tl.store(part_o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], part, mask=hmask[:, None])
        tl.store(part_lse_ptr + rows, tl.where(l > 0, m + tl.log2(tl.where(l > 0, l, 1.0)), float("-inf")), mask=hmask)
        if REDUCE == 1:
            tl.debug_barrier()  # every thread's partial is written before the release below
            done = tl.atomic_add(count_ptr + b * H_kv + kv_head, 1, sem="acq_rel")
            if done == SPLITS - 1:
                if GROUP_HEADS > 0:  # the group's query heads GROUP_HEADS a load (`group_heads`)
                    _combine_group(b, kv_head * GROUP, part_o_ptr, part_lse_ptr, o_ptr, H, stride_ob, stride_oh,
                                   GROUP, HEAD_DIM, SPLITS, SPLITS_P2, GROUP_HEADS)  # fmt: skip
                else:  # too many splits for one head's tile: one head after another, CHUNK splits a load
                    for i in tl.static_range(GROUP):
                        _combine_head(b, kv_head * GROUP + i, 0, part_o_ptr, part_lse_ptr, o_ptr, H, stride_ob,
                                      stride_oh, HEAD_DIM, HEAD_DIM, SPLITS, CHUNK, True)  # fmt: skip
                tl.atomic_xchg(count_ptr + b * H_kv + kv_head, 0)
    if TIMELINE:
        _stamp(timeline_ptr, ((b * H_kv + kv_head) * SPLITS + split).to(tl.int64), t_start, t_loop)


@triton.jit
def _reduce_kernel(
    part_o_ptr,
    part_lse_ptr,
    o_ptr,
    timeline_ptr,
    H,
    stride_ob,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SPLITS: tl.constexpr,
    CHUNK: tl.constexpr,
    PDL: tl.constexpr = 0,
    TIMELINE: tl.constexpr = 0,
):
    """Stage 2 as its own launch: one program per (query head, sequence, BLOCK_D columns), its
    splits' partials and log-sum-exps read CHUNK splits a load (`_combine_head`); B x H_q x
    D / BLOCK_D programs (`reduce_block_d`: enough to reach the SMs at batch 1). PDL: launched
    as stage 1's programmatic dependent, so first wait until stage 1 has finished and its
    partials are visible. TIMELINE: as stage 1's, its mid the end of that wait."""
    if TIMELINE:
        t_start = tl.extra.cuda.globaltimer()
    if PDL:
        tl.extra.cuda.gdc_wait()
    if TIMELINE:
        t_wait = tl.extra.cuda.globaltimer()
    _combine_head(tl.program_id(1), tl.program_id(0), tl.program_id(2) * BLOCK_D, part_o_ptr, part_lse_ptr, o_ptr,
                  H, stride_ob, stride_oh, HEAD_DIM, BLOCK_D, SPLITS, CHUNK, False)  # fmt: skip
    if TIMELINE:
        row = (tl.program_id(1) * H + tl.program_id(0)) * tl.num_programs(2) + tl.program_id(2)
        _stamp(timeline_ptr, row.to(tl.int64), t_start, t_wait)


def combine_chunk(splits: int, num_warps: int, block_d: int = 128) -> int:
    """Splits a reduction load reads at once: all of them, up to a [CHUNK, block_d] fp32 tile of
    about 32 registers a thread (8 splits per warp at 128 columns), a power of two.

    >>> combine_chunk(32, 4), combine_chunk(128, 4), combine_chunk(4, 8), combine_chunk(64, 1), combine_chunk(128, 4, 32)
    (32, 32, 4, 8, 128)
    """
    return min(triton.next_power_of_2(max(1, splits)), max(1, 1024 * max(1, num_warps) // max(1, block_d)))


def group_heads(splits: int, group: int, num_warps: int, head_dim: int = 128) -> int:
    """Query heads the last program of a group (REDUCE=1) combines a load: as many as fit a
    [heads, splits, head_dim] fp32 tile of about 32 registers a thread, a power of two up to the
    group's; 0 where one head's splits alone do not fit (then one head after another).

    >>> group_heads(16, 8, 4), group_heads(8, 8, 4), group_heads(2, 8, 4), group_heads(64, 8, 4), group_heads(32, 8, 4)
    (2, 4, 8, 0, 1)
    """
    s = triton.next_power_of_2(max(1, splits))
    rows = 1024 * max(1, num_warps) // max(1, head_dim)
    if s > rows:
        return 0
    return min(triton.next_power_of_2(max(1, group)), 1 << ((rows // s).bit_length() - 1))


def reduce_block_d(head_dim: int, rows: int, sms: int) -> int:
    """Columns of the head a reduce program combines: the whole head where the B x H_q rows fill
    the SMs, else a half, a quarter ... (at least 32 columns) so that about one program per SM
    runs (batch 1 of 32 query heads: 4 programs a head on 132 SMs).

    >>> reduce_block_d(128, 32, 132), reduce_block_d(128, 128, 132), reduce_block_d(128, 512, 132), reduce_block_d(64, 8, 132)
    (32, 64, 128, 32)
    """
    want = 1 << (max(1, math.ceil(sms / max(1, rows))) - 1).bit_length()
    parts = max(1, min(want, head_dim // 32))
    return head_dim // parts


def timeline_rows(
    batch: int, heads: int, kv_heads: int, head_dim: int, splits: int, reduce: int, sms: int
) -> tuple[int, int]:
    """Programs of stage 1 and of the separate reduce kernel (0 where there is none) for a
    call with `splits` splits (already resolved from 0, `auto_splits`): a timeline's rows.
    Stage 1's row of (split, KV head, sequence b) is (b x H_kv + head) x splits + split; the
    reduce kernel's (b x H_q + head) x D / BLOCK_D + column block, after stage 1's.

    >>> timeline_rows(1, 32, 4, 128, 64, 0, 132), timeline_rows(1, 32, 4, 128, 64, 1, 132), timeline_rows(8, 32, 4, 128, 1, 0, 132)
    ((256, 128), (256, 0), (32, 0))
    """
    stage1 = splits * kv_heads * batch
    if splits <= 1 or reduce:
        return stage1, 0
    return stage1, batch * heads * (head_dim // reduce_block_d(head_dim, batch * heads, sms))


#: the module's kernel launches, through their compiled handles after the first of each signature
_LAUNCHES = LaunchCache()
_COUNTERS: dict[tuple[str, int], torch.Tensor] = {}


def _counters(device: torch.device, n: int) -> torch.Tensor:
    """A zeroed int32 buffer of at least n counters per device, kept between calls (the last
    program of each group puts its counter back to zero)."""
    key = (str(device), n)
    if key not in _COUNTERS:
        _COUNTERS[key] = torch.zeros(n, dtype=torch.int32, device=device)
    return _COUNTERS[key]


_PDL: dict[int, bool] = {}
log = logging.getLogger(__name__)


def pdl_supported(device: torch.device) -> bool:
    """Whether a launch on `device` can be a programmatic dependent launch: a CUDA device of
    compute capability 9.0 or later, not Triton's interpreter (asked once per device)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    index = _index(device)
    if index not in _PDL:
        _PDL[index] = torch.cuda.get_device_capability(index)[0] >= 9
    return _PDL[index]


def _index(device: torch.device) -> int:
    """The CUDA device's index (the current device where it names none); -1 for any other."""
    if device.type != "cuda":
        return -1
    return device.index if device.index is not None else torch.cuda.current_device()


def auto_splits(batch: int, kv_heads: int, max_context: int, sms: int) -> int:
    """NUM_SPLITS=0: a power of two of splits giving about two programs per SM, at most one
    split per 256 keys of `max_context`, at most 64.

    >>> auto_splits(1, 8, 32768, 132), auto_splits(64, 8, 4096, 132), auto_splits(1, 8, 300, 132)
    (32, 1, 1)
    """
    want = max(1, math.ceil(2 * sms / max(1, batch * kv_heads)))
    cap = max(1, min(64, want, max_context // 256))
    return 1 << (cap.bit_length() - 1)


def decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    NUM_SPLITS: int,
    BLOCK_N: int,
    num_warps: int,
    num_stages: int,
    REDUCE: int = 0,
    PREFETCH: int = 0,
    PDL: int = 0,
    out: torch.Tensor | None = None,
    timeline: torch.Tensor | None = None,
) -> torch.Tensor:
    """One decode step's attention over the paged cache with one configuration (into `out`,
    [B, H_q, D], where given). `timeline` (a CUDA int64 tensor of at least `timeline_rows`
    rows of 4): every program of both kernels writes when it started, reached its midpoint
    (stage 1: the end of its KV loop; stage 2: the end of its PDL wait) and ended, in ns of
    the GPU's global timer, and its SM; a separate compile of each kernel, for diagnosis."""
    return _decode(q, k_cache, v_cache, block_table, context_lens, False, sm_scale, NUM_SPLITS, BLOCK_N,
                   num_warps, num_stages, REDUCE, PREFETCH, PDL, out, timeline)  # fmt: skip


def decode_slots(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    *,
    sm_scale: float | None = None,
    NUM_SPLITS: int,
    BLOCK_N: int,
    num_warps: int,
    num_stages: int,
    REDUCE: int = 0,
    PREFETCH: int = 0,
    PDL: int = 0,
    out: torch.Tensor | None = None,
    timeline: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same attention over a serving engine's token-slot cache (SGLang's Triton backend
    with page size 1): k_buffer and v_buffer [slots, H_kv, D]; sequence b's keys are at the
    slots kv_indices[kv_indptr[b]:kv_indptr[b + 1]] in order (int32 or int64 both); q and the
    output [B, H_q, D]. Everything is read on the device, so a CUDA graph can hold the call.
    NUM_SPLITS=0 ("auto") takes kv_indices' length as the longest context it may see."""
    assert k_buffer.ndim == 3 and v_buffer.shape == k_buffer.shape, f"k_buffer {tuple(k_buffer.shape)}"
    assert kv_indptr.ndim == 1 and kv_indptr.shape[0] == q.shape[0] + 1, "kv_indptr must be [B + 1]"
    return _decode(q, k_buffer.unsqueeze(1), v_buffer.unsqueeze(1), kv_indices, kv_indptr, True, sm_scale,
                   NUM_SPLITS, BLOCK_N, num_warps, num_stages, REDUCE, PREFETCH, PDL, out, timeline)  # fmt: skip


def _decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    context_lens: torch.Tensor,
    slots: bool,
    sm_scale: float | None,
    NUM_SPLITS: int,
    BLOCK_N: int,
    num_warps: int,
    num_stages: int,
    REDUCE: int,
    PREFETCH: int,
    PDL: int,
    out: torch.Tensor | None,
    timeline: torch.Tensor | None = None,
) -> torch.Tensor:
    assert q.ndim == 3 and k_cache.ndim == 4 and v_cache.shape == k_cache.shape, (
        f"q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, v_cache {tuple(v_cache.shape)}"
    )
    B, H, D = q.shape
    _, page, H_kv, Dk = k_cache.shape
    assert Dk == D and H % H_kv == 0, "caches must be [pages, page_size, H_kv, D] with H_q % H_kv == 0"
    assert D >= 16 and D & (D - 1) == 0, f"head_dim must be a power of two >= 16, got {D}"
    assert k_cache.stride(3) == v_cache.stride(3) == q.stride(2) == 1
    if slots:
        assert block_table.ndim == 1 and context_lens.shape == (B + 1,), "kv_indices [n], kv_indptr [B + 1]"
        longest = block_table.shape[0]
    else:
        assert block_table.dtype == torch.int32 and block_table.shape[0] == B and context_lens.shape == (B,)
        assert context_lens.dtype == torch.int32
        longest = block_table.shape[1] * page
    if out is not None:
        assert out.shape == (B, H, D) and out.dtype == q.dtype and out.stride(2) == 1, "out must be [B, H_q, D]"
    o = out if out is not None else torch.empty((B, H, D), device=q.device, dtype=q.dtype)
    if B == 0:
        return o
    splits = NUM_SPLITS or auto_splits(B, H_kv, longest, num_sms(q.device))
    group = H // H_kv
    block_h = max(16, triton.next_power_of_2(group))
    if splits > 1:
        part_o = torch.empty((B, H, splits, D), device=q.device, dtype=torch.float32)
        part_lse = torch.empty((B, H, splits), device=q.device, dtype=torch.float32)
    else:
        part_o = part_lse = o
    counts = _counters(q.device, B * H_kv) if (splits > 1 and REDUCE) else o
    scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)) * 1.4426950408889634
    consts = {"GROUP": group, "HEAD_DIM": D, "BLOCK_H": block_h, "SPLITS": splits}
    heads_a_load = group_heads(splits, group, num_warps, D) if (splits > 1 and REDUCE) else 0
    early_reduce = bool(PDL & 1) and splits > 1 and not REDUCE
    pdl = (early_reduce or bool(PDL & 2)) and pdl_supported(q.device)
    stage1 = 0
    if timeline is not None:  # (off the engine's path: no work here without one)
        stage1, stage2 = timeline_rows(B, H, H_kv, D, splits, REDUCE, num_sms(q.device))
        if q.device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
            raise ValueError(
                "a decode timeline reads the GPU's global timer (inline PTX): CUDA only, not the interpreter"
            )
        if (
            timeline.dtype != torch.int64
            or timeline.device != q.device
            or not timeline.is_contiguous()
            or timeline.numel() < 4 * (stage1 + stage2)
        ):
            raise ValueError(
                f"timeline must be contiguous int64 on {q.device} with at least {stage1 + stage2} rows of 4"
            )
    stamps = timeline.view(-1) if timeline is not None else o  # (the kernels index it flat: row x 4 + field)
    assert not (PDL & 4 and not PDL & 2), "PDL bit 4 (reads before the wait) needs bit 2 (the wait)"

    def launch(with_pdl: bool) -> None:
        wait = with_pdl and bool(PDL & 2)
        _LAUNCHES(
            _split_kernel,
            (splits, H_kv, B),
            q,
            k_cache,
            v_cache,
            block_table,
            context_lens,
            o,
            part_o,
            part_lse,
            counts,
            stamps,
            scale,
            H,
            H_kv,
            q.stride(0),
            q.stride(1),
            k_cache.stride(0),
            k_cache.stride(1),
            k_cache.stride(2),
            v_cache.stride(0),
            v_cache.stride(1),
            v_cache.stride(2),
            0 if slots else block_table.stride(0),
            o.stride(0),
            o.stride(1),
            PAGE=page,
            BLOCK_N=BLOCK_N,
            REDUCE=int(bool(REDUCE)),
            SLOTS=slots,
            INPUT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
            CHUNK=combine_chunk(splits, num_warps),
            PREFETCH=int(PREFETCH),
            L2_HINTS=int(os.environ.get("TRITON_INTERPRET") != "1"),  # (inline PTX: not on the interpreter)
            L2_LINES=max(1, D * k_cache.element_size() // 128),
            L2_LINE=max(1, 128 // k_cache.element_size()),
            GROUP_HEADS=heads_a_load,
            SPLITS_P2=triton.next_power_of_2(splits) if heads_a_load else 1,
            PDL=int(with_pdl and early_reduce),
            WAIT=int(wait),
            EARLY=int(wait and bool(PDL & 4)),  # (a prefetch: inline PTX, so not on the interpreter)
            TIMELINE=int(timeline is not None),
            **consts,
            num_warps=num_warps,
            num_stages=num_stages,
            **({"launch_pdl": True} if wait else {}),
        )
        if splits > 1 and not REDUCE:
            block_d = reduce_block_d(D, B * H, num_sms(q.device))
            meta = {"HEAD_DIM": D, "BLOCK_D": block_d, "SPLITS": splits, "CHUNK": combine_chunk(splits, 4, block_d)}
            _LAUNCHES(
                _reduce_kernel,
                (H, B, D // block_d),
                part_o,
                part_lse,
                o,
                stamps[4 * stage1 :] if timeline is not None else o,
                H,
                o.stride(0),
                o.stride(1),
                **meta,
                TIMELINE=int(timeline is not None),
                num_warps=4,
                **({"PDL": 1, "launch_pdl": True} if (with_pdl and early_reduce) else {}),
            )

    if pdl:
        try:
            launch(True)
            return o
        except Exception as exc:  # a Triton without the launch option or the instructions: both run plainly
            _PDL[_index(q.device)] = False
            log.warning("decode: no programmatic dependent launch here (%s); the reduce kernel runs after", exc)
    launch(False)
    return o


_CANDIDATE = '''"""Candidate: the split-KV paged decode template at one configuration (generated)."""

from evokernel.search_spaces.attention.template_decode import decode


CONFIG = {config}


def kernel(q, k_cache, v_cache, block_table, context_lens):
    return decode(q, k_cache, v_cache, block_table, context_lens, **CONFIG)
'''


def candidate_source(params: Mapping[str, int]) -> str:
    """The text of a candidate module running `decode` at `params`."""
    check_params(params, PARAMS, optional=OPTIONAL)
    config = ", ".join(f'"{k}": {int(params[k])}' for k in sorted(params))
    return _CANDIDATE.format(config="{" + config + "}")


_SDPA_GATHERED = '''"""Baseline: gather the paged KV cache into contiguous K and V, then torch
scaled_dot_product_attention{backend_note} (generated by
evokernel.search_spaces.attention.template_decode.sdpa_gathered_source).

The gather is part of what this baseline does, and is timed: every page the block table
names (its full width, so no read-back of the lengths) is copied to [B, H_kv, N, D], and a
boolean mask hides keys past each sequence's context length."""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKEND = {backend!r}


def kernel(q, k_cache, v_cache, block_table, context_lens):
    b, hq, d = q.shape
    page, hkv = k_cache.shape[1], k_cache.shape[2]
    n = block_table.shape[1] * page
    pages = block_table.long()
    k = k_cache[pages].reshape(b, n, hkv, d).transpose(1, 2)
    v = v_cache[pages].reshape(b, n, hkv, d).transpose(1, 2)
    mask = (torch.arange(n, device=q.device)[None, :] < context_lens[:, None])[:, None, None, :]
    args = (q[:, :, None, :], k, v)
    if BACKEND is None:
        o = F.scaled_dot_product_attention(*args, attn_mask=mask, enable_gqa=hq != hkv)
    else:
        with sdpa_kernel(getattr(SDPBackend, BACKEND)):
            o = F.scaled_dot_product_attention(*args, attn_mask=mask, enable_gqa=hq != hkv)
    return o[:, :, 0, :]
'''


def sdpa_gathered_source(backend: str | None = None) -> str:
    """The baseline a user without a paged kernel would run: gather the cache, then torch SDPA
    (backend None: torch's own choice; else an SDPBackend name such as "EFFICIENT_ATTENTION").

    >>> "k_cache[pages]" in sdpa_gathered_source()
    True
    """
    note = "" if backend is None else f" with backend {backend}"
    return _SDPA_GATHERED.format(backend=backend, backend_note=note)
