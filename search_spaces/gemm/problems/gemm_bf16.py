"""C = epilogue(A @ B) in bf16 at the projection shapes of LLMs (fp32 accumulation).

A[M, K] is drawn from randn / sqrt(K) and B[K, N] from randn, so C's entries are O(1). The
shape is the problem's parameters (`Params`: `Problem.load(path, params={...})`, else the
environment variable EVOKERNEL_GEMM_<NAME>, read when the module is loaded):

- model (EVOKERNEL_GEMM_MODEL): llama3-8b (default) or qwen3-30b-a3b (its attention
  projections; its experts are the fused-MoE problem's), see MODELS;
- layer (EVOKERNEL_GEMM_LAYER): qkv, o, gate_up or down (default qkv; see MODELS);
- m (EVOKERNEL_GEMM_M): tokens (default 2048; a comma-separated list tunes one config for all);
- epilogue (EVOKERNEL_GEMM_EPILOGUE): none (default; the cuBLAS comparison), or "+"-joined
  parts of bias, relu / silu / gelu_tanh, residual, e.g. bias+silu or bias+gelu_tanh+residual;
- dtype (EVOKERNEL_GEMM_DTYPE): bfloat16 (default), or float16 / float32 (the CPU interpreter).

The reference is `torch.matmul` and plain torch for the epilogue, in fp32, rounded once.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
import torch
import torch.nn.functional as F

from evokernel.judge.problem import problem_params

#: (N, K) of each projection: C[M, N] = X[M, K] @ W[K, N].
MODELS = {
    # hidden 4096, 32 query heads and 8 KV heads of 128, MLP 14336
    "llama3-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)},
    # hidden 2048, 32 query heads and 4 KV heads of 128 (attention only: its MLP is the MoE)
    "qwen3-30b-a3b": {"qkv": (5120, 2048), "o": (2048, 4096)},
    "tiny": {"qkv": (72, 80)},  # tests (the CPU interpreter)
}


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters (see the module's docstring)."""

    model: str = "llama3-8b"
    layer: str = "qkv"
    m: tuple[int, ...] = (2048,)
    epilogue: str = "none"
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"


P = problem_params(Params, env="EVOKERNEL_GEMM_")
MODEL, LAYER = P.model, P.layer
if MODEL not in MODELS or LAYER not in MODELS[MODEL]:
    raise ValueError(f"model/layer (EVOKERNEL_GEMM_MODEL/LAYER) must name one of {MODELS}, got {MODEL!r}/{LAYER!r}")
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE = _DTYPES[P.dtype]
_PARTS = [p for p in P.epilogue.split("+") if p and p != "none"]
BIAS = "bias" in _PARTS
RESIDUAL = "residual" in _PARTS
_ACTS = [p for p in _PARTS if p in ("relu", "silu", "gelu_tanh")]
if len(_ACTS) > 1 or set(_PARTS) - {"bias", "residual", "relu", "silu", "gelu_tanh"}:
    raise ValueError(f"epilogue (EVOKERNEL_GEMM_EPILOGUE): bias, one of relu/silu/gelu_tanh, residual; got {_PARTS}")
ACTIVATION = _ACTS[0] if _ACTS else "none"
EPILOGUE = {"bias": BIAS, "residual": RESIDUAL, "activation": ACTIVATION}

_N, _K = MODELS[MODEL][LAYER]
_MS = list(P.m)
FAMILY = f"gemm_{str(DTYPE).removeprefix('torch.')}_{'+'.join(_PARTS) or 'plain'}"
SHAPES = [{"M": m, "N": _N, "K": _K} for m in _MS]
HELDOUT_SHAPES = [{"M": max(1, _MS[0] // 2 + 5), "N": _N, "K": _K}]  # an odd M near the tuned one
TOLERANCE = {
    "bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2},
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "float32": {"rtol": 1e-4, "atol": 1e-4},
}


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    M, N, K = shape["M"], shape["N"], shape["K"]
    g = torch.Generator(device=device).manual_seed(seed)
    a = (torch.randn(M, K, generator=g, device=device) / math.sqrt(K)).to(DTYPE)
    b = torch.randn(K, N, generator=g, device=device).to(DTYPE)
    extra = []
    if BIAS:
        extra.append(torch.randn(N, generator=g, device=device).to(DTYPE))
    if RESIDUAL:
        extra.append(torch.randn(M, N, generator=g, device=device).to(DTYPE))
    return (a, b, *extra)


def reference(a: torch.Tensor, b: torch.Tensor, *extra: torch.Tensor) -> torch.Tensor:
    x = a.float() @ b.float()
    rest = list(extra)
    if BIAS:
        x = x + rest.pop(0).float()
    if ACTIVATION == "relu":
        x = torch.relu(x)
    elif ACTIVATION == "silu":
        x = F.silu(x)
    elif ACTIVATION == "gelu_tanh":
        x = F.gelu(x, approximate="tanh")
    if RESIDUAL:
        x = x + rest.pop(0).float()
    return x.to(a.dtype)


def flops(shape: dict) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def bytes(shape: dict) -> float:  # noqa: A001 - the problem contract's name
    M, N, K = shape["M"], shape["N"], shape["K"]
    item = torch.tensor([], dtype=DTYPE).element_size()
    return float(item * (M * K + K * N + M * N * (2 if RESIDUAL else 1) + (N if BIAS else 0)))
