"""The space of the Hopper GEMM template (`search_spaces/triton_gemm.py`).

Constraints rule out, before anything compiles, what cannot fit an H200: shared memory for
the pipeline's stages, the accumulator's registers per thread (under `maxnreg` where set),
and warp specialisation without TMA (its producer warps issue bulk copies). What else fails
(a cluster shape Triton rejects, a warp-specialised loop this Triton cannot split) fails
once and is learned by the search (`SearchOptions.learn_failures`).

>>> space = gemm_space()
>>> len(space.params), space.size
(12, 245760)
>>> space.why_invalid(dict(DEFAULTS, BM=256, BN=256, num_warps=4))
'registers: a 256x256 fp32 accumulator is 512 registers per thread with 4 warps (at most 160)'
>>> space.is_valid(DEFAULTS)
True
"""

from __future__ import annotations

from evokernel.genome import Genome
from evokernel.search_spaces.triton_gemm import DEFAULTS
from evokernel.space import (
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

__all__ = ["gemm_space", "gemm_class", "DEFAULTS"]

#: Accumulator registers per thread allowed: 255 per thread in all, minus what addresses,
#: loop state and the epilogue take.
ACC_REGISTERS = 160


def _registers(p: Point) -> str | None:
    per_thread = p["BM"] * p["BN"] // (32 * p["num_warps"])
    cap = min(ACC_REGISTERS, p["maxnreg"] - 64) if p["maxnreg"] else ACC_REGISTERS
    if per_thread > cap:
        return (f"registers: a {p['BM']}x{p['BN']} fp32 accumulator is {per_thread} registers per thread with "
                f"{p['num_warps']} warps (at most {cap})")
    return None


def _warp_spec(p: Point) -> str | None:
    if p["WARP_SPEC"] and not p["TMA"]:
        return "warp specialisation needs TMA loads"
    return None


def gemm_space(*, elem_bytes: int = 2, shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES) -> SearchSpace:
    """Tiles, grouping, warps, stages, split-K, persistence, TMA, warp specialisation,
    cluster size and a register cap of C = epilogue(A @ B)."""
    return SearchSpace(
        [
            PowerOfTwo("BM", 16, 256),
            PowerOfTwo("BN", 32, 256),
            PowerOfTwo("BK", 32, 128),
            Choice("GROUP_M", [1, 8]),
            PowerOfTwo("num_warps", 4, 8),
            IntRange("num_stages", 2, 5),
            Choice("SPLIT_K", [1, 2, 4, 8]),
            Choice("PERSISTENT", [0, 1]),
            Choice("TMA", [0, 1]),
            Choice("WARP_SPEC", [0, 1]),
            Choice("num_ctas", [1, 2]),
            Choice("maxnreg", [0, 128, 168, 232]),
        ],
        constraints=[shared_memory_limit(shared_memory_bytes, elem_bytes=elem_bytes), thread_limit(),
                     Constraint(_registers, "registers"), Constraint(_warp_spec, "warp specialisation")],
        name="gemm_hopper",
    )


def gemm_class(genome: Genome) -> str:
    """Niche in the elite archive: the output tile and how the work is scheduled."""
    how = "persistent" if genome["PERSISTENT"] else "grid"
    return f"{genome['BM']}x{genome['BN']}/{how}" + (f"/splitk{genome['SPLIT_K']}" if genome["SPLIT_K"] > 1 else "")
