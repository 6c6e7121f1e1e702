"""The warp-specialised Gluon flash-attention prefill (search_spaces/attention/template_prefill_gluon.py).

On the CPU: the configuration rules, the refusal of CPU tensors (Gluon does not run in
Triton's interpreter) as a clear error, the candidate's source, and the kernel's sm_90 build
(Triton's NVIDIA backend compiles without a GPU): a producer partition giving its registers
to the consumers, TMA loads, the scores' MMA issued before the previous block's P V with
OVERLAP (one group left in flight), no spills, shared memory as predicted. On a GPU: results
against the fp32 reference on ragged causal GQA batches and non-causal ones.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from tests._gluon import bf16_desc, compile_sm90, require_gluon_sm90
from evokernel.search_spaces.attention.template_prefill_gluon import (
    GLUON_DEFAULTS,
    attention_gluon,
    attention_gluon_dense,
    check_gluon_params,
    gluon_candidate_source,
    gluon_shared_bytes,
)

_CUDA = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def test_the_configuration_rules_say_why():
    assert check_gluon_params(GLUON_DEFAULTS) is None
    assert "multiple of 16 x num_warps" in check_gluon_params(dict(GLUON_DEFAULTS, BLOCK_M=64))
    assert "num_warps is 4" in check_gluon_params(dict(GLUON_DEFAULTS, num_warps=2))
    assert "shared memory" in check_gluon_params(dict(GLUON_DEFAULTS, num_stages=3))
    assert "OVERLAP needs at least 2" in check_gluon_params(dict(GLUON_DEFAULTS, num_stages=1))
    assert check_gluon_params(dict(GLUON_DEFAULTS, num_stages=1, OVERLAP=0)) is None
    assert "spills" in check_gluon_params(dict(GLUON_DEFAULTS, BLOCK_M=256, BLOCK_N=64, num_stages=2))
    assert "power of two" in check_gluon_params(dict(GLUON_DEFAULTS, BLOCK_N=96))  # (Gluon's shapes: seen on the H200)
    assert check_gluon_params(dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1)) is None
    assert "PINGPONG: two consumer warpgroups" in check_gluon_params(dict(GLUON_DEFAULTS, PINGPONG=1))
    assert "PINGPONG" in check_gluon_params(dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, OVERLAP=0))


def test_the_gluon_kernel_refuses_cpu_tensors_with_a_clear_reason():
    q = torch.randn(10, 4, 128, dtype=torch.float16)
    k = torch.randn(10, 2, 128, dtype=torch.float16)
    cu = torch.tensor([0, 10], dtype=torch.int32)
    with pytest.raises(ValueError, match="Hopper GPU only"):
        attention_gluon(q, k, k, cu, 10, causal=True, **GLUON_DEFAULTS)
    with pytest.raises(ValueError, match="Hopper GPU only"):
        attention_gluon_dense(
            q.view(1, 10, 4, 128).transpose(1, 2), k.view(1, 10, 2, 128), k, causal=False, **GLUON_DEFAULTS
        )
    src = gluon_candidate_source(GLUON_DEFAULTS, causal=False)
    assert "def kernel(q, k, v, cu_seqlens, max_seqlen, seqlens):" in src and "causal=False" in src
    with pytest.raises(ValueError, match="exactly"):
        gluon_candidate_source(dict(GLUON_DEFAULTS, EXTRA=1), causal=True)


def _sm90(
    BM: int,
    BN: int,
    warps: int,
    stages: int,
    overlap: bool,
    causal: bool = True,
    D: int = 128,
    pingpong: bool = False,
    **modes: bool | int,
):
    """The kernel compiled for sm_90 on the CPU (descriptors as a launch passes them);
    `modes`: QSTAGES, FOLD, TMA_STORE, DENSE."""
    require_gluon_sm90()
    from evokernel.search_spaces.attention.template_prefill_gluon import _attn_gluon_kernel
    from evokernel.search_spaces.gemm.template_gluon import gluon_launch_maxnreg

    types = {
        "q_desc": bf16_desc([BM // (2 if pingpong else 1), D]),
        "k_desc": bf16_desc([BN, D]),
        "v_desc": bf16_desc([BN, D]),
        "o_desc": bf16_desc([BM // (2 if pingpong else 1), D]),
        "o_ptr": "*bf16",
        "cu_ptr": "*i32",
        "qk_scale": "fp32",
    }
    consts = dict(GROUP=4, STAGES=stages, CAUSAL=causal, OVERLAP=overlap, num_warps=warps, PINGPONG=pingpong)
    consts.update(dict(QSTAGES=1, FOLD=True, TMA_STORE=False, DENSE=False, BY_SEQUENCE=False, SNAKE=False), **modes)
    return compile_sm90(
        _attn_gluon_kernel,
        types,
        consts,
        ("o_ptr", "cu_ptr", "stride_ot"),
        num_warps=warps,
        maxnreg=gluon_launch_maxnreg((2 if pingpong else 1) * warps),
    )


@pytest.mark.slow
def test_the_overlapped_kernel_builds_a_producer_and_keeps_the_scores_ahead_of_p_v_for_sm90():
    kernel = _sm90(128, 128, 8, 2, True)
    ttgir, ptx = kernel.asm["ttgir"], kernel.asm["ptx"]
    assert "ttg.warp_specialize" in ttgir and kernel.metadata.num_warps == 12  # 8 consumers + the producer's group
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;", ptx)  # the producer gives its registers away
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)  # the scores waited for, P V still in flight
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::(cta|cluster)\.global", ptx)  # Q, K, V by TMA
    assert "st.local" not in ptx  # no spills
    assert "ex2.approx" in ptx
    predicted = gluon_shared_bytes(128, 128, 2)
    assert predicted < kernel.metadata.shared <= predicted + 512


@pytest.mark.slow
@pytest.mark.parametrize("causal", [True, False])
def test_the_plain_kernel_waits_for_every_mma_and_one_warpgroup_builds_for_sm90(causal: bool):
    kernel = _sm90(64, 128, 4, 2, False, causal=causal)
    ptx = kernel.asm["ptx"]
    assert kernel.metadata.num_warps == 8 and not re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    assert "st.local" not in ptx


@pytest.mark.slow
def test_the_ping_pong_kernel_builds_two_consumers_taking_turns_and_a_producer_for_sm90():
    kernel = _sm90(128, 128, 4, 2, True, pingpong=True)
    ttgir, ptx = kernel.asm["ttgir"], kernel.asm["ptx"]
    assert "ttg.warp_specialize" in ttgir and kernel.metadata.num_warps == 12  # 4 + 4 consumers, the producer's group
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)  # the second consumer's registers
    assert re.search(r"wgmma\.wait_group\.sync\.aligned\s+1;", ptx)
    assert "st.local" not in ptx
    # the consumers' 64-row halves of Q and the K/V slots as one 128-row tile's; the prediction
    # (a whole tile's output conversion) bounds it
    assert (128 + 2 * 2 * 128) * 128 * 2 < kernel.metadata.shared <= gluon_shared_bytes(128, 128, 2, parts=2) + 512


@pytest.mark.slow
def test_the_folded_scale_the_tma_store_the_second_q_slot_the_order_and_the_dense_layout_build_for_sm90():
    plain = _sm90(128, 128, 4, 2, True, pingpong=True, FOLD=False)
    folded = _sm90(128, 128, 4, 2, True, pingpong=True)

    def count(ptx: str, op: str) -> int:
        return len(re.findall(rf"\b{op}\.f32", ptx))

    # the scale folds into one fused multiply-add an element: far fewer multiplies, more FMAs
    assert count(folded.asm["ptx"], "mul") < count(plain.asm["ptx"], "mul") - 128
    assert count(folded.asm["ptx"], "fma.rn") > count(plain.asm["ptx"], "fma.rn") + 128
    for modes in (
        dict(TMA_STORE=True),
        dict(TMA_STORE=True, QSTAGES=2, BY_SEQUENCE=True, SNAKE=True),
        dict(DENSE=True, QSTAGES=2),
    ):
        kernel = _sm90(128, 128, 4, 2, True, pingpong=True, **modes)
        ptx = kernel.asm["ptx"]
        assert "st.local" not in ptx, modes
        tma_store = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared", ptx))
        assert tma_store == (2 if modes.get("TMA_STORE") else 0), modes  # one a consumer
        predicted = gluon_shared_bytes(
            128, 128, 2, parts=2, q_stages=modes.get("QSTAGES", 1), tma_store=modes.get("TMA_STORE", False)
        )
        assert predicted <= kernel.metadata.shared <= predicted + 512, (modes, kernel.metadata.shared)
    assert "shared memory" in check_gluon_params(
        dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, QSTAGES=2, TMA_STORE=1, num_stages=3)
    )


def _reference(q, k, v, lens, causal):
    out = torch.empty_like(q, dtype=torch.float32)
    group = q.shape[1] // k.shape[1]
    start = 0
    for n in lens:
        sl = slice(start, start + n)
        qs = q[sl].float().transpose(0, 1)
        ks = k[sl].float().repeat_interleave(group, 1).transpose(0, 1)
        vs = v[sl].float().repeat_interleave(group, 1).transpose(0, 1)
        s = qs @ ks.transpose(1, 2) / math.sqrt(q.shape[2])
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        out[sl] = (s.softmax(-1) @ vs).transpose(0, 1)
        start += n
    return out


GPU_CASES = [
    (dict(GLUON_DEFAULTS), True, [37, 200, 130], 32, 8),
    (dict(GLUON_DEFAULTS, OVERLAP=0), True, [37, 200, 130], 32, 8),
    (dict(GLUON_DEFAULTS, BLOCK_N=64, num_stages=3), True, [1, 129, 300], 8, 1),
    (dict(GLUON_DEFAULTS, BLOCK_M=64, num_warps=4), False, [300, 77], 24, 24),
    (dict(GLUON_DEFAULTS, BLOCK_N=64, num_stages=4), False, [513], 8, 2),
    (dict(GLUON_DEFAULTS, PERSISTENT=1), True, [37, 200, 130, 1000], 32, 8),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1), True, [512] * 16, 32, 8),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, OVERLAP=1), False, [300, 77, 1], 24, 24),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1), True, [37, 200, 130], 32, 8),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, BLOCK_N=64, num_stages=3), False, [300, 77], 24, 24),
    (
        dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, QSTAGES=2, TMA_STORE=1),
        True,
        [37, 200, 130, 1000],
        32,
        8,
    ),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, QSTAGES=2, TMA_STORE=1, FOLD=0), False, [300, 77, 1], 24, 24),
    (dict(GLUON_DEFAULTS, PERSISTENT=1, TMA_STORE=1), True, [512] * 16, 32, 8),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, QSTAGES=2, TMA_STORE=1, BY_SEQUENCE=1), True,
     [37, 200, 130, 1000], 32, 8),
    (dict(GLUON_DEFAULTS, BY_SEQUENCE=1), True, [512] * 16, 32, 8),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, QSTAGES=2, TMA_STORE=1, SNAKE=1), True, [512] * 16, 32, 8),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, SNAKE=1), False, [300, 77, 1], 24, 24),
]  # fmt: skip


def test_every_gpu_case_is_a_valid_configuration() -> None:
    for params, *_ in GPU_CASES:
        assert check_gluon_params(params) is None, params


@pytest.mark.gpu
@pytest.mark.skipif(not _CUDA, reason="needs a Hopper GPU")
@pytest.mark.parametrize("params, causal, lens, hq, hkv", GPU_CASES)
def test_the_gluon_kernel_matches_the_reference_on_the_gpu(params, causal, lens, hq, hkv) -> None:
    torch.manual_seed(0)
    T = sum(lens)
    q = (1.5 * torch.randn(T, hq, 128, device="cuda")).to(torch.bfloat16)
    k = (1.5 * torch.randn(T, hkv, 128, device="cuda")).to(torch.bfloat16)
    v = torch.randn(T, hkv, 128, device="cuda").to(torch.bfloat16)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    from evokernel.search_spaces.attention.template_prefill_gluon import _PLANS

    fast = sum(launch.fast_calls for launch, _ in _PLANS.values())
    for _ in range(2):  # the second call launches the compiled kernel directly
        o = attention_gluon(q, k, v, cu, max(lens), causal=causal, **params)
    assert sum(launch.fast_calls for launch, _ in _PLANS.values()) == fast + 1
    ref = _reference(q, k, v, lens, causal)
    err = (o.float() - ref).abs().max().item()
    assert torch.isfinite(o).all() and err < 2e-2, err


DENSE_CASES = [
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, QSTAGES=2, TMA_STORE=1), True, 2, 300, 32, 8),
    (dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, TMA_STORE=1, SNAKE=1), False, 3, 256, 24, 24),
    (dict(GLUON_DEFAULTS), True, 1, 77, 8, 2),
    (
        dict(GLUON_DEFAULTS, num_warps=4, PINGPONG=1, PERSISTENT=1, QSTAGES=2, TMA_STORE=1, BY_SEQUENCE=1),
        True,
        3,
        640,
        32,
        8,
    ),
]


@pytest.mark.gpu
@pytest.mark.skipif(not _CUDA, reason="needs a Hopper GPU")
@pytest.mark.parametrize("params, causal, B, S, hq, hkv", DENSE_CASES)
def test_the_dense_layout_matches_the_packed_reference_on_the_gpu(params, causal, B, S, hq, hkv) -> None:
    """[B, H, S, D] tensors (SDPA's layout; rows past a head's end are the next head's)."""
    assert check_gluon_params(params) is None
    torch.manual_seed(1)
    q = (1.5 * torch.randn(B, hq, S, 128, device="cuda")).to(torch.bfloat16)
    k = (1.5 * torch.randn(B, hkv, S, 128, device="cuda")).to(torch.bfloat16)
    v = torch.randn(B, hkv, S, 128, device="cuda").to(torch.bfloat16)
    for _ in range(2):
        o = attention_gluon_dense(q, k, v, causal=causal, **params)
    assert o.shape == q.shape

    def packed(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(1, 2).reshape(B * S, t.shape[1], 128)

    ref = _reference(packed(q), packed(k), packed(v), [S] * B, causal).view(B, S, hq, 128).transpose(1, 2)
    err = (o.float() - ref).abs().max().item()
    assert torch.isfinite(o).all() and err < 2e-2, err


def test_integers_that_follow_the_prompt_lengths_are_not_specialised() -> None:
    """A served engine's prefill sees a new max length with nearly every request: the tile
    counts derived from it (and the dense length, and the Triton template's batch) must not be
    specialisation keys, or Triton compiles a variant mid-trace whenever one lands on 1 or a
    multiple of 16 (seen on the H200: a 1.66 s p99 time to first token, only in the first
    replay)."""
    from evokernel.search_spaces.attention import template_prefill
    from evokernel.search_spaces.attention import template_prefill_gluon as tpg

    def unspecialised(fn) -> set[str]:
        return {p.name for p in fn.params if p.do_not_specialize}

    assert {"n_m", "n_tiles", "S"} <= unspecialised(tpg._attn_gluon_kernel)
    assert {"B", "num_tiles"} <= unspecialised(template_prefill._attn_kernel)
