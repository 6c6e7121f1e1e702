"""The spaces of the attention templates: prefill (`template_prefill.py`) and paged decode
(`template_decode.py`).

Constraints rule out, before anything compiles, what cannot fit an H200 or is known to be
hopeless: shared memory for the pipelined K and V tiles, fp32 registers per thread for the
accumulator and the scores, a query block split over more warps than it has rows of 16,
and points that only fail or duplicate another (warp specialisation, which Triton 3.6 on
Hopper builds as if absent, or not at all with 4 warps and eager rescaling; the KV order of a
non-causal kernel; a reduction strategy with one split). The prefill KV tile stops at 128
keys: the 256x256 / 16-warp class of tiles made ptxas run for minutes on the H200, and
every 256-key tile spills in sm_90 builds of this template, whatever the warps. What else fails (a
warp-specialised loop this Triton cannot split, descriptors it cannot build) fails once and
is learned by the search (`SearchOptions.learn_failures`).

>>> space = attention_space(head_dim=128, causal=True)
>>> len(space.params), space.size, space.is_valid(ATTENTION_DEFAULTS)
(11, 17280, True)
>>> space.why_invalid(dict(ATTENTION_DEFAULTS, BLOCK_M=256, BLOCK_N=128, num_stages=2))
'registers: a 256x128 tile (fp32 accumulator 256x128, scores 256x128) is 320 registers per thread with 8 warps (at most 176)'
>>> decode_space(head_dim=128, group=4).why_invalid(dict(DECODE_DEFAULTS, NUM_SPLITS=1, REDUCE=1))
'reduce: one split writes the output itself (REDUCE=1 would duplicate REDUCE=0)'
"""

from __future__ import annotations

from evokernel.core.genome import Genome
from evokernel.core.geometry import Geometry
from evokernel.search_spaces.attention.template_prefill import DEFAULTS as ATTENTION_DEFAULTS
from evokernel.search_spaces.attention.template_decode import DEFAULTS as DECODE_DEFAULTS
from evokernel.core.space import (
    H200_SHARED_MEMORY_BYTES,
    Choice,
    Constraint,
    IntRange,
    Ordinal,
    Point,
    PowerOfTwo,
    SearchSpace,
    thread_limit,
)

__all__ = [
    "attention_space",
    "attention_class",
    "prefill_gluon_space",
    "prefill_gluon_class",
    "decode_space",
    "decode_class",
    "ATTENTION_DEFAULTS",
    "DECODE_DEFAULTS",
]

#: Prefill: fp32 registers per thread allowed for the accumulator, the scores and the
#: probabilities (at half width), out of 255, the rest going to addresses, row statistics and
#: loop state; with 16 warps the register file (64K per SM) leaves 128 a thread, so the tile
#: gets 128 - 40. Calibrated on sm_90 cubins of the template (Triton 3.9's ptxas, no GPU
#: needed): every tile kept compiles without spills or with a few bytes in one load mode;
#: every tile pruned spills hundreds of bytes in both.
TILE_REGISTERS = 176
#: Decode: the same count for the query rows of a program; the gathered K/V addresses (one
#: per key) take much of the rest (BLOCK_N 64 on one warp already spills).
DECODE_TILE_REGISTERS = 96


def _register_cap(num_warps: int, cap: int) -> int:
    return min(cap, 65536 // (32 * num_warps) - 40)


def _flag(name: str) -> Choice:
    return Choice(name, [0, 1])


def attention_space(
    *,
    head_dim: int = 128,
    causal: bool = True,
    elem_bytes: int = 2,
    shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES,
) -> SearchSpace:
    """Tiles, warps, stages and the structural genes of the prefill template for one
    head_dim (the tile constraints depend on it) and masking (REVERSE_KV only when causal)."""
    D = head_dim

    def shared_memory(p: Point) -> str | None:
        need = (p.BLOCK_M * D + 2 * p.num_stages * p.BLOCK_N * D) * elem_bytes
        if need > shared_memory_bytes:
            return (
                f"shared memory: (BLOCK_M*D + 2*num_stages*BLOCK_N*D) * {elem_bytes} B = {need} B "
                f"> {shared_memory_bytes} B"
            )
        return None

    def registers(p: Point) -> str | None:
        per_thread = (p.BLOCK_M * D + 3 * p.BLOCK_M * p.BLOCK_N // 2) // (32 * p.num_warps)
        cap = _register_cap(p.num_warps, TILE_REGISTERS)
        if per_thread > cap:
            return (
                f"registers: a {p.BLOCK_M}x{p.BLOCK_N} tile (fp32 accumulator {p.BLOCK_M}x{D}, scores "
                f"{p.BLOCK_M}x{p.BLOCK_N}) is {per_thread} registers per thread with {p.num_warps} warps "
                f"(at most {cap})"
            )
        return None

    def rows_per_warp(p: Point) -> str | None:
        if p.BLOCK_M < 16 * p.num_warps:
            return (
                f"warps: BLOCK_M={p.BLOCK_M} over {p.num_warps} warps is under 16 rows a warp "
                f"(the MMA's row block; the row softmax would cross warps)"
            )
        return None

    def warp_spec(p: Point) -> str | None:
        if p.WARP_SPEC and not p.TMA:
            return "warp specialisation needs TMA loads"
        if p.WARP_SPEC:
            # sm_90 builds with Triton 3.6 (the H200's), compiled on the CPU: with 4 warps
            # its Hopper pass fails on this loop ("PassManager::run failed") unless
            # LAZY_RESCALE=1, where it builds the same PTX as WARP_SPEC=0; with 8 or 16 warps
            # the same PTX too. The recorded H200 sweep agrees: its 54 failed WARP_SPEC=1
            # kernels are the 4-warp eager-rescale ones, the others ran as fast as their twins
            return (
                "warp specialisation: Triton 3.6 builds none for this kernel on Hopper (4 warps: its pass "
                "fails, or with LAZY_RESCALE=1 builds the same kernel as without; 8-16: the same kernel)"
            )
        return None

    def kv_order(p: Point) -> str | None:
        if p.REVERSE_KV and not causal:
            return "REVERSE_KV: the KV order matters only for causal attention (a duplicate of REVERSE_KV=0)"
        return None

    return SearchSpace(
        [
            PowerOfTwo("BLOCK_M", 64, 256),
            PowerOfTwo("BLOCK_N", 32, 128),  # 256-wide tiles spill at any warp count (and see above)
            PowerOfTwo("num_warps", 4, 16),
            IntRange("num_stages", 1, 5),
            _flag("CAUSAL_SKIP"),
            _flag("EXP2"),
            _flag("LAZY_RESCALE"),
            _flag("PERSISTENT"),
            _flag("TMA"),
            _flag("WARP_SPEC"),
            _flag("REVERSE_KV"),
        ],
        constraints=[
            Constraint(shared_memory, "shared memory"),
            thread_limit(),
            Constraint(registers, "registers"),
            Constraint(rows_per_warp, "warps"),
            Constraint(warp_spec, "warp specialisation"),
            Constraint(kv_order, "kv order"),
        ],
        name=f"attention_prefill_d{D}_{'causal' if causal else 'full'}",
        geometry=Geometry.infer(["BLOCK_M", "BLOCK_N", "num_warps", "num_stages"]),  # query blocks x heads x sequences
    )


def attention_class(genome: Genome) -> str:
    """Niche in the elite archive: the tile, how the work is scheduled, how K/V are loaded."""
    how = "persistent" if genome["PERSISTENT"] else "grid"
    return f"{genome['BLOCK_M']}x{genome['BLOCK_N']}/{how}" + ("/tma" if genome["TMA"] else "")


def prefill_gluon_space(*, head_dim: int = 128, causal: bool | None = None) -> SearchSpace:
    """The genes of the Gluon (FA3-style) prefill kernel
    (`template_prefill_gluon.py`): tiles, warps and slots, and the structures it turns on and
    off (OVERLAP: the scores of the next block under this block's P V; PINGPONG: two consumer
    warpgroups taking turns; PERSISTENT: one program per SM; QSTAGES: a second Q slot, the
    next work item's Q loaded under this one; TMA_STORE: the output out by a TMA store the
    consumers do not wait for; BY_SEQUENCE: causal work sequence by sequence, for L2 reuse of
    its K and V; SNAKE: a persistent program's rounds alternately forward and backward over
    the programs, evening out a static schedule's loads). Its rules
    (`check_gluon_params`: layouts, the H200's shared memory, registers) prune before any
    compile. The genes are the same with and without the causal mask; `causal`, where given,
    names the masking in the space's name (which the SGLang export reads).

    >>> space = prefill_gluon_space()
    >>> space.is_valid(dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, OVERLAP=1, PINGPONG=1,
    ...     PERSISTENT=1, QSTAGES=2, TMA_STORE=1, BY_SEQUENCE=1, SNAKE=1))
    True
    >>> len(space.valid_points())
    800
    """
    from evokernel.search_spaces.attention.template_prefill_gluon import check_gluon_params

    def rules(p: Point) -> str | None:
        return check_gluon_params(p, head_dim)  # (a Point is the dict of the genes)

    return SearchSpace(
        [
            PowerOfTwo("BLOCK_M", 64, 128),
            PowerOfTwo("BLOCK_N", 64, 256),
            PowerOfTwo("num_warps", 4, 8),
            IntRange("num_stages", 1, 4),
            _flag("OVERLAP"),
            _flag("PINGPONG"),
            _flag("PERSISTENT"),
            IntRange("QSTAGES", 1, 2),
            _flag("TMA_STORE"),
            _flag("BY_SEQUENCE"),
            _flag("SNAKE"),
        ],
        constraints=[Constraint(rules, "the Gluon kernel's layouts and the H200's limits")],
        name=f"attention_prefill_gluon_d{head_dim}" + ("" if causal is None else "_causal" if causal else "_full"),
        geometry=Geometry.infer(["BLOCK_M", "BLOCK_N", "num_warps", "num_stages"]),
    )


def prefill_gluon_class(genome: Genome) -> str:
    """Niche in the elite archive: the tile and the schedule."""
    how = "pingpong" if genome["PINGPONG"] else ("overlap" if genome["OVERLAP"] else "serial")
    return f"{genome['BLOCK_M']}x{genome['BLOCK_N']}/{how}" + ("/persistent" if genome["PERSISTENT"] else "")


def decode_space(
    *,
    head_dim: int = 128,
    group: int = 4,
    elem_bytes: int = 2,
    shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES,
    max_splits: int = 128,
    prefetch: bool = True,
    pdl: bool = True,
    thirds: bool = True,
) -> SearchSpace:
    """Splits, tile, warps, stages and the reduction of the paged decode template for one
    head_dim and GQA group size (H_q / H_kv query heads share a program: at least 16 rows).
    NUM_SPLITS: "auto" (0) or a power of two up to `max_splits` (128 since session 23, when the
    reductions stopped reading one split a load; the recorded H200 decode landscapes cover 64),
    and with `thirds` three times a power of two as well (3, 6, 12, ..., 96: session 25). Auto
    gives about two programs per SM where the H200's sm_90 compile of the winners fits three
    (146 registers a thread, 74 KB of shared memory: Nsight Compute at b1 x 32768 and 4 x 16384
    found 1.9 programs an SM and the DRAM 63% / 76% busy); 1.5x auto's splits fill the third,
    and on the H200 that was no faster (session 25: 96 splits 2.5% slower at b1 x 32768, 24 and
    12 level at 4 x 16384 and 8 x 8192), so no seed starts there.
    `prefetch`: the PREFETCH gene (session 23; its value 2, the next tile asked of L2 a step
    ahead: session 26; the recorded landscapes' space has none); `pdl`:
    the PDL gene (session 24: the reduce kernel as a programmatic dependent launch; session 25:
    its second and third bits, the split kernel as the dependent of the kernel before it and its
    reads before the wait)."""
    D = head_dim
    rows = max(16, 1 << (max(1, group) - 1).bit_length())

    def shared_memory(p: Point) -> str | None:
        # K/V tiles in flight: num_stages - 1 with the indices a step ahead (sm_90 compiles:
        # one K and one V tile per stage past the first); without, num_stages (an over-estimate:
        # the same-step gather gets one buffer on Triton 3.9, a later Triton may pipeline it)
        tiles = max(1, p.num_stages - 1) if p.get("PREFETCH") else p.num_stages
        need = (rows * D + 2 * tiles * p.BLOCK_N * D) * elem_bytes
        if need > shared_memory_bytes:
            return (
                f"shared memory: ({rows}*D + 2*{tiles} tiles*BLOCK_N*D) * {elem_bytes} B = {need} B "
                f"> {shared_memory_bytes} B"
            )
        return None

    def registers(p: Point) -> str | None:
        per_thread = (rows * D + 3 * rows * p.BLOCK_N // 2) // (32 * p.num_warps)
        cap = _register_cap(p.num_warps, DECODE_TILE_REGISTERS)
        if per_thread > cap:
            return (
                f"registers: {rows} query rows x (D={D} + BLOCK_N={p.BLOCK_N} scores) is {per_thread} registers "
                f"per thread with {p.num_warps} warps (at most {cap})"
            )
        return None

    def reduce(p: Point) -> str | None:
        if p.NUM_SPLITS == 1 and p.REDUCE:
            return "reduce: one split writes the output itself (REDUCE=1 would duplicate REDUCE=0)"
        if p.get("PDL", 0) & 1 and (p.NUM_SPLITS == 1 or p.REDUCE):
            return "reduce: no separate reduce kernel to launch early (PDL bit 1 would duplicate PDL without it)"
        return None

    return SearchSpace(
        [
            # 0: auto (see template_decode.auto_splits)
            Ordinal("NUM_SPLITS", split_values(max_splits, thirds), default=8),
            PowerOfTwo("BLOCK_N", 16, 128),
            PowerOfTwo("num_warps", 1, 8),
            IntRange("num_stages", 1, 4),
            _flag("REDUCE"),
            # 1: the indices a step ahead; 2: two steps ahead, the next tile's rows asked of L2 (template_decode)
            *([Choice("PREFETCH", [0, 1, 2])] if prefetch else []),
            # bit 1: the reduce kernel launched early; bit 2: stage 1 launched early; bit 4: stage 1
            # reads its indices and prefetches its first tile before its wait, so only with bit 2
            # (template_decode)
            *([Choice("PDL", [0, 1, 2, 3, 6, 7])] if pdl else []),
        ],
        constraints=[
            Constraint(shared_memory, "shared memory"),
            Constraint(registers, "registers"),
            Constraint(reduce, "reduce"),
        ],
        name=f"attention_decode_d{D}_g{group}",
        geometry=Geometry.infer(["NUM_SPLITS", "BLOCK_N", "num_warps", "num_stages"]),  # sequences x KV heads x splits
    )


def split_values(max_splits: int = 128, thirds: bool = True) -> list[int]:
    """NUM_SPLITS' values, in order: 0 ("auto"), the powers of two up to max_splits and (thirds)
    three times a power of two below it.

    >>> split_values(16), split_values(16, thirds=False)
    ([0, 1, 2, 3, 4, 6, 8, 12, 16], [0, 1, 2, 4, 8, 16])
    """
    twos = [1 << i for i in range(max(1, max_splits).bit_length())]
    return [0] + sorted(set(twos + ([3 * t for t in twos if 3 * t < max_splits] if thirds else [])))


def decode_class(genome: Genome) -> str:
    """Niche in the elite archive: how the context is split and how the splits are combined."""
    splits = genome["NUM_SPLITS"] or "auto"
    pdl = genome.params.get("PDL", 0)
    return (
        f"splits{splits}/n{genome['BLOCK_N']}"
        + ("/lastblock" if genome["REDUCE"] else "")
        + {0: "", 1: "/prefetch", 2: "/l2ahead"}.get(genome.params.get("PREFETCH", 0), "/prefetch")
        + ("/pdl" if pdl & 1 else "")
        + ("/pdlwait" if pdl & 2 else "")
        + ("/early" if pdl & 4 else "")
    )
