"""The space of the fp8 GEMM template (`search_spaces/gemm/template_fp8.py`).

>>> space = gemm_fp8_space(blockwise=True)
>>> space.why_invalid(dict(DEFAULTS, BK=256))
'scale groups: BK=256 does not divide the 128-wide scale groups'
>>> space.is_valid(DEFAULTS) and gemm_fp8_space(blockwise=False).is_valid(dict(DEFAULTS, BK=256))
True
"""

from __future__ import annotations

from evokernel.search_spaces.gemm.space import ACC_REGISTERS
from evokernel.search_spaces.gemm.template_fp8 import DEFAULTS, GROUP
from evokernel.core.space import (
    H200_SHARED_MEMORY_BYTES,
    Choice,
    Constraint,
    IntRange,
    Point,
    PowerOfTwo,
    SearchSpace,
    shared_memory_limit,
    thread_limit,
)

__all__ = ["gemm_fp8_space", "DEFAULTS"]


def _registers(p: Point) -> str | None:
    per_thread = p["BM"] * p["BN"] // (32 * p["num_warps"])
    if per_thread > ACC_REGISTERS:
        return (
            f"registers: a {p['BM']}x{p['BN']} fp32 accumulator is {per_thread} registers per thread with "
            f"{p['num_warps']} warps (at most {ACC_REGISTERS})"
        )
    return None


def gemm_fp8_space(*, blockwise: bool, shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES) -> SearchSpace:
    """Tiles (1-byte operands), grouping, warps, stages and split-K; with block scales, BK
    must divide the 128-wide scale groups."""
    constraints = [
        shared_memory_limit(shared_memory_bytes, elem_bytes=1),
        thread_limit(),
        Constraint(_registers, "registers"),
    ]
    if blockwise:
        constraints.append(
            Constraint(
                lambda p: (
                    None
                    if GROUP % p["BK"] == 0
                    else f"scale groups: BK={p['BK']} does not divide the {GROUP}-wide scale groups"
                ),
                "scale groups",
            )
        )
    return SearchSpace(
        [
            PowerOfTwo("BM", 16, 256),
            PowerOfTwo("BN", 32, 256),
            PowerOfTwo("BK", 64, 256),
            Choice("GROUP_M", [1, 8]),
            PowerOfTwo("num_warps", 4, 8),
            IntRange("num_stages", 2, 6),
            Choice("SPLIT_K", [1, 2, 4, 8]),
        ],
        constraints=constraints,
        name="gemm_fp8_" + ("block" if blockwise else "tensor"),
    )
