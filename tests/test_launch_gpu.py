"""`GemmLauncher` on the GPU (the H200, Triton 3.6): the compiled-handle launches give
bitwise `gemm`'s results on every path of the template and of the Gluon kernel, over
rotating input sets (other pointers) and unaligned views; one JIT launch per plan and
kernel, every later call direct; under CUDA-graph capture, on a side stream, with a launch
hook set. Skipped without a GPU (tests/test_launch.py checks on the CPU that this file
collects). Run on the GPU machine:

    python3 -m pytest -q -p no:cacheprovider -rA tests/test_launch_gpu.py
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
import triton

from evokernel.search_spaces.gemm.template import DEFAULTS, GemmLauncher, candidate_source, gemm, last_compiled

_CUDA = torch.cuda.is_available()
_HOPPER = _CUDA and torch.cuda.get_device_capability()[0] == 9
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")]

#: a 64x128x64 tile, 4 warps, 3 stages: the cases' base
BASE = dict(DEFAULTS, BM=64, BN=128, BK=64, num_warps=4, num_stages=3)
BIAS_SILU_RES = {"bias": True, "activation": "silu", "residual": True}

#: (genes over BASE, (M, N, K), epilogue, an unaligned view of A too (pointer loads only))
TRITON_CASES = [
    ({}, (100, 520, 200), {}, True),  # ragged M, N, K
    ({"TMA": 1}, (256, 1024, 512), {"bias": True, "activation": "relu"}, False),
    ({"TMA": 1, "TMA_STORE": 1}, (300, 512, 256), BIAS_SILU_RES, False),
    ({"TMA": 1, "TMA_STORE": 2, "PERSISTENT": 1}, (2048, 1024, 512), {}, False),
    (
        {"TMA": 1, "TMA_STORE": 2, "PERSISTENT": 1},
        (300, 520, 200),
        {"activation": "gelu_tanh", "residual": True},
        False,
    ),
    ({"SPLIT_K": 2}, (64, 1024, 2048), {}, True),  # two kernels a call
    ({"SPLIT_K": 2}, (40, 520, 2048), BIAS_SILU_RES, True),
    ({"SPLIT_K": 4, "SPLITK_FIXUP": 1}, (16, 1024, 4096), BIAS_SILU_RES, True),
    ({"SPLIT_K": 3, "SPLITK_FIXUP": 1, "TMA": 1, "PERSISTENT": 1}, (64, 2048, 3072), {}, False),
    ({"PERSISTENT": 1}, (1000, 1000, 1000), {"bias": True, "activation": "relu"}, True),
    ({"SWAP_AB": 1, "BM": 32}, (32, 2048, 1024), {}, True),
    (
        {
            "BM": 16,
            "BN": 128,
            "BK": 128,
            "GROUP_M": 8,
            "num_stages": 4,
            "SPLIT_K": 2,
            "SPLITK_FIXUP": 1,
            "SWAP_AB": 1,
            "TMA": 1,
        },
        (16, 4096, 4096),
        {},
        False,
    ),  # Llama-3-8B o at M=16's winner
    ({"BM": 128, "BN": 128, "BN_TAIL": 64, "num_warps": 8, "TMA": 1, "TMA_STORE": 1}, (512, 6144, 1024), {}, False),
    ({"BN": 128, "BN_TAIL": 32}, (256, 1000, 512), BIAS_SILU_RES, True),
    # (128x128: a 128x256 tile with BASE's 3 stages needs 278552 B of shared memory, over the H200's 232448)
    ({"BM": 128, "BN": 128, "num_warps": 8, "TMA": 1, "PERSISTENT": 1, "STREAM_K": 1}, (512, 1536, 1024), {}, False),
    (
        {"BM": 64, "BN": 64, "BK": 128, "GROUP_M": 1, "num_stages": 7, "maxnreg": 232},
        (16, 6144, 4096),
        {},
        True,
    ),  # Llama-3-8B qkv at M=16's winner
]

#: the Gluon kernel (bf16, everything by TMA): genes over its benchmark point, as tests/test_gluon_gemm.py
GLUON_POINT = dict(
    DEFAULTS, BM=128, BN=256, BK=64, num_warps=8, num_stages=4, TMA=1, PERSISTENT=1, TMA_STORE=2, GLUON=1
)
GLUON_CASES = [
    ({}, (300, 520, 200), {}),
    ({"BN": 128, "num_stages": 6, "TMA_STORE": 1}, (2048, 1536, 1024), {"activation": "silu"}),
    (
        {"BM": 64, "num_warps": 4, "num_stages": 5},
        (64, 6144, 4096),
        {"bias": True, "activation": "gelu_tanh", "residual": True},
    ),
    ({"BN": 128, "BN_TAIL": 64, "num_stages": 4, "TMA_STORE": 1, "PERSISTENT": 0}, (512, 6144, 4096), {}),
    (
        {"BM": 32, "BN": 128, "num_warps": 8, "num_stages": 8, "TMA_STORE": 1, "SWAP_AB": 1},
        (50, 6144, 1000),
        BIAS_SILU_RES,
    ),
    ({"BN": 128, "num_warps": 4, "TMA_STORE": 1, "GLUON": 2}, (1000, 1000, 1000), {}),
    ({"BN": 128, "num_warps": 4, "TMA_STORE": 2, "GLUON": 2}, (2048, 2048, 1024), {"bias": True}),
]


def _inputs(m: int, n: int, k: int, seed: int, epi: dict[str, Any]) -> tuple:
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g) / k**0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g) if epi.get("bias") else None
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=g) if epi.get("residual") else None
    return a, b, bias, res


def _reference(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, res: torch.Tensor | None, act: str
) -> torch.Tensor:
    x = a.float() @ b.float()
    if bias is not None:
        x = x + bias.float()
    x = {
        "none": x,
        "relu": torch.relu(x),
        "silu": torch.nn.functional.silu(x),
        "gelu_tanh": torch.nn.functional.gelu(x, approximate="tanh"),
    }[act]
    return x + res.float() if res is not None else x


def _check(params: dict, shape: tuple[int, int, int], epi: dict[str, Any], unaligned: bool) -> None:
    """Three input sets and (where asked) an unaligned view of A, three rounds: the launcher's
    C is gemm's, bitwise, and near the fp32 reference; one JIT launch per plan and kernel."""
    m, n, k = shape
    act = epi.get("activation", "none")
    sets = [_inputs(m, n, k, seed, epi) for seed in range(3)]
    if unaligned:  # 2 bytes past an aligned address, rows of k + 1 elements
        wide = torch.randn(m, k + 1, device="cuda", dtype=torch.bfloat16)
        sets.append((wide[:, 1:], *sets[0][1:]))
        assert sets[-1][0].data_ptr() % 16
    run = GemmLauncher(params, activation=act)
    for _ in range(3):
        for a, b, bias, res in sets:
            got = run(a, b, bias, res)
            want = gemm(a, b, bias=bias, residual=res, activation=act, **params)
            torch.cuda.synchronize()
            assert torch.equal(got, want), "the launcher's C is not gemm's"
            ref = _reference(a, b, bias, res, act)
            err = ((got.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
            assert torch.isfinite(got).all() and err < 2e-2, err
    kernels = 2 if params.get("SPLIT_K", 1) > 1 and not params.get("SPLITK_FIXUP") else 1
    plans = 1 + unaligned
    assert run.stats() == {
        "plans": plans,
        "jit_launches": kernels * plans,
        "fast_launches": kernels * (3 * len(sets) - plans),
    }, run.stats()
    if triton.__version__.startswith("3.6."):  # below the launcher's Python wrapper, tensor maps cached
        assert all(p.main._handle.raw is not None for p in run._plans.values()), "not the raw launch"


@pytest.mark.parametrize("over, shape, epi, unaligned", TRITON_CASES)
def test_the_launcher_is_gemm_bitwise_through_the_compiled_handle(
    over: dict, shape: tuple[int, int, int], epi: dict, unaligned: bool
) -> None:
    _check(dict(BASE, **over), shape, epi, unaligned)


@pytest.mark.skipif(not _HOPPER, reason="the Gluon kernel needs a Hopper GPU")
@pytest.mark.parametrize("over, shape, epi", GLUON_CASES)
def test_the_gluon_launcher_is_gemm_bitwise_through_the_compiled_handle(
    over: dict, shape: tuple[int, int, int], epi: dict
) -> None:
    params = dict(GLUON_POINT, **over)
    params.setdefault("BN_TAIL", 0)
    params.setdefault("SWAP_AB", 0)
    _check(params, shape, epi, False)


@pytest.mark.parametrize(
    "over", [{"TMA": 1, "TMA_STORE": 2, "PERSISTENT": 1}, {"SPLIT_K": 4, "SPLITK_FIXUP": 1}, {"SPLIT_K": 2}]
)
def test_the_launcher_replays_in_a_cuda_graph(over: dict) -> None:
    params = dict(BASE, **over)
    a, b, bias, res = _inputs(64, 1024, 2048, 0, BIAS_SILU_RES)
    run = GemmLauncher(params, activation="silu")
    run(a, b, bias, res)  # the plan and the compiled kernels, before capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(a, b, bias, res)  # (warm-up on the capture's stream, as torch.cuda.graphs asks)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run(a, b, bias, res)
    for seed in (1, 2):
        fresh = _inputs(64, 1024, 2048, seed, BIAS_SILU_RES)
        for static, new in zip((a, b, bias, res), fresh):
            static.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, gemm(a, b, bias=bias, residual=res, activation="silu", **params))


def test_the_launcher_runs_on_the_current_stream() -> None:
    params = dict(BASE, SPLIT_K=4, SPLITK_FIXUP=1)  # (the fixup's counters are per stream)
    a, b, _, _ = _inputs(16, 1024, 4096, 0, {})
    run = GemmLauncher(params)
    want = gemm(a, b, **params)
    run(a, b)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(10_000_000)  # the side stream busy: a launch on another stream would finish first
        got = [run(a, b) for _ in range(3)]
    torch.cuda.synchronize()
    assert all(torch.equal(g, want) for g in got)


def test_a_launch_hook_sees_the_direct_launches() -> None:
    from triton import knobs

    seen: list[Any] = []

    def hook(metadata: Any) -> None:
        seen.append(metadata)

    run = GemmLauncher(dict(BASE, TMA=1))
    a, b, _, _ = _inputs(256, 1024, 512, 0, {})
    run(a, b)
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        got = run(a, b)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    run(a, b)
    torch.cuda.synchronize()
    assert torch.equal(got, gemm(a, b, **dict(BASE, TMA=1)))
    metadata = seen[0].get() if hasattr(seen[0], "get") and not isinstance(seen[0], dict) else seen[0]  # (LazyDict)
    assert len(seen) == 1 and "_gemm_kernel" in metadata["name"]
    assert run.stats()["fast_launches"] == 2


def test_a_generated_candidate_runs_its_launcher() -> None:
    params = dict(BASE, TMA=1, TMA_STORE=1)
    namespace: dict[str, Any] = {}
    exec(compile(candidate_source(params, bias=True, activation="relu"), "candidate", "exec"), namespace)  # noqa: S102
    a, b, bias, _ = _inputs(300, 512, 256, 0, {"bias": True})
    for _ in range(3):
        got = namespace["kernel"](a, b, bias)
    assert torch.equal(got, gemm(a, b, bias=bias, activation="relu", **params))
    assert namespace["_gemm"].stats() == {"plans": 1, "jit_launches": 1, "fast_launches": 2}
    assert last_compiled().n_regs > 0  # (the probes' registers: the kernel launched last)


def test_the_launchers_host_time_is_a_fraction_of_gemms() -> None:
    """(`benchmarks/launch_overhead.py` measures it against torch.matmul at every GEMM row)"""
    params = dict(BASE, TMA=1, TMA_STORE=2, PERSISTENT=1)
    a, b, _, _ = _inputs(64, 4096, 4096, 0, {})
    run = GemmLauncher(params)

    def host_us(fn: Any, n: int = 200) -> float:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        us = (time.perf_counter() - t0) / n * 1e6
        torch.cuda.synchronize()
        return us

    fast = min(host_us(lambda: run(a, b)) for _ in range(3))
    slow = min(host_us(lambda: gemm(a, b, **params)) for _ in range(3))
    matmul = min(host_us(lambda: torch.matmul(a, b)) for _ in range(3))
    print(f"host us per call: launcher {fast:.1f}, gemm {slow:.1f}, torch.matmul {matmul:.1f}")
    assert fast < slow / 2, (fast, slow)


# --- the templates that launch through a LaunchCache (fused MoE, attention prefill, decode) ----


def _through_the_jit_then_direct(
    module: Any, call: Any, sets: list[tuple], monkeypatch: pytest.MonkeyPatch, *, bitwise: bool = True
) -> None:
    """`call(*inputs)` on each input set: first every launch through the JIT (the reference:
    direct launches off, a fresh cache), then through a fresh cache, three rounds; the same
    outputs (bitwise, or within 1e-3 where the kernels' atomics may order sums differently),
    and direct launches after each launch signature's first."""
    from evokernel.runtime.launch import LaunchCache

    monkeypatch.setenv("EVOKERNEL_FAST_LAUNCH", "0")
    monkeypatch.setattr(module, "_LAUNCHES", LaunchCache())
    want = [call(*inputs).clone() for inputs in sets]
    monkeypatch.delenv("EVOKERNEL_FAST_LAUNCH")
    cache = LaunchCache()
    monkeypatch.setattr(module, "_LAUNCHES", cache)
    for _ in range(3):
        for inputs, w in zip(sets, want):
            got = call(*inputs)
            torch.cuda.synchronize()
            if bitwise:
                assert torch.equal(got, w)
            else:
                torch.testing.assert_close(got, w, atol=1e-3, rtol=1e-3)
    stats = cache.stats()
    assert stats["fast_calls"] >= 2 * stats["jit_calls"] > 0, stats


@pytest.mark.parametrize("over", [{}, {"TMA": 1}, {"PERSISTENT": 1}])
def test_the_attention_template_launches_directly(over: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from evokernel.search_spaces.attention import template_prefill as triton_attention

    lens, h, hkv, d = [300, 77, 512], 8, 2, 128
    total = sum(lens)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], device="cuda", dtype=torch.int32)

    def inputs(seed: int) -> tuple:
        g = torch.Generator(device="cuda").manual_seed(seed)
        return tuple(
            torch.randn(total, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for n in (h, hkv, hkv)
        ) + (cu,)

    params = dict(triton_attention.DEFAULTS, **over)
    _through_the_jit_then_direct(
        triton_attention,
        lambda *x: triton_attention.attention(*x, causal=True, **params),
        [inputs(s) for s in range(3)],
        monkeypatch,
    )


@pytest.mark.parametrize("over", [{}, {"NUM_SPLITS": 4, "REDUCE": 1}, {"NUM_SPLITS": 1}])
def test_the_decode_template_launches_directly(over: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from evokernel.search_spaces.attention import template_decode as triton_decode

    lens, h, hkv, d, page = [1000, 37, 4000, 129], 32, 8, 128, 16
    per_seq = [-(-n // page) for n in lens]
    pages = sum(per_seq) + 2
    table = torch.zeros(len(lens), max(per_seq), dtype=torch.int32)
    order = torch.randperm(pages, generator=torch.Generator().manual_seed(0))
    start = 0
    for i, n in enumerate(per_seq):
        table[i, :n] = order[start : start + n]
        start += n
    table, ctx = table.cuda(), torch.tensor(lens, device="cuda", dtype=torch.int32)

    def inputs(seed: int) -> tuple:
        g = torch.Generator(device="cuda").manual_seed(seed)
        q = torch.randn(len(lens), h, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(pages, page, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        return q, k, v, table, ctx

    params = dict(triton_decode.DEFAULTS, **over)
    _through_the_jit_then_direct(
        triton_decode, lambda *x: triton_decode.decode(*x, **params), [inputs(s) for s in range(3)], monkeypatch
    )


@pytest.mark.parametrize("structure", [{}, {"gemv": 1}, {"gemv": 2}, {"fuse_silu": True}])
def test_the_fused_moe_template_launches_directly(structure: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from evokernel.search_spaces.moe import template as triton_moe

    m, e, hidden, inter, top_k = 64, 8, 512, 256, 2
    cfg = dict(zip(triton_moe.GEMM_KEYS, (32, 64, 64, 1, 4, 3)))

    def inputs(seed: int) -> tuple:
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        w1 = torch.randn(e, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16, generator=g) / hidden**0.5
        w2 = torch.randn(e, hidden, inter, device="cuda", dtype=torch.bfloat16, generator=g) / inter**0.5
        logits = torch.randn(m, e, device="cuda", generator=g)
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), top_k, dim=-1)
        return x, w1, w2, weights, ids.to(torch.int32)

    _through_the_jit_then_direct(
        triton_moe,
        lambda *x: triton_moe.fused_moe(*x, up=cfg, down=cfg, **structure),
        [inputs(s) for s in range(3)],
        monkeypatch,
        bitwise=False,
    )
