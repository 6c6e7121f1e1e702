"""C = A @ B in float32 on small shapes that are not multiples of the tiles (CPU tests)."""

from __future__ import annotations

import math

import torch

SHAPES = [{"M": 48, "N": 40, "K": 64}, {"M": 33, "N": 70, "K": 32}]
HELDOUT_SHAPES = [{"M": 16, "N": 16, "K": 16}]
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
