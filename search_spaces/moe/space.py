"""The space of the fused-MoE template: each of its two GEMMs has its own tiles, grouping,
warps and stages (`search_spaces/moe/template.py`).

>>> space = moe_space()
>>> len(space.params), space.size, moe_space(separate_block_m=True).size
(11, 1638400, 6553600)
>>> g = space.genome(BLOCK_SIZE_M=64, BLOCK_SIZE_N=128, BLOCK_SIZE_K=64, GROUP_SIZE_M=8, num_warps=4,
...                  num_stages=3, down_BLOCK_SIZE_N=128, down_BLOCK_SIZE_K=64,
...                  down_GROUP_SIZE_M=1, down_num_warps=4, down_num_stages=4)
>>> moe_space(gemv=True).why_invalid(dict(g.params, GEMV=1))
'GEMV: the small-batch path takes BLOCK_SIZE_M 16 and GROUP_SIZE_M 1 (it ignores them)'
>>> fp8 = moe_space(fp8="block")
>>> fp8.why_invalid(dict(g.params, down_BLOCK_SIZE_K=256))
'scale groups: down_BLOCK_SIZE_K=256 does not divide the 128-wide scale groups'
>>> moe_space(fp8="block", gemv=True).why_invalid(dict(g.params, GEMV=1))
'GEMV: the small-batch path is bf16/fp16 only (fp8 weights take the GEMM path)'
>>> sglang_config(g)
({'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 8, 'num_warps': 4, 'num_stages': 3}, {'BLOCK_SIZE_M': 64, 'BLOCK_SIZE_N': 128, 'BLOCK_SIZE_K': 64, 'GROUP_SIZE_M': 1, 'num_warps': 4, 'num_stages': 4})
"""

from __future__ import annotations

from collections.abc import Mapping

from evokernel.core.genome import Genome
from evokernel.search_spaces.gemm.template_fp8 import GROUP as FP8_GROUP
from evokernel.core.space import H200_SHARED_MEMORY_BYTES, IntRange, Ordinal, Point, PowerOfTwo, SearchSpace

__all__ = ["moe_space", "moe_shared_space", "shared_params", "sglang_config", "distinct_experts", "MOE_MODELS"]


#: The MoE layers the problems (problems/moe_bf16.py, moe_fp8.py) take by name:
#: E experts, hidden size H, expert intermediate size I, experts per token.
MOE_MODELS: dict[str, dict[str, int]] = {
    "qwen3-30b-a3b": {"E": 128, "H": 2048, "I": 768, "topk": 8},
    "mixtral-8x7b": {"E": 8, "H": 4096, "I": 14336, "topk": 2},
    # DeepSeek-V3's routed experts (256 of them, hidden 7168, intermediate 2048, top 8), one
    # GPU's share under 8-way expert parallelism: 32 experts
    "deepseek-v3-ep8": {"E": 32, "H": 7168, "I": 2048, "topk": 8},
    "tiny": {"E": 4, "H": 64, "I": 32, "topk": 2},  # tests
}


def _smem(prefix: str, limit: int, elem_bytes: int):
    def check(p: Point) -> str | None:
        bm = p.get(f"{prefix}BLOCK_SIZE_M", p["BLOCK_SIZE_M"])
        bn, bk = p[f"{prefix}BLOCK_SIZE_N"], p[f"{prefix}BLOCK_SIZE_K"]
        gated = 2 if not prefix and p.get("FUSE_SILU") else 1  # the fused up GEMM loads gate and up tiles
        need = (bm * bk + gated * bk * bn) * elem_bytes * p[f"{prefix}num_stages"]
        if need > limit:
            return f"shared memory ({prefix or 'up '}GEMM): {need} B > {limit} B"
        return None

    return check


def _gemv(p: Point) -> str | None:
    """The small-batch path: its tiles live in registers, and the M-side genes mean nothing."""
    if not p.get("GEMV"):
        return None
    if (
        p["BLOCK_SIZE_M"] != 16
        or p["GROUP_SIZE_M"] != 1
        or p["down_GROUP_SIZE_M"] != 1
        or p.get("down_BLOCK_SIZE_M", 16) != 16
    ):
        return "GEMV: the small-batch path takes BLOCK_SIZE_M 16 and GROUP_SIZE_M 1 (it ignores them)"
    # live fp32 tiles: the step's weights and a per-lane accumulator each, for gate and up
    # (two) or down (one)
    for prefix, tiles in (("", 4), ("down_", 2)):
        per_thread = tiles * p[f"{prefix}BLOCK_SIZE_N"] * p[f"{prefix}BLOCK_SIZE_K"] // (32 * p[f"{prefix}num_warps"])
        if per_thread > 160:
            return f"GEMV registers ({prefix or 'up '}): {per_thread} fp32 values per thread > 160"
    return None


def _scale_groups(p: Point) -> str | None:
    """fp8 block scales: each BLOCK_SIZE_K step must lie in one 128-wide scale group (any
    BLOCK_SIZE_N works: the kernel looks a column's block scale up per column when the tile
    spans several 128-row blocks, once per tile otherwise)."""
    for prefix in ("", "down_"):
        bk = p[f"{prefix}BLOCK_SIZE_K"]
        if FP8_GROUP % bk:
            return f"scale groups: {prefix}BLOCK_SIZE_K={bk} does not divide the {FP8_GROUP}-wide scale groups"
    return None


def _fuse_silu(p: Point) -> str | None:
    """SiLU in the up GEMM's epilogue: a GEMM-path structure (the GEMV path fuses it already),
    with two fp32 accumulators of BLOCK_SIZE_M x BLOCK_SIZE_N per program."""
    if not p.get("FUSE_SILU"):
        return None
    if p.get("GEMV"):
        return "FUSE_SILU: the GEMV path fuses SiLU already (one structure at a time)"
    per_thread = 2 * p["BLOCK_SIZE_M"] * p["BLOCK_SIZE_N"] // (32 * p["num_warps"])
    if per_thread > 256:
        return f"FUSE_SILU registers: {per_thread} fp32 accumulators per thread > 256"
    return None


def _no_fuse_silu(p: Point) -> str | None:
    return "FUSE_SILU: fp8 fuses SiLU with the re-quantisation (bf16/fp16 only)" if p.get("FUSE_SILU") else None


def _no_gemv(p: Point) -> str | None:
    return "GEMV: the small-batch path is bf16/fp16 only (fp8 weights take the GEMM path)" if p.get("GEMV") else None


def moe_space(
    *,
    elem_bytes: int = 2,
    shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES,
    separate_block_m: bool = False,
    gemv: bool = False,
    fp8: str | None = None,
    fuse_silu: bool = False,
) -> SearchSpace:
    """BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages of the up and of the down GEMM.

    The down GEMM shares the up GEMM's BLOCK_SIZE_M unless `separate_block_m`: SGLang aligns
    the token-expert pairs once for both GEMMs and overrides a tuned down config's
    BLOCK_SIZE_M with the up one's, so only shared-M winners can be exported to it as they
    were measured (the template aligns twice when they differ).

    `fp8` ("tensor" or "block"): the fp8 w8a8 template (e4m3 operands: 1-byte tiles in
    shared memory, whatever `elem_bytes` says); with "block" (128x128 weight blocks, 1x128
    activation groups) BLOCK_SIZE_K must divide 128. GEMV is bf16/fp16 only: with `gemv`
    the gene stays, and the space never proposes it on. `fuse_silu` adds the FUSE_SILU gene
    (SiLU-and-multiply in the up GEMM's epilogue; bf16/fp16, not with GEMV)."""
    if fp8 not in (None, "tensor", "block"):
        raise ValueError(f"fp8 must be None, 'tensor' or 'block', got {fp8!r}")
    if fp8:
        elem_bytes = 1
    params = []
    for prefix in ("", "down_"):
        params += [
            *([PowerOfTwo(f"{prefix}BLOCK_SIZE_M", 16, 128)] if not prefix or separate_block_m else []),
            PowerOfTwo(f"{prefix}BLOCK_SIZE_N", 32, 256),
            PowerOfTwo(f"{prefix}BLOCK_SIZE_K", 32, 256),
            Ordinal(f"{prefix}GROUP_SIZE_M", [1, 8, 16, 32, 64]),
            PowerOfTwo(f"{prefix}num_warps", 4, 8),
            IntRange(f"{prefix}num_stages", 2, 5),
        ]
    if gemv:  # the small-batch structure (see search_spaces/moe/template.py) as a gene
        params.append(Ordinal("GEMV", [0, 1, 2]))  # 2: the down GEMV per pair, then a sum over the top_k
    if fuse_silu:  # SiLU-and-multiply fused into the up GEMM
        params.append(Ordinal("FUSE_SILU", [0, 1]))
    space = SearchSpace(
        params,
        name="fused_moe"
        + (f"_fp8_{fp8}" if fp8 else "")
        + ("_gemv" if gemv else "")
        + ("_fusesilu" if fuse_silu else ""),
    )
    for prefix in ("", "down_"):
        space.add_constraint(_smem(prefix, shared_memory_bytes, elem_bytes), f"{prefix}shared_memory")
    if gemv:
        space.add_constraint(_no_gemv if fp8 else _gemv, "GEMV")
    if fuse_silu:
        space.add_constraint(_no_fuse_silu if fp8 else _fuse_silu, "FUSE_SILU")
    if fp8 == "block":
        space.add_constraint(_scale_groups, "scale groups")
    return space


def moe_shared_space(*, elem_bytes: int = 2, shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES) -> SearchSpace:
    """One config for both GEMMs, as SGLang's own MoE tuner searches (a subset of its grid):
    small enough to measure whole (448 valid points), which is what a recorded landscape needs.

    >>> space = moe_shared_space()
    >>> space.size, len(space.valid_points())
    (576, 448)
    """
    space = SearchSpace(
        [
            PowerOfTwo("BLOCK_SIZE_M", 16, 128),
            PowerOfTwo("BLOCK_SIZE_N", 32, 256),
            PowerOfTwo("BLOCK_SIZE_K", 64, 256),
            Ordinal("GROUP_SIZE_M", [1, 16]),
            PowerOfTwo("num_warps", 4, 8),
            IntRange("num_stages", 2, 4),
        ],
        name="fused_moe_shared",
    )
    space.add_constraint(_smem("", shared_memory_bytes, elem_bytes), "shared_memory")
    return space


def shared_params(params: dict[str, int]) -> dict[str, int]:
    """A shared-space point as a `moe_space()` genome: the same config for the down GEMM
    (whose BLOCK_SIZE_M is the up GEMM's in that space)."""
    return {**params, **{f"down_{k}": v for k, v in params.items() if k != "BLOCK_SIZE_M"}}


def sglang_config(genome: Genome) -> tuple[dict[str, int], dict[str, int]]:
    """(up, down) configs as SGLang's tuned-config files write them."""
    from evokernel.search_spaces.moe.template import split_config

    return split_config(genome.params)


def distinct_experts(shape: Mapping[str, int]) -> float:
    """A lower bound on the experts a batch's routing touches, for the gate's roofline floor.

    Each token picks top_k distinct experts of E, so under this problem's random routing an
    expert is touched by at least one of M tokens with probability p = 1 - (1 - top_k/E)^M:
    E p experts on average, with a spread of about sqrt(E p (1 - p)). Five spreads (and one)
    under the mean, never fewer than top_k, bounds what any seed's inputs touch.
    `min(E, M * top_k)`, the most a batch can reach, is no floor: at M=16 on Qwen3-30B-A3B
    (E=128, top 8) it counts 128 experts where ~82 are touched, and the gate rejected honest
    GEMM-path kernels as faster than the roofline."""
    E, k, M = shape["E"], shape["topk"], shape["M"]
    p = 1.0 - (1.0 - k / E) ** M
    return max(float(k), E * p - 5.0 * (E * p * (1.0 - p)) ** 0.5 - 1.0)
