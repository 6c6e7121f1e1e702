"""The space of the Hopper GEMM template (`search_spaces/gemm/template.py`).

Constraints rule out, before anything compiles, what cannot fit an H200: shared memory for
the pipeline's stages, the accumulator's registers per thread (under `maxnreg` where set),
and warp specialisation where Triton 3.6 cannot build it on Hopper. Its one form there is a
non-persistent kernel of 4 warps whose K loop Triton splits into a producer warpgroup
(TMA loads) and two consumer warpgroups of BM/2 rows each (12 warps): cuBLAS's `coop`
kernels' structure. Two rules keep duplicates out: the split-K fixup gene means something
only with split-K, and WARP_SPEC=1 with 8 warps or a persistent kernel compiles to the same
kernel as WARP_SPEC=0 (`warp_spec_idle`). What else fails
(a cluster shape Triton rejects, a warp-specialised loop this Triton cannot split) fails
once and is learned by the search (`SearchOptions.learn_failures`). Where a search starts
is apart: `seeds.py` (heuristics) and `cublas.py` (cuBLAS's own kernel, read as a point).

>>> space = gemm_space()
>>> len(space.params), space.size
(13, 1843200)
>>> space.why_invalid(dict(DEFAULTS, BM=256, BN=256, num_warps=4))
'registers: a 256x256 fp32 accumulator is 512 registers per thread with 4 warps (at most 160)'
>>> space.why_invalid(dict(DEFAULTS, SPLITK_FIXUP=1))
'split-K fixup: SPLITK_FIXUP=1 needs SPLIT_K > 1 (one split has no partials to sum)'
>>> space.is_valid(DEFAULTS)
True
"""

# One module on purpose, though over 400 lines: the GEMM space is its validity rules; each rule (shared memory,
# registers, warp specialisation, split-K fixup, stream-K, TMA store, Gluon) is a small function here, and keeping
# them in one file keeps each rule in one place.

from __future__ import annotations

from evokernel.core.genome import Genome
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
from evokernel.search_spaces.gemm.template import DEFAULTS

__all__ = [
    "gemm_space",
    "gemm_class",
    "warp_spec_idle",
    "without_idle_genes",
    "gluon_misfit",
    "gluon_warps",
    "ACC_REGISTERS",
    "WARP_SPEC_HANGS",
    "DEFAULTS",
]

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
            return (
                f"registers: a {p['BM'] // 2}x{_width(p)} fp32 accumulator per consumer warpgroup is "
                f"{per_thread} registers per thread (at most {ACC_REGISTERS})"
            )
        return None
    per_thread = p["BM"] * _width(p) // (32 * p["num_warps"])
    cap = min(ACC_REGISTERS, p["maxnreg"] - 64) if p["maxnreg"] else ACC_REGISTERS
    if per_thread > cap:
        return (
            f"registers: a {p['BM']}x{_width(p)} fp32 accumulator is {per_thread} registers per thread with "
            f"{p['num_warps']} warps (at most {cap})"
        )
    return None


def warp_spec_idle(p: Point | dict) -> bool:
    """Whether WARP_SPEC=1 compiles to the very kernel WARP_SPEC=0 does: Triton 3.6 on Hopper
    specialises only the K loop of a non-persistent kernel of 4 warps (the PTX of 8-warp and
    of persistent kernels is identical either way, compiled for sm_90 on the CPU)."""
    return bool(p["WARP_SPEC"]) and (p["num_warps"] != 4 or bool(p["PERSISTENT"]))


def without_idle_genes(p: Point | dict) -> dict:
    """The point with WARP_SPEC off where it changes nothing (`warp_spec_idle`): how a
    recorded winner with such an idle gene (e.g. 128x256, 8 warps, persistent, "ws") is
    spelled in this space, the same kernel.

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
    if p["SPLIT_K"] > 1:  # (+1.5 KB: at +1 KB one of 154 sm_90 builds, 15 stages, was 256 B over)
        return p["BM"] * p["BN"] * 4 + 1536
    return 8192 * elem_bytes * max(1, p["BN"] // 128) + 1536


#: why WARP_SPEC=1 is out of `gemm_space` unless asked for (`warp_spec=True`)
WARP_SPEC_HANGS = (
    "warp specialisation: Triton 3.6's cooperative kernel (4 warps, non-persistent) hung on the "
    "H200 in each of its 4 GPU test cases; gemm_space(warp_spec=True) keeps it"
)


def _warp_spec(limit: int, elem_bytes: int, allowed: bool = True):
    def check(p: Point) -> str | None:
        if not p["WARP_SPEC"]:
            return None
        if not p["TMA"]:
            return "warp specialisation needs TMA loads"
        if warp_spec_idle(p):
            return (
                "warp specialisation: Triton 3.6 specialises only a non-persistent kernel of 4 warps on "
                "Hopper (with 8 warps or persistent the kernel is the same as without)"
            )
        if not allowed:
            return WARP_SPEC_HANGS
        if p["BM"] < 128:
            # its two consumer warpgroups each take BM/2 rows; at BM=64 each computed the whole
            # tile and every such kernel run on the H200 gave NaN
            return "warp specialisation: two consumer warpgroups of BM/2 rows need BM >= 128"
        if p.get("TMA_STORE") or p.get("SWAP_AB") or p["maxnreg"] or p["num_ctas"] > 1:
            # Triton 3.6's passes fail on the first two (sm_90, compiled on the CPU); its
            # warpgroups set their own registers (40 producer, 232 consumers)
            return "warp specialisation: without a TMA store, swap-AB, maxnreg or a CTA cluster"
        need = _pipeline_bytes(p, elem_bytes) + _ws_scratch(p, elem_bytes)
        if need > limit:
            return (
                f"warp specialisation: the pipeline and the consumers' C tile need {need} B of shared memory "
                f"> {limit} B"
            )
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
    return (
        p["BM"] * p["BN"] * elem_bytes // (2 if p["TMA_STORE"] == 2 else 1) + p["BM"] * p.get("BN_TAIL", 0) * elem_bytes
    )


def _stream_k(limit: int, elem_bytes: int):
    def check(p: Point) -> str | None:
        if not p.get("STREAM_K"):
            return None
        if not (p["PERSISTENT"] and p["SPLIT_K"] == 1 and not p["WARP_SPEC"]):
            return "stream-K: STREAM_K=1 is a schedule of the persistent kernel, without split-K or warp specialisation"
        if p["num_ctas"] > 1 and p["TMA"]:
            # Triton 3.6 on the H200: its pipeliner fails ("PassManager::run failed")
            return "stream-K: with TMA loads, not on a CTA cluster (num_ctas > 1: Triton's pipeliner fails)"
        # inside the pipelined K loop, a partial tile's fp32 store goes through a layout
        # conversion in shared memory beside the pipeline's buffers (128x256x64 with 3 stages
        # needs 278552 B = 3 x 49152 + 128 x 256 x 4 + 24)
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
        if p["TMA_STORE"] == 2 and p["num_ctas"] > 1:  # Triton 3.6's pipeliner fails on it (H200)
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
            need += 32800  # memory beside the live pipeline (128x(256+64), 4 stages: 229376 + 32800 B)
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


def gluon_misfit(p: Point | dict) -> str | None:
    """Why a point's schedule has no Gluon kernel (`GLUON` set), or None where it has one:
    the Gluon kernel (`template_gluon`) is a TMA tile whose C is stored by TMA (whole,
    TMA_STORE=1, or in halves, 2), without split-K, stream-K, A_REG, Triton's warp
    specialisation (it is warp-specialised itself), a CTA cluster or a register cap. The one
    statement of that rule: `gemm_space` rules such points out, the template refuses them,
    and `seeds.gluon_variant` asks it which points have a Gluon form.

    >>> point = dict(DEFAULTS, TMA=1, TMA_STORE=1)
    >>> gluon_misfit(point) is None, gluon_misfit(dict(point, SPLIT_K=2)) is None
    (True, False)
    """
    if (
        p["TMA"]
        and p.get("TMA_STORE") in (1, 2)
        and p["SPLIT_K"] == 1
        and not p["WARP_SPEC"]
        and p["num_ctas"] == 1
        and not p["maxnreg"]
        and not (p.get("STREAM_K") or p.get("A_REG"))
    ):
        return None
    return (
        "Gluon: a TMA tile stored by TMA (TMA_STORE=1 whole, 2 in halves), without split-K, stream-K, A_REG, "
        "WARP_SPEC (it is warp-specialised itself), a cluster or maxnreg"
    )


def gluon_warps(bm: int) -> int:
    """The Gluon kernel's consumer warps at BM rows: one warpgroup per 64 rows, two at most."""
    return 4 if bm <= 64 else 8


def _gluon(limit: int, elem_bytes: int):
    def check(p: Point) -> str | None:
        if not p.get("GLUON"):
            return None
        misfit = gluon_misfit(p)
        if misfit:
            return misfit
        if p["GLUON"] == 2:  # ping-pong: two consumer warpgroups, a whole tile each, taking turns
            if p.get("SWAP_AB") or p["num_warps"] != 4 or p["BM"] not in (64, 128) or p["BN"] < 64:
                return "Gluon ping-pong: 4 warps a consumer, tiles of 64 or 128 rows and 64+ columns, not swapped"
            if not p["PERSISTENT"]:  # one tile per program leaves the second consumer idle
                return "Gluon ping-pong: persistent (the consumers take turns at a program's tiles)"
            # each consumer stages its own C
            need = _pipeline_bytes(p, elem_bytes) + 2 * _staged_c_bytes(p, elem_bytes) + 512
            if need > limit:
                return (
                    f"Gluon ping-pong: the pipeline, two consumers' C staging and the barriers need {need} B "
                    f"of shared memory > {limit} B"
                )
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
                return (
                    f"Gluon: one consumer warpgroup per 64 rows, at most two (BM={p['BM']}: "
                    f"{gluon_warps(p['BM'])} warps)"
                )
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


def gemm_space(
    *,
    elem_bytes: int = 2,
    shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES,
    swap_ab: bool = False,
    stream_k: bool = False,
    tma_store: bool = False,
    bn_tail: bool = False,
    a_reg: bool = False,
    gluon: bool = False,
    warp_spec: bool = False,
) -> SearchSpace:
    """Tiles, grouping, warps, stages, split-K (and where its partials are summed),
    persistence, TMA, warp specialisation, cluster size and a register cap of
    C = epilogue(A @ B); with `swap_ab` also the SWAP_AB gene (the tile computed as B^T A^T,
    for few tokens), with `stream_k` the STREAM_K gene (the persistent kernel's last tiles
    split by K steps evenly over the SMs: no partly idle last wave), with `tma_store` the
    TMA_STORE gene (C through a tensor descriptor, whole or in two halves), with `bn_tail` the
    BN_TAIL gene (tiles BN + 32 or BN + 64 columns wide, as two accumulators: 96, 160, 192,
    288 and 320 wide tiles, which fill the last wave where powers of two do not; cuBLAS runs
    320-wide tiles at Qwen3's qkv), with `a_reg` the A_REG
    gene (a 128-256 column tile as 64-wide MMAs sharing A in registers), with `gluon` (and
    `tma_store`) the GLUON gene (the tile run by the warp-specialised Gluon kernel of
    search_spaces/gemm/template_gluon.py: a TMA producer warp, one consumer warpgroup per 64 rows,
    one MMA in flight, C by TMA; GLUON=2 its ping-pong form, two consumer warpgroups taking
    turns at whole tiles); see search_spaces/gemm/template.py. Triton's own warp-specialised
    kernel (WARP_SPEC=1: cooperative, 4 warps, non-persistent) only with `warp_spec`: it hung
    on the H200 in every GPU test case, so a search must not meet it.

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
            # up to 16: cuBLAS runs narrow tiles 6-16 stages deep (64x64 with 13 stages
            # at Qwen3's o, M=256, 64x32 with 16 at Llama's o, M=64); shared memory
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
        constraints=[
            shared_memory_limit(shared_memory_bytes, elem_bytes=elem_bytes),
            thread_limit(),
            Constraint(_registers, "registers"),
            Constraint(_warp_spec(shared_memory_bytes, elem_bytes, warp_spec), "warp specialisation"),
            Constraint(_fixup, "split-K fixup"),
        ],
        name="gemm_hopper",
    )
    if swap_ab:
        space = SearchSpace(
            [*space.params, Choice("SWAP_AB", [0, 1])],
            constraints=[*space.constraints, Constraint(_swap_ab, "swap-AB")],
            name="gemm_hopper_swapab",
        )
    if stream_k:
        space = SearchSpace(
            [*space.params, Choice("STREAM_K", [0, 1])],
            constraints=[*space.constraints, Constraint(_stream_k(shared_memory_bytes, elem_bytes), "stream-K")],
            name=space.name + "_streamk",
        )
    if tma_store:
        space = SearchSpace(
            [*space.params, Choice("TMA_STORE", [0, 1, 2])],
            constraints=[*space.constraints, Constraint(_tma_store(shared_memory_bytes, elem_bytes), "TMA store")],
            name=space.name + "_tmastore",
        )
    if bn_tail:
        space = SearchSpace(
            [*space.params, Choice("BN_TAIL", [0, 32, 64])],
            constraints=[*space.constraints, Constraint(_bn_tail(shared_memory_bytes, elem_bytes), "BN tail")],
            name=space.name + "_bntail",
        )
    if a_reg:
        space = SearchSpace(
            [*space.params, Choice("A_REG", [0, 1])],
            constraints=[*space.constraints, Constraint(_a_reg, "A in registers")],
            name=space.name + "_areg",
        )
    if gluon:
        if not tma_store:
            raise ValueError(
                "gemm_space(gluon=True) needs tma_store=True: the Gluon kernel's C store is the "
                "TMA_STORE gene (1 whole, 2 in halves)"
            )
        space = SearchSpace(
            [*space.params, Choice("GLUON", [0, 1, 2])],
            constraints=[*space.constraints, Constraint(_gluon(shared_memory_bytes, elem_bytes), "Gluon")],
            name=space.name + "_gluon",
        )
    return space


def gemm_class(genome: Genome) -> str:
    """Niche in the elite archive: the output tile and how the work is scheduled."""
    how = ("streamk" if genome.params.get("STREAM_K") else "persistent") if genome["PERSISTENT"] else "grid"
    split = f"/splitk{genome['SPLIT_K']}" if genome["SPLIT_K"] > 1 else ""
    kernel = {1: "/gluon", 2: "/pingpong"}.get(genome.params.get("GLUON", 0), "")
    return f"{genome['BM']}x{_width(genome.params)}/{how}{split}{kernel}"
