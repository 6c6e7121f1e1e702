"""Small fused Triton kernels that model-level rewrites put where eager PyTorch launches a
chain of elementwise ops (`evokernel.model.model_level`): one pass over memory instead of five.

- `norm_modulate(x, ...)`: an optional (gated) residual add, then LayerNorm (no affine) or
  RMSNorm (with a weight), then an optional adaLN modulation `h * (1 + scale) + shift`;
  returns the new residual stream and the normalised (modulated) rows. It stands for
  `x = r + gate * x; h = norm(x) * (1 + scale) + shift` (DiT blocks) and for the fused
  add + RMSNorm of decoder layers. One program per block of rows; the row lives in
  registers (hidden up to 16384). gate/shift/scale are per (batch, channel): [B, H], views of one
  projection allowed (a common batch stride).
- `qk_norm_rope(qkv, ...)`: the attention prologue after a merged QKV projection: split
  the [B, S, (Hq + 2 Hkv) * D] projection into heads, RMSNorm each q and k head (QK-norm,
  weight [D]), rotate q and k (RoPE: `interleaved` pairs (x0, x1) as FLUX does, or the
  rotate-half form of Llama/Qwen), and write q, k, v as [B, heads, S_total, D] at token
  offset `offset` (so two streams can fill one joint-attention buffer without a cat).
  cos/sin are [S_total, D/2]. One program per (block of BLOCK_T tokens, head).

Both run in Triton's interpreter on the CPU (set TRITON_INTERPRET=1 before importing).

>>> sorted(NORM_GENES), sorted(ROPE_GENES)
(['num_warps'], ['BLOCK_T', 'num_warps'])
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["norm_modulate", "qk_norm_rope", "NORM_GENES", "ROPE_GENES"]

#: Tunable launch parameters and their domains (the first value is the default).
NORM_GENES: dict[str, tuple[int, ...]] = {"num_warps": (4, 1, 2, 8, 16)}
ROPE_GENES: dict[str, tuple[int, ...]] = {"BLOCK_T": (4, 1, 16), "num_warps": (4, 1, 2, 8)}


@triton.jit
def _norm_modulate_kernel(
    x_ptr,
    r_ptr,
    gate_ptr,
    shift_ptr,
    scale_ptr,
    w_ptr,
    xo_ptr,
    h_ptr,
    rows_per_batch,
    H,
    mod_stride,
    eps,
    HAS_RES: tl.constexpr,
    HAS_GATE: tl.constexpr,
    HAS_MOD: tl.constexpr,
    HAS_W: tl.constexpr,
    RMS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    batch = row // rows_per_batch
    cols = tl.arange(0, BLOCK)
    mask = cols < H
    base = row.to(tl.int64) * H
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        if HAS_GATE:
            g = tl.load(gate_ptr + batch * mod_stride + cols, mask=mask, other=0.0).to(tl.float32)
            x = x * g
        x = x + tl.load(r_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        # the stream is stored in its dtype, and normalised as stored (as eager does)
        x = x.to(xo_ptr.dtype.element_ty)
        tl.store(xo_ptr + base + cols, x, mask=mask)
        x = x.to(tl.float32)
    if RMS:
        var = tl.sum(x * x, axis=0) / H
        h = x * tl.rsqrt(var + eps)
    else:
        mean = tl.sum(x, axis=0) / H
        d = tl.where(mask, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / H
        h = d * tl.rsqrt(var + eps)
    if HAS_W:
        h = h * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_MOD:
        sc = tl.load(scale_ptr + batch * mod_stride + cols, mask=mask, other=0.0).to(tl.float32)
        sh = tl.load(shift_ptr + batch * mod_stride + cols, mask=mask, other=0.0).to(tl.float32)
        h = h * (1.0 + sc) + sh
    tl.store(h_ptr + base + cols, h.to(h_ptr.dtype.element_ty), mask=mask)


def norm_modulate(
    x: torch.Tensor,
    *,
    residual: torch.Tensor | None = None,
    gate: torch.Tensor | None = None,
    shift: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    rms: bool = False,
    eps: float = 1e-6,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(stream, h): stream = residual + gate * x (x itself without a residual), h =
    norm(stream) [* weight] [* (1 + scale) + shift]. x: [B, S, H] contiguous."""
    assert x.ndim == 3 and x.is_contiguous(), f"x must be a contiguous [B, S, H], got {tuple(x.shape)}"
    B, S, H = x.shape
    mods = [t for t in (gate, shift, scale) if t is not None]
    for t in mods:  # views of one [B, k * H] projection (chunks) are fine: unit channel stride, one batch stride
        assert t.shape == (B, H) and t.stride(1) == 1 and t.stride(0) == mods[0].stride(0), (
            f"gate/shift/scale must be [{B}, {H}] with unit channel stride and a common batch stride"
        )
    mod_stride = mods[0].stride(0) if mods else 0
    assert (shift is None) == (scale is None), "modulation needs both shift and scale"
    assert gate is None or residual is not None, "a gate needs a residual"
    if residual is not None:
        assert residual.shape == x.shape and residual.is_contiguous()
    out = torch.empty_like(x) if residual is not None else x
    h = torch.empty_like(x)
    if x.numel() == 0:
        return out, h
    _norm_modulate_kernel[(B * S,)](
        x,
        residual if residual is not None else x,
        gate if gate is not None else x,
        shift if shift is not None else x,
        scale if scale is not None else x,
        weight if weight is not None else x,
        out,
        h,
        S,
        H,
        mod_stride,
        eps,
        HAS_RES=residual is not None,
        HAS_GATE=gate is not None,
        HAS_MOD=shift is not None,
        HAS_W=weight is not None,
        RMS=rms,
        BLOCK=triton.next_power_of_2(H),
        num_warps=num_warps,
    )
    return out, h


@triton.jit
def _qk_norm_rope_kernel(
    qkv_ptr,
    qw_ptr,
    kw_ptr,
    cos_ptr,
    sin_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    S,
    S_total,
    offset,
    HQ,
    HKV,
    eps,
    D: tl.constexpr,
    BLOCK_T: tl.constexpr,
    INTERLEAVED: tl.constexpr,
):
    tblock = tl.program_id(0)
    head = tl.program_id(1)  # 0..HQ-1: q, then HKV k heads, then HKV v heads
    batch = tl.program_id(2)
    HALF: tl.constexpr = D // 2
    t = tblock * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < S
    i = tl.arange(0, HALF)
    if INTERLEAVED:  # pairs (x[2i], x[2i+1])
        lo_off, hi_off = 2 * i, 2 * i + 1
    else:  # halves (x[i], x[i + D/2])
        lo_off, hi_off = i, i + HALF
    width = (HQ + 2 * HKV) * D
    src = qkv_ptr + (batch * S + t.to(tl.int64))[:, None] * width + head * D
    m2 = tmask[:, None]
    lo = tl.load(src + lo_off[None, :], mask=m2, other=0.0).to(tl.float32)
    hi = tl.load(src + hi_off[None, :], mask=m2, other=0.0).to(tl.float32)
    if head < HQ + HKV:
        is_q = head < HQ
        if is_q:
            w_ptr, out_ptr, h, heads = qw_ptr, q_ptr, head, HQ
        else:
            w_ptr, out_ptr, h, heads = kw_ptr, k_ptr, head - HQ, HKV
        rstd = tl.rsqrt((tl.sum(lo * lo, axis=1) + tl.sum(hi * hi, axis=1)) / D + eps)
        # the normalised head is rounded to the model's dtype before the rotation, as eager does
        lo = lo * rstd[:, None] * tl.load(w_ptr + lo_off).to(tl.float32)[None, :]
        hi = hi * rstd[:, None] * tl.load(w_ptr + hi_off).to(tl.float32)[None, :]
        lo = lo.to(out_ptr.dtype.element_ty).to(tl.float32)
        hi = hi.to(out_ptr.dtype.element_ty).to(tl.float32)
        pos = (offset + t)[:, None] * HALF + i[None, :]
        c = tl.load(cos_ptr + pos, mask=m2, other=0.0).to(tl.float32)
        s = tl.load(sin_ptr + pos, mask=m2, other=0.0).to(tl.float32)
        new_lo = lo * c - hi * s
        new_hi = hi * c + lo * s
        dst = out_ptr + ((batch * heads + h).to(tl.int64) * S_total + offset + t)[:, None] * D
        tl.store(dst + lo_off[None, :], new_lo.to(out_ptr.dtype.element_ty), mask=m2)
        tl.store(dst + hi_off[None, :], new_hi.to(out_ptr.dtype.element_ty), mask=m2)
    else:
        h = head - HQ - HKV
        dst = v_ptr + ((batch * HKV + h).to(tl.int64) * S_total + offset + t)[:, None] * D
        tl.store(dst + lo_off[None, :], lo.to(v_ptr.dtype.element_ty), mask=m2)
        tl.store(dst + hi_off[None, :], hi.to(v_ptr.dtype.element_ty), mask=m2)


def qk_norm_rope(
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    heads: int,
    kv_heads: int,
    out: tuple[torch.Tensor, ...] | None = None,
    offset: int = 0,
    interleaved: bool = False,
    eps: float = 1e-6,
    BLOCK_T: int = 4,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, v) as [B, heads, S_total, D] from a merged projection qkv [B, S, (heads + 2
    kv_heads) * D], q and k RMS-normalised per head and rotated; written at tokens
    [offset, offset + S) of `out` when given (else new tensors with S_total = S)."""
    assert qkv.ndim == 3 and qkv.is_contiguous(), f"qkv must be a contiguous [B, S, W], got {tuple(qkv.shape)}"
    B, S, W = qkv.shape
    D = W // (heads + 2 * kv_heads)
    assert D * (heads + 2 * kv_heads) == W and D >= 2 and D & (D - 1) == 0, f"head_dim {D} must be a power of two"
    if out is None:
        out = (qkv.new_empty(B, heads, S, D), qkv.new_empty(B, kv_heads, S, D), qkv.new_empty(B, kv_heads, S, D))
    q, k, v = out
    S_total = q.shape[2]
    assert q.shape == (B, heads, S_total, D) and k.shape == v.shape == (B, kv_heads, S_total, D)
    assert all(t.is_contiguous() for t in out) and 0 <= offset and offset + S <= S_total
    assert cos.shape == sin.shape == (S_total, D // 2) and cos.is_contiguous() and sin.is_contiguous(), (
        f"cos/sin must be contiguous [{S_total}, {D // 2}], got {tuple(cos.shape)}"
    )
    assert q_weight.shape == k_weight.shape == (D,)
    if S == 0:
        return q, k, v
    grid = (triton.cdiv(S, BLOCK_T), heads + 2 * kv_heads, B)
    _qk_norm_rope_kernel[grid](
        qkv,
        q_weight,
        k_weight,
        cos,
        sin,
        q,
        k,
        v,
        S,
        S_total,
        offset,
        heads,
        kv_heads,
        eps,
        D=D,
        BLOCK_T=BLOCK_T,
        INTERLEAVED=interleaved,
        num_warps=num_warps,
    )
    return q, k, v
