"""A fused mixture-of-experts layer with fp8 (e4m3) w8a8 experts, at the shapes of real MoE models.

The layer of `moe_bf16.py`,

    out[t] = sum_j w[t, j] * W2[e] @ (silu(Wg[e] @ x[t]) * (Wu[e] @ x[t])),  e = topk_ids[t, j]

with the expert weights stored in e4m3 and fp32 scales, and the activations quantised to e4m3
inside the call (dynamically), as serving engines run fp8 checkpoints
(`search_spaces/triton_moe.py` says how the kernel does it). Inputs: x [M, H] (bf16),
w1 [E, 2I, H] and w2 [E, H, I] in e4m3 (gate rows, then up rows), w1_scale, w2_scale (fp32),
topk_weights (fp32), topk_ids (int32). The parameter scales (EVOKERNEL_FP8_SCALES) picks the scheme:

- tensor: one scale per expert weight matrix (w1_scale, w2_scale [E]); x and the
  intermediate each get one dynamic scale for the whole tensor, max(amax, 1e-12) / 448;
- block: weights per 128x128 block (w1_scale [E, 2I/128, H/128], w2_scale [E, H/128,
  I/128], DeepSeek-V3's checkpoints); x and the intermediate per row and 128 columns.

Default: block for deepseek-v3-ep8 (its checkpoint's scheme), tensor for the others.

The reference, in plain torch, expert by expert in fp32: the weights dequantised; x quantised
and dequantised by that scheme; the up projection rounded to x's dtype (the kernel keeps it
there, as SGLang does); silu(g) * u in fp32, quantised and dequantised by the scheme (per
tensor: over all M*top_k rows); the down projection, the routing weights, the sum over top-k,
rounded once to x's dtype. Kernel and reference thus compute the same values up to
accumulation order; where that order moves an intermediate value across an e4m3 rounding
boundary the two differ by one e4m3 step there (12.5% of that value at most), which the
TOLERANCE covers (and the fp8 accumulation of Hopper's tensor cores, on the H200).

Shapes from the parameters as `moe_bf16.py`'s: model (EVOKERNEL_MOE_MODEL, default
qwen3-30b-a3b; see MODELS), m (EVOKERNEL_MOE_M, default 64; a comma-separated list tunes one
config for all), dtype (EVOKERNEL_MOE_DTYPE: x's dtype, bfloat16, or float16 / float32 for
the CPU interpreter).
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
import torch

from evokernel.judge.problem import problem_params
from evokernel.search_spaces.moe import MOE_MODELS, distinct_experts
from evokernel.search_spaces.gemm.template_fp8 import GROUP, quantize

#: E experts, hidden size H, expert intermediate size I, experts per token (the shared table).
MODELS = MOE_MODELS


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters (see the module's docstring); scales None is the model's
    checkpoint scheme (set when the parameters are resolved)."""

    model: str = "qwen3-30b-a3b"
    m: tuple[int, ...] = (64,)
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    scales: Literal["tensor", "block"] | None = None

    def __post_init__(self) -> None:
        if self.scales is None:
            msgspec.structs.force_setattr(self, "scales", "block" if self.model.startswith("deepseek") else "tensor")


P = problem_params(Params, env="EVOKERNEL_MOE_", env_names={"scales": "EVOKERNEL_FP8_SCALES"})
MODEL = P.model
if MODEL not in MODELS:
    raise ValueError(f"model (EVOKERNEL_MOE_MODEL) must be one of {sorted(MODELS)}, got {MODEL!r}")
SCALES = P.scales
BLOCKWISE = SCALES == "block"
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE = _DTYPES[P.dtype]
_MS = list(P.m)

FAMILY = f"moe_fp8_{SCALES}_{MODEL}_{str(DTYPE).removeprefix('torch.')}"
SHAPES = [{"M": m, **MODELS[MODEL]} for m in _MS]
_HELD = max(1, _MS[0] // 2 + 3)  # an odd batch near the tuned one
while _HELD in _MS:
    _HELD += 1
HELDOUT_SHAPES = [{"M": _HELD, **MODELS[MODEL]}]
TOLERANCE = {  # the scale-aware check of the gate: atol is relative to the output's RMS floored at 1
    "bfloat16": {"rtol": 3e-2, "atol": 3e-2},
    "float16": {"rtol": 1e-2, "atol": 1e-2},
    "float32": {"rtol": 1e-2, "atol": 1e-2},
}


def _quantize_experts(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [quantize(w[e], blockwise=BLOCKWISE, weight=True) for e in range(w.shape[0])]
    q = torch.stack([p[0] for p in pairs])
    s = torch.stack([p[1] for p in pairs])
    return q, (s if BLOCKWISE else s.reshape(-1))


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    M, E, H, I, k = shape["M"], shape["E"], shape["H"], shape["I"], shape["topk"]
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, H, generator=g, device=device)
    w1 = torch.randn(E, 2 * I, H, generator=g, device=device).mul_(1 / math.sqrt(H))
    w2 = torch.randn(E, H, I, generator=g, device=device).mul_(1 / math.sqrt(I))
    logits = torch.randn(M, E, generator=g, device=device)
    weights, ids = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    w1_q, w1_s = _quantize_experts(w1)
    del w1
    w2_q, w2_s = _quantize_experts(w2)
    return x.to(DTYPE), w1_q, w2_q, w1_s, w2_s, weights.float(), ids.to(torch.int32)


def _dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """One expert's weight [N, K] in fp32: a scalar scale, or one per 128x128 block."""
    x = q.float()
    if scale.numel() == 1:
        return x * scale.float().reshape(())
    return x * scale.float().repeat_interleave(GROUP, 0)[: x.shape[0]].repeat_interleave(GROUP, 1)[:, : x.shape[1]]


def _fake_quant(a: torch.Tensor, blockwise: bool) -> torch.Tensor:
    """An activation [rows, cols] in fp32 through e4m3 and back, by the problem's scheme."""
    q, s = quantize(a, blockwise=blockwise, weight=False)
    if not blockwise:
        return q.float() * s
    return q.float() * s.repeat_interleave(GROUP, 1)[:, : a.shape[1]]


def reference(x, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids):
    M, H = x.shape
    top_k = topk_ids.shape[1]
    inter = w2.shape[2]
    blockwise = w1_scale.dim() == 3
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)  # the (token, slot) pairs, expert by expert
    counts = torch.bincount(flat, minlength=w1.shape[0]).tolist()  # the one read-back to the host
    weights = topk_weights.reshape(-1).float()
    xd = _fake_quant(x.float(), blockwise)
    act = torch.zeros(flat.numel(), inter, device=x.device, dtype=torch.float32)
    runs, start = [], 0
    for e, n in enumerate(counts):
        if n:
            runs.append((e, order[start : start + n]))
            start += n
    for e, pairs in runs:
        h = (xd[pairs // top_k] @ _dequantize(w1[e], w1_scale[e]).t()).to(x.dtype).float()
        g, u = h[:, :inter], h[:, inter:]
        act[pairs] = g * torch.sigmoid(g) * u
    act = _fake_quant(act, blockwise)  # per tensor: one scale over every pair
    out = torch.zeros(M, H, device=x.device, dtype=torch.float32)
    for e, pairs in runs:
        y = act[pairs] @ _dequantize(w2[e], w2_scale[e]).t()
        out.index_add_(0, pairs // top_k, y * weights[pairs][:, None])
    return out.to(x.dtype)


def flops(shape: dict) -> float:
    pairs = shape["M"] * shape["topk"]
    return 2.0 * pairs * (2 * shape["I"] * shape["H"] + shape["H"] * shape["I"])


def bytes(shape: dict) -> float:  # noqa: A001
    """e4m3 weights (1 byte) of (a lower bound on) the experts the batch touches (see
    evokernel.search_spaces.moe.distinct_experts), plus x in and out in its dtype."""
    experts = distinct_experts(shape)
    size = torch.tensor([], dtype=DTYPE).element_size()
    return experts * 3 * shape["I"] * shape["H"] + size * 2 * shape["M"] * shape["H"]
