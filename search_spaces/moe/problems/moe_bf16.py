"""A fused mixture-of-experts layer in bf16, at the shapes of real MoE models.

Inputs: x [M, H], W1 [E, 2I, H] (gate rows, then up rows), W2 [E, H, I], and the router's
choice for each token: top_k experts (`topk_ids`, int32) and their weights (`topk_weights`,
fp32, softmax over the chosen logits, renormalised). The output is

    out[t] = sum_j w[t, j] * W2[e] @ (silu(Wg[e] @ x[t]) * (Wu[e] @ x[t])),  e = topk_ids[t, j]

computed here in plain torch, expert by expert, in fp32, rounded once to x's dtype.

The model and batch size are the problem's parameters (`Params`: `Problem.load(path,
params={...})`, else the environment variable EVOKERNEL_MOE_<NAME>, read when the module is
loaded): model (EVOKERNEL_MOE_MODEL, default qwen3-30b-a3b; see MODELS), m (EVOKERNEL_MOE_M,
default 64; a comma-separated list tunes one config for all), dtype (EVOKERNEL_MOE_DTYPE:
bfloat16, or float16 / float32, e.g. for the CPU, where Triton's interpreter cannot do bf16
dots).

trace (EVOKERNEL_MOE_TRACE; optional, the path of a JSONL or CSV trace, see
`evokernel.model.workload`) tunes for the traffic instead: the trace's decode batch sizes (a
continuous-batching replay, at most 256 running) are bucketed to SGLang's config grid (GRID,
nearest), the buckets holding at least 1% of the decode steps become the SHAPES (the 6
heaviest at most) and their shares the WEIGHTS; m is then ignored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import msgspec
import torch
import torch.nn.functional as F

from evokernel.judge.problem import problem_params
from evokernel.search_spaces.moe import MOE_MODELS, distinct_experts

#: E experts, hidden size H, expert intermediate size I, experts per token (the shared table).
MODELS = MOE_MODELS


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters (see the module's docstring)."""

    model: str = "qwen3-30b-a3b"
    m: tuple[int, ...] = (64,)
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    trace: str = ""  # made absolute: the judge's health check loads the problem from another folder

    def __post_init__(self) -> None:
        if self.trace:
            msgspec.structs.force_setattr(self, "trace", str(Path(self.trace).resolve()))


P = problem_params(Params, env="EVOKERNEL_MOE_")
MODEL = P.model
if MODEL not in MODELS:
    raise ValueError(f"model (EVOKERNEL_MOE_MODEL) must be one of {sorted(MODELS)}, got {MODEL!r}")
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE = _DTYPES[P.dtype]
#: the batch sizes SGLang ships fused-MoE configs for
GRID = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
TRACE = P.trace
if TRACE:
    from evokernel.model.workload import Trace as _Trace, weights as _weights

    _decode = _Trace.load(TRACE).decode_batches()
    if not _decode:
        raise ValueError(f"trace (EVOKERNEL_MOE_TRACE) {TRACE}: no decode steps (every request has output_len 1)")
    _shares = _weights(_decode, GRID)
    _heavy = sorted((m for m in GRID if _shares[m] >= 0.01), key=lambda m: (-_shares[m], m))[:6]
    _MS = sorted(_heavy)
    WEIGHTS = {m: _shares[m] for m in _MS}
else:
    _MS = list(P.m)

FAMILY = f"moe_{MODEL}_{str(DTYPE).removeprefix('torch.')}"
SHAPES = [{"M": m, **MODELS[MODEL]} for m in _MS]
_HELD = max(1, _MS[0] // 2 + 3)  # an odd batch near the tuned one
while _HELD in _MS:
    _HELD += 1
HELDOUT_SHAPES = [{"M": _HELD, **MODELS[MODEL]}]
TOLERANCE = {
    "bfloat16": {"rtol": 2e-2, "atol": 2e-2},
    "float16": {"rtol": 5e-3, "atol": 5e-3},
    "float32": {"rtol": 1e-4, "atol": 1e-4},
}


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    M, E, H, I, k = shape["M"], shape["E"], shape["H"], shape["I"], shape["topk"]
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, H, generator=g, device=device)
    w1 = torch.randn(E, 2 * I, H, generator=g, device=device).mul_(1 / math.sqrt(H))
    w2 = torch.randn(E, H, I, generator=g, device=device).mul_(1 / math.sqrt(I))
    logits = torch.randn(M, E, generator=g, device=device)
    weights, ids = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return x.to(DTYPE), w1.to(DTYPE), w2.to(DTYPE), weights.float(), ids.to(torch.int32)


def reference(x, w1, w2, topk_weights, topk_ids):
    M, H = x.shape
    top_k = topk_ids.shape[1]
    inter = w2.shape[2]
    out = torch.zeros(M, H, device=x.device, dtype=torch.float32)
    flat = topk_ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)  # the (token, slot) pairs, expert by expert
    counts = torch.bincount(flat, minlength=w1.shape[0]).tolist()  # the one read-back to the host
    weights = topk_weights.reshape(-1).float()
    start = 0
    for e, n in enumerate(counts):
        if n == 0:
            continue
        pairs = order[start : start + n]
        start += n
        rows = pairs // top_k
        h = x[rows].float() @ w1[e].float().t()
        act = F.silu(h[:, :inter]) * h[:, inter:]
        y = act @ w2[e].float().t()
        out.index_add_(0, rows, y * weights[pairs][:, None])
    return out.to(x.dtype)


def flops(shape: dict) -> float:
    pairs = shape["M"] * shape["topk"]
    return 2.0 * pairs * (2 * shape["I"] * shape["H"] + shape["H"] * shape["I"])


def bytes(shape: dict) -> float:  # noqa: A001
    """Weights of (a lower bound on: `distinct_experts`) the experts the batch touches, plus activations in and out."""
    experts = distinct_experts(shape)
    size = torch.tensor([], dtype=DTYPE).element_size()
    return size * (experts * 3 * shape["I"] * shape["H"] + 2 * shape["M"] * shape["H"])
