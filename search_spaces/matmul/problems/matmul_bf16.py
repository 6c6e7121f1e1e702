"""C = A @ B in bf16 on the shapes of the recorded H200 landscapes (fp32 accumulation).

A[M, K] and B[K, N] are row-major; A is drawn from randn / sqrt(K) and B from randn, so
every entry of C is a sum of K random terms with variance about 1: O(1) outputs, where
bf16 rounding is the only expected error. Inputs are drawn on the target device.

The parameter `dtype` (`Problem.load(path, params={"dtype": "float16"})`, or the environment
variable EVOKERNEL_MATMUL_DTYPE=float16 before the module is loaded) checks the same problem
in float16 or float32, e.g. on the CPU, where Triton's interpreter cannot do bf16 dots. The
tolerances are per output dtype.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec
import torch

from evokernel.judge.problem import problem_params


class Params(msgspec.Struct, frozen=True, kw_only=True):
    """The problem's parameters: the input and output dtype (EVOKERNEL_MATMUL_DTYPE)."""

    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"


P = problem_params(Params, env="EVOKERNEL_MATMUL_")
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
#: Input and output dtype (bfloat16 unless the parameter dtype says otherwise).
DTYPE: torch.dtype = _DTYPES[P.dtype]

#: The four shapes of the shipped landscapes (decode, small batch, prefill, large square-ish).
SHAPES = [
    {"M": 16, "N": 4096, "K": 4096},
    {"M": 256, "N": 4096, "K": 14336},
    {"M": 2048, "N": 6144, "K": 4096},
    {"M": 8192, "N": 8192, "K": 1024},
]

#: Two other LLM projection shapes, checked by the gate but never tuned on.
HELDOUT_SHAPES = [
    {"M": 64, "N": 14336, "K": 4096},
    {"M": 512, "N": 4096, "K": 11008},
]

#: What `evokernel check` runs on a machine without a GPU: the same problem at sizes a CPU
#: checks in seconds (edges that are not multiples of common tiles; the H200 shapes would
#: take minutes there, and a CPU's timings say nothing about a GPU's).
CPU_SHAPES = [{"M": 16, "N": 256, "K": 256}, {"M": 96, "N": 160, "K": 320}]
CPU_HELDOUT_SHAPES = [{"M": 33, "N": 70, "K": 48}]

# Outputs are O(1); bf16 keeps 8 significant bits (one ulp is 2**-7 relative), fp16 11.
# fp32 is full fp32: a tf32 kernel (10-bit mantissa inputs) would not pass.
TOLERANCE = {
    "bfloat16": {"rtol": 2e-2, "atol": 2e-2},
    "float16": {"rtol": 5e-3, "atol": 5e-3},
    "float32": {"rtol": 1e-4, "atol": 1e-4},
}


def make_inputs(shape: dict, seed: int, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """A[M, K] ~ randn / sqrt(K) and B[K, N] ~ randn in DTYPE, drawn on `device` from `seed`."""
    m, n, k = shape["M"], shape["N"], shape["K"]
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=g, device=device, dtype=torch.float32).mul_(1.0 / math.sqrt(k))
    b = torch.randn(k, n, generator=g, device=device, dtype=torch.float32)
    return a.to(DTYPE), b.to(DTYPE)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The product in fp32, rounded once to the inputs' dtype."""
    return (a.float() @ b.float()).to(a.dtype)


def flops(shape: dict) -> int:
    return 2 * shape["M"] * shape["N"] * shape["K"]


def bytes(shape: dict) -> int:  # noqa: A001 - the problem contract's name
    m, n, k = shape["M"], shape["N"], shape["K"]
    return DTYPE.itemsize * (m * k + k * n + m * n)
