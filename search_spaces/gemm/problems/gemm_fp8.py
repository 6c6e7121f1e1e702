"""C = (A_q * a_scale) @ (B_q * b_scale)^T with fp8 (e4m3) operands, C in bf16, at LLM shapes.

The activation A [M, K] and the weight B [N, K] (nn.Linear's layout) are drawn like the bf16
problem's (A ~ randn / sqrt(K), B ~ randn), then quantised to e4m3 with fp32 scales, by the
parameter `scales` (environment: EVOKERNEL_FP8_SCALES):

- tensor (default): one scale each;
- block: A per token and 128 columns ([M, K/128]), B per 128x128 block ([N/128, K/128]), as
  DeepSeek-V3 serves its weights.

The reference dequantises in fp32 and multiplies, rounded once to bf16: the candidates are
judged on the GEMM, not on the quantisation. Shapes as `gemm_bf16.py`: the parameters model,
layer and m (EVOKERNEL_GEMM_MODEL, EVOKERNEL_GEMM_LAYER, EVOKERNEL_GEMM_M).
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
import torch

from evokernel.judge.problem import problem_params
from evokernel.search_spaces.gemm.template_fp8 import GROUP, quantize

MODELS = {  # (N, K) per projection: the same as gemm_bf16.py's
    "llama3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)},
    "qwen3-30b-a3b": {"qkv": (5120, 2048), "o": (2048, 4096)},
    "tiny": {"qkv": (200, 256)},  # tests (the CPU interpreter)
}


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters (see the module's docstring)."""

    model: str = "llama3-8b"
    layer: str = "qkv"
    m: tuple[int, ...] = (2048,)
    scales: Literal["tensor", "block"] = "tensor"


P = problem_params(Params, env="EVOKERNEL_GEMM_", env_names={"scales": "EVOKERNEL_FP8_SCALES"})
MODEL, LAYER = P.model, P.layer
if MODEL not in MODELS or LAYER not in MODELS[MODEL]:
    raise ValueError(f"model/layer (EVOKERNEL_GEMM_MODEL/LAYER) must name one of {MODELS}, got {MODEL!r}/{LAYER!r}")
SCALES = P.scales
BLOCKWISE = SCALES == "block"
_N, _K = MODELS[MODEL][LAYER]
_MS = list(P.m)
FAMILY = f"gemm_fp8_{SCALES}"
SHAPES = [{"M": m, "N": _N, "K": _K} for m in _MS]
HELDOUT_SHAPES = [{"M": max(1, _MS[0] // 2 + 5), "N": _N, "K": _K}]
TOLERANCE = {"bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2}}


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    M, N, K = shape["M"], shape["N"], shape["K"]
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(M, K, generator=g, device=device).mul_(1 / math.sqrt(K))
    b = torch.randn(N, K, generator=g, device=device)
    a_q, a_s = quantize(a, blockwise=BLOCKWISE, weight=False)
    b_q, b_s = quantize(b, blockwise=BLOCKWISE, weight=True)
    return a_q, b_q, a_s, b_s


def _dequantize(q: torch.Tensor, scale: torch.Tensor, rows_per_scale: int) -> torch.Tensor:
    x = q.float()
    if scale.numel() == 1:
        return x * scale.float()
    s = scale.float().repeat_interleave(rows_per_scale, 0)[: x.shape[0]].repeat_interleave(GROUP, 1)[:, : x.shape[1]]
    return x * s


def reference(a, b, a_scale, b_scale):
    return (_dequantize(a, a_scale, 1) @ _dequantize(b, b_scale, GROUP).t()).to(torch.bfloat16)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes(shape: dict) -> float:  # noqa: A001
    M, N, K = shape["M"], shape["N"], shape["K"]
    return M * K + N * K + 2 * M * N
