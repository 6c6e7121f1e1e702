"""The GEMM family's seed helpers that the GEMM benchmark (benchmarks/gemm_h200.py) feeds its
searches with: earlier winners with deeper pipelines (`deep_variants`, search_spaces/gemm/seeds.py)
and cuBLAS's own tiles read as points of the space (`cublas_seeds`, search_spaces/gemm/cublas.py)."""

from __future__ import annotations

from evokernel.search_spaces import gemm_space
from evokernel.search_spaces.gemm import cublas
from evokernel.search_spaces.gemm.cublas import cublas_seeds
from evokernel.search_spaces.gemm.seeds import deep_variants
from evokernel.search_spaces.gemm.template import DEFAULTS


def test_earlier_winners_come_back_with_deeper_pipelines_where_they_fit():
    """A 64-row winner is re-seeded at the deepest pipeline that fits in shared memory (up
    to 16 stages, as cuBLAS runs narrow tiles), a larger one with one stage more, its C
    stored from registers where staging C leaves no room."""
    space = gemm_space(tma_store=True, bn_tail=True)
    narrow = dict(DEFAULTS, BM=64, BN=64, BK=128, num_warps=4, num_stages=5, TMA_STORE=0, BN_TAIL=0)
    wide = dict(DEFAULTS, BM=128, BN=128, BK=64, num_warps=8, num_stages=4, TMA=1, TMA_STORE=2, BN_TAIL=64)
    full = dict(DEFAULTS, BM=64, BN=256, BK=64, num_warps=4, num_stages=5, TMA=1, TMA_STORE=2, BN_TAIL=64)
    assert all(space.is_valid(p) for p in (narrow, wide))
    deep = deep_variants([narrow, wide, full], space)
    # 64x64x128: 32 KiB a stage, 7 fit; 128x(128+64) s5 fits only without C's staging;
    # 64x(256+64) is already as deep as shared memory allows (the 5-stage point is invalid)
    assert deep == [dict(narrow, num_stages=7), dict(wide, num_stages=5, TMA_STORE=0)]
    assert all(space.is_valid(p) for p in deep)


def test_cublas_kernel_names_become_seeds_of_the_space(monkeypatch, capsys):
    """cuBLAS 13's kernel names on the H200 at Qwen3's qkv, M=512: each becomes a valid point
    of the space, its optional genes off; names without a tile (the split-K reduction, a
    memset) give none; a profile that fails gives no seed."""
    import torch

    space = gemm_space(swap_ab=True, tma_store=True, bn_tail=True)
    off = {"SWAP_AB": 0, "TMA_STORE": 0, "BN_TAIL": 0}
    shape = {"M": 512, "N": 5120, "K": 2048}
    if not torch.cuda.is_available():  # the real profile fails here: said, and no seed
        assert cublas_seeds(512, shape, space, off, tma_store=True) == ([], [])
        assert "not read" in capsys.readouterr().out
    recorded = {
        "nvjet_sm90_tst_320x64_64x4_1x2_h_bz_NNT": 7.6,
        "Memset (Device)": 0.7,
        "void cublasLt::splitKreduce_kernel<32, 16, int, float>": 1.7,
    }
    monkeypatch.setattr(cublas, "kernel_names", lambda m, n, k, reps=5: recorded)
    names, points = cublas_seeds(512, shape, space, off, tma_store=True)
    assert names == list(recorded)
    assert [(p["BM"], p["BN"], p["BN_TAIL"], p["num_warps"], p["SWAP_AB"]) for p in points] == [(64, 256, 64, 4, 0)]
    assert all(space.is_valid(p) for p in points)
