"""A Triton flash-attention forward (prefill) over packed variable-length sequences, as a
template over its config.

O = softmax(Q K^T * scale [+ causal mask]) V per sequence and head, in the layout serving
engines pass: q [total_tokens, H_q, D], k and v [total_tokens, H_kv, D] (H_q a multiple of
H_kv: grouped-query attention, query head h reads KV head h // (H_q / H_kv)), and
`cu_seqlens` [B + 1] int32, the prefix sums of the sequence lengths. The output has q's
shape and dtype; the softmax is online, in fp32. head_dim is a power of two (64 and 128 in
the problems). The causal mask is the square one (query i sees keys 0..i of its sequence).

The grid needs no `max_seqlen` (so no read-back of the lengths): each program finds its
(sequence, query block) by a prefix sum of the blocks per sequence over `cu_seqlens`, and
the grid is sized by the bound total_tokens / BLOCK_M + B; programs past the last block do
nothing. Causal tiles are handed out heaviest first (the last query blocks of a sequence).

The genome (`PARAMS`):

- BLOCK_M, BLOCK_N: the query rows of a program and the keys of one step of its KV loop;
  num_warps, num_stages: warps per program and software-pipeline depth of the KV loop;
- CAUSAL_SKIP: 1 visits only the KV blocks a query block can see and masks only the blocks
  on the causal diagonal and at the sequence's end (the bulk runs unmasked); 0 visits every
  KV block of the sequence and masks each one (the naive loop: about twice the work when
  causal, and the mask's cost on every block when not);
- EXP2: 1 computes exp2 with log2(e) folded into the softmax scale; 0 calls exp;
- LAZY_RESCALE: 1 rescales the accumulator and the row sums only when some row's running
  max grew by more than 2^8 (until then the exponentials are taken against the stale max,
  which bounds them by 256: exact in fp32, and the final division cancels the reference
  point); 0 rescales after every KV block;
- PERSISTENT: 1 launches one program per SM, each walking (tile, head) work items;
  0 launches one program per (query block, head);
- TMA: 1 loads Q, K and V through host-built tensor descriptors (Hopper's bulk-copy engine;
  rows past a sequence's end are masked in the scores, rows past the tensor zero-filled);
  0 uses pointer loads. Needs contiguous q/k/v (else the call raises: a failure value);
- WARP_SPEC: Triton's warp specialisation (`tl.range(..., warp_specialize=True)`) of the KV
  loop, or of the tile loop when persistent, where this Triton supports it on this GPU (a
  compile error otherwise; Triton 3.6 on Hopper ignores it, or fails with 4 warps and eager
  rescaling, so `attention_space` rules it out there);
- REVERSE_KV: 1 walks the KV blocks from the diagonal (the masked blocks) down to the
  first key; 0 from the first key up.

`attention(q, k, v, cu_seqlens, causal=..., **params)` runs one configuration;
`candidate_source(params, causal=...)` writes the candidate module a search evaluates
(`kernel(q, k, v, cu_seqlens, max_seqlen, seqlens)`: the lengths also as host values, so
nothing reads them back from the GPU), `sdpa_source(backend, causal=...)` the torch baselines.
Everything runs in Triton's interpreter on the CPU too (where warp specialisation and the
launch parameters have no effect), which is how the tests check every path.

>>> src = candidate_source(dict(DEFAULTS, BLOCK_M=64), causal=True)
>>> "def kernel(q, k, v, cu_seqlens, max_seqlen, seqlens):" in src and '"BLOCK_M": 64' in src and "causal=True" in src
True
"""

# One module on purpose, though over 400 lines: the prefill kernel's tile loop, its launch and the candidate and
# baseline sources render one template; the kernel's constexpr genes and the host launch that fills them change
# together.

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from evokernel.judge.candidate import check_params
from evokernel.runtime.launch import LaunchCache
from evokernel.search_spaces.gemm.template import num_sms

__all__ = ["PARAMS", "DEFAULTS", "SDPA_BACKENDS", "attention", "candidate_source", "sdpa_source"]

PARAMS: tuple[str, ...] = (
    "BLOCK_M",
    "BLOCK_N",
    "num_warps",
    "num_stages",
    "CAUSAL_SKIP",
    "EXP2",
    "LAZY_RESCALE",
    "PERSISTENT",
    "TMA",
    "WARP_SPEC",
    "REVERSE_KV",
)
#: A plain configuration (Triton's fused-attention tutorial's Hopper choice for head_dim 128, no extras).
DEFAULTS: dict[str, int] = {
    "BLOCK_M": 128,
    "BLOCK_N": 64,
    "num_warps": 8,
    "num_stages": 3,
    "CAUSAL_SKIP": 1,
    "EXP2": 1,
    "LAZY_RESCALE": 0,
    "PERSISTENT": 0,
    "TMA": 0,
    "WARP_SPEC": 0,
    "REVERSE_KV": 0,
}
SDPA_BACKENDS: tuple[str, ...] = ("flash", "efficient", "cudnn", "math", "varlen")

_LOG2E = 1.4426950408889634
#: the module's kernel launches, through their compiled handles after the first of each signature
_LAUNCHES = LaunchCache()


@triton.jit
def _locate(tile, cu_ptr, B, BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr, CAUSAL: tl.constexpr):
    """(sequence, query block, first token, length) of work tile `tile`; sequence == B for a
    tile past the last one. Tiles number the query blocks of sequence 0, then 1, ...; causal
    tiles run from a sequence's last block (the most keys) to its first."""
    offs = tl.arange(0, BLOCK_B)
    lo = tl.load(cu_ptr + offs, mask=offs < B, other=0)
    hi = tl.load(cu_ptr + offs + 1, mask=offs < B, other=0)
    blocks = (hi - lo + BLOCK_M - 1) // BLOCK_M
    ends = tl.cumsum(blocks, 0)
    seq = tl.sum((ends <= tile).to(tl.int32), 0)
    mine = offs == seq
    local = tile - tl.sum(tl.where(mine, ends - blocks, 0), 0)
    if CAUSAL:
        local = tl.sum(tl.where(mine, blocks, 0), 0) - 1 - local
    return seq, local, tl.sum(tl.where(mine, lo, 0), 0), tl.sum(tl.where(mine, hi - lo, 0), 0)


@triton.jit
def _kv_blocks(
    acc,
    l_i,
    m_i,
    q,
    k_ptr,
    v_ptr,
    k_desc,
    v_desc,
    offs_m,
    start,
    length,
    kv_head,
    lo,
    hi,
    qk_scale,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    EXP2: tl.constexpr,
    LAZY: tl.constexpr,
    TMA: tl.constexpr,
    WS: tl.constexpr,
    REVERSE: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """The online softmax over keys [lo, hi) of one sequence, BLOCK_N at a time (lo is a
    multiple of BLOCK_N). MASKED: mask keys past the sequence's end and, when CAUSAL, keys
    after the query; otherwise every key of the range is visible to every row."""
    offs_d = tl.arange(0, HEAD_DIM)
    n_blocks = tl.cdiv(hi - lo, BLOCK_N)
    for i in tl.range(0, n_blocks, warp_specialize=WS):
        if REVERSE:
            n0 = lo + (n_blocks - 1 - i) * BLOCK_N
        else:
            n0 = lo + i * BLOCK_N
        offs_n = n0 + tl.arange(0, BLOCK_N)
        if TMA:
            k = k_desc.load([start + n0, kv_head * HEAD_DIM])
            v = v_desc.load([start + n0, kv_head * HEAD_DIM])
        else:
            rows = (start + offs_n).to(tl.int64)
            k_ptrs = k_ptr + rows[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :]
            v_ptrs = v_ptr + rows[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :]
            if MASKED:
                k = tl.load(k_ptrs, mask=offs_n[:, None] < length, other=0.0)
                v = tl.load(v_ptrs, mask=offs_n[:, None] < length, other=0.0)
            else:
                k = tl.load(k_ptrs)
                v = tl.load(v_ptrs)
        qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION) * qk_scale
        if MASKED:
            keep = offs_n[None, :] < length
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        if LAZY:
            # rescale only when a row's max grew past 2^8 (8 in log2 units, 8 ln 2 in natural ones)
            tau = 8.0 if EXP2 else 5.545177444479562
            if tl.max(m_new - m_i, 0) > tau:
                alpha = tl.exp2(m_i - m_new) if EXP2 else tl.exp(m_i - m_new)
                acc = acc * alpha[:, None]
                l_i = l_i * alpha
                m_i = m_new
        else:
            alpha = tl.exp2(m_i - m_new) if EXP2 else tl.exp(m_i - m_new)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
        p = tl.exp2(qk - m_i[:, None]) if EXP2 else tl.exp(qk - m_i[:, None])
        l_i = l_i + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=INPUT_PRECISION)
    return acc, l_i, m_i


@triton.jit
def _attn_tile(
    tile,
    head,
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    q_desc,
    k_desc,
    v_desc,
    cu_ptr,
    B,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
    CAUSAL: tl.constexpr,
    CAUSAL_SKIP: tl.constexpr,
    EXP2: tl.constexpr,
    LAZY: tl.constexpr,
    TMA: tl.constexpr,
    WS: tl.constexpr,
    REVERSE: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    """One query block of one head: its KV loop(s), then O = acc / l."""
    seq, m_block, start, length = _locate(tile, cu_ptr, B, BLOCK_M, BLOCK_B, CAUSAL)
    if seq < B:
        kv_head = head // GROUP
        offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        if TMA:
            q = q_desc.load([start + m_block * BLOCK_M, head * HEAD_DIM])
        else:
            q_ptrs = q_ptr + (start + offs_m).to(tl.int64)[:, None] * stride_qt + head * stride_qh + offs_d[None, :]
            q = tl.load(q_ptrs, mask=offs_m[:, None] < length, other=0.0)
        # a finite start for the running max: a fully masked row never computes inf - inf
        m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        hi = length
        bulk = 0  # keys [0, bulk) are visible to every row of the block: no mask there
        if CAUSAL_SKIP:
            if CAUSAL:
                hi = tl.minimum(length, (m_block + 1) * BLOCK_M)
                bulk = (m_block * BLOCK_M) // BLOCK_N * BLOCK_N
            else:
                bulk = length // BLOCK_N * BLOCK_N
        if REVERSE:
            acc, l_i, m_i = _kv_blocks(
                acc,
                l_i,
                m_i,
                q,
                k_ptr,
                v_ptr,
                k_desc,
                v_desc,
                offs_m,
                start,
                length,
                kv_head,
                bulk,
                hi,
                qk_scale,
                stride_kt,
                stride_kh,
                stride_vt,
                stride_vh,
                HEAD_DIM,
                BLOCK_N,
                True,
                CAUSAL,
                EXP2,
                LAZY,
                TMA,
                WS,
                True,
                INPUT_PRECISION,
            )
            acc, l_i, m_i = _kv_blocks(
                acc,
                l_i,
                m_i,
                q,
                k_ptr,
                v_ptr,
                k_desc,
                v_desc,
                offs_m,
                start,
                length,
                kv_head,
                0,
                bulk,
                qk_scale,
                stride_kt,
                stride_kh,
                stride_vt,
                stride_vh,
                HEAD_DIM,
                BLOCK_N,
                False,
                CAUSAL,
                EXP2,
                LAZY,
                TMA,
                WS,
                True,
                INPUT_PRECISION,
            )
        else:
            acc, l_i, m_i = _kv_blocks(
                acc,
                l_i,
                m_i,
                q,
                k_ptr,
                v_ptr,
                k_desc,
                v_desc,
                offs_m,
                start,
                length,
                kv_head,
                0,
                bulk,
                qk_scale,
                stride_kt,
                stride_kh,
                stride_vt,
                stride_vh,
                HEAD_DIM,
                BLOCK_N,
                False,
                CAUSAL,
                EXP2,
                LAZY,
                TMA,
                WS,
                False,
                INPUT_PRECISION,
            )
            acc, l_i, m_i = _kv_blocks(
                acc,
                l_i,
                m_i,
                q,
                k_ptr,
                v_ptr,
                k_desc,
                v_desc,
                offs_m,
                start,
                length,
                kv_head,
                bulk,
                hi,
                qk_scale,
                stride_kt,
                stride_kh,
                stride_vt,
                stride_vh,
                HEAD_DIM,
                BLOCK_N,
                True,
                CAUSAL,
                EXP2,
                LAZY,
                TMA,
                WS,
                False,
                INPUT_PRECISION,
            )
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        o_ptrs = o_ptr + (start + offs_m).to(tl.int64)[:, None] * stride_ot + head * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < length)


@triton.jit(do_not_specialize=["B", "num_tiles"])  # (they follow the batch: no compile per value class)
def _attn_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    q_desc,
    k_desc,
    v_desc,
    cu_ptr,
    B,
    H,
    num_tiles,
    num_programs,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
    CAUSAL: tl.constexpr,
    CAUSAL_SKIP: tl.constexpr,
    EXP2: tl.constexpr,
    LAZY: tl.constexpr,
    PERSISTENT: tl.constexpr,
    TMA: tl.constexpr,
    WS_TILES: tl.constexpr,
    WS_KV: tl.constexpr,
    REVERSE: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    if PERSISTENT:
        # work items tile-major, heads adjacent: the query heads sharing a KV head run together (L2)
        for w in tl.range(tl.program_id(0), num_tiles * H, num_programs, warp_specialize=WS_TILES):
            _attn_tile(
                w // H,
                w % H,
                q_ptr,
                k_ptr,
                v_ptr,
                o_ptr,
                q_desc,
                k_desc,
                v_desc,
                cu_ptr,
                B,
                qk_scale,
                stride_qt,
                stride_qh,
                stride_kt,
                stride_kh,
                stride_vt,
                stride_vh,
                stride_ot,
                stride_oh,
                GROUP,
                HEAD_DIM,
                BLOCK_M,
                BLOCK_N,
                BLOCK_B,
                CAUSAL,
                CAUSAL_SKIP,
                EXP2,
                LAZY,
                TMA,
                WS_KV,
                REVERSE,
                INPUT_PRECISION,
            )
    else:
        _attn_tile(
            tl.program_id(1),
            tl.program_id(0),
            q_ptr,
            k_ptr,
            v_ptr,
            o_ptr,
            q_desc,
            k_desc,
            v_desc,
            cu_ptr,
            B,
            qk_scale,
            stride_qt,
            stride_qh,
            stride_kt,
            stride_kh,
            stride_vt,
            stride_vh,
            stride_ot,
            stride_oh,
            GROUP,
            HEAD_DIM,
            BLOCK_M,
            BLOCK_N,
            BLOCK_B,
            CAUSAL,
            CAUSAL_SKIP,
            EXP2,
            LAZY,
            TMA,
            WS_KV,
            REVERSE,
            INPUT_PRECISION,
        )


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int | None = None,
    *,
    causal: bool,
    sm_scale: float | None = None,
    BLOCK_M: int,
    BLOCK_N: int,
    num_warps: int,
    num_stages: int,
    CAUSAL_SKIP: int = 1,
    EXP2: int = 1,
    LAZY_RESCALE: int = 0,
    PERSISTENT: int = 0,
    TMA: int = 0,
    WARP_SPEC: int = 0,
    REVERSE_KV: int = 0,
) -> torch.Tensor:
    """Attention over packed sequences with one configuration of the template.
    `max_seqlen` (optional, as flash-attention's varlen API takes it) only tightens the grid."""
    assert q.ndim == 3 and k.ndim == 3 and v.shape == k.shape, (
        f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    )
    total, H, D = q.shape
    assert k.shape[0] == total and k.shape[2] == D and H % k.shape[1] == 0, (
        "k/v must be [total, H_kv, D] with H_q % H_kv == 0"
    )
    assert D >= 16 and D & (D - 1) == 0, f"head_dim must be a power of two >= 16, got {D}"
    assert q.dtype == k.dtype == v.dtype and q.stride(2) == k.stride(2) == v.stride(2) == 1
    assert cu_seqlens.dtype == torch.int32 and cu_seqlens.ndim == 1, "cu_seqlens must be int32 [B + 1]"
    B = cu_seqlens.shape[0] - 1
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    if total == 0 or B == 0:
        return o
    tiles = total // BLOCK_M + B  # >= the sum over sequences of ceil(length / BLOCK_M)
    if max_seqlen is not None:
        tiles = min(tiles, B * triton.cdiv(max_seqlen, BLOCK_M))
    q_desc = k_desc = v_desc = None
    if TMA:
        if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
            raise ValueError("TMA needs contiguous q, k and v")
        from triton.tools.tensor_descriptor import TensorDescriptor

        Hkv = k.shape[1]
        q_desc = TensorDescriptor.from_tensor(q.view(total, H * D), [BLOCK_M, D])
        k_desc = TensorDescriptor.from_tensor(k.view(total, Hkv * D), [BLOCK_N, D])
        v_desc = TensorDescriptor.from_tensor(v.view(total, Hkv * D), [BLOCK_N, D])
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    programs = min(num_sms(q.device), tiles * H) if PERSISTENT else 0
    grid = (programs,) if PERSISTENT else (H, tiles)
    _LAUNCHES(
        _attn_kernel,
        grid,
        q,
        k,
        v,
        o,
        q_desc,
        k_desc,
        v_desc,
        cu_seqlens,
        B,
        H,
        tiles,
        programs,
        scale * (_LOG2E if EXP2 else 1.0),
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        o.stride(0),
        o.stride(1),
        GROUP=H // k.shape[1],
        HEAD_DIM=D,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_B=triton.next_power_of_2(B + 1),
        CAUSAL=bool(causal),
        CAUSAL_SKIP=bool(CAUSAL_SKIP),
        EXP2=bool(EXP2),
        LAZY=bool(LAZY_RESCALE),
        PERSISTENT=bool(PERSISTENT),
        TMA=bool(TMA),
        WS_TILES=bool(WARP_SPEC) and bool(PERSISTENT),
        WS_KV=bool(WARP_SPEC) and not PERSISTENT,
        REVERSE=bool(REVERSE_KV),
        INPUT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return o


_CANDIDATE = '''"""Candidate: the flash-attention prefill template at one configuration (generated)."""

from evokernel.search_spaces.attention.template_prefill import attention


CONFIG = {config}


def kernel(q, k, v, cu_seqlens, max_seqlen, seqlens):
    return attention(q, k, v, cu_seqlens, max_seqlen, causal={causal}, **CONFIG)
'''


def candidate_source(params: Mapping[str, int], *, causal: bool) -> str:
    """The text of a candidate module running `attention` at `params` (inputs q, k, v, cu_seqlens on the
    device, max_seqlen and seqlens on the host)."""
    check_params(params, PARAMS)
    config = ", ".join(f'"{k}": {int(params[k])}' for k in sorted(params))
    return _CANDIDATE.format(config="{" + config + "}", causal=bool(causal))


_SDPA = '''"""Baseline: torch scaled_dot_product_attention, backend {backend!r}, on the padded [B, H, N, D]
view of the packed sequences (generated by evokernel.search_spaces.attention.template_prefill.sdpa_source).

The lengths come as the host-side values the problem hands over (no read-back from the GPU:
nothing in a timed call waits for the device). Equal lengths take one call on views (no
copies: q, k, v are viewed as [B, N, H, D] and transposed), while unequal lengths take one
call per sequence, written into the packed output. The "varlen" backend is torch's flash
varlen_attn on the packed layout, with the given max_seqlen. EXPAND_GQA: K and V are
expanded to one head per query head before the backend sees them, for a backend without
grouped-query attention; the expansion is made once per input tensor (kept while the tensor
is alive and unchanged: its data pointer, shape and version counter) and is not part of the
timed call, as a user who keeps expanded K/V would have it."""

import inspect

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKEND = {backend!r}
CAUSAL = {causal}
EXPAND_GQA = {expand}
_EXPANDED = {{}}


def _expand(t, group):
    key = (t.data_ptr(), tuple(t.shape), t._version, group)
    hit = _EXPANDED.get(key)
    if hit is None:
        if len(_EXPANDED) >= 16:
            _EXPANDED.clear()
        hit = _EXPANDED[key] = t.repeat_interleave(group, dim=1).contiguous()
    return hit


def _sdpa(q, k, v):
    with sdpa_kernel(getattr(SDPBackend, {enum!r})):
        return F.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL, enable_gqa=q.shape[1] != k.shape[1])


def _varlen(q, k, v, cu_seqlens, max_seqlen):
    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    extra = {{}}
    if q.shape[1] != k.shape[1]:
        if "enable_gqa" not in params:
            raise RuntimeError("this torch's varlen_attn has no grouped-query attention")
        extra["enable_gqa"] = True
    if CAUSAL:
        extra.update({{"window_size": (-1, 0)}} if "window_size" in params else {{"is_causal": True}})
    return varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **extra)


def kernel(q, k, v, cu_seqlens, max_seqlen, seqlens):
    lens = seqlens
    if EXPAND_GQA and q.shape[1] != k.shape[1]:
        group = q.shape[1] // k.shape[1]
        k, v = _expand(k, group), _expand(v, group)
    if q.ndim == 4:  # the dense [B, H, S, D] layout, as SDPA takes it
        if BACKEND == "varlen":
            raise RuntimeError("varlen_attn takes the packed layout, not [B, H, S, D]")
        return _sdpa(q, k, v)
    if BACKEND == "varlen":
        return _varlen(q, k, v, cu_seqlens, max_seqlen)
    total, hq, d = q.shape
    hkv = k.shape[1]
    if all(n == lens[0] for n in lens):
        b, n = len(lens), lens[0]
        o = _sdpa(q.view(b, n, hq, d).transpose(1, 2), k.view(b, n, hkv, d).transpose(1, 2),
                  v.view(b, n, hkv, d).transpose(1, 2))
        return o.transpose(1, 2).reshape(total, hq, d)
    out = torch.empty_like(q)
    start = 0
    for n in lens:
        sl = slice(start, start + n)
        o = _sdpa(q[sl].transpose(0, 1)[None], k[sl].transpose(0, 1)[None], v[sl].transpose(0, 1)[None])
        out[sl] = o[0].transpose(0, 1)
        start += n
    return out
'''

_ENUMS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
    "varlen": "FLASH_ATTENTION",
}


def sdpa_source(backend: str, *, causal: bool, expand_gqa: bool = False) -> str:
    """The baseline candidate a user would otherwise run: torch SDPA with one backend forced
    (`flash`, `efficient`, `cudnn`, `math`), or `varlen` (torch's varlen_attn). A backend
    that cannot run the problem (absent, no GQA, ...) raises: a failure value for the search.
    `expand_gqa`: K and V expanded to the query heads outside the timed call (for a backend
    without grouped-query attention).

    >>> "enable_gqa=q.shape[1] != k.shape[1]" in sdpa_source("flash", causal=True)
    True
    >>> "EXPAND_GQA = True" in sdpa_source("efficient", causal=True, expand_gqa=True)
    True
    """
    if backend not in _ENUMS:
        raise ValueError(f"backend must be one of {sorted(_ENUMS)}, got {backend!r}")
    return _SDPA.format(backend=backend, enum=_ENUMS[backend], causal=bool(causal), expand=bool(expand_gqa))
