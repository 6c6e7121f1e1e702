"""The paged decode template's launch variants on the GPU (the H200, Triton 3.6): programmatic
dependent launches (PDL bits 1, 2, 4) and the L2 hints (PREFETCH=2; bit 4's first tile) change
when kernels start and what L2 holds, never what is computed. So each variant's output is
bitwise the plain configuration's, eagerly and replayed from a CUDA graph that holds several
calls back to back (where the programmatic edges live), and the plain one is within bf16's
error of an fp32 reference (1% of each sequence's output, as a norm). Skipped without a GPU;
run on the GPU machine with

    python3 -m pytest -q -p no:cacheprovider -o addopts="" -rA tests/test_decode_gpu.py

(`bash benchmarks/device.sh decode-reduce` runs it first unless SKIP_TESTS is set).
"""

from __future__ import annotations

import math

import pytest
import torch

_CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")]

#: a long sequence, a short one and one shorter than a tile, in the engine's token-slot layout
LENS, HQ, HKV, D = [6000, 700, 37], 32, 4, 128
BASE = {"NUM_SPLITS": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "REDUCE": 0, "PREFETCH": 0, "PDL": 0}
#: genes over BASE that may change only timing: (name, overrides, the overrides it must equal bitwise)
VARIANTS = [
    ("pdl1", {"PDL": 1}, {}),
    ("pdl3", {"PDL": 3}, {}),
    ("pdl7", {"PDL": 7}, {}),
    ("prefetch1", {"PREFETCH": 1}, {}),
    ("l2ahead", {"PREFETCH": 2}, {}),
    ("l2ahead_pdl7", {"PREFETCH": 2, "PDL": 7}, {}),
    ("l2ahead_b128", {"PREFETCH": 2, "BLOCK_N": 128}, {"BLOCK_N": 128}),
    ("fused_pdl6", {"REDUCE": 1, "PDL": 6}, {"REDUCE": 1}),
    ("fused_l2ahead", {"REDUCE": 1, "PREFETCH": 2}, {"REDUCE": 1}),
]


def _inputs(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    slots = sum(LENS) + 64
    q = torch.randn(len(LENS), HQ, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(slots, HKV, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    order = torch.randperm(slots, device="cuda", generator=g)[: sum(LENS)].to(torch.int32)  # scattered slots
    indptr = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    return q, k, v, indptr, order


def _reference(q, k, v, indptr, indices) -> torch.Tensor:
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(q.shape[0]):
        rows = indices[indptr[b] : indptr[b + 1]].long()
        kk = k[rows].float().repeat_interleave(HQ // HKV, 1)
        vv = v[rows].float().repeat_interleave(HQ // HKV, 1)
        s = torch.einsum("hd,nhd->hn", q[b].float(), kk) / math.sqrt(D)
        out[b] = torch.einsum("hn,nhd->hd", s.softmax(-1), vv)
    return out


def _call(inputs: tuple[torch.Tensor, ...], params: dict[str, int], out: torch.Tensor) -> torch.Tensor:
    from evokernel.search_spaces.attention.template_decode import decode_slots

    q, k, v, indptr, indices = inputs
    return decode_slots(q, k, v, indptr, indices, **params, out=out)


@pytest.mark.parametrize("name,over,same_as", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_a_launch_variant_computes_what_the_plain_configuration_does(name: str, over: dict, same_as: dict) -> None:
    sets = [_inputs(s) for s in range(3)]
    plain = [_call(x, dict(BASE, **same_as), torch.empty_like(x[0])).clone() for x in sets]
    for x, want in zip(sets, plain):  # per sequence, relative to its output's size (a long one's is small)
        ref = _reference(*x)
        for b in range(len(LENS)):
            rel = ((want[b].float() - ref[b]).norm() / ref[b].norm()).item()
            assert rel < 1e-2, (name, b, rel)
    outs = [torch.empty_like(x[0]) for x in sets]
    params = dict(BASE, **over)
    for x, o, want in zip(sets, outs, plain):  # eagerly, each call after another
        assert torch.equal(_call(x, params, o), want), name
    # replayed from one graph of the three calls back to back: each call a dependent of the last
    for o in outs:
        o.zero_()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for x, o in zip(sets, outs):  # warm-up (compiles) off the capture
            _call(x, params, o)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for x, o in zip(sets, outs):
            _call(x, params, o)
    for o in outs:
        o.zero_()
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    for o, want in zip(outs, plain):
        assert torch.equal(o, want), f"{name} replayed from a graph"


@pytest.mark.parametrize("over", [{}, {"PDL": 1}, {"REDUCE": 1}], ids=["separate", "pdl1", "fused"])
def test_a_timeline_stamps_every_program_in_order_and_changes_nothing(over: dict) -> None:
    """`timeline`: every program of both kernels writes start <= mid <= end on the global timer
    and an SM that exists; without PDL the reduce kernel's programs start after stage 1's last
    ended (stream order), with bit 1 some may start before it and wait; the output is bitwise
    the untimed call's."""
    from evokernel.search_spaces.attention.template_decode import timeline_rows
    from evokernel.search_spaces.gemm.template import num_sms

    x = _inputs(7)
    params = dict(BASE, **over)
    want = _call(x, params, torch.empty_like(x[0])).clone()
    sms = num_sms(x[0].device)
    stage1, stage2 = timeline_rows(len(LENS), HQ, HKV, D, BASE["NUM_SPLITS"], params["REDUCE"], sms)
    assert stage1 == BASE["NUM_SPLITS"] * HKV * len(LENS) and (stage2 > 0) == (not params["REDUCE"])
    stamps = torch.zeros(stage1 + stage2 + 5, 4, dtype=torch.int64, device="cuda")  # 5 rows to spare, untouched
    from evokernel.search_spaces.attention.template_decode import decode_slots

    q, k, v, indptr, indices = x
    for _ in range(2):  # (the first call compiles the timed kernels, the reduce kernel's after stage 1 launched)
        got = decode_slots(q, k, v, indptr, indices, **params, out=torch.empty_like(q), timeline=stamps)
        torch.cuda.synchronize()
    assert torch.equal(got, want)
    rows = stamps[: stage1 + stage2].cpu()
    assert (rows[:, 0] > 0).all() and (rows[:, 0] <= rows[:, 1]).all() and (rows[:, 1] <= rows[:, 2]).all()
    assert ((rows[:, 3] >= 0) & (rows[:, 3] < sms)).all()
    assert (stamps[stage1 + stage2 :] == 0).all()
    span = (rows[:, 2].max() - rows[:, 0].min()).item()
    assert 0 < span < 10_000_000, span  # ns: one call, under 10 ms
    if stage2 and not params["PDL"]:
        assert rows[stage1:, 0].min() >= rows[:stage1, 2].max()
    if stage2 and params["PDL"]:  # each reduce program's wait ends after stage 1's last program ended
        assert rows[stage1:, 1].min() >= rows[:stage1, 2].max()
