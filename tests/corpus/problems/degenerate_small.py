"""A deliberately degenerate problem: the outputs are tiny (x * 1e-9) and the tolerance's
atol (1e-6, relative to an RMS floored at 1) dwarfs them, so a kernel that returns zeros
would pass. The judge must refuse to judge anything against it."""

from __future__ import annotations

import torch

SHAPES = [{"n": 1000}]
HELDOUT_SHAPES = [{"n": 77}]
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


def make_inputs(shape: dict, seed: int, device: str = "cpu") -> tuple[torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(shape["n"], generator=g, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x * 1e-9


def flops(shape: dict) -> int:
    return shape["n"]


def bytes(shape: dict) -> int:  # noqa: A001 - the problem contract's name
    return 8 * shape["n"]
