"""Where an RMSNorm search starts: the usual hand-tuned rule, and a looping variant.

The rule most RMSNorm kernels ship with (Liger-Kernel's, Unsloth's): one block holds the
whole row (BLOCK_N = the hidden size rounded up to a power of two) and the warps grow with
it, here so that each thread holds about 16 elements; narrow rows share a program (up to 8
rows, 2048 elements a program). The second seed loops over the row in blocks of 1024 with
two pipeline stages, what wide rows at few tokens may prefer. Starting points, not answers:
the search moves on from them.

>>> rmsnorm_seeds(4096)
[{'BLOCK_N': 4096, 'ROWS': 1, 'num_warps': 8, 'num_stages': 1}, {'BLOCK_N': 1024, 'ROWS': 1, 'num_warps': 2, 'num_stages': 2}]
>>> rmsnorm_seeds(200)  # a narrow row: one seed, 8 rows a program
[{'BLOCK_N': 256, 'ROWS': 8, 'num_warps': 4, 'num_stages': 1}]
"""

from __future__ import annotations

from evokernel.core.space import SearchSpace

from .space import MAX_BLOCK_N, next_power_of_two, rmsnorm_space

__all__ = ["rmsnorm_seeds", "one_block_seed"]

#: Elements of the block each thread holds in the seeds.
PER_THREAD = 16
#: Elements a program of the seeds covers at least, narrow rows sharing it.
PROGRAM_ELEMENTS = 2048


def _warps(elements: int) -> int:
    return max(1, min(32, elements // (32 * PER_THREAD)))


def one_block_seed(hidden: int) -> dict[str, int]:
    """The whole row in one block (capped at the space's widest), warps by its size."""
    block = max(64, min(MAX_BLOCK_N, next_power_of_two(hidden)))
    rows = max(1, min(8, PROGRAM_ELEMENTS // block))
    return {"BLOCK_N": block, "ROWS": rows, "num_warps": _warps(block * rows), "num_stages": 1}


def rmsnorm_seeds(hidden: int, space: SearchSpace | None = None) -> list[dict[str, int]]:
    """Seeds for `Search(seeds=...)` at rows of `hidden` elements: those valid in `space`
    (default `rmsnorm_space(hidden)`), without repeats."""
    space = space or rmsnorm_space(hidden)
    looping = {"BLOCK_N": 1024, "ROWS": 1, "num_warps": _warps(1024), "num_stages": 2}
    out: list[dict[str, int]] = []
    for point in (one_block_seed(hidden), looping):
        if space.is_valid(point) and point not in out:
            out.append(point)
    return out
