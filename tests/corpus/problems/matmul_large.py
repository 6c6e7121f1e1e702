"""C = A @ B in float32, large enough (2048^3) that one call takes a measurable time on a GPU.

For the GPU-only cheats (work on a side stream that escapes the timed region): on an H200
one product takes about 0.3 ms, well above the judge's escape margin. Too slow for the CPU
tests, which never use it."""

from __future__ import annotations

import math

import torch

SHAPES = [{"M": 2048, "N": 2048, "K": 2048}]
HELDOUT_SHAPES = [{"M": 1024, "N": 3072, "K": 1536}]
TOLERANCE = {"float32": {"rtol": 1e-4, "atol": 1e-4}}


def make_inputs(shape: dict, seed: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    m, n, k = shape["M"], shape["N"], shape["K"]
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, generator=g, device=device) / math.sqrt(k)
    b = torch.randn(k, n, generator=g, device=device)
    return a, b


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() @ b.double()).to(a.dtype)


def flops(shape: dict) -> int:
    return 2 * shape["M"] * shape["N"] * shape["K"]


def bytes(shape: dict) -> int:  # noqa: A001 - the problem contract's name
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 4 * (m * k + k * n + m * n)
