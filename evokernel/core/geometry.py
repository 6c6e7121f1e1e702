"""What the hardware says before anything runs: how a space's parameters map to tiles.

A space that declares its `Geometry` (which parameter tiles which problem dimension, which
are warps and pipeline stages) gets analytic features for any shape: tiles and waves over
the GPU's SMs, the padding a tile wastes, shared memory per CTA, a tile's arithmetic
intensity, output elements per thread. The cost model (`evokernel.mutators.cost_model`)
learns from them across shapes, and ranks a first generation with them before anything
was measured on the new shape.

>>> g = Geometry(tiles={"M": "BM", "N": "BN", "K": "BK"}, warps="num_warps", stages="num_stages")
>>> f = g.features({"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 3}, {"M": 2048, "N": 6144, "K": 4096})
>>> f["tiles"], round(f["waves"], 2), f["k_iters"], f["smem_kib"]
(384.0, 2.91, 64.0, 144.0)
>>> Geometry.infer(["BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps"]).tiles["K"]
'BLOCK_SIZE_K'

Attention maps its tiles onto the sequence: a split-KV decode program takes one KV head of
one sequence and a share of its keys (the grid: sequences x KV heads x splits), and a
prefill program BLOCK_M query rows of one head of one sequence (query blocks x heads x
sequences; the shipped prefill geometry leaves this unmapped, see `_KNOWN`):

>>> d = Geometry.infer(["NUM_SPLITS", "BLOCK_N", "num_warps", "num_stages", "REDUCE"])
>>> f = d.features({"NUM_SPLITS": 32, "BLOCK_N": 64, "num_warps": 4}, {"B": 1, "C": 32768, "Hkv": 8})
>>> f["tiles"], f["k_iters"]
(256.0, 16.0)
>>> p = Geometry(tiles={"M": "BLOCK_M", "N": "BLOCK_N"}, dims={"M": "S", "N": "S"}, output=("M",),
...     reduction=("N",), grid=("B", "Hq"))
>>> p.features({"BLOCK_M": 128, "BLOCK_N": 64}, {"B": 4, "S": 2048, "Hq": 32})["tiles"]
2048.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Geometry", "H200_SMS", "H200_SHARED_KIB"]

H200_SMS = 132
H200_SHARED_KIB = 228.0

#: Parameter names of the shipped kernel templates: (family, tile per problem dimension, the
#: other parameters the family's spaces have, the rest of its geometry).
_KNOWN: tuple[tuple[str, dict[str, str], tuple[str, ...], dict[str, Any]], ...] = (
    ("matmul", {"M": "BM", "N": "BN", "K": "BK"}, (), {}),  # search_spaces/matmul, the matmul landscapes
    ("moe", {"M": "BLOCK_SIZE_M", "N": "BLOCK_SIZE_N", "K": "BLOCK_SIZE_K"}, (), {}),  # fused MoE (SGLang's names)
    # split-KV paged decode: a program per sequence, KV head and split; BLOCK_N keys a step
    (
        "attention",
        {"N": "BLOCK_N"},
        ("NUM_SPLITS",),
        dict(dims={"N": "C"}, output=(), reduction=("N",), grid=("B", "Hkv"), splits="NUM_SPLITS"),
    ),
    # prefill: query rows and key columns per tile. Mapped onto the sequence (a program per
    # BLOCK_M query rows of a head of a sequence: dims M and N -> S, grid B x Hq) its features
    # made the cost model worse on the prefill landscapes, leave one shape out (4 x 2048: 0.886
    # of the optimum at 25 evaluations against 0.902 without; Qwen3 4 x 4096: 0.972 against
    # 1.000), so they stay unmapped (NaN) until a prefill feature earns its place
    ("attention", {"M": "BLOCK_M", "N": "BLOCK_N"}, (), {}),
)


@dataclass(frozen=True)
class Geometry:
    """Which parameter tiles which dimension of the problem's shape (`tiles`: dimension ->
    parameter); the output dimensions (their tiles make the grid) and the reduction ones;
    the warps and stages parameters; bytes per element; the GPU's SMs and shared memory;
    the template family (`kind`), which picks the default strategy
    (`evokernel.engine.strategies.default_for`). Where the shape names its dimensions
    otherwise, `dims` maps a tile's dimension to the shape's key (attention: query rows and
    keys both run over the sequence, S or C); `grid` names shape dimensions the programs
    are multiplied by (sequences, heads; a missing one counts 1), and `splits` a parameter
    that splits the reduction over that many programs (split-KV decode; 0, "automatic",
    leaves the grid unknown)."""

    tiles: Mapping[str, str]
    output: tuple[str, ...] = ("M", "N")
    reduction: tuple[str, ...] = ("K",)
    warps: str | None = None
    stages: str | None = None
    elem_bytes: int = 2
    sms: int = H200_SMS
    shared_kib: float = H200_SHARED_KIB
    kind: str = ""  # the template family it describes ("matmul", "moe", "attention"; "" unknown)
    dims: Mapping[str, str] = field(default_factory=dict)
    grid: tuple[str, ...] = ()
    splits: str | None = None

    @classmethod
    def infer(cls, names: Iterable[str]) -> Geometry | None:
        """The geometry of a space whose parameters use one of the shipped templates' names
        (a recorded landscape's columns), or None."""
        have = set(names)
        for kind, tiles, also, rest in _KNOWN:
            if set(tiles.values()) <= have and set(also) <= have:
                return cls(
                    kind=kind,
                    tiles=dict(tiles),
                    warps="num_warps" if "num_warps" in have else None,
                    stages="num_stages" if "num_stages" in have else None,
                    **rest,
                )
        return None

    def _size(self, d: str, shape: Mapping[str, Any]) -> float | None:
        """The extent of tile dimension `d` in `shape` (through `dims`; a sequence length S
        missing from a packed problem's shape is its tokens over its sequences, T / B)."""
        key = self.dims.get(d, d)
        v: Any = shape.get(key)
        if not _number(v) and key == "S" and _number(shape.get("T")) and _number(shape.get("B")):
            v = float(shape["T"]) / float(shape["B"]) if float(shape["B"]) > 0 else None
        if not _number(v) or float(v) <= 0:
            return None
        return float(v)

    def features(self, params: Mapping[str, Any], shape: Mapping[str, float]) -> dict[str, float]:
        """Analytic features of one point on one shape; the shape's missing dimensions leave
        out what needs them (every key is always present, NaN where unknown)."""
        nan = float("nan")
        tile = {d: float(params[p]) for d, p in self.tiles.items() if _number(params.get(p))}
        size = {d: v for d in self.tiles if (v := self._size(d, shape)) is not None}
        count = {d: math.ceil(size[d] / tile[d]) for d in tile if d in size and tile[d] > 0}
        out: dict[str, float] = {}
        grid = [count[d] for d in self.output if d in count]
        split = float(params[self.splits]) if self.splits and _number(params.get(self.splits)) else 1.0
        tiles = nan
        if size and len(grid) == len([d for d in self.output if d in self.tiles]) and split > 0:
            more = [float(shape[g]) for g in self.grid if _number(shape.get(g))]
            tiles = float(math.prod(grid)) * math.prod(more) * split
        out["tiles"] = tiles
        out["waves"] = tiles / self.sms if tiles == tiles else nan
        out["wave_efficiency"] = tiles / (math.ceil(tiles / self.sms) * self.sms) if tiles == tiles else nan
        waste = [count[d] * tile[d] / size[d] for d in count]
        out["padding"] = float(math.prod(waste)) if waste else nan
        red = [count[d] for d in self.reduction if d in count]
        out["k_iters"] = float(math.prod(red)) / split if red and split > 0 else nan
        outs = [tile[d] for d in self.output if d in tile]
        out["tile_elems"] = float(math.prod(outs)) if outs else nan
        out["intensity"] = (math.prod(outs) / sum(outs)) if len(outs) >= 2 else nan
        stages = float(params[self.stages]) if self.stages and _number(params.get(self.stages)) else 1.0
        if (
            len(self.output) >= 2
            and all(d in tile for d in self.output[:2])
            and self.reduction
            and self.reduction[0] in tile
        ):
            m, n, k = tile[self.output[0]], tile[self.output[1]], tile[self.reduction[0]]
            out["smem_kib"] = (m * k + k * n) * self.elem_bytes * stages / 1024
        else:
            out["smem_kib"] = nan
        out["smem_fraction"] = out["smem_kib"] / self.shared_kib
        warps = float(params[self.warps]) if self.warps and _number(params.get(self.warps)) else nan
        out["elems_per_thread"] = out["tile_elems"] / (32 * warps) if warps == warps else nan
        dims = [size[d] for d in self.tiles if d in size]
        more = [float(shape[g]) for g in self.grid if _number(shape.get(g)) and float(shape[g]) > 0]
        out["log2_work"] = math.log2(math.prod(dims) * math.prod(more)) if dims else nan
        return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
