"""The space of a plain Triton matmul (the one the shipped H200 landscapes sweep).

>>> space = matmul_space()
>>> space.size, len(space.valid_points())
(960, 840)
>>> tile_class(space.genome(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=4))
'128x256'
"""

from __future__ import annotations

from evokernel.core.genome import Genome
from evokernel.core.geometry import Geometry
from evokernel.core.space import (
    H200_SHARED_MEMORY_BYTES,
    Choice,
    IntRange,
    PowerOfTwo,
    SearchSpace,
    shared_memory_limit,
    thread_limit,
)

__all__ = ["matmul_space", "tile_class"]


def matmul_space(*, elem_bytes: int = 2, shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES) -> SearchSpace:
    """Tile shape, grouped ordering, warps and pipeline stages of C = A @ B."""
    return SearchSpace(
        [
            PowerOfTwo("BM", 16, 256),
            PowerOfTwo("BN", 32, 256),
            PowerOfTwo("BK", 32, 128),
            Choice("GROUP_M", [1, 8]),
            PowerOfTwo("num_warps", 4, 8),
            IntRange("num_stages", 2, 5),
        ],
        constraints=[shared_memory_limit(shared_memory_bytes, elem_bytes=elem_bytes), thread_limit()],
        name="matmul",
        geometry=Geometry(
            kind="matmul",
            tiles={"M": "BM", "N": "BN", "K": "BK"},
            warps="num_warps",
            stages="num_stages",
            elem_bytes=elem_bytes,
            shared_kib=shared_memory_bytes / 1024,
        ),
    )


def tile_class(genome: Genome) -> str:
    """Niche of a matmul genome in the elite archive: its output tile."""
    return f"{genome['BM']}x{genome['BN']}"
