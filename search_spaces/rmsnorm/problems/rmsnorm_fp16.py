"""Fused add-RMSNorm in fp16 on the hidden sizes of LLM layers: y = h / rms(h) * w.

Inputs: x[M, N] (M tokens of hidden size N), w[N] and, with the residual, residual[M, N];
h = x + residual (x itself without one), rms(h) = sqrt(mean(h^2) + 1e-6) over each row.
Outputs: y, and with the residual (y, h), both in the inputs' dtype: the add-and-norm that
runs between every two sublayers of a Llama or Qwen model. x and the residual are drawn
from randn (scaled by 2 and 1), w from 1 + 0.1 * randn, on the target device. The
reference computes in fp32 and rounds once.

Parameters (`Problem.load(path, params={...})`, `evokernel check --param NAME=VALUE`, or
EVOKERNEL_RMSNORM_<NAME> before the module is loaded):

- dtype: float16 (default), bfloat16, float32;
- residual: true (default: the fused add) or false (the plain norm, one output).

On the CPU (`evokernel check`, Triton's interpreter) it runs at CPU_SHAPES: narrow rows,
one not a power of two, a row count no block of rows divides.
"""

from __future__ import annotations

from typing import Literal

import msgspec
import torch

from evokernel.judge.problem import problem_params


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters (see the module's docstring)."""

    dtype: Literal["float16", "bfloat16", "float32"] = "float16"
    residual: bool = True


P = problem_params(Params, env="EVOKERNEL_RMSNORM_")
DTYPE: torch.dtype = getattr(torch, P.dtype)
RESIDUAL: bool = P.residual
#: The epsilon under the root (Llama's and Qwen's).
EPS = 1e-6
FAMILY = "rmsnorm"

#: Decode and prefill token counts at Qwen3-30B-A3B's (2048), Llama-3-8B's (4096) and
#: Llama-3-70B's (8192) hidden sizes.
SHAPES = [
    {"M": 16, "N": 4096},
    {"M": 4096, "N": 4096},
    {"M": 256, "N": 2048},
    {"M": 64, "N": 8192},
]
#: Checked by the gate, never tuned on: a hidden size that is not a power of two (Qwen2.5-14B's).
HELDOUT_SHAPES = [{"M": 100, "N": 5120}, {"M": 1, "N": 4096}]
#: What `evokernel check` runs without a GPU: seconds in the interpreter.
CPU_SHAPES = [{"M": 6, "N": 256}, {"M": 33, "N": 200}]
CPU_HELDOUT_SHAPES = [{"M": 3, "N": 1000}]

# y is O(1) (rms 1 before w): one rounding to fp16 is 2**-11 relative, to bf16 2**-8; a
# kernel that scales the rounded h rather than the fp32 sum adds half an ulp of h.
TOLERANCE = {
    "float16": {"rtol": 2e-3, "atol": 2e-3},
    "bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2},
    "float32": {"rtol": 1e-5, "atol": 1e-5},
}


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple[torch.Tensor, ...]:
    """x ~ 2 randn [M, N], w ~ 1 + 0.1 randn [N] and (with the residual) residual ~ randn
    [M, N], in DTYPE, drawn on `device` from `seed`."""
    m, n = shape["M"], shape["N"]
    g = torch.Generator(device=device).manual_seed(seed)
    x = 2.0 * torch.randn(m, n, generator=g, device=device)
    w = 1.0 + 0.1 * torch.randn(n, generator=g, device=device)
    if not RESIDUAL:
        return x.to(DTYPE), w.to(DTYPE)
    r = torch.randn(m, n, generator=g, device=device)
    return x.to(DTYPE), w.to(DTYPE), r.to(DTYPE)


def reference(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None):
    """y (and h with the residual) in fp32, rounded once to x's dtype."""
    h = x.float() if residual is None else x.float() + residual.float()
    y = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + EPS) * w.float()
    return y.to(x.dtype) if residual is None else (y.to(x.dtype), h.to(x.dtype))


def flops(shape: dict) -> int:
    """Per element: square, add, scale, weight (and the residual's add)."""
    return (4 + RESIDUAL) * shape["M"] * shape["N"]


def bytes(shape: dict) -> int:  # noqa: A001 - the problem contract's name
    """x and y (and the residual and h) once each, w once."""
    m, n = shape["M"], shape["N"]
    return DTYPE.itemsize * ((2 + 2 * RESIDUAL) * m * n + n)
