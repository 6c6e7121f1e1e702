"""Attention prefill (flash-attention forward) over packed variable-length sequences, in bf16.

Inputs, in the layout serving engines pass: q [T, H_q, D], k and v [T, H_kv, D] (T the total
tokens of the batch), cu_seqlens [B + 1] int32 on the device (prefix sums of the lengths),
and the host-side metadata a varlen API takes as plain Python values: max_seqlen (int) and
seqlens (a tuple of ints), so no kernel or baseline needs to read lengths back from the GPU
inside a timed call (flash-attention's varlen API takes max_seqlen so; SGLang keeps the
lengths on the host too). Output:
[T, H_q, D], softmax(q k^T / sqrt(D) [+ causal mask]) v per sequence and head, query head h
reading KV head h // (H_q / H_kv). q and k are drawn from 1.5 * randn (logits of standard
deviation 2.25: peaked rows, so outputs are O(1) and a wrong mask or scale shows), v from
randn. The shape comes from the environment, read when the module is loaded:

- EVOKERNEL_ATTN_MODEL: llama3-8b (default; 32 query heads, 8 KV heads, D 128, causal),
  qwen3-30b-a3b (32/4, D 128, causal), flux-dit (24/24, D 128, one 4096+512 token sequence,
  not causal), d64 (16/16, D 64, causal), tiny (4/2, D 64, causal: the CPU tests); see MODELS;
- EVOKERNEL_ATTN_SEQLENS: comma-separated lengths (e.g. "2048,2048,2048,2048" or varlen
  "512,1800,3000"; default: the model's);
- EVOKERNEL_ATTN_BATCH: with a single length in EVOKERNEL_ATTN_SEQLENS, that many sequences
  of it (e.g. SEQLENS=2048 BATCH=4);
- EVOKERNEL_ATTN_CAUSAL: 1 or 0, overriding the model's masking;
- EVOKERNEL_ATTN_DTYPE: bfloat16 (default), or float16 / float32 (the CPU interpreter);
- EVOKERNEL_ATTN_LAYOUT: packed (default) or bhsd: the dense batched layout diffusion models
  pass to torch's scaled_dot_product_attention, q [B, H_q, S, D], k and v [B, H_kv, S, D]
  and the output [B, H_q, S, D], every sequence of one length (cu_seqlens, max_seqlen and
  seqlens are still handed over).

The reference is plain torch in fp32, per sequence (and per group of heads, to bound the
score matrices' memory), rounded once to the dtype.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
import torch

from evokernel.judge.problem import problem_params

#: (H_q, H_kv, D, causal, default lengths) of each model's attention.
MODELS = {
    "llama3-8b": (32, 8, 128, True, [2048] * 4),
    "qwen3-30b-a3b": (32, 4, 128, True, [2048] * 4),
    "flux-dit": (24, 24, 128, False, [4096 + 512]),  # image + text tokens of a 1024x1024 FLUX.1 step
    "d64": (16, 16, 64, True, [2048] * 4),
    "tiny": (4, 2, 64, True, [37, 64, 20]),  # tests (the CPU interpreter)
}


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters, from `Problem.load(path, params={...})` or else the environment
    (EVOKERNEL_ATTN_<NAME>, see above); seqlens () is the model's lengths, causal None its masking."""

    model: str = "llama3-8b"
    seqlens: tuple[int, ...] = ()
    batch: int | None = None
    causal: bool | None = None
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    layout: Literal["packed", "bhsd"] = "packed"


P = problem_params(Params, env="EVOKERNEL_ATTN_")
MODEL = P.model
if MODEL not in MODELS:
    raise ValueError(f"model (EVOKERNEL_ATTN_MODEL) must be one of {sorted(MODELS)}, got {MODEL!r}")
HQ, HKV, D, _CAUSAL, _LENS = MODELS[MODEL]
CAUSAL = _CAUSAL if P.causal is None else P.causal
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE = _DTYPES[P.dtype]

LENS = list(P.seqlens) or _LENS
if len(LENS) == 1 and P.batch is not None:
    LENS = LENS * P.batch
if not LENS or min(LENS) < 1:
    raise ValueError(f"sequence lengths must be positive, got {LENS}")
DENSE = P.layout == "bhsd"
if DENSE and len(set(LENS)) != 1:
    raise ValueError(f"the bhsd layout takes sequences of one length, got {LENS}")


def lens_key(lens: list[int]) -> str:
    """A shape's lengths as text: "2048x4" for equal lengths, else "512/1800/3000"."""
    return f"{lens[0]}x{len(lens)}" if len(set(lens)) == 1 else "/".join(map(str, lens))


def parse_lens(key: str) -> list[int]:
    if "x" in key:
        n, b = key.split("x")
        return [int(n)] * int(b)
    return [int(n) for n in key.split("/")]


def _shape(lens: list[int]) -> dict:
    return {"T": sum(lens), "B": len(lens), "Hq": HQ, "Hkv": HKV, "D": D, "lens": lens_key(lens)}


FAMILY = f"attention_prefill_{str(DTYPE).removeprefix('torch.')}_d{D}_{'causal' if CAUSAL else 'full'}" + (
    "_bhsd" if DENSE else ""
)
SHAPES = [_shape(LENS)]
# uneven lengths near the tuned ones, neither a multiple of any block size (dense: two
# sequences of one such length)
HELDOUT_SHAPES = [_shape([max(1, LENS[0] // 2 + 5)] * 2 if DENSE else [max(1, LENS[0] // 2 + 5), max(1, LENS[-1] - 3)])]
TOLERANCE = {
    "bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "float32": {"rtol": 1e-4, "atol": 1e-4},
}


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple:
    lens = parse_lens(shape["lens"])
    T, hq, hkv, d = sum(lens), shape["Hq"], shape["Hkv"], shape["D"]
    g = torch.Generator(device=device).manual_seed(seed)
    q = (1.5 * torch.randn(T, hq, d, generator=g, device=device)).to(DTYPE)
    k = (1.5 * torch.randn(T, hkv, d, generator=g, device=device)).to(DTYPE)
    v = torch.randn(T, hkv, d, generator=g, device=device).to(DTYPE)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    if DENSE:
        q, k, v = (to_bhsd(t, len(lens)) for t in (q, k, v))
    return q, k, v, cu, max(lens), tuple(lens)


def to_bhsd(t: torch.Tensor, batch: int) -> torch.Tensor:
    """A packed [B x S, H, D] tensor of equal lengths as a contiguous [B, H, S, D] one."""
    return t.view(batch, t.shape[0] // batch, *t.shape[1:]).transpose(1, 2).contiguous()


def to_packed(t: torch.Tensor) -> torch.Tensor:
    """A [B, H, S, D] tensor as the packed [B x S, H, D] one."""
    b, h, n, d = t.shape
    return t.transpose(1, 2).reshape(b * n, h, d)


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    seqlens: tuple[int, ...],
) -> torch.Tensor:
    if q.ndim == 4:  # the bhsd layout: the packed reference, laid out again
        out = reference(to_packed(q), to_packed(k), to_packed(v), cu_seqlens, max_seqlen, seqlens)
        return to_bhsd(out, q.shape[0])
    T, hq, d = q.shape
    group = hq // k.shape[1]
    out = torch.empty((T, hq, d), device=q.device, dtype=torch.float32)
    bounds = [0, *torch.tensor(seqlens).cumsum(0).tolist()]
    for s, e in zip(bounds[:-1], bounds[1:]):
        n = e - s
        heads = max(group, (1 << 28) // max(1, n * n) // group * group)  # ~1 GiB of fp32 scores at a time
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril() if CAUSAL else None
        for h0 in range(0, hq, heads):
            qs = q[s:e, h0 : h0 + heads].float().transpose(0, 1)
            ks = k[s:e, h0 // group : (h0 + heads) // group].float().transpose(0, 1).repeat_interleave(group, 0)
            vs = v[s:e, h0 // group : (h0 + heads) // group].float().transpose(0, 1).repeat_interleave(group, 0)
            scores = (qs @ ks.transpose(1, 2)) / math.sqrt(d)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            out[s:e, h0 : h0 + heads] = (scores.softmax(-1) @ vs).transpose(0, 1)
    return out.to(q.dtype)


def _pairs(lens: list[int]) -> float:
    """Query-key pairs computed, summed over sequences."""
    return float(sum(n * (n + 1) // 2 if CAUSAL else n * n for n in lens))


def flops(shape: dict) -> float:
    return 4.0 * shape["Hq"] * shape["D"] * _pairs(parse_lens(shape["lens"]))


def bytes(shape: dict) -> float:  # noqa: A001 - the problem contract's name
    item = torch.tensor([], dtype=DTYPE).element_size()
    T = shape["T"]
    return float(item * T * shape["D"] * (2 * shape["Hq"] + 2 * shape["Hkv"]) + 4 * (shape["B"] + 1))
