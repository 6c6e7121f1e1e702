"""Seed heuristics of the Hopper GEMM space: known-good starting points for a search.

Apart from the space (`space.py`), which says what is valid, these say where to start:
`gemm_seeds` (the tiles Triton's tutorials and Hopper autotune lists lead with, by token
count), `wave_seeds` (the tiles whose count fills the GPU's waves best at an M x N output,
from a small model of each tile's rate), the forms of a point that run on another kernel:
`coop_variant` (Triton's warp-specialised form) and `gluon_variant` (the Gluon kernel's),
and `deep_variants` (points, earlier winners, again with deeper pipelines). The rates in
the model (`TAIL_RATE`, `_tile_rate`) are rounded from H200 timings (BENCHMARKS.md).
Starting points, not answers: the search measures them.

>>> space = gemm_space()
>>> all(space.is_valid(p) for m in (16, 256, 4096) for p in gemm_seeds(m))
True
"""

from __future__ import annotations

from collections.abc import Iterable

from evokernel.core.space import H200_SHARED_MEMORY_BYTES, SearchSpace
from evokernel.search_spaces.gemm.space import gemm_space, gluon_misfit, gluon_warps
from evokernel.search_spaces.gemm.template import DEFAULTS

__all__ = ["gemm_seeds", "wave_seeds", "coop_variant", "gluon_variant", "deep_variants", "TAIL_RATE"]


def _point(BM: int, BN: int, BK: int, w: int, s: int, **extra: int) -> dict[str, int]:
    return {**DEFAULTS, "BM": BM, "BN": BN, "BK": BK, "num_warps": w, "num_stages": s, **extra}


#: the tail's own MMA's rate per column, relative to the main MMA's, fitted to H200 timings:
#: 128x(128+64) runs at ~0.85 of a full-width MMA's rate, 128x(128+32) at ~0.6
TAIL_RATE = {0: 1.0, 32: 0.23, 64: 0.65}


def _tail_rate(bn: int, tail: int) -> float:
    """A tile BN + tail wide's rate relative to one MMA of its whole width: 0.85 for 128+64,
    0.6 for 128+32, ~0.9 for 256+64 (the tail a smaller part of the tile).

    >>> round(_tail_rate(128, 64), 2), round(_tail_rate(128, 32), 2), round(_tail_rate(256, 64), 2)
    (0.85, 0.6, 0.9)
    """
    return (bn + tail) / (bn + tail / TAIL_RATE[tail]) if tail else 1.0


def _tile_rate(bm: int, w: int) -> float:
    """A tile's output rate per SM relative to 128x256 (rounded from H200 timings: 128x128 runs
    at ~0.85, 64x128 at ~0.7; 64x256 with 4 warps and 5 stages at ~0.9, beating
    128x128 at Qwen3 qkv M=2048 and 128x256 at Llama gate_up M=512): smaller tiles
    read more operand bytes per MMA."""
    if bm >= 128:
        return 1.0 if w >= 192 else 0.85 if w >= 128 else 0.7
    if bm == 64 and w >= 256:
        return 0.9
    if w <= 64:  # narrow tiles, for memory-bound shapes, with deep pipelines (a guess: unmeasured)
        return 0.6 if w == 64 else 0.5
    return 0.8 if bm * w >= 64 * 192 else 0.7


def _fitting_point(
    space: SearchSpace,
    bm: int,
    bn: int,
    bk: int,
    depths: Iterable[int],
    *,
    tma_store: bool,
    coop: bool = False,
    warps: int | None = None,
    stores: tuple[int, ...] | None = None,
    **genes: int,
) -> dict[str, int] | None:
    """The first point of `space` with this tile at the deepest of `depths` that fits, C
    staged whole, else in halves, else stored from registers (a 128x320 tile's pipeline
    leaves no room for the whole of C); one warpgroup (4 warps) per tile of up to 64 rows,
    two for larger ones (64x320 runs 0.0160 ms with 4 warps, 0.0267 with 8: Qwen3 qkv
    M=512 on the H200). With `coop`, the warp-specialised form instead (`coop_variant`);
    `warps` and `stores` (TMA_STORE values, in order) override those choices. None where no
    depth fits."""
    if coop:
        genes = dict(genes, WARP_SPEC=1, PERSISTENT=0)
    if stores is None:
        stores = (
            (0,)
            if tma_store and coop
            else (1, 2, 0)
            if tma_store and genes.get("SPLIT_K", 1) == 1
            else (0,)
            if tma_store
            else (None,)
        )
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
    232), as cuBLAS's `coop` kernels run 128x192 and 128x256 tiles on the H200 (at
    every Llama-3-8B and Qwen3 layer from M=2048 up, Llama's qkv at M=512); its pipeline as deep as `p`'s plus one
    stage (a producer with its own warps keeps more stages in flight), or less where it
    does not fit, C stored from registers (a TMA store fails to compile with it).

    Where `space` leaves it out (`gemm_space`'s default: it hung on the H200), None.

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
    return _fitting_point(
        space, p["BM"], p["BN"], p["BK"], range(min(p["num_stages"] + 1, 8), 1, -1), tma_store=False, coop=True, **base
    )


def gluon_variant(space: SearchSpace, p: dict[str, int]) -> dict[str, int] | None:
    """The Gluon kernel's form of a TMA tile (`GLUON=1`: search_spaces/gemm/template_gluon.py), or
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
    # (the genes the Gluon form sets itself aside, the rule the space and the template apply)
    if (
        "GLUON" not in space.names
        or gluon_misfit(dict(p, WARP_SPEC=0, maxnreg=0, num_ctas=1, TMA_STORE=1))
        or (p["BN"] < 64 if swap else (p["BM"] < 64 or p["BN"] < 64))
    ):
        return None
    base = {k: v for k, v in p.items() if k not in ("BM", "BN", "BK", "num_warps", "num_stages", "TMA_STORE")}
    base.update(GLUON=1, WARP_SPEC=0, maxnreg=0, num_ctas=1)
    return _fitting_point(
        space,
        p["BM"],
        p["BN"],
        p["BK"],
        range(min(p["num_stages"] + 1, 16), 1, -1),
        tma_store=True,
        warps=4 * (p["BN"] // 64) if swap else gluon_warps(p["BM"]),
        stores=(1,) if swap else (1, 2),
        **base,
    )


def deep_variants(points: list[dict[str, int]], space: SearchSpace) -> list[dict[str, int]]:
    """Points (earlier winners) again with deeper pipelines, each valid in `space`: a tile of
    at most 64 rows (or a swap-AB tile at most 64 wide) at the deepest pipeline that fits, up
    to 16 stages, none where it already is as deep as fits; a larger tile with one stage more,
    its C stored from registers (TMA_STORE=0) where staging C leaves no room, none where
    neither fits. Narrow tiles are memory-latency bound: cuBLAS runs them 6-16 stages deep on
    the H200 (64x64 with 13 stages at Qwen3's o, M=256), and 64x(128+64) ran 0.0419 ms with 5
    stages and 0.0497 with 4 at Llama's qkv, M=512. cuBLAS runs that row's 128x192 tile 5
    stages deep, where the searched one won with 4 and C staged in halves.

    >>> [p["num_stages"] for p in deep_variants([_point(64, 64, 128, 4, 5), _point(128, 256, 64, 8, 3)],
    ...                                          gemm_space())]
    [7, 4]
    """
    out = []
    for p in points:
        if p["BM"] > 64 and not (p.get("SWAP_AB") and p["BN"] <= 64):
            more = [
                q
                for q in (dict(p, num_stages=p["num_stages"] + 1), dict(p, num_stages=p["num_stages"] + 1, TMA_STORE=0))
                if space.is_valid(q)
            ]
            out += more[:1]
            continue
        deeper = [
            dict(p, num_stages=s) for s in range(16, p["num_stages"], -1) if space.is_valid(dict(p, num_stages=s))
        ]
        if deeper:
            out.append(deeper[0])
    return out


def wave_seeds(
    m: int,
    n: int,
    *,
    sms: int = 132,
    tma_store: bool = False,
    top: int = 4,
    shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES,
) -> list[dict[str, int]]:
    """TMA tiles (BN_TAIL genes set) whose count fills the GPU's waves best at an M x N output:
    for each tile of 64-256 rows and 64-256 columns, at least 64 x 128 (96, 160, 192 and 320
    with a tail), and 64x32 and 64x64 with the deepest pipeline that fits (as cuBLAS runs them
    at Qwen3's o M=256 and Llama's o M=64) -- those without a tail also split in two
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
    >>> [(p["BM"], p["BN"] + p["BN_TAIL"]) for p in wave_seeds(512, 5120)][:1]  # cuBLAS's tile there
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
                # tile, 128x(128+64) runs at ~0.83 of 128x256's rate and 128x(128+32) at
                # ~0.6 of 128x128's (H200)
                fill *= _tail_rate(bn, tail) * _tile_rate(bm, w)
                # one warpgroup per 64 rows: 64x320 runs 0.0160 ms with 4 warps and 0.0267
                # with 8 (Qwen3 qkv, M=512, H200)
                # 64-row tiles run deeper pipelines (64x(128+64): 5 stages 0.0419 ms, 4 stages
                # 0.0497 at Llama qkv M=512); tiles with a tail are not persistent
                # (128x(256+64) at Qwen3 qkv M=2048: 0.0805 ms persistent, 0.0667 not)
                depths = range(16, 2, -1) if bm == 64 and w <= 64 else (5, 4, 3) if bm == 64 else (4, 3)
                p = _fitting_point(
                    space,
                    bm,
                    bn,
                    64,
                    depths,
                    tma_store=tma_store,
                    TMA=1,
                    BN_TAIL=tail,
                    PERSISTENT=int(waves > 1 and not tail),
                    SPLIT_K=split,
                    SPLITK_FIXUP=int(split > 1),
                )
                if p is not None:
                    scored.append((round(fill, 3), bm * w, p))
    scored.sort(key=lambda x: (x[0], x[1]), reverse=True)
    return [p for _, _, p in scored[:top]]


def gemm_seeds(
    m: int,
    *,
    swap_ab: bool = False,
    stream_k: bool = False,
    tma_store: bool = False,
    bn_tail: bool = False,
    gluon: bool = False,
    warp_spec: bool = False,
) -> list[dict[str, int]]:
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
    # (Llama's down at M=256 reached 0.50-0.69x cuBLAS's speed from the seeds above alone)
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
        streamed = [
            _point(128, 128, 64, 8, 5, TMA=1, PERSISTENT=1, STREAM_K=1),
            _point(128, 128, 64, 8, 4, TMA=1, PERSISTENT=1, STREAM_K=1),
            _point(64, 128, 128, 4, 4, PERSISTENT=1, STREAM_K=1),
        ]
        out = (streamed if m >= 128 else []) + out
        out = [dict(p, STREAM_K=p.get("STREAM_K", 0)) for p in out]
    if tma_store:
        # the persistent TMA tiles storing C in two halves through a descriptor (the
        # persistent-matmul tutorial's fastest Hopper form), from a few hundred tokens up
        stored = [
            dict(_point(128, 256, 64, 8, 3, TMA=1, PERSISTENT=1), TMA_STORE=2),
            dict(_point(128, 256, 64, 8, 4, TMA=1, PERSISTENT=1), TMA_STORE=2),
            dict(_point(128, 128, 64, 8, 4, TMA=1, PERSISTENT=1), TMA_STORE=1),
        ]
        if stream_k:
            stored = [dict(p, STREAM_K=0) for p in stored] + [dict(stored[2], STREAM_K=1)]
        out = [dict(p, TMA_STORE=p.get("TMA_STORE", 0)) for p in ((stored if m >= 128 else []) + out)]
    if bn_tail:  # (the tiles with a tail come from `wave_seeds`, which needs N)
        out = [dict(p, BN_TAIL=0) for p in out]
    if gluon and tma_store:
        # the Gluon kernel (a TMA producer warp, one consumer warpgroup per 64 rows, one MMA
        # in flight): cuBLAS's cooperative 128x256 4-stage tile from a few hundred tokens up,
        # a deep 64-row one below
        # (on the H200, against cuBLAS: 128x128 s6 1.069 and the ping-pong s5 1.065 at gate_up
        # M=512, 0.983 / 0.995 at Qwen3 qkv M=2048; 128x256 s4 0.998 at o M=8192; 64x64 s13
        # persistent 0.915 at Qwen3 o M=256 (the searches' best 0.826); swap-AB 32x64 s16
        # 0.961 at o M=64 (0.879), 16x64 s16 1.081 at o M=16)
        wide = dict(_point(128, 128, 64, 8, 6, TMA=1, PERSISTENT=1), TMA_STORE=1, GLUON=1)
        deep = dict(_point(64, 64, 64, 4, 13, TMA=1, PERSISTENT=int(m >= 128)), TMA_STORE=1, GLUON=1)
        if m < 128:
            made = [deep, dict(_point(64, 128, 64, 4, 8, TMA=1), TMA_STORE=1, GLUON=1)]
            if swap_ab:  # the tokens as the MMA's narrow side, 16-32 of them, the pipeline 16 deep
                made.insert(
                    0, dict(_point(32 if m > 16 else 16, 64, 64, 4, 16, TMA=1, SWAP_AB=1), TMA_STORE=1, GLUON=1)
                )
        elif m < 512:
            made = [wide, deep]
        else:
            made = [
                dict(_point(128, 256, 64, 8, 4, TMA=1, PERSISTENT=1), TMA_STORE=2, GLUON=1),
                dict(_point(128, 128, 64, 4, 5, TMA=1, PERSISTENT=1), TMA_STORE=2, GLUON=2),  # ping-pong
                wide,
                *([deep] if m == 512 else []),
            ]
        made = [dict(q, **({"STREAM_K": 0} if stream_k else {}), **({"BN_TAIL": 0} if bn_tail else {})) for q in made]
        out = made + [dict(q, GLUON=0) for q in out]
    if not swap_ab:
        return out
    # the seeds carry SWAP_AB; at up to 64 tokens a few swapped tiles lead
    swapped = [
        dict(
            p,
            **({"STREAM_K": 0} if stream_k else {}),
            **({"TMA_STORE": 0} if tma_store else {}),
            **({"BN_TAIL": 0} if bn_tail else {}),
            **({"GLUON": 0} if gluon and tma_store else {}),
        )
        for p in swapped
    ]
    return (swapped if m <= 64 else []) + [dict(p, SWAP_AB=p.get("SWAP_AB", 0)) for p in out]
