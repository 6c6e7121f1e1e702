"""The warp-specialised Gluon GEMM (search_spaces/gemm/template_gluon.py, the template's GLUON=1).

On the CPU: the space's rules, the refusal of CPU tensors (Gluon does not run in Triton's
interpreter) as a clear error, and the kernel's sm_90 build (Triton's NVIDIA backend compiles
without a GPU): a producer partition and the consumers, the consumers keeping one MMA in
flight, registers moved from the producer to the consumers, shared memory as the space
predicts. On a GPU: results against torch at ragged shapes, every schedule and epilogue.
"""

from __future__ import annotations

import re

import pytest
import torch

from evokernel.search_spaces import gemm_space, gluon_variant
from evokernel.search_spaces.gemm.template import DEFAULTS, candidate_source, gemm
from evokernel.core.space import H200_SHARED_MEMORY_BYTES
from tests._gluon import bf16_desc, compile_sm90, require_gluon_sm90

#: a Gluon point of the benchmark space: 128x256, 8 consumer warps, 4 stages, C in halves
POINT = dict(DEFAULTS, BM=128, BN=256, BK=64, num_warps=8, num_stages=4, TMA=1, PERSISTENT=1, TMA_STORE=2, GLUON=1)


def _space():
    return gemm_space(tma_store=True, gluon=True)


def test_the_space_keeps_the_gluon_kernel_to_what_it_is():
    space = _space()
    assert space.is_valid(POINT)
    assert "one consumer warpgroup per 64 rows" in space.why_invalid(dict(POINT, BN=128, num_warps=4))
    assert "split-K" in space.why_invalid(dict(POINT, SPLIT_K=2))
    assert not space.is_valid(dict(POINT, WARP_SPEC=1))  # (it is warp-specialised itself)
    assert "without split-K, stream-K" in space.why_invalid(dict(POINT, BN=128, num_ctas=2, TMA_STORE=1))
    assert "stored by TMA" in space.why_invalid(dict(POINT, TMA_STORE=0))
    assert "shared memory" in space.why_invalid(dict(POINT, TMA_STORE=1))  # 196608 + 65536 for C whole
    assert "at least 64 x 64" in space.why_invalid(dict(POINT, BM=32, num_warps=4, TMA_STORE=1))
    assert space.is_valid(dict(POINT, BM=64, num_warps=4, num_stages=5))
    assert space.is_valid(dict(POINT, BN=128, num_stages=6, TMA_STORE=1, PERSISTENT=0))
    with pytest.raises(ValueError, match="tma_store"):
        gemm_space(gluon=True)
    # a winner of the Triton template, in the Gluon kernel's form
    q = gluon_variant(space, dict(POINT, GLUON=0, num_stages=3))
    assert q == POINT
    assert gluon_variant(space, dict(POINT, GLUON=0, BN=128, BN_TAIL=0, SPLIT_K=2)) is None
    assert gluon_variant(gemm_space(tma_store=True), dict(POINT, GLUON=0)) is None  # no gene, no variant


def test_the_gluon_kernel_refuses_cpu_tensors_with_a_clear_reason():
    a = torch.randn(64, 64, dtype=torch.float16)
    b = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="Hopper GPU only"):
        gemm(a, b, **POINT)
    with pytest.raises(ValueError, match="without split-K"):
        gemm(a, b, **dict(POINT, TMA_STORE=0))
    src = candidate_source(POINT)
    assert '"GLUON": 1' in src and "def kernel(a, b):" in src


# --- the slot protocol, modelled -----------------------------------------------------------


def _protocol(k_tiles: int, stages: int, tiles: int, consumers: int, *, turns: bool, seed: int) -> str | None:
    """The kernel's barrier protocol as coroutines scheduled at random (a producer and one
    or two consumers, as `_producer` and `_consumer` wait and arrive), checking that every
    MMA reads the slot use it waited for and that no slot is overwritten before its
    release. An mbarrier wait by parity passes when the barrier's completed phases and the
    parity differ in parity (`mbarrier.try_wait.parity`). None, or what went wrong."""
    import random

    rnd = random.Random(seed)
    ready, empty, turn = [0] * stages, [0] * stages, [0, 0]
    held: list[int | None] = [None] * stages
    released: set[int] = set()
    errors: list[str] = []

    def producer():
        for use in range(tiles * k_tiles):
            s = use % stages
            while empty[s] % 2 == ((use // stages) & 1) ^ 1:  # wait(empty[s], parity)
                yield
            if held[s] is not None and held[s] not in released:
                errors.append(f"use {use} overwrote slot {s} holding unreleased use {held[s]}")
            held[s] = use
            yield  # the TMA load in flight
            ready[s] += 1

    def consumer(first: int, stride: int):
        it, n = first * k_tiles, 0
        for _ in range(first, tiles, stride):
            if turns and stride > 1 and n + first > 0:  # wait(turn[first], (n + first + 1) & 1)
                while turn[first] % 2 == (n + first + 1) & 1:
                    yield
            for kt in range(k_tiles):
                s = it % stages
                while ready[s] % 2 == (it // stages) & 1:
                    yield
                if held[s] != it:
                    errors.append(f"consumer {first} read slot {s} for use {it}, holding {held[s]}")
                yield  # the MMA issued; wait(1): the previous one done
                if kt > 0:
                    released.add(it - 1)
                    empty[(it - 1) % stages] += 1
                it += 1
            if stride > 1:
                turn[1 - first] += 1
            yield  # wait(0)
            if k_tiles:
                released.add(it - 1)
                empty[(it - 1) % stages] += 1
            for _ in range(3):  # the epilogue
                yield
            it += (stride - 1) * k_tiles
            n += 1

    live = [producer()] + [consumer(c, consumers) for c in range(consumers)]
    for _ in range(10**6):  # (a run takes a few thousand steps)
        if not live or errors:
            break
        runner = rnd.choice(live)
        try:
            next(runner)
        except StopIteration:
            live.remove(runner)
    return errors[0] if errors else ("hang" if live else None)


@pytest.mark.parametrize("consumers", [1, 2])
def test_the_slot_protocol_reads_what_it_waited_for_and_never_hangs(consumers: int) -> None:
    for k_tiles in (1, 2, 3, 4, 5, 8, 16):
        for stages in (2, 3, 4, 5, 8):
            for seed in range(12):
                got = _protocol(k_tiles, stages, 5, consumers, turns=True, seed=seed)
                assert got is None, (k_tiles, stages, seed, got)


def test_two_consumers_without_taking_turns_read_slots_before_they_are_loaded() -> None:
    """Why the ping-pong consumers take turns: without the turn barriers, a consumer waits on
    a slot's round by parity while the other consumer's earlier round of it is not loaded
    yet, and passes (a review's finding, session 10): wherever a tile has at least as many K
    steps as there are slots."""
    failing = {
        (k, n)
        for k in (1, 2, 4, 8)
        for n in (2, 4)
        if any(_protocol(k, n, 5, 2, turns=False, seed=seed) for seed in range(12))
    }
    assert failing and all(k >= n for k, n in failing), failing


def _gluon_sm90(
    BM: int,
    BN: int,
    BK: int,
    stages: int,
    warps: int,
    epi: int = 1,
    tail: int = 0,
    swap: bool = False,
    pingpong: bool = False,
    **epilogue,
):
    """The Gluon kernel compiled for sm_90 on the CPU (descriptors as a launch passes them)."""
    require_gluon_sm90()
    from evokernel.search_spaces.gemm.template_gluon import _gluon_gemm_kernel, gluon_launch_maxnreg

    types = {
        "a_desc": bf16_desc([BM, BK]),
        "b_desc": bf16_desc([BK, BN]),
        "c_desc": bf16_desc([BM, BN // epi]),
        "b2_desc": bf16_desc([BK, tail or BN]),
        "c2_desc": bf16_desc([BM, tail or BN // epi]),
        "bias_ptr": "*bf16",
        "res_ptr": "*bf16",
    }
    consts = {
        **dict(
            GROUP_M=8,
            STAGES=stages,
            EPI_SPLIT=epi,
            BNT=tail,
            HAS_BIAS=False,
            ACT=0,
            HAS_RES=False,
            num_warps=warps,
            SWAP=swap,
            PINGPONG=pingpong,
        ),
        **epilogue,
    }
    return compile_sm90(
        _gluon_gemm_kernel,
        types,
        consts,
        ("M", "N", "K", "bias_ptr", "res_ptr", "stride_rm"),
        num_warps=warps,
        maxnreg=gluon_launch_maxnreg(2 * warps if pingpong else warps),
    )


@pytest.mark.slow
def test_the_gluon_kernel_builds_a_producer_and_consumers_keeping_one_mma_in_flight_for_sm90():
    kernel = _gluon_sm90(128, 256, 64, 4, 8, epi=2)
    ttgir, ptx = kernel.asm["ttgir"], kernel.asm["ptx"]
    assert "ttg.warp_specialize" in ttgir and kernel.metadata.num_warps == 12  # 8 consumers + the producer's group
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)  # the main loop leaves one MMA in flight
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)  # the producer gives its registers away
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+240;", ptx)
    assert "cp.async.bulk.tensor.2d.global.shared" in ptx  # C by TMA
    # shared memory: the pipeline, C's half and the barriers, as the space predicts
    space = _space()
    predicted = (128 * 64 + 64 * 256) * 2 * 4 + 128 * 128 * 2
    assert predicted < kernel.metadata.shared <= predicted + 512 <= H200_SHARED_MEMORY_BYTES
    assert space.is_valid(POINT)


@pytest.mark.slow
def test_the_gluon_kernel_builds_with_its_epilogue_and_one_warpgroup_for_sm90():
    kernel = _gluon_sm90(64, 128, 64, 8, 4, epi=1, HAS_BIAS=True, ACT=3, HAS_RES=True)
    assert "ttg.warp_specialize" in kernel.asm["ttgir"] and kernel.metadata.num_warps == 8
    assert kernel.metadata.shared <= H200_SHARED_MEMORY_BYTES


@pytest.mark.slow
def test_a_gluon_tile_with_a_tail_keeps_both_mmas_of_a_k_step_in_flight_for_sm90():
    """128x(256+64), cuBLAS's 320-wide tile at Qwen3's qkv: two MMAs per K step (B's 256
    columns and the tail's 64), the previous step's pair waited for (wait_group 2)."""
    kernel = _gluon_sm90(128, 256, 64, 3, 8, epi=2, tail=64)
    ptx = kernel.asm["ptx"]
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+2;", ptx)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16", ptx)  # the tail's MMA
    point = dict(POINT, BN_TAIL=64, num_stages=3)
    space = gemm_space(tma_store=True, bn_tail=True, gluon=True)
    assert space.is_valid(point)
    predicted = (128 * 64 + 64 * 320) * 2 * 3 + 128 * 128 * 2 + 128 * 64 * 2
    assert predicted < kernel.metadata.shared <= predicted + 512


@pytest.mark.slow
def test_a_swapped_gluon_tile_puts_the_tokens_on_the_mmas_narrow_side_for_sm90():
    """SWAP_AB with 16 tokens and 64 weight columns, 16 stages (cuBLAS's 64x16 tile, call
    BB): the MMA is m64n16 (the weights its 64 rows), one in flight."""
    kernel = _gluon_sm90(16, 64, 64, 16, 4, swap=True, HAS_BIAS=True, HAS_RES=True)
    ptx = kernel.asm["ptx"]
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)) == {"m64n16k16"}
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    space = gemm_space(tma_store=True, swap_ab=True, gluon=True)
    point = dict(POINT, BM=16, BN=64, num_warps=4, num_stages=16, TMA_STORE=1, SWAP_AB=1, PERSISTENT=0)
    assert space.is_valid(point)
    assert "swap-AB" in space.why_invalid(dict(point, TMA_STORE=2))
    assert "swap-AB" in space.why_invalid(dict(point, BN=128, num_stages=8))  # 8 warps for 128 weight columns
    predicted = (16 * 64 + 64 * 64) * 2 * 16 + 16 * 64 * 2
    assert predicted < kernel.metadata.shared <= predicted + 512


@pytest.mark.slow
def test_the_ping_pong_gluon_kernel_builds_two_consumers_and_a_producer_for_sm90():
    """GLUON=2: two 4-warp consumer warpgroups (232 registers each after setmaxnreg) and the
    producer (24), each consumer with its own C staging."""
    kernel = _gluon_sm90(128, 128, 64, 4, 4, pingpong=True)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.num_warps == 12
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    point = dict(POINT, BN=128, num_warps=4, TMA_STORE=1, GLUON=2)
    space = _space()
    assert space.is_valid(point)
    assert "persistent" in space.why_invalid(dict(point, PERSISTENT=0))
    assert "ping-pong" in space.why_invalid(dict(point, num_stages=6))  # two C stagings beside 6 stages
    predicted = (128 * 64 + 64 * 128) * 2 * 4 + 2 * 128 * 128 * 2
    assert predicted < kernel.metadata.shared <= predicted + 512


# --- on a GPU ---------------------------------------------------------------------------------

_CUDA = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
GPU_CASES = [
    # (genes over POINT, (M, N, K), epilogue)
    ({}, (300, 520, 200), {}),  # ragged in M, N and K: TMA's zero fill and clipped stores
    ({"PERSISTENT": 0}, (1000, 1024, 4096), {}),
    ({"BN": 128, "num_stages": 6, "TMA_STORE": 1}, (2048, 1536, 1024), {"activation": "silu"}),
    (
        {"BM": 64, "num_warps": 4, "num_stages": 5},
        (64, 6144, 4096),
        {"bias": True, "activation": "gelu_tanh", "residual": True},
    ),
    ({"BM": 256, "BN": 128, "num_stages": 4}, (512, 4096, 14336), {"residual": True}),
    ({"GROUP_M": 1}, (8192, 256, 64), {"bias": True, "activation": "relu"}),
    # tails: the tile 192 and 320 wide (the last tile's tail past N: clipped)
    ({"BN": 128, "BN_TAIL": 64, "num_stages": 4, "TMA_STORE": 1, "PERSISTENT": 0}, (512, 6144, 4096), {}),
    ({"BN_TAIL": 64, "num_stages": 3}, (2048, 5120, 2048), {"bias": True, "residual": True}),
    (
        {"BM": 64, "num_warps": 4, "BN": 128, "BN_TAIL": 32, "num_stages": 5, "TMA_STORE": 1},
        (100, 1000, 304),
        {},
    ),  # K: 16-byte rows for TMA
    # swap-AB: the tokens on the MMA's narrow side (the last tile's tokens past M: clipped)
    (
        {"BM": 16, "BN": 64, "num_warps": 4, "num_stages": 16, "TMA_STORE": 1, "SWAP_AB": 1, "PERSISTENT": 0},
        (16, 4096, 4096),
        {},
    ),
    (
        {"BM": 32, "BN": 128, "num_warps": 8, "num_stages": 8, "TMA_STORE": 1, "SWAP_AB": 1},
        (50, 6144, 1000),
        {"bias": True, "activation": "silu", "residual": True},
    ),
    # ping-pong: 1000x1000 in 128x128 tiles is 64 tiles (each program of 64 one, the second
    # consumer idle); 4096x4096 is 1024 (7-8 a program: the consumers take turns, an odd
    # count leaves the second one a tile short)
    ({"BN": 128, "num_warps": 4, "TMA_STORE": 1, "GLUON": 2}, (1000, 1000, 1000), {}),
    ({"BN": 128, "num_warps": 4, "TMA_STORE": 2, "GLUON": 2}, (4096, 4096, 4096), {"bias": True}),
    ({"BM": 64, "num_warps": 4, "num_stages": 4, "GLUON": 2}, (2048, 5120, 2048), {}),
]


def _gpu_params(over: dict) -> dict:
    params = dict(POINT, **over)
    params.setdefault("BN_TAIL", 0)
    params.setdefault("SWAP_AB", 0)
    return params


def test_every_gpu_case_is_a_point_of_the_space() -> None:
    """(checked here, on the CPU: a case the space rules out would fail on the GPU for the
    wrong reason, and device time is short)"""
    space = gemm_space(tma_store=True, bn_tail=True, swap_ab=True, gluon=True)
    for over, _, _ in GPU_CASES:
        assert space.is_valid(_gpu_params(over)), (over, space.why_invalid(_gpu_params(over)))


@pytest.mark.gpu
@pytest.mark.skipif(not _CUDA, reason="needs a Hopper GPU")
@pytest.mark.parametrize("over, shape, epi", GPU_CASES)
def test_the_gluon_kernel_matches_torch_on_the_gpu(over: dict, shape: tuple[int, int, int], epi: dict) -> None:
    m, n, k = shape
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k**0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if epi.get("bias") else None
    res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) if epi.get("residual") else None
    act = epi.get("activation", "none")
    params = _gpu_params(over)
    for _ in range(2):  # twice: the second call reuses the compiled kernel
        c = gemm(a, b, bias=bias, residual=res, activation=act, **params)
    ref = a.float() @ b.float()
    if bias is not None:
        ref = ref + bias.float()
    ref = {
        "none": ref,
        "relu": torch.relu(ref),
        "silu": torch.nn.functional.silu(ref),
        "gelu_tanh": torch.nn.functional.gelu(ref, approximate="tanh"),
    }[act]
    if res is not None:
        ref = ref + res.float()
    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    assert torch.isfinite(c).all() and err < 1e-2, err
