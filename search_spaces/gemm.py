"""The space of the Hopper GEMM template (`search_spaces/triton_gemm.py`).

Constraints rule out, before anything compiles, what cannot fit an H200: shared memory for
the pipeline's stages, the accumulator's registers per thread (under `maxnreg` where set),
and warp specialisation where Triton 3.6 cannot build it on Hopper. Its one form there is a
non-persistent kernel of 4 warps whose K loop Triton splits into a producer warpgroup
(TMA loads) and two consumer warpgroups of BM/2 rows each (12 warps): cuBLAS's `coop`
kernels' structure. Two rules keep duplicates out: the split-K fixup gene means something
only with split-K, and WARP_SPEC=1 with 8 warps or a persistent kernel compiles to the same
kernel as WARP_SPEC=0 (`warp_spec_idle`). What else fails
(a cluster shape Triton rejects, a warp-specialised loop this Triton cannot split) fails
once and is learned by the search (`SearchOptions.learn_failures`).

>>> space = gemm_space()
>>> len(space.params), space.size
(13, 1843200)
>>> space.why_invalid(dict(DEFAULTS, BM=256, BN=256, num_warps=4))
'registers: a 256x256 fp32 accumulator is 512 registers per thread with 4 warps (at most 160)'
>>> space.why_invalid(dict(DEFAULTS, SPLITK_FIXUP=1))
'split-K fixup: SPLITK_FIXUP=1 needs SPLIT_K > 1 (one split has no partials to sum)'
>>> space.is_valid(DEFAULTS)
True
>>> all(space.is_valid(p) for m in (16, 256, 4096) for p in gemm_seeds(m))
True
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from evokernel.core.genome import Genome
from evokernel.search_spaces.triton_gemm import DEFAULTS
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

__all__ = ["gemm_space", "gemm_class", "gemm_seeds", "wave_seeds", "cublas_seed", "coop_variant", "gluon_variant",
           "warp_spec_idle", "without_idle_genes", "DEFAULTS"]

#: Accumulator registers per thread allowed: 255 per thread in all, minus what addresses,
#: loop state and the epilogue take.
ACC_REGISTERS = 160


def _width(p: Point) -> int:
    """The output tile's columns: BN, plus the tail's where the genome has one."""
    return p["BN"] + p.get("BN_TAIL", 0)


def _registers(p: Point) -> str | None:
    if p["WARP_SPEC"]:  # two consumer warpgroups of BM/2 rows each hold the accumulator
        per_thread = p["BM"] * _width(p) // (2 * 128)
        if per_thread > ACC_REGISTERS:
            return (f"registers: a {p['BM'] // 2}x{_width(p)} fp32 accumulator per consumer warpgroup is "
                    f"{per_thread} registers per thread (at most {ACC_REGISTERS})")
        return None
    per_thread = p["BM"] * _width(p) // (32 * p["num_warps"])
    cap = min(ACC_REGISTERS, p["maxnreg"] - 64) if p["maxnreg"] else ACC_REGISTERS
    if per_thread > cap:
        return (f"registers: a {p['BM']}x{_width(p)} fp32 accumulator is {per_thread} registers per thread with "
                f"{p['num_warps']} warps (at most {cap})")
    return None


def warp_spec_idle(p: Point | dict) -> bool:
    """Whether WARP_SPEC=1 compiles to the very kernel WARP_SPEC=0 does: Triton 3.6 on Hopper
    specialises only the K loop of a non-persistent kernel of 4 warps (the PTX of 8-warp and
    of persistent kernels is identical either way, compiled for sm_90 on the CPU)."""
    return bool(p["WARP_SPEC"]) and (p["num_warps"] != 4 or bool(p["PERSISTENT"]))


def without_idle_genes(p: Point | dict) -> dict:
    """The point with WARP_SPEC off where it changes nothing (`warp_spec_idle`): how a
    winner recorded before that was ruled out (e.g. 128x256 w8 persistent "ws", calls
    AG-BE) is spelled in this space, the same kernel.

    >>> without_idle_genes(dict(DEFAULTS, WARP_SPEC=1, num_warps=8))["WARP_SPEC"]
    0
    """
    return dict(p, WARP_SPEC=0) if warp_spec_idle(p) else dict(p)


def _ws_scratch(p: Point, elem_bytes: int) -> int:
    """Shared memory a warp-specialised kernel takes beside its pipeline: the consumers'
    C tile converted for the store (16 KB per 128 columns of BN, 32 KB at 256; the fp32
    partial's whole tile with split-K) and the producer's barriers: Triton 3.6's sm_90
    kernels measured 128x256 s4 229608 B = 196608 + 33000, 128x(128+64) s5 221664 =
    204800 + 16864, 128x128 split-K 2 s4 196840 = 131072 + 65768."""
    if p["SPLIT_K"] > 1:  # (+1.5 KB: a review's 154 builds found one 15-stage point 256 B over at +1 KB)
        return p["BM"] * p["BN"] * 4 + 1536
    return 8192 * elem_bytes * max(1, p["BN"] // 128) + 1536


#: why WARP_SPEC=1 is out of `gemm_space` unless asked for (`warp_spec=True`)
WARP_SPEC_HANGS = ("warp specialisation: Triton 3.6's cooperative kernel (4 warps, non-persistent) hung on the "
                   "H200 in each of its 4 GPU test cases (call S11b); gemm_space(warp_spec=True) keeps it")


def _warp_spec(limit: int, elem_bytes: int, allowed: bool = True):
    def check(p: Point) -> str | None:
        if not p["WARP_SPEC"]:
            return None
        if not p["TMA"]:
            return "warp specialisation needs TMA loads"
        if warp_spec_idle(p):
            return ("warp specialisation: Triton 3.6 specialises only a non-persistent kernel of 4 warps on "
                    "Hopper (with 8 warps or persistent the kernel is the same as without)")
        if not allowed:
            return WARP_SPEC_HANGS
        if p["BM"] < 128:
            # its two consumer warpgroups each take BM/2 rows; at BM=64 each computed the whole
            # tile and 5 of 5 such kernels gave NaN (calls AF, BA, BD)
            return "warp specialisation: two consumer warpgroups of BM/2 rows need BM >= 128"
        if p.get("TMA_STORE") or p.get("SWAP_AB") or p["maxnreg"] or p["num_ctas"] > 1:
            # Triton 3.6's passes fail on the first two (sm_90, compiled on the CPU); its
            # warpgroups set their own registers (40 producer, 232 consumers)
            return "warp specialisation: without a TMA store, swap-AB, maxnreg or a CTA cluster"
        need = _pipeline_bytes(p, elem_bytes) + _ws_scratch(p, elem_bytes)
        if need > limit:
            return (f"warp specialisation: the pipeline and the consumers' C tile need {need} B of shared memory "
                    f"> {limit} B")
        return None
    return check


def _fixup(p: Point) -> str | None:
    if p["SPLITK_FIXUP"] and p["SPLIT_K"] == 1:
        return "split-K fixup: SPLITK_FIXUP=1 needs SPLIT_K > 1 (one split has no partials to sum)"
    return None


def _pipeline_bytes(p: Point, elem_bytes: int) -> int:
    """Shared memory of the K loop's stages: an A and a B tile each (B with its tail)."""
    return (p["BM"] * p["BK"] + p["BK"] * _width(p)) * elem_bytes * p["num_stages"]


def _staged_c_bytes(p: Point, elem_bytes: int) -> int:
    """Shared memory a TMA store stages C's tile (or half of it) in; C has A's dtype."""
    if not p.get("TMA_STORE"):
        return 0
    return p["BM"] * p["BN"] * elem_bytes // (2 if p["TMA_STORE"] == 2 else 1) + p["BM"] * p.get("BN_TAIL", 0) * elem_bytes


def _stream_k(limit: int, elem_bytes: int):
    def check(p: Point) -> str | None:
        if not p.get("STREAM_K"):
            return None
        if not (p["PERSISTENT"] and p["SPLIT_K"] == 1 and not p["WARP_SPEC"]):
            return "stream-K: STREAM_K=1 is a schedule of the persistent kernel, without split-K or warp specialisation"
        if p["num_ctas"] > 1 and p["TMA"]:
            # Triton 3.6 on the H200 (call Z1): its pipeliner fails ("PassManager::run failed")
            return "stream-K: with TMA loads, not on a CTA cluster (num_ctas > 1: Triton's pipeliner fails)"
        # inside the pipelined K loop, a partial tile's fp32 store goes through a layout
        # conversion in shared memory beside the pipeline's buffers (call Z5: 128x256x64 s3
        # needed 278552 B = 3 x 49152 + 128 x 256 x 4 + 24)
        need = _pipeline_bytes(p, elem_bytes) + p["BM"] * p["BN"] * 4 + _staged_c_bytes(p, elem_bytes)
        if need > limit:
            return f"stream-K: the pipeline, the partial's conversion and C's staging need {need} B of shared memory > {limit} B"
        return None
    return check


def _tma_store(limit: int, elem_bytes: int):
    def check(p: Point) -> str | None:
        if not p.get("TMA_STORE"):
            return None
        if not (p["TMA"] and p["SPLIT_K"] == 1):
            return "TMA store: C through a tensor descriptor goes with TMA loads and no split-K"
        if p["TMA_STORE"] == 2 and p["num_ctas"] > 1:  # Triton 3.6's pipeliner fails on it (call Z1: 5 of 5)
            return "TMA store: C in halves not on a CTA cluster (num_ctas > 1: Triton's pipeliner fails)"
        # the store stages its tile (or half of it) in shared memory beside the pipeline
        need = _pipeline_bytes(p, elem_bytes) + _staged_c_bytes(p, elem_bytes)
        if need > limit:
            return f"TMA store: the pipeline and the staged C tile need {need} B of shared memory > {limit} B"
        return None
    return check


def _bn_tail(limit: int, elem_bytes: int):
    def check(p: Point) -> str | None:
        tail = p.get("BN_TAIL", 0)
        if not tail:
            return None
        if tail >= p["BN"] or _width(p) > 320:
            return f"BN tail: a tail of {tail} columns needs BN > {tail} and BN + tail <= 320 (BN={p['BN']})"
        if p["SPLIT_K"] > 1 or p.get("SWAP_AB") or p.get("STREAM_K"):
            return "BN tail: tiles BN + BN_TAIL wide go without split-K, swap-AB or stream-K"
        need = _pipeline_bytes(p, elem_bytes) + _staged_c_bytes(p, elem_bytes)
        if p["PERSISTENT"] and not p.get("GLUON"):  # the tail's store converts its layout through shared
            need += 32800  # memory beside the live pipeline (call BC: 128x(256+64) s4 needed 229376 + 32800 B)
        if need > limit:  # (the generic rule counts BN alone)
            return f"BN tail: the pipeline with the B tiles of the tail needs {need} B of shared memory > {limit} B"
        return None
    return check


def _a_reg(p: Point) -> str | None:
    if not p.get("A_REG"):
        return None
    if _width(p) not in (128, 192, 256):
        return f"A_REG: the tile's {_width(p)} columns are not 2-4 MMAs of 64"
    if p["SPLIT_K"] > 1 or p.get("SWAP_AB") or p.get("STREAM_K"):
        return "A_REG: 64-wide MMAs sharing A go without split-K, swap-AB or stream-K"
    if p.get("TMA_STORE") == 2:  # (its C is stored in 64-column pieces already)
        return "A_REG: C in halves is C in 64-column pieces here (TMA_STORE=1)"
    return None


def gluon_warps(bm: int) -> int:
    """The Gluon kernel's consumer warps at BM rows: one warpgroup per 64 rows, two at most."""
    return 4 if bm <= 64 else 8


def _gluon(limit: int, elem_bytes: int):
    def check(p: Point) -> str | None:
        if not p.get("GLUON"):
            return None
        if not (p["TMA"] and p["SPLIT_K"] == 1 and not p["WARP_SPEC"] and p["num_ctas"] == 1 and not p["maxnreg"]
                and not (p.get("STREAM_K") or p.get("A_REG"))):
            return ("Gluon: a TMA tile without split-K, stream-K, A_REG, WARP_SPEC (it is warp-specialised "
                    "itself), a cluster or maxnreg")
        if p["GLUON"] == 2:  # ping-pong: two consumer warpgroups, a whole tile each, taking turns
            if p.get("SWAP_AB") or p["num_warps"] != 4 or p["BM"] not in (64, 128) or p["BN"] < 64:
                return "Gluon ping-pong: 4 warps a consumer, tiles of 64 or 128 rows and 64+ columns, not swapped"
            if not p["PERSISTENT"]:  # one tile per program leaves the second consumer idle
                return "Gluon ping-pong: persistent (the consumers take turns at a program's tiles)"
            if p.get("TMA_STORE") not in (1, 2):
                return "Gluon: C is stored by TMA, whole (TMA_STORE=1) or in halves (TMA_STORE=2)"
            # each consumer stages its own C
            need = _pipeline_bytes(p, elem_bytes) + 2 * _staged_c_bytes(p, elem_bytes) + 512
            if need > limit:
                return (f"Gluon ping-pong: the pipeline, two consumers' C staging and the barriers need {need} B "
                        f"of shared memory > {limit} B")
            return None
        if p.get("SWAP_AB"):  # the tile transposed: BN the MMA's rows, BM (the tokens) its narrow side
            if not (p["BM"] <= 64 and p["BN"] in (64, 128) and p["num_warps"] == 4 * (p["BN"] // 64)):
                return "Gluon swap-AB: BM of 16-64 tokens, BN 64 or 128 (one consumer warpgroup per 64 of BN)"
            if p.get("TMA_STORE") != 1 or p.get("BN_TAIL"):
                return "Gluon swap-AB: C stored whole (TMA_STORE=1), no tail"
        else:
            if p["BM"] < 64 or p["BN"] < 64:
                return "Gluon: a warpgroup MMA tile of at least 64 x 64"
            if p["num_warps"] != gluon_warps(p["BM"]):
                return (f"Gluon: one consumer warpgroup per 64 rows, at most two (BM={p['BM']}: "
                        f"{gluon_warps(p['BM'])} warps)")
            if p.get("TMA_STORE") not in (1, 2):
                return "Gluon: C is stored by TMA, whole (TMA_STORE=1) or in halves (TMA_STORE=2)"
        # the pipeline's slots, C's staging and the slots' barriers (sm_90 builds: 128x256
        # s4 in halves 229556 B = 196608 + 32768 + 180; 64x64 s12 205108 = 196608 + 8192 + 308)
        need = _pipeline_bytes(p, elem_bytes) + _staged_c_bytes(p, elem_bytes) + 512
        if need > limit:
            return f"Gluon: the pipeline, C's staging and the barriers need {need} B of shared memory > {limit} B"
        return None
    return check


def _swap_ab(p: Point) -> str | None:
    if p.get("SWAP_AB") and p["BN"] < 64:
        return "swap-AB: the weights' BN side becomes the MMA's rows, at least 64 (BN >= 64)"
    return None


def gemm_space(*, elem_bytes: int = 2, shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES,
               swap_ab: bool = False, stream_k: bool = False, tma_store: bool = False,
               bn_tail: bool = False, a_reg: bool = False, gluon: bool = False,
               warp_spec: bool = False) -> SearchSpace:
    """Tiles, grouping, warps, stages, split-K (and where its partials are summed),
    persistence, TMA, warp specialisation, cluster size and a register cap of
    C = epilogue(A @ B); with `swap_ab` also the SWAP_AB gene (the tile computed as B^T A^T,
    for few tokens), with `stream_k` the STREAM_K gene (the persistent kernel's last tiles
    split by K steps evenly over the SMs: no partly idle last wave), with `tma_store` the
    TMA_STORE gene (C through a tensor descriptor, whole or in two halves), with `bn_tail` the
    BN_TAIL gene (tiles BN + 32 or BN + 64 columns wide, as two accumulators: 96, 160, 192,
    288 and 320 wide tiles, which fill the last wave where powers of two do not; cuBLAS runs
    320-wide tiles at Qwen3's qkv, call BB), with `a_reg` the A_REG
    gene (a 128-256 column tile as 64-wide MMAs sharing A in registers), with `gluon` (and
    `tma_store`) the GLUON gene (the tile run by the warp-specialised Gluon kernel of
    search_spaces/gluon_gemm.py: a TMA producer warp, one consumer warpgroup per 64 rows,
    one MMA in flight, C by TMA; GLUON=2 its ping-pong form, two consumer warpgroups taking
    turns at whole tiles); see search_spaces/triton_gemm.py. Triton's own warp-specialised
    kernel (WARP_SPEC=1: cooperative, 4 warps, non-persistent) only with `warp_spec`: it hung
    on the H200 in every GPU test case (call S11b), so a search must not meet it.

    >>> gemm_space(swap_ab=True).why_invalid(dict(DEFAULTS, BM=16, BN=32, SWAP_AB=1))
    "swap-AB: the weights' BN side becomes the MMA's rows, at least 64 (BN >= 64)"
    >>> gemm_space(stream_k=True).why_invalid(dict(DEFAULTS, STREAM_K=1))
    'stream-K: STREAM_K=1 is a schedule of the persistent kernel, without split-K or warp specialisation'
    >>> gemm_space(stream_k=True).is_valid(dict(DEFAULTS, STREAM_K=1, PERSISTENT=1))
    True
    >>> gemm_space(stream_k=True).why_invalid(dict(DEFAULTS, BN=256, TMA=1, num_stages=3, STREAM_K=1, PERSISTENT=1))
    "stream-K: the pipeline, the partial's conversion and C's staging need 278528 B of shared memory > 232448 B"
    >>> big = dict(DEFAULTS, BN=256, TMA=1, num_stages=4)
    >>> gemm_space(tma_store=True).why_invalid(dict(big, TMA_STORE=1))
    'TMA store: the pipeline and the staged C tile need 262144 B of shared memory > 232448 B'
    >>> gemm_space(tma_store=True).is_valid(dict(big, num_stages=3, TMA_STORE=2))
    True
    >>> gemm_space(bn_tail=True).is_valid(dict(DEFAULTS, BN_TAIL=64, TMA=1))
    True
    >>> gemm_space(bn_tail=True).why_invalid(dict(DEFAULTS, BN=64, BN_TAIL=64))
    'BN tail: a tail of 64 columns needs BN > 64 and BN + tail <= 320 (BN=64)'
    >>> gemm_space(bn_tail=True).is_valid(dict(DEFAULTS, BN=256, BN_TAIL=64, TMA=1, num_stages=3))
    True
    >>> gemm_space(bn_tail=True).why_invalid(dict(DEFAULTS, BK=128, BN_TAIL=64, num_stages=3))
    'BN tail: the pipeline with the B tiles of the tail needs 245760 B of shared memory > 232448 B'
    """
    space = SearchSpace(
        [
            PowerOfTwo("BM", 16, 256),
            PowerOfTwo("BN", 32, 256),
            PowerOfTwo("BK", 32, 128),
            Choice("GROUP_M", [1, 8]),
            PowerOfTwo("num_warps", 4, 8),
            # up to 16: cuBLAS runs narrow tiles 6-16 stages deep (call BB: 64x64 with 13
            # stages at Qwen3's o, M=256, 64x32 with 16 at Llama's o, M=64); shared memory
            # bounds it per tile (64x64x64 13 stages: 213 KB, 58 registers, sm_90 ptxas)
            IntRange("num_stages", 2, 16),
            Choice("SPLIT_K", [1, 2, 4, 8]),
            Choice("SPLITK_FIXUP", [0, 1]),
            Choice("PERSISTENT", [0, 1]),
            Choice("TMA", [0, 1]),
            Choice("WARP_SPEC", [0, 1]),
            Choice("num_ctas", [1, 2]),
            Choice("maxnreg", [0, 128, 168, 232]),
        ],
        constraints=[shared_memory_limit(shared_memory_bytes, elem_bytes=elem_bytes), thread_limit(),
                     Constraint(_registers, "registers"),
                     Constraint(_warp_spec(shared_memory_bytes, elem_bytes, warp_spec), "warp specialisation"),
                     Constraint(_fixup, "split-K fixup")],
        name="gemm_hopper",
    )
    if swap_ab:
        space = SearchSpace([*space.params, Choice("SWAP_AB", [0, 1])], constraints=[*space.constraints,
                            Constraint(_swap_ab, "swap-AB")], name="gemm_hopper_swapab")
    if stream_k:
        space = SearchSpace([*space.params, Choice("STREAM_K", [0, 1])], constraints=[*space.constraints,
                            Constraint(_stream_k(shared_memory_bytes, elem_bytes), "stream-K")],
                            name=space.name + "_streamk")
    if tma_store:
        space = SearchSpace([*space.params, Choice("TMA_STORE", [0, 1, 2])], constraints=[*space.constraints,
                            Constraint(_tma_store(shared_memory_bytes, elem_bytes), "TMA store")],
                            name=space.name + "_tmastore")
    if bn_tail:
        space = SearchSpace([*space.params, Choice("BN_TAIL", [0, 32, 64])], constraints=[*space.constraints,
                            Constraint(_bn_tail(shared_memory_bytes, elem_bytes), "BN tail")],
                            name=space.name + "_bntail")
    if a_reg:
        space = SearchSpace([*space.params, Choice("A_REG", [0, 1])], constraints=[*space.constraints,
                            Constraint(_a_reg, "A in registers")], name=space.name + "_areg")
    if gluon:
        if not tma_store:
            raise ValueError("gemm_space(gluon=True) needs tma_store=True: the Gluon kernel's C store is the "
                             "TMA_STORE gene (1 whole, 2 in halves)")
        space = SearchSpace([*space.params, Choice("GLUON", [0, 1, 2])], constraints=[*space.constraints,
                            Constraint(_gluon(shared_memory_bytes, elem_bytes), "Gluon")], name=space.name + "_gluon")
    return space


def gemm_class(genome: Genome) -> str:
    """Niche in the elite archive: the output tile and how the work is scheduled."""
    how = ("streamk" if genome.params.get("STREAM_K") else "persistent") if genome["PERSISTENT"] else "grid"
    split = f"/splitk{genome['SPLIT_K']}" if genome["SPLIT_K"] > 1 else ""
    kernel = {1: "/gluon", 2: "/pingpong"}.get(genome.params.get("GLUON", 0), "")
    return f"{genome['BM']}x{_width(genome.params)}/{how}{split}{kernel}"


def _point(BM: int, BN: int, BK: int, w: int, s: int, **extra: int) -> dict[str, int]:
    return {**DEFAULTS, "BM": BM, "BN": BN, "BK": BK, "num_warps": w, "num_stages": s, **extra}


#: the tail's own MMA's rate per column, relative to the main MMA's, fitted to call AB's
#: probe: 128x(128+64) ran at ~0.85 of a full-width MMA's rate, 128x(128+32) at ~0.6
TAIL_RATE = {0: 1.0, 32: 0.23, 64: 0.65}


def _tail_rate(bn: int, tail: int) -> float:
    """A tile BN + tail wide's rate relative to one MMA of its whole width: 0.85 for 128+64,
    0.6 for 128+32, ~0.9 for 256+64 (the tail a smaller part of the tile).

    >>> round(_tail_rate(128, 64), 2), round(_tail_rate(128, 32), 2), round(_tail_rate(256, 64), 2)
    (0.85, 0.6, 0.9)
    """
    return (bn + tail) / (bn + tail / TAIL_RATE[tail]) if tail else 1.0


def _tile_rate(bm: int, w: int) -> float:
    """A tile's output rate per SM relative to 128x256 (rounded from the probes: 128x128 runs
    at ~0.85, 64x128 at ~0.7, call AB; 64x256 with 4 warps and 5 stages at ~0.9, beating
    128x128 at Qwen3 qkv M=2048 and 128x256 at Llama gate_up M=512, call BD): smaller tiles
    read more operand bytes per MMA."""
    if bm >= 128:
        return 1.0 if w >= 192 else 0.85 if w >= 128 else 0.7
    if bm == 64 and w >= 256:
        return 0.9
    if w <= 64:  # narrow tiles, for memory-bound shapes, with deep pipelines (a guess: unmeasured)
        return 0.6 if w == 64 else 0.5
    return 0.8 if bm * w >= 64 * 192 else 0.7


def _fitting_point(space: SearchSpace, bm: int, bn: int, bk: int, depths: Iterable[int], *, tma_store: bool,
                   coop: bool = False, warps: int | None = None, stores: tuple[int, ...] | None = None,
                   **genes: int) -> dict[str, int] | None:
    """The first point of `space` with this tile at the deepest of `depths` that fits, C
    staged whole, else in halves, else stored from registers (a 128x320 tile's pipeline
    leaves no room for the whole of C); one warpgroup (4 warps) per tile of up to 64 rows,
    two for larger ones (64x320 ran 0.0160 ms with 4 warps, 0.0267 with 8: Qwen3 qkv
    M=512, call BC). With `coop`, the warp-specialised form instead (`coop_variant`);
    `warps` and `stores` (TMA_STORE values, in order) override those choices. None where no
    depth fits."""
    if coop:
        genes = dict(genes, WARP_SPEC=1, PERSISTENT=0)
    if stores is None:
        stores = (0,) if tma_store and coop else (1, 2, 0) if tma_store and genes.get("SPLIT_K", 1) == 1 \
            else (0,) if tma_store else (None,)
    if warps is None:
        warps = 4 if bm <= 64 or coop else 8
    for depth in depths:
        for store in stores:
            p = _point(bm, bn, bk, warps, depth, **genes, **({} if store is None else {"TMA_STORE": store}))
            if space.is_valid(p):
                return p
    return None


def coop_variant(space: SearchSpace, p: dict[str, int]) -> dict[str, int] | None:
    """The warp-specialised ("cooperative") form of a TMA tile of at least 128 rows, or None:
    one producer warpgroup issuing the TMA loads and two consumer warpgroups of BM/2 rows
    each running the MMAs (Triton 3.6 builds it from a non-persistent 4-warp kernel whose K
    loop is `warp_specialize`d: 12 warps, the producer at 40 registers, the consumers at
    232), as cuBLAS's `coop` kernels run 128x192 and 128x256 tiles on the H200 (call BB:
    every row from M=2048 up, Llama's qkv at M=512); its pipeline as deep as `p`'s plus one
    stage (a producer with its own warps keeps more stages in flight), or less where it
    does not fit, C stored from registers (a TMA store fails to compile with it).

    Where `space` leaves it out (`gemm_space`'s default: it hung on the H200, call S11b), None.

    >>> q = coop_variant(gemm_space(warp_spec=True), _point(128, 256, 64, 8, 3, TMA=1, PERSISTENT=1))
    >>> q["num_warps"], q["num_stages"], q["WARP_SPEC"], q["PERSISTENT"]
    (4, 4, 1, 0)
    >>> coop_variant(gemm_space(warp_spec=True), _point(64, 256, 64, 4, 4, TMA=1)) is None
    True
    >>> coop_variant(gemm_space(), _point(128, 256, 64, 8, 3, TMA=1, PERSISTENT=1)) is None
    True
    """
    if p["BM"] < 128 or not p["TMA"] or p.get("SWAP_AB") or p.get("STREAM_K") or p.get("A_REG"):
        return None
    base = {k: v for k, v in p.items() if k not in ("BM", "BN", "BK", "num_warps", "num_stages")}
    base.update(maxnreg=0, num_ctas=1, **({"TMA_STORE": 0} if "TMA_STORE" in p else {}))
    return _fitting_point(space, p["BM"], p["BN"], p["BK"], range(min(p["num_stages"] + 1, 8), 1, -1),
                          tma_store=False, coop=True, **base)


def gluon_variant(space: SearchSpace, p: dict[str, int]) -> dict[str, int] | None:
    """The Gluon kernel's form of a TMA tile (`GLUON=1`: search_spaces/gluon_gemm.py), or
    None where it has none (split-K, fewer than 64 rows or columns unswapped, or no GLUON
    gene in `space`): the same tile (its BN tail, its swap-AB too) and schedule, one consumer warpgroup per 64
    rows, its pipeline as deep as `p`'s plus one stage or less where it does not fit, C
    staged whole where it fits, else in halves.

    >>> space = gemm_space(tma_store=True, gluon=True)
    >>> q = gluon_variant(space, dict(_point(128, 256, 64, 8, 3, TMA=1, PERSISTENT=1), TMA_STORE=2, GLUON=0))
    >>> q["GLUON"], q["num_warps"], q["num_stages"], q["TMA_STORE"], q["PERSISTENT"]
    (1, 8, 4, 2, 1)
    """
    swap = bool(p.get("SWAP_AB"))
    if "GLUON" not in space.names or p["SPLIT_K"] > 1 or not p["TMA"] or p.get("STREAM_K") or p.get("A_REG") \
            or (p["BN"] < 64 if swap else (p["BM"] < 64 or p["BN"] < 64)):
        return None
    base = {k: v for k, v in p.items() if k not in ("BM", "BN", "BK", "num_warps", "num_stages", "TMA_STORE")}
    base.update(GLUON=1, WARP_SPEC=0, maxnreg=0, num_ctas=1)
    return _fitting_point(space, p["BM"], p["BN"], p["BK"], range(min(p["num_stages"] + 1, 16), 1, -1),
                          tma_store=True, warps=4 * (p["BN"] // 64) if swap else gluon_warps(p["BM"]),
                          stores=(1,) if swap else (1, 2), **base)


def wave_seeds(m: int, n: int, *, sms: int = 132, tma_store: bool = False, top: int = 4,
               shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES) -> list[dict[str, int]]:
    """TMA tiles (BN_TAIL genes set) whose count fills the GPU's waves best at an M x N output:
    for each tile of 64-256 rows and 64-256 columns, at least 64 x 128 (96, 160, 192 and 320
    with a tail), and 64x32 and 64x64 with the deepest pipeline that fits (as cuBLAS runs them
    at Qwen3's o M=256 and Llama's o M=64, call BB) -- those without a tail also split in two
    along K where they are fewer than the SMs, scored 10% down for the partials -- the
    fraction of the SMs' time in whole waves that does useful work (tiles over the waves'
    slots, times the tiles' coverage of M x N), times the tile's own rate (`_tile_rate`,
    `_tail_rate`); the `top` best, ties to the larger tile. One warpgroup (4 warps) per
    64-row tile, two per larger one. At
    M=512 x N=6144 on 132 SMs: 128x192 tiles (128 of them, 97%), then 128x256 (96, 73%).
    The search still measures them; this only says where to start.

    >>> [(p["BM"], p["BN"] + p["BN_TAIL"]) for p in wave_seeds(512, 6144)][:2]
    [(128, 192), (128, 256)]
    >>> [(p["BM"], p["BN"], p["SPLIT_K"]) for p in wave_seeds(256, 2048)][:1]  # Qwen3's o at 256 tokens
    [(64, 128, 2)]
    >>> [(p["BM"], p["BN"] + p["BN_TAIL"]) for p in wave_seeds(2048, 5120)][:2]  # 256 tiles of 128x320: 1.94 waves
    [(128, 320), (64, 256)]
    >>> [(p["BM"], p["BN"] + p["BN_TAIL"]) for p in wave_seeds(512, 5120)][:1]  # cuBLAS's tile there (call BB)
    [(64, 320)]
    >>> [(p["BM"], p["BN"], p["num_stages"]) for p in wave_seeds(64, 4096)][:2]  # Llama-3-8B's o at 64 tokens
    [(64, 64, 14), (64, 32, 16)]
    """
    space = gemm_space(tma_store=tma_store, bn_tail=True, shared_memory_bytes=shared_memory_bytes)
    scored = []
    for bm in (64, 128, 256):
        for bn, tail in ((32, 0), (64, 0), (64, 32), (128, 0), (128, 32), (128, 64), (256, 0), (256, 64)):
            w = bn + tail
            if (bm * w < 64 * 128 and not (bm == 64 and w <= 64)) or (w == 32 and bm != 64):
                continue
            tiles_m, tiles_n = -(-m // bm), -(-n // w)
            # split-K only where the tiles alone do not fill one wave (its partials' traffic
            # grows with M x N; with a wave or more it costs more than the idle SMs did)
            for split in (1, 2) if not tail and tiles_m * tiles_n < sms else (1,):
                tiles = tiles_m * tiles_n * split
                waves = -(-tiles // sms)
                fill = tiles / (waves * sms) * (m / (tiles_m * bm)) * (n / (tiles_n * w))
                if split > 1:  # the partials' round trip through the workspace
                    fill *= 0.9
                # the tail's own MMA reads A from shared memory again for few columns: per
                # tile, 128x(128+64) ran at ~0.83 of 128x256's rate and 128x(128+32) at
                # ~0.6 of 128x128's (call AB's probe)
                fill *= _tail_rate(bn, tail) * _tile_rate(bm, w)
                # one warpgroup per 64 rows: 64x320 ran 0.0160 ms with 4 warps and 0.0267
                # with 8 (Qwen3 qkv, M=512, call BC)
                # 64-row tiles run deeper pipelines (64x(128+64): 5 stages 0.0419 ms, 4 stages
                # 0.0497 at Llama qkv M=512, call BC); tiles with a tail are not persistent
                # (128x(256+64) at Qwen3 qkv M=2048: 0.0805 ms persistent, 0.0667 not)
                depths = range(16, 2, -1) if bm == 64 and w <= 64 else (5, 4, 3) if bm == 64 else (4, 3)
                p = _fitting_point(space, bm, bn, 64, depths, tma_store=tma_store, TMA=1, BN_TAIL=tail,
                                   PERSISTENT=int(waves > 1 and not tail), SPLIT_K=split, SPLITK_FIXUP=int(split > 1))
                if p is not None:
                    scored.append((round(fill, 3), bm * w, p))
    scored.sort(key=lambda x: (x[0], x[1]), reverse=True)
    return [p for _, _, p in scored[:top]]


#: cuBLAS's Hopper kernels (CUDA 12.9+): nvjet_sm90_tst_<rows>x<cols>_<BK>x<stages>_<cluster>_...
_NVJET = re.compile(r"nvjet_sm90_tst_(\d+)x(\d+)_(\d+)x(\d+)_\d+x\d+_")


def _pow2_floor(x: int, lo: int, hi: int) -> int:
    p = lo
    while p * 2 <= min(x, hi):
        p *= 2
    return p


def cublas_seed(kernel: str, m: int, n: int, *, sms: int = 132, tma_store: bool = False, swap_ab: bool = False,
                shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES, warp_spec: bool = False) -> dict[str, int] | None:
    """The template's nearest point to the kernel cuBLAS ran at M x N (its name, as
    torch.profiler reports it), or None for a kernel whose name says no tile. cuBLAS computes
    C^T for row-major torch tensors, so its tile's rows run along our N and its columns along
    our M. Widths that are no power of two become BN + BN_TAIL (192 = 128 + 64, 320 = 256 + 64),
    rows that are none round down (192 -> 128); its stages are capped at what fits, its
    columns (our rows) under 64 are a swap-AB tile where `swap_ab` (cuBLAS's C^T is our
    B^T A^T: the weights fill the MMA's 64 rows, the tokens its 16-32 columns), its
    split-K becomes SPLIT_K=2 with the in-kernel fixup, its cluster is dropped
    (num_ctas=2 fails or gives NaN in Triton 3.6 here). Its `coop` kernels (a producer
    warpgroup and two consumer ones) become Triton's warp-specialised form (`coop_variant`)
    where `warp_spec` lets the space hold it (it hung on the H200, call S11b), else the plain
    tile (whose Gluon form `gluon_variant` gives: the same structure). At
    Qwen3's qkv, M=512, cuBLAS's 320x64 tile became the 64x(256+64) that beat it (1.021,
    call BD).

    >>> p = cublas_seed("nvjet_sm90_tst_320x64_64x4_1x2_h_bz_NNT", 512, 5120, tma_store=True)
    >>> p["BM"], p["BN"], p["BN_TAIL"], p["num_warps"], p["num_stages"]
    (64, 256, 64, 4, 4)
    >>> p = cublas_seed("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_NNT", 256, 2048)  # Qwen3's o (call BB)
    >>> p["BM"], p["BN"], p["num_stages"], p["SPLIT_K"]
    (64, 64, 13, 1)
    >>> p = cublas_seed("nvjet_sm90_tst_64x32_64x16_1x2_h_bz_NNT", 64, 4096, swap_ab=True)  # Llama's o
    >>> p["BM"], p["BN"], p["SWAP_AB"], p["num_stages"]
    (32, 64, 1, 16)
    >>> name = "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT"  # Llama qkv M=512, call BB
    >>> p = cublas_seed(name, 512, 6144, warp_spec=True)
    >>> p["BM"], p["BN"] + p["BN_TAIL"], p["num_warps"], p["num_stages"], p["WARP_SPEC"], p["PERSISTENT"]
    (128, 192, 4, 5, 1, 0)
    >>> p = cublas_seed(name, 512, 6144)
    >>> p["BM"], p["BN"] + p["BN_TAIL"], p["num_warps"], p["num_stages"], p["WARP_SPEC"]
    (128, 192, 8, 5, 0)
    >>> cublas_seed("void cublasLt::splitKreduce_kernel<32, 16, int>", 16, 4096) is None
    True
    """
    match = _NVJET.search(kernel)
    if not match:
        return None
    rows, cols, bk, stages = map(int, match.groups())
    split = 2 if "splitK" in kernel else 1
    bm = _pow2_floor(cols, 16, 256)
    bn = _pow2_floor(rows, 32, 256)
    tail = rows - bn if rows - bn in (32, 64) and rows - bn < bn and split == 1 else 0
    tiles = -(-m // bm) * -(-n // (bn + tail)) * split
    swap = {"SWAP_AB": int(bm < 64 and bn >= 64 and not tail)} if swap_ab else {}
    space = gemm_space(tma_store=tma_store, bn_tail=True, swap_ab=swap_ab, shared_memory_bytes=shared_memory_bytes,
                       warp_spec=warp_spec)
    return _fitting_point(space, bm, bn, _pow2_floor(bk, 32, 128), range(min(stages, 16), 1, -1),
                          tma_store=tma_store, coop="_coop" in kernel and bm >= 128 and warp_spec, TMA=1, BN_TAIL=tail,
                          PERSISTENT=int(tiles > sms and not tail), SPLIT_K=split, SPLITK_FIXUP=int(split > 1), **swap)


def gemm_seeds(m: int, *, swap_ab: bool = False, stream_k: bool = False, tma_store: bool = False,
               bn_tail: bool = False, gluon: bool = False, warp_spec: bool = False) -> list[dict[str, int]]:
    """Known-good starting points for `Search(seeds=...)` at M tokens: the template's default
    (Triton's matmul tutorial on Hopper), the tile shapes Triton's tutorials and common
    Hopper autotune lists lead with (128x256x64 and 256x128x64, 8 warps, 3 stages; the
    persistent TMA form of the persistent-matmul tutorial; a warp-specialised 128x256, one
    producer and two consumer warpgroups, as cuBLAS's `coop` kernels), and for
    skinny M, where the GEMM is a read of the weights, small-BM tiles with split-K to fill
    the 132 SMs; at up to 64 tokens also with the split-K fixup, as a call there takes ~20 us
    and the second kernel's launch and workspace pass cost a good part of split-K's gain.
    Starting points, not answers: the search moves on from them."""
    big = [
        dict(DEFAULTS),
        _point(128, 256, 64, 8, 3),
        _point(256, 128, 64, 8, 3),
        _point(128, 128, 64, 8, 4, TMA=1, PERSISTENT=1),
        _point(128, 256, 64, 8, 3, TMA=1, PERSISTENT=1),
        _point(64, 256, 64, 4, 4),
    ]
    if warp_spec:
        big.insert(-1, _point(128, 256, 64, 4, 4, TMA=1, WARP_SPEC=1))  # one producer and two consumer warpgroups
    small = [
        _point(16, 64, 128, 4, 4),
        _point(16, 128, 128, 4, 4, SPLIT_K=2),
        _point(32, 64, 128, 4, 5, SPLIT_K=4),
        _point(16, 64, 128, 4, 4, SPLIT_K=4, TMA=1),
        _point(64, 64, 128, 4, 4, SPLIT_K=2),
        _point(64, 128, 64, 4, 4),
        _point(64, 128, 128, 8, 3, TMA=1),
    ]
    fixup = [
        _point(16, 64, 128, 4, 4, SPLIT_K=4, SPLITK_FIXUP=1),
        _point(16, 128, 128, 4, 5, SPLIT_K=2, SPLITK_FIXUP=1),
        _point(16, 32, 128, 4, 5, SPLIT_K=8, SPLITK_FIXUP=1, TMA=1),
        _point(32, 64, 128, 4, 4, SPLIT_K=4, SPLITK_FIXUP=1, TMA=1, PERSISTENT=1),
    ]
    swapped = [  # the tokens as the MMA's columns (BM 16-64), the weights' rows as its rows
        _point(16, 128, 128, 4, 4, SWAP_AB=1),
        _point(32, 128, 128, 4, 4, SWAP_AB=1),
        _point(64, 128, 64, 4, 4, SWAP_AB=1),
        _point(16, 128, 128, 4, 4, SPLIT_K=2, SPLITK_FIXUP=1, TMA=1, SWAP_AB=1),
        _point(32, 64, 128, 4, 4, SPLIT_K=4, SPLITK_FIXUP=1, SWAP_AB=1),
    ]
    # mid M (a few hundred tokens): too few output tiles to fill 132 SMs with wide tiles, too
    # many K steps per tile to hide the latency; split-K in one kernel doubles the programs
    # (call N/P: down M=256 at 0.50-0.69x cuBLAS with the seeds above alone)
    mid = [
        _point(128, 128, 64, 8, 4, SPLIT_K=2, SPLITK_FIXUP=1, TMA=1),
        _point(64, 128, 64, 4, 4, SPLIT_K=2, SPLITK_FIXUP=1, TMA=1),
        _point(128, 256, 64, 8, 3, SPLIT_K=4, SPLITK_FIXUP=1, TMA=1),
    ]
    if m <= 64:
        out = small + fixup + big[:2]
    elif m <= 512:
        out = small[-3:] + mid + big
    else:
        out = big
    if stream_k:
        # from a few hundred tokens up, the persistent TMA tiles with the last wave dealt out
        # by K steps (M=512 x N=6144 in 128x256 tiles is 96 tiles: 36 of 132 SMs idle)
        # (128x256 tiles do not fit beside the partial's conversion: see _stream_k)
        streamed = [_point(128, 128, 64, 8, 5, TMA=1, PERSISTENT=1, STREAM_K=1),
                    _point(128, 128, 64, 8, 4, TMA=1, PERSISTENT=1, STREAM_K=1),
                    _point(64, 128, 128, 4, 4, PERSISTENT=1, STREAM_K=1)]
        out = ((streamed if m >= 128 else []) + out)
        out = [dict(p, STREAM_K=p.get("STREAM_K", 0)) for p in out]
    if tma_store:
        # the persistent TMA tiles storing C in two halves through a descriptor (the
        # persistent-matmul tutorial's fastest Hopper form), from a few hundred tokens up
        stored = [dict(_point(128, 256, 64, 8, 3, TMA=1, PERSISTENT=1), TMA_STORE=2),
                  dict(_point(128, 256, 64, 8, 4, TMA=1, PERSISTENT=1), TMA_STORE=2),
                  dict(_point(128, 128, 64, 8, 4, TMA=1, PERSISTENT=1), TMA_STORE=1)]
        if stream_k:
            stored = [dict(p, STREAM_K=0) for p in stored] + [dict(stored[2], STREAM_K=1)]
        out = [dict(p, TMA_STORE=p.get("TMA_STORE", 0)) for p in ((stored if m >= 128 else []) + out)]
    if bn_tail:  # (the tiles with a tail come from `wave_seeds`, which needs N)
        out = [dict(p, BN_TAIL=0) for p in out]
    if gluon and tma_store:
        # the Gluon kernel (a TMA producer warp, one consumer warpgroup per 64 rows, one MMA
        # in flight): cuBLAS's cooperative 128x256 4-stage tile from a few hundred tokens up
        # (call BB), a deep 64-row one below
        # (call S11b, against cuBLAS: 128x128 s6 1.069 and the ping-pong s5 1.065 at gate_up
        # M=512, 0.983 / 0.995 at Qwen3 qkv M=2048; 128x256 s4 0.998 at o M=8192; 64x64 s13
        # persistent 0.915 at Qwen3 o M=256 (the searches' best 0.826); swap-AB 32x64 s16
        # 0.961 at o M=64 (0.879), 16x64 s16 1.081 at o M=16)
        wide = dict(_point(128, 128, 64, 8, 6, TMA=1, PERSISTENT=1), TMA_STORE=1, GLUON=1)
        deep = dict(_point(64, 64, 64, 4, 13, TMA=1, PERSISTENT=int(m >= 128)), TMA_STORE=1, GLUON=1)
        if m < 128:
            made = [deep, dict(_point(64, 128, 64, 4, 8, TMA=1), TMA_STORE=1, GLUON=1)]
            if swap_ab:  # the tokens as the MMA's narrow side, 16-32 of them, the pipeline 16 deep
                made.insert(0, dict(_point(32 if m > 16 else 16, 64, 64, 4, 16, TMA=1, SWAP_AB=1), TMA_STORE=1,
                                    GLUON=1))
        elif m < 512:
            made = [wide, deep]
        else:
            made = [dict(_point(128, 256, 64, 8, 4, TMA=1, PERSISTENT=1), TMA_STORE=2, GLUON=1),
                    dict(_point(128, 128, 64, 4, 5, TMA=1, PERSISTENT=1), TMA_STORE=2, GLUON=2),  # ping-pong
                    wide, *([deep] if m == 512 else [])]
        made = [dict(q, **({"STREAM_K": 0} if stream_k else {}), **({"BN_TAIL": 0} if bn_tail else {}))
                for q in made]
        out = made + [dict(q, GLUON=0) for q in out]
    if not swap_ab:
        return out
    # the seeds carry SWAP_AB; at up to 64 tokens a few swapped tiles lead
    swapped = [dict(p, **({"STREAM_K": 0} if stream_k else {}), **({"TMA_STORE": 0} if tma_store else {}),
                    **({"BN_TAIL": 0} if bn_tail else {}), **({"GLUON": 0} if gluon and tma_store else {}))
               for p in swapped]
    return (swapped if m <= 64 else []) + [dict(p, SWAP_AB=p.get("SWAP_AB", 0)) for p in out]
