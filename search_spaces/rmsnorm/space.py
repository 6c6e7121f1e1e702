"""The space of the fused RMSNorm template: block width, rows per program, warps, stages.

Every validity rule of the family is here, each with the reason it gives:

- **lanes**: every thread holds at least one element of the block
  (`BLOCK_N * ROWS >= num_warps * 32`); more warps than that would idle.
- **registers**: no thread holds more than 64 fp32 elements of the block
  (`BLOCK_N * ROWS <= num_warps * 32 * 64`); beyond that the block spills.
- **hidden** (only when the space knows the hidden size): a block no wider than the row
  rounded up to a power of two (wider blocks only add masked-off lanes), and `num_stages`
  1 where one block holds the whole row (there is no loop to pipeline: another value would
  compile the same kernel).

>>> space = rmsnorm_space()
>>> space.size, len(space.valid_points())
(648, 432)
>>> space.why_invalid({"BLOCK_N": 64, "ROWS": 1, "num_warps": 4, "num_stages": 1})
'lanes: BLOCK_N * ROWS = 64 < num_warps * 32 = 128 (threads without an element)'
>>> space = rmsnorm_space(hidden=4096)
>>> space.why_invalid({"BLOCK_N": 8192, "ROWS": 1, "num_warps": 8, "num_stages": 1})
'hidden: BLOCK_N = 8192 > 4096, the row of 4096 rounded up to a power of two'
>>> space.why_invalid({"BLOCK_N": 4096, "ROWS": 1, "num_warps": 8, "num_stages": 2})
'stages: BLOCK_N = 4096 holds the whole row of 4096 (no loop): num_stages must be 1'
>>> space.is_valid(space.default()), len(space.valid_points())
(True, 356)
"""

from __future__ import annotations

from evokernel.core.genome import Genome
from evokernel.core.space import Constraint, IntRange, Point, PowerOfTwo, SearchSpace

__all__ = ["rmsnorm_space", "rmsnorm_class", "next_power_of_two", "MAX_BLOCK_N", "MAX_PER_THREAD"]

#: The widest block of the space: a Llama-3-70B row (8192) in one block, twice over.
MAX_BLOCK_N = 16384
#: Elements of the block one thread may hold before it spills registers.
MAX_PER_THREAD = 64


def next_power_of_two(n: int) -> int:
    """The least power of two >= n (1 for n <= 1).

    >>> [next_power_of_two(n) for n in (1, 200, 256, 5120)]
    [1, 256, 256, 8192]
    """
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _lanes(p: Point) -> str | None:
    if p.BLOCK_N * p.ROWS < p.num_warps * 32:
        return (
            f"lanes: BLOCK_N * ROWS = {p.BLOCK_N * p.ROWS} < num_warps * 32 = {p.num_warps * 32} "
            "(threads without an element)"
        )
    return None


def _registers(p: Point) -> str | None:
    per_thread = p.BLOCK_N * p.ROWS // (p.num_warps * 32)
    if per_thread > MAX_PER_THREAD:
        return (
            f"registers: BLOCK_N * ROWS / (num_warps * 32) = {per_thread} elements per thread "
            f"> {MAX_PER_THREAD} (spills)"
        )
    return None


def _hidden_rules(hidden: int) -> list[Constraint]:
    widest = max(64, next_power_of_two(hidden))  # the narrowest block of the space, at least

    def block(p: Point) -> str | None:
        if p.BLOCK_N > widest:
            return f"hidden: BLOCK_N = {p.BLOCK_N} > {widest}, the row of {hidden} rounded up to a power of two"
        return None

    def stages(p: Point) -> str | None:
        if p.BLOCK_N >= hidden and p.num_stages != 1:
            return f"stages: BLOCK_N = {p.BLOCK_N} holds the whole row of {hidden} (no loop): num_stages must be 1"
        return None

    return [Constraint(block, "hidden"), Constraint(stages, "stages")]


def rmsnorm_space(hidden: int | None = None) -> SearchSpace:
    """Block width along the row, rows per program, warps and pipeline stages of
    y = x / rms(x) * w (optionally after h = x + residual). `hidden` is the widest row the
    problem runs (its largest N); with it the space leaves out blocks wider than that row
    and stage counts that cannot matter."""
    if hidden is not None and not (isinstance(hidden, int) and hidden >= 1):
        raise ValueError(f"hidden must be a positive int, got {hidden!r}")
    block = MAX_BLOCK_N if hidden is None else min(MAX_BLOCK_N, max(64, next_power_of_two(hidden)))
    default_block = min(1024, block)
    constraints = [Constraint(_lanes, "lanes"), Constraint(_registers, "registers")]
    if hidden is not None:
        constraints += _hidden_rules(hidden)
    return SearchSpace(
        [
            PowerOfTwo("BLOCK_N", 64, MAX_BLOCK_N, default=default_block),
            PowerOfTwo("ROWS", 1, 8),
            PowerOfTwo("num_warps", 1, 32, default=min(4, default_block // 32)),
            IntRange("num_stages", 1, 3),
        ],
        constraints=constraints,
        name="rmsnorm",
    )


def rmsnorm_class(genome: Genome) -> str:
    """Niche of an RMSNorm genome in the elite archive: its block (`1x4096`: ROWS x BLOCK_N).

    >>> rmsnorm_class(rmsnorm_space().genome(BLOCK_N=4096, ROWS=1, num_warps=8, num_stages=1))
    '1x4096'
    """
    return f"{genome['ROWS']}x{genome['BLOCK_N']}"
