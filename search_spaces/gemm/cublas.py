"""cuBLAS's Hopper kernel names, read as points of the GEMM space (`cublas_seed`).

torch.profiler names the kernel cuBLAS ran for a torch.matmul (`nvjet_sm90_tst_<rows>x<cols>_
<BK>x<stages>_<cluster>_...` on Hopper with CUDA 12.9 and later); the name holds the tile,
the pipeline depth, split-K and the cooperative form, which `cublas_seed` turns into the
template's nearest point: a seed that starts a search where cuBLAS already is.
`kernel_names` reads the names (and device times) of the kernels torch.matmul runs at a
shape, `cublas_seeds` both at once: the names at a shape and the valid points they give.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping

from evokernel.core.space import H200_SHARED_MEMORY_BYTES, SearchSpace
from evokernel.search_spaces.gemm.seeds import _fitting_point
from evokernel.search_spaces.gemm.space import gemm_space

__all__ = ["cublas_seed", "cublas_seeds", "kernel_names"]

#: cuBLAS's Hopper kernels (CUDA 12.9+): nvjet_sm90_tst_<rows>x<cols>_<BK>x<stages>_<cluster>_...
_NVJET = re.compile(r"nvjet_sm90_tst_(\d+)x(\d+)_(\d+)x(\d+)_\d+x\d+_")


def _pow2_floor(x: int, lo: int, hi: int) -> int:
    p = lo
    while p * 2 <= min(x, hi):
        p *= 2
    return p


def cublas_seed(
    kernel: str,
    m: int,
    n: int,
    *,
    sms: int = 132,
    tma_store: bool = False,
    swap_ab: bool = False,
    shared_memory_bytes: int = H200_SHARED_MEMORY_BYTES,
    warp_spec: bool = False,
) -> dict[str, int] | None:
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
    where `warp_spec` lets the space hold it (it hung on the H200), else the plain
    tile (whose Gluon form `gluon_variant` gives: the same structure). At
    Qwen3's qkv, M=512, cuBLAS's 320x64 tile becomes the 64x(256+64) that beat it on the H200 (1.021x).

    >>> p = cublas_seed("nvjet_sm90_tst_320x64_64x4_1x2_h_bz_NNT", 512, 5120, tma_store=True)
    >>> p["BM"], p["BN"], p["BN_TAIL"], p["num_warps"], p["num_stages"]
    (64, 256, 64, 4, 4)
    >>> p = cublas_seed("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_NNT", 256, 2048)  # Qwen3's o
    >>> p["BM"], p["BN"], p["num_stages"], p["SPLIT_K"]
    (64, 64, 13, 1)
    >>> p = cublas_seed("nvjet_sm90_tst_64x32_64x16_1x2_h_bz_NNT", 64, 4096, swap_ab=True)  # Llama's o
    >>> p["BM"], p["BN"], p["SWAP_AB"], p["num_stages"]
    (32, 64, 1, 16)
    >>> name = "nvjet_sm90_tst_192x128_64x5_1x2_h_bz_coopB_NNT"  # Llama qkv M=512
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
    space = gemm_space(
        tma_store=tma_store, bn_tail=True, swap_ab=swap_ab, shared_memory_bytes=shared_memory_bytes, warp_spec=warp_spec
    )
    return _fitting_point(
        space,
        bm,
        bn,
        _pow2_floor(bk, 32, 128),
        range(min(stages, 16), 1, -1),
        tma_store=tma_store,
        coop="_coop" in kernel and bm >= 128 and warp_spec,
        TMA=1,
        BN_TAIL=tail,
        PERSISTENT=int(tiles > sms and not tail),
        SPLIT_K=split,
        SPLITK_FIXUP=int(split > 1),
        **swap,
    )


def kernel_names(m: int, n: int, k: int, *, reps: int = 5) -> dict[str, float]:
    """The kernels torch.matmul (cuBLAS) runs for a bf16 M x K by K x N product (B row-major,
    as the problems lay it out): name -> median device time in us, under torch.profiler.
    Needs a CUDA GPU (the inputs are made on it)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # cuBLAS's heuristics and workspace set up outside the profile
        torch.matmul(a, b)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            torch.matmul(a, b)
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(ev.name, []).append(ev.device_time)
    return {name: statistics.median(us) for name, us in kernels.items()}


def cublas_seeds(
    m: int, shape: Mapping, space: SearchSpace, off: dict[str, int], *, tma_store: bool
) -> tuple[list[str], list[dict]]:
    """The kernels cuBLAS runs at this M x N x K (`shape` holds N and K; `kernel_names`) and
    the template's nearest points to them (`cublas_seed`, swap-AB tiles where `space` has the
    SWAP_AB gene), each filled with `off` (the space's optional genes, off) and kept where
    valid in `space`. A failure to profile (no GPU, a profiler error) is said and gives no
    names and no seed.
    """
    try:
        names = list(kernel_names(m, int(shape["N"]), int(shape["K"])))
    except Exception as exc:  # the profiler is a convenience here, not the search
        print(f"cuBLAS's kernels at M={m}: not read ({type(exc).__name__}: {exc})", flush=True)
        return [], []
    points = [
        cublas_seed(name, m, int(shape["N"]), tma_store=tma_store, swap_ab="SWAP_AB" in space.names) for name in names
    ]
    filled = [{**off, **p} for p in points if p]
    return names, [p for p in filled if space.is_valid(p)]
