"""The GEMM benchmark's own seed helpers (benchmarks/gemm_h200.py, cublas_kernels.py,
gemm_sk_probe.py): deeper pipelines of earlier winners, cuBLAS's tiles as seeds, the probe's
configs as points of the space.

These helpers are GEMM seed heuristics, which belong with the family's seeds in
search_spaces/ (issue 24: a kernel family is one folder); until they move there, the
scripts are loaded here by path, as modules of their own (no sys.path entry)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from evokernel.search_spaces import gemm_space

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _script(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (gemm_h200.cublas_seeds imports cublas_kernels by name)
    spec.loader.exec_module(module)
    return module


def test_earlier_winners_come_back_with_deeper_pipelines_where_they_fit():
    """cuBLAS runs narrow tiles 6-16 stages deep (call BB); a 64-row winner is re-seeded at
    the deepest pipeline that fits in shared memory (up to 16), a larger one with one stage
    more, its C stored from registers where staging C leaves no room."""
    deep_variants = _script("gemm_h200").deep_variants

    from evokernel.search_spaces.gemm.template import DEFAULTS

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


def test_cublas_kernel_names_become_seeds_of_the_benchmark_space(monkeypatch, capsys):
    """Call BB's names (cuBLAS 13 on the H200) at the rows the searches lost: each becomes a
    valid point of the benchmark's space, its optional genes off; names without a tile
    (the split-K reduction, a memset) give none; a profile that fails gives no seed."""
    import torch
    cublas_seeds = _script("gemm_h200").cublas_seeds
    cublas_kernels = _script("cublas_kernels")

    space = gemm_space(swap_ab=True, tma_store=True, bn_tail=True)
    off = {"SWAP_AB": 0, "TMA_STORE": 0, "BN_TAIL": 0}
    shape = {"M": 512, "N": 5120, "K": 2048}
    if not torch.cuda.is_available():  # the real profile fails here: said, and no seed
        assert cublas_seeds(512, shape, space, off, tma_store=True) == ([], [])
        assert "not read" in capsys.readouterr().out
    recorded = {"nvjet_sm90_tst_320x64_64x4_1x2_h_bz_NNT": 7.6, "Memset (Device)": 0.7,
                "void cublasLt::splitKreduce_kernel<32, 16, int, float>": 1.7}
    monkeypatch.setattr(cublas_kernels, "kernel_names", lambda m, n, k, reps=5: recorded)
    names, points = cublas_seeds(512, shape, space, off, tma_store=True)
    assert names == list(recorded)
    assert [(p["BM"], p["BN"], p["BN_TAIL"], p["num_warps"], p["SWAP_AB"]) for p in points] == [(64, 256, 64, 4, 0)]
    assert all(space.is_valid(p) for p in points)


def test_every_probe_config_is_a_point_of_the_benchmark_space():
    """The probe's configs (gemm_sk_probe.py: the sets run on the device) are points of the
    whole GEMM space, optional genes filled as off: a config the space rules out would be a
    wasted compile or a misleading row on the GPU."""
    probe = _script("gemm_sk_probe")

    # (Triton's cooperative kernels, WARP_SPEC=1, hung on the H200 in call S11b: the probe
    # keeps them, for a later Triton, and `benchmarks/device.sh coop` leaves them out by default)
    space = gemm_space(swap_ab=True, stream_k=True, tma_store=True, bn_tail=True, a_reg=True, gluon=True,
                       warp_spec=True)
    off = {p.name: p.values[0] for p in space.params}
    for name, cfg in {**probe.COOP_CONFIGS, **probe.SMALL_CONFIGS}.items():  # (the older sets hold known failures)
        point = {**off, **cfg}
        assert space.is_valid(point), (name, space.why_invalid(point))
