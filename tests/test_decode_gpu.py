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
