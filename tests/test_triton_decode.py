"""The split-KV paged decode template: every split count (one, several, auto, more splits
than pages), both reductions (a separate kernel, the last program through atomics, called
twice so its counters must have been reset), page sizes of 1, 8 and 16, grouped-query and
multi-head attention, through Triton's interpreter; its space; the gathered-SDPA baseline;
the problem module; and generated candidates through the real `evokernel check` on the CPU.

Kernels run in a fresh interpreter process (see tests/test_triton_matmul.py for why); the
interpreter does bf16 dots wrongly, so these checks use fp16 and fp32."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ._interpreter import run_interpreted
import torch

from evokernel import Genome
from evokernel.judge.problem import Problem, load_module
from evokernel.search_spaces import decode_class, decode_space
from evokernel.search_spaces.attention import template_decode as triton_decode
from evokernel.search_spaces.attention.template_decode import (
    DEFAULTS,
    OPTIONAL,
    PARAMS,
    auto_splits,
    candidate_source,
    sdpa_gathered_source,
    sglang_default_params,
)

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "attention_decode_bf16.py"

# (config overrides, context lengths, (H_q, H_kv, D), page size, dtype, calls)
CASES = [
    ({}, [40, 7, 100], (4, 1, 64), 8, "float16", 1),  # SGLang's 8 splits: the 7-token sequence leaves 7 empty
    ({"NUM_SPLITS": 1}, [40, 7, 100], (4, 1, 64), 8, "float16", 1),  # no second stage
    ({"NUM_SPLITS": 0}, [300, 1], (8, 2, 64), 16, "float32", 1),  # auto: 2 splits on the interpreter's 4 "SMs"
    ({"NUM_SPLITS": 16, "BLOCK_N": 16}, [40, 7], (4, 1, 64), 8, "float16", 1),  # more splits than pages
    ({"NUM_SPLITS": 4, "REDUCE": 1}, [40, 7, 100], (4, 1, 64), 8, "float16", 2),  # the counters come back to zero
    ({"NUM_SPLITS": 16, "REDUCE": 1, "BLOCK_N": 16}, [33, 2], (8, 1, 128), 16, "float32", 2),
    # the last program combines 4 of a group's 6 query heads a load (group_heads), the second load half masked
    ({"NUM_SPLITS": 8, "REDUCE": 1, "BLOCK_N": 16}, [90, 3], (12, 2, 128), 1, "float16", 2),
    ({"NUM_SPLITS": 2, "BLOCK_N": 16}, [19, 50], (4, 4, 64), 1, "float16", 1),  # page size 1, multi-head
    ({"NUM_SPLITS": 4, "BLOCK_N": 64}, [70, 129], (4, 2, 64), 16, "float16", 1),  # a block spans pages
    # 128 splits: the reductions read them 32 (4 warps) or 8 (1 warp) a load, most of them empty
    ({"NUM_SPLITS": 128, "BLOCK_N": 16}, [300, 7], (8, 2, 64), 1, "float16", 1),
    ({"NUM_SPLITS": 128, "BLOCK_N": 16, "REDUCE": 1, "num_warps": 1}, [300, 7], (8, 2, 64), 1, "float16", 2),
    # one sequence of 2 query heads on the interpreter's 4 "SMs": each reduce program combines half a head
    ({"NUM_SPLITS": 8, "BLOCK_N": 16}, [100], (2, 1, 64), 1, "float16", 1),
    # the pages of the next step fetched a step ahead: blocks spanning pages, a split's last block partial
    ({"NUM_SPLITS": 4, "BLOCK_N": 16, "PREFETCH": 1, "num_stages": 3}, [70, 129, 5], (4, 2, 64), 16, "float16", 1),
    # two steps ahead (the L2 hints themselves are inline PTX, left out here): splits of 1, 2 and 3+ blocks,
    # a split shorter than a block, pages spanning blocks, with each reduction
    ({"NUM_SPLITS": 4, "BLOCK_N": 16, "PREFETCH": 2}, [70, 129, 5, 33], (4, 2, 64), 16, "float16", 1),
    ({"NUM_SPLITS": 2, "BLOCK_N": 16, "PREFETCH": 2, "REDUCE": 1}, [100, 1, 17], (8, 2, 64), 1, "float16", 2),
    # three times a power of two splits (session 25): the reductions' loads masked past the last split,
    # split ranges rounded to whole blocks so the last splits are empty
    ({"NUM_SPLITS": 12, "BLOCK_N": 16}, [300, 7, 41], (8, 2, 64), 1, "float16", 1),
    ({"NUM_SPLITS": 6, "BLOCK_N": 16, "REDUCE": 1}, [300, 7], (8, 1, 64), 1, "float16", 2),
    ({"NUM_SPLITS": 96, "BLOCK_N": 16, "REDUCE": 1, "num_warps": 1}, [300, 7], (8, 2, 64), 1, "float16", 2),
    # a programmatic dependent launch asked for where none exists (the interpreter): the same result
    ({"NUM_SPLITS": 4, "BLOCK_N": 16, "PDL": 1}, [70, 129, 5], (4, 2, 64), 1, "float16", 1),
    ({"NUM_SPLITS": 4, "BLOCK_N": 16, "PDL": 3}, [70, 129, 5], (4, 2, 64), 1, "float16", 1),
    ({"NUM_SPLITS": 4, "BLOCK_N": 16, "PDL": 2, "REDUCE": 1}, [70, 129, 5], (4, 2, 64), 1, "float16", 2),
    # bit 4 asked for where no wait exists (the interpreter): no prefetch, the same result
    ({"NUM_SPLITS": 4, "BLOCK_N": 16, "PDL": 7}, [70, 129, 5, 7], (4, 2, 64), 1, "float16", 1),
]

_SCRIPT = r"""
import json, math, sys, torch
from evokernel.search_spaces.attention.template_decode import DEFAULTS, decode
out = []
for over, lens, (hq, hkv, d), page, dtype, calls in json.loads(sys.argv[1]):
    dt = getattr(torch, dtype)
    b = len(lens)
    g = torch.Generator().manual_seed(sum(lens) + hq)
    per_seq = [math.ceil(n / page) for n in lens]
    pages = sum(per_seq) + 2
    q = (1.5 * torch.randn(b, hq, d, generator=g)).to(dt)
    kc = (1.5 * torch.randn(pages, page, hkv, d, generator=g)).to(dt)
    vc = torch.randn(pages, page, hkv, d, generator=g).to(dt)
    perm = torch.randperm(pages, generator=g)
    table = torch.full((b, max(per_seq) + 1), pages - 1, dtype=torch.int32)  # unused entries name a real page
    used = 0
    for i, n in enumerate(per_seq):
        table[i, :n] = perm[used:used + n]
        used += n
    ctx = torch.tensor(lens, dtype=torch.int32)
    want = torch.zeros(b, hq, d, dtype=torch.float64)
    for i, n in enumerate(lens):
        rows = table[i, :per_seq[i]].long()
        k = kc[rows].reshape(-1, hkv, d)[:n].double().repeat_interleave(hq // hkv, 1)
        v = vc[rows].reshape(-1, hkv, d)[:n].double().repeat_interleave(hq // hkv, 1)
        s = torch.einsum("hd,nhd->hn", q[i].double(), k) / math.sqrt(d)
        want[i] = torch.einsum("hn,nhd->hd", s.softmax(-1), v)
    errs = []
    for _ in range(calls):
        o = decode(q, kc, vc, table, ctx, **{**DEFAULTS, **over})
        errs.append(((o.double() - want).abs() / (want.abs() + 1)).max().item())
    out.append({"err": max(errs), "dtype": str(o.dtype), "shape": list(o.shape)})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted() -> list[dict]:
    return run_interpreted(_SCRIPT, json.dumps(CASES))


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(CASES)))
def test_every_path_matches_the_fp64_reference(interpreted: list[dict], i: int) -> None:
    over, lens, (hq, _, d), _, dtype, _ = CASES[i]
    got = interpreted[i]
    assert got["shape"] == [len(lens), hq, d] and got["dtype"] == f"torch.{dtype}"
    assert got["err"] < (2e-3 if dtype == "float16" else 1e-5), (over, got)


def test_auto_splits_fill_the_gpu_without_splitting_short_contexts():
    assert auto_splits(1, 8, 32768, 132) == 32  # 8 programs: 32 splits make 256 (two per SM)
    assert auto_splits(256, 8, 32768, 132) == 1  # already 2048 programs
    assert auto_splits(4, 8, 512, 132) == 2  # wants 8, but at most one split per 256 keys
    assert auto_splits(1, 1, 1 << 20, 132) == 64  # the cap


def test_space_rules_out_duplicates_and_what_cannot_fit_and_renders_every_valid_point():
    space = decode_space(head_dim=128, group=4)
    assert set(space.names) == set(PARAMS) | set(OPTIONAL) and space.is_valid(DEFAULTS)
    assert sglang_default_params() == DEFAULTS and DEFAULTS["PREFETCH"] == 0
    assert DEFAULTS["NUM_SPLITS"] == 8 and space["NUM_SPLITS"].default == 8
    assert "duplicate" in space.why_invalid(dict(DEFAULTS, NUM_SPLITS=1, REDUCE=1))
    assert "duplicate" in space.why_invalid(dict(DEFAULTS, REDUCE=1, PDL=1))  # no reduce kernel to launch early
    assert "duplicate" in space.why_invalid(dict(DEFAULTS, NUM_SPLITS=1, PDL=1))
    assert space.is_valid(dict(DEFAULTS, PDL=1)) and decode_class(Genome.of(dict(DEFAULTS, PDL=1))).endswith("/pdl")
    # bit 2 (stage 1 a dependent of the kernel before it) holds with any reduction
    assert space.is_valid(dict(DEFAULTS, REDUCE=1, PDL=2)) and space.is_valid(dict(DEFAULTS, NUM_SPLITS=1, PDL=2))
    assert "duplicate" in space.why_invalid(dict(DEFAULTS, REDUCE=1, PDL=3))
    assert decode_class(Genome.of(dict(DEFAULTS, PDL=3))).endswith("/pdl/pdlwait")
    assert decode_class(Genome.of(dict(DEFAULTS, PDL=7))).endswith("/pdl/pdlwait/early")
    assert space.is_valid(dict(DEFAULTS, PDL=6)) and space.is_valid(dict(DEFAULTS, PDL=6, PREFETCH=1))
    assert 4 not in space["PDL"].values and 5 not in space["PDL"].values  # bit 4 alone: no wait to read before
    assert space.is_valid(dict(DEFAULTS, NUM_SPLITS=0, REDUCE=1))
    assert space.is_valid(dict(DEFAULTS, NUM_SPLITS=96)) and space.is_valid(dict(DEFAULTS, NUM_SPLITS=24, PDL=1))
    assert space["NUM_SPLITS"].values[:8] == (0, 1, 2, 3, 4, 6, 8, 12)  # auto, then the splits in order
    big = decode_space(head_dim=256, group=64, shared_memory_bytes=100 * 1024)
    assert "shared memory" in big.why_invalid(dict(DEFAULTS, BLOCK_N=128, num_stages=2))
    # 128-key tiles at 4 stages: three K/V tiles in flight with PREFETCH (fits 227 KB), four
    # counted without (the same-step gather's buffers are not known ahead of the compiler)
    assert space.is_valid(dict(DEFAULTS, BLOCK_N=128, num_stages=4, num_warps=8, PREFETCH=1))
    assert "shared memory" in space.why_invalid(dict(DEFAULTS, BLOCK_N=128, num_stages=4, num_warps=8))
    assert "registers" in space.why_invalid(dict(DEFAULTS, BLOCK_N=64, num_warps=1))  # spills on sm_90
    many_heads = decode_space(head_dim=256, group=64)  # 64 query heads a program: 64x256 accumulators
    assert "registers" in many_heads.why_invalid(dict(DEFAULTS, num_stages=1, num_warps=1))
    assert many_heads.is_valid(dict(DEFAULTS, num_stages=1, num_warps=8, BLOCK_N=16))
    rng = np.random.default_rng(0)
    for _ in range(20):
        g = space.genome(space.sample(rng))
        assert "def kernel(q, k_cache, v_cache, block_table, context_lens):" in candidate_source(g.params)
        assert decode_class(g).startswith("splits")
    assert decode_class(space.genome(dict(DEFAULTS, NUM_SPLITS=0, REDUCE=1))) == "splitsauto/n32/lastblock"
    with pytest.raises(ValueError, match="exactly"):
        candidate_source({"NUM_SPLITS": 8})


def test_the_problem_reads_its_shape_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("EVOKERNEL_DECODE_MODEL", "qwen3-30b-a3b")
    monkeypatch.setenv("EVOKERNEL_DECODE_BATCH", "4")
    monkeypatch.setenv("EVOKERNEL_DECODE_CONTEXT", "512,8000")
    monkeypatch.setenv("EVOKERNEL_DECODE_PAGE", "64")
    p = Problem.load(PROBLEM)
    assert p.shapes == [{"B": 4, "C": 8000, "Hq": 32, "Hkv": 4, "D": 128, "P": 64, "lens": "512/8000/512/8000"}]
    assert p.heldout[0]["lens"] == "263/7995/3" and p.family == "attention_decode_bfloat16_d128_g8_p64"
    assert p.flops(p.shapes[0]) == 4 * 32 * 128 * 17024
    q, kc, vc, table, ctx = p.make_inputs(p.heldout[0], 0, "cpu")
    assert table.dtype == ctx.dtype == torch.int32 and table.shape == (3, 125) and kc.shape == (132, 64, 4, 128)
    owned = torch.cat([table[0, :5], table[1, :125], table[2, :1]]).tolist()
    assert len(set(owned)) == 131 and (table[0, 5:] == 0).all()  # no page shared; unused entries are 0


def test_the_gathered_sdpa_baseline_matches_the_reference(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("EVOKERNEL_DECODE_MODEL", "tiny")
    monkeypatch.setenv("EVOKERNEL_DECODE_DTYPE", "float32")
    monkeypatch.setenv("EVOKERNEL_DECODE_BATCH", "3")
    monkeypatch.setenv("EVOKERNEL_DECODE_CONTEXT", "40,7,100")
    monkeypatch.setenv("EVOKERNEL_DECODE_PAGE", "8")
    problem = Problem.load(PROBLEM)
    path = tmp_path / "sdpa_gathered.py"
    for backend in (None, "MATH"):
        path.write_text(sdpa_gathered_source(backend))
        baseline = load_module(path, prefix=f"_sdpa_gathered_{backend}")
        for shape in problem.shapes + problem.heldout:
            inputs = problem.make_inputs(shape, 1, "cpu")
            torch.testing.assert_close(baseline.kernel(*inputs), problem.reference(*inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_generated_candidates_pass_the_gate_on_the_cpu(tmp_path: Path):
    env = {
        **os.environ,
        "EVOKERNEL_DECODE_MODEL": "tiny",
        "EVOKERNEL_DECODE_DTYPE": "float16",
        "EVOKERNEL_DECODE_BATCH": "3",
        "EVOKERNEL_DECODE_CONTEXT": "40,7,100",
        "EVOKERNEL_DECODE_PAGE": "8",
    }
    env.pop("TRITON_INTERPRET", None)
    cand = tmp_path / "decode_candidate.py"
    cand.write_text(candidate_source(dict(DEFAULTS, NUM_SPLITS=4, REDUCE=1, BLOCK_N=16)))
    proc = subprocess.run(
        [sys.executable, "-m", "evokernel.cli", "check", str(PROBLEM), str(cand), "--device", "cpu", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["accepted"], data["reason"]
    assert [t["shape"] for t in data["timings"]] == ["B=3,C=100,Hq=4,Hkv=1,D=64,P=8,lens=40/7/100"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "over",
    [
        {},
        {"REDUCE": 1, "NUM_SPLITS": 16},
        {"NUM_SPLITS": 1, "BLOCK_N": 64, "num_warps": 2},
        {"BLOCK_N": 128, "num_warps": 8, "num_stages": 3, "REDUCE": 1},
        {"NUM_SPLITS": 128, "BLOCK_N": 64, "num_stages": 2, "REDUCE": 1},
        {"NUM_SPLITS": 128, "BLOCK_N": 64, "num_stages": 2},
        {"NUM_SPLITS": 64, "BLOCK_N": 64, "num_stages": 4, "PREFETCH": 1},
        {"NUM_SPLITS": 16, "BLOCK_N": 128, "PDL": 1},
        {"NUM_SPLITS": 16, "BLOCK_N": 128, "PDL": 3},  # both kernels dependents
        {"NUM_SPLITS": 16, "BLOCK_N": 128, "PDL": 2, "REDUCE": 1},  # stage 1 alone, its last program combining
        {"NUM_SPLITS": 16, "BLOCK_N": 128, "PDL": 7},  # and the first step's reads before the wait
        {"NUM_SPLITS": 64, "BLOCK_N": 128, "PREFETCH": 2},  # the next tile asked of L2 each step
        {"NUM_SPLITS": 16, "BLOCK_N": 64, "PREFETCH": 2, "PDL": 7, "num_stages": 3},
        {"NUM_SPLITS": 64, "BLOCK_N": 128, "num_stages": 3, "TIMELINE": 1},  # the b1 winner, timed per program
        {"NUM_SPLITS": 16, "BLOCK_N": 128, "REDUCE": 1, "PDL": 2, "TIMELINE": 1},
    ],
)
def test_variants_build_for_sm90(over: dict[str, int]):
    """Stage 1 (with the atomics of the last-program reduction) and stage 2 compile to sm_90
    cubins that pipeline their K/V gathers (async copies), without a GPU."""
    from tests.test_triton_attention import compile_sm90

    p = dict(DEFAULTS, **{k: v for k, v in over.items() if k != "TIMELINE"})  # (not a gene)
    ptrs = {
        "q_ptr": "*bf16",
        "k_ptr": "*bf16",
        "v_ptr": "*bf16",
        "o_ptr": "*bf16",
        "bt_ptr": "*i32",
        "lens_ptr": "*i32",
        "part_o_ptr": "*fp32",
        "part_lse_ptr": "*fp32",
        "count_ptr": "*i32",
        "timeline_ptr": "*i64",
        "qk_scale": "fp32",
    }
    common = {"GROUP": 4, "HEAD_DIM": 128, "BLOCK_H": 16, "SPLITS": p["NUM_SPLITS"]}
    consts = {
        **common,
        "PAGE": 16,
        "BLOCK_N": p["BLOCK_N"],
        "REDUCE": p["REDUCE"],
        "INPUT_PRECISION": "tf32",
        "SLOTS": False,
        "CHUNK": triton_decode.combine_chunk(p["NUM_SPLITS"], p["num_warps"]),
        "PREFETCH": p["PREFETCH"],
        "L2_HINTS": 1,
        "L2_LINES": 2,
        "L2_LINE": 64,
    }
    # the last program's grouped combine (a [heads, splits, 128] tile a load) where it fits
    heads = triton_decode.group_heads(p["NUM_SPLITS"], 4, p["num_warps"]) if p["REDUCE"] else 0
    consts.update(GROUP_HEADS=heads, SPLITS_P2=(1 << (p["NUM_SPLITS"] - 1).bit_length()) if heads else 1)
    early, wait, ahead = p["PDL"] & 1, (p["PDL"] >> 1) & 1, p["PDL"] >> 2
    consts.update(PDL=early, WAIT=wait, EARLY=ahead, TIMELINE=over.get("TIMELINE", 0))
    stage1 = compile_sm90(
        triton_decode._split_kernel, ptrs, consts, num_warps=p["num_warps"], num_stages=p["num_stages"]
    )
    assert decode_space().is_valid(p)
    if p["num_stages"] > 1:
        assert "async_copy_global_to_local" in stage1.asm["ttgir"]
    if p["REDUCE"]:
        assert "atom" in stage1.asm["ptx"]
    # PDL bit 1: stage 1 lets its dependent launch early, stage 2 waits for stage 1's results;
    # bit 2: stage 1 waits for the kernel before it
    assert ("griddepcontrol.launch_dependents" in stage1.asm["ptx"]) == bool(early)
    assert ("griddepcontrol.wait" in stage1.asm["ptx"]) == bool(wait)
    ptx = stage1.asm["ptx"]
    if wait:  # bit 4: the lengths and indices loaded and the first tile prefetched before the wait; else nothing
        before, after = ptx.split("griddepcontrol.wait", 1)
        assert ("ld.global" in before) == ("prefetch.global.L2" in before) == bool(ahead), before[-2000:]
        assert ("prefetch.global.L2" in after) == (p["PREFETCH"] == 2)
    # PREFETCH=2: the next tile's rows asked of L2 inside the loop, two lines (of 128 bytes) a row
    # of K and of V: 2 x 2 x BLOCK_N a step over the program's threads; without it no hint but bit 4's
    assert ("prefetch.global.L2" in ptx) == (p["PREFETCH"] == 2 or bool(wait and ahead))
    if p["PREFETCH"] == 2:
        assert ptx.count("prefetch.global.L2") >= 4 * p["BLOCK_N"] // (32 * p["num_warps"])
    # TIMELINE (a diagnosis): each program reads the global timer at its start, after its KV
    # loop and at its end, and its SM; without it, no timer read at all
    timed = bool(over.get("TIMELINE"))
    assert ptx.count("%globaltimer") == (3 if timed else 0) and ("%smid" in ptx) == timed
    parts = {"part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "o_ptr": "*bf16", "timeline_ptr": "*i64"}
    splits = max(p["NUM_SPLITS"], 1)
    for block_d in (128, 32):  # a program per head, and a quarter of a head (batch 1)
        chunk = triton_decode.combine_chunk(splits, 4, block_d)
        reduce = {"HEAD_DIM": 128, "BLOCK_D": block_d, "SPLITS": splits, "CHUNK": chunk, "PDL": early}
        reduce["TIMELINE"] = int(timed)
        stage2 = compile_sm90(triton_decode._reduce_kernel, parts, reduce, num_warps=4, num_stages=1)
        assert stage2.metadata.shared >= 0
        assert ("griddepcontrol.wait" in stage2.asm["ptx"]) == bool(early)
        assert stage2.asm["ptx"].count("%globaltimer") == (3 if timed else 0)


# (config overrides, context lengths, (H_q, H_kv, D), dtype of kv_indices)
SLOT_CASES = [
    ({"NUM_SPLITS": 4, "BLOCK_N": 16}, [40, 7, 100], (8, 2, 64), "int64"),
    ({"NUM_SPLITS": 8, "BLOCK_N": 32, "REDUCE": 1}, [33, 1, 64], (4, 1, 64), "int32"),
    ({"NUM_SPLITS": 1, "BLOCK_N": 16}, [19, 50], (4, 4, 64), "int64"),
    ({"NUM_SPLITS": 0, "BLOCK_N": 16}, [300, 2], (8, 2, 64), "int32"),
    ({"NUM_SPLITS": 8, "BLOCK_N": 16, "PREFETCH": 1, "REDUCE": 1}, [100, 33, 1], (8, 2, 64), "int64"),
    ({"NUM_SPLITS": 2, "BLOCK_N": 16, "PREFETCH": 2}, [100, 33, 1], (8, 2, 64), "int32"),
]

_SLOTS_SCRIPT = r"""
import json, math, sys, torch
from evokernel.search_spaces.attention.template_decode import DEFAULTS, decode_slots
out = []
for over, lens, (hq, hkv, d), idx in json.loads(sys.argv[1]):
    b = len(lens)
    g = torch.Generator().manual_seed(sum(lens) + hq)
    slots = sum(lens) + 5
    q = (1.5 * torch.randn(b, hq, d, generator=g)).half()
    kb = (1.5 * torch.randn(slots, hkv, d, generator=g)).half()
    vb = torch.randn(slots, hkv, d, generator=g).half()
    indices = torch.randperm(slots, generator=g)[: sum(lens)].to(getattr(torch, idx))  # the engine's slots, scattered
    indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    want = torch.zeros(b, hq, d, dtype=torch.float64)
    for i, n in enumerate(lens):
        rows = indices[indptr[i]: indptr[i + 1]].long()
        k = kb[rows].double().repeat_interleave(hq // hkv, 1)
        v = vb[rows].double().repeat_interleave(hq // hkv, 1)
        s = torch.einsum("hd,nhd->hn", q[i].double(), k) / math.sqrt(d)
        want[i] = torch.einsum("hn,nhd->hd", s.softmax(-1), v)
    o = torch.full((b, hq, d), float("nan"), dtype=torch.float16)
    errs = []
    for _ in range(2):  # the second call into the caller's buffer (as SGLang hands one over)
        got = decode_slots(q, kb, vb, indptr, indices, **{**DEFAULTS, **over}, out=o)
        errs.append(((got.double() - want).abs() / (want.abs() + 1)).max().item())
    out.append({"err": max(errs), "same_buffer": got.data_ptr() == o.data_ptr(), "shape": list(got.shape)})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_token_slot_layout_of_a_serving_engine_matches_the_reference() -> None:
    """SGLang's Triton backend's cache (page size 1): k/v [slots, H_kv, D], each sequence's
    slots in kv_indices from kv_indptr[b] to kv_indptr[b + 1], written into its output buffer."""
    got = run_interpreted(_SLOTS_SCRIPT, json.dumps(SLOT_CASES))
    for case, g in zip(SLOT_CASES, got):
        lens, (hq, _, d) = case[1], case[2]
        assert g["shape"] == [len(lens), hq, d] and g["same_buffer"], (case, g)
        assert g["err"] < 2e-3, (case, g)


def test_slot_indices_fetched_a_step_ahead_let_the_stages_buffer_more_tiles():
    """Compiled for sm_90: with the slot indices loaded in the step that uses them, the gathered
    K/V loads get one buffer whatever num_stages says (the same shared memory at 2, 3 and 4
    stages); with PREFETCH=1 (the next step's indices loaded a step ahead) each stage past the
    second adds a K and a V tile."""
    from tests.test_triton_attention import compile_sm90

    ptrs = {
        "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "bt_ptr": "*i32", "lens_ptr": "*i32",
        "part_o_ptr": "*fp32", "part_lse_ptr": "*fp32", "count_ptr": "*i32", "timeline_ptr": "*i64",
        "qk_scale": "fp32",
    }  # fmt: skip
    tile = 2 * 64 * 128 * 2  # a K and a V tile of 64 keys x 128 bf16

    def shared(stages: int, prefetch: int, hints: int = 0) -> int:
        consts = {"GROUP": 8, "HEAD_DIM": 128, "BLOCK_H": 16, "SPLITS": 64, "PAGE": 1, "BLOCK_N": 64, "REDUCE": 0,
                  "INPUT_PRECISION": "tf32", "SLOTS": True, "CHUNK": 32, "PREFETCH": prefetch,
                  "GROUP_HEADS": 0, "SPLITS_P2": 1, "PDL": 0, "WAIT": 0, "EARLY": 0, "L2_HINTS": hints,
                  "L2_LINES": 2, "L2_LINE": 64, "TIMELINE": 0}  # fmt: skip
        return compile_sm90(triton_decode._split_kernel, ptrs, consts, num_warps=4, num_stages=stages).metadata.shared

    plain = [shared(st, 0) for st in (2, 3, 4)]
    ahead = [shared(st, 1) for st in (2, 3, 4)]
    print(f"shared memory at num_stages 2, 3, 4 (BLOCK_N 64): {plain} without PREFETCH, {ahead} with it")
    # (Triton 3.9: plain is the same at 2, 3 and 4 stages, one buffer; a later Triton may
    # pipeline the same-step gather deeper, so only what PREFETCH guarantees is asserted)
    assert all(a >= p for a, p in zip(ahead, plain))
    assert ahead[1] - ahead[0] >= tile and ahead[2] - ahead[1] >= tile
    # PREFETCH=2 with its L2 hints: the pipeline PREFETCH=1 gets (the hints read indices the loop does not carry)
    assert [shared(st, 2, 1) for st in (2, 3, 4)] == ahead


_PDL_FALLBACK_SCRIPT = r"""
import json, logging, torch
from evokernel.search_spaces.attention import template_decode as t
seen = []
logging.getLogger(t.__name__).addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: seen.append(r.getMessage())})())
t.pdl_supported = lambda device: True  # as on an H200: the launch is tried (the interpreter has no griddepcontrol)
g = torch.Generator().manual_seed(0)
q = torch.randn(2, 8, 64, generator=g).half()
kv = torch.randn(300, 1, 2, 64, generator=g).half()
table = torch.arange(300, dtype=torch.int32).view(2, 150)
lens = torch.tensor([150, 70], dtype=torch.int32)
cfg = dict(NUM_SPLITS=4, BLOCK_N=16, num_warps=4, num_stages=2)
with_pdl = t.decode(q, kv, kv, table, lens, **cfg, PDL=1)
plain = t.decode(q, kv, kv, table, lens, **cfg, PDL=0)
waits = t.decode(q, kv, kv, table, lens, **cfg, PDL=2, REDUCE=1)  # stage 1 as a dependent, no reduce kernel
fused = t.decode(q, kv, kv, table, lens, **cfg, PDL=0, REDUCE=1)
print(json.dumps({"diff": (with_pdl.float() - plain.float()).abs().max().item(),
                  "diff_wait": (waits.float() - fused.float()).abs().max().item(), "warned": seen}))
"""


def test_a_programmatic_dependent_launch_that_fails_runs_both_kernels_plainly() -> None:
    """PDL=1 (and 2) where the launch cannot be made (here Triton's interpreter, which has no
    griddepcontrol): the same output, from the kernels launched the ordinary way, and a warning
    that says so."""
    got = run_interpreted(_PDL_FALLBACK_SCRIPT)
    assert got["diff"] == 0.0 and got["diff_wait"] == 0.0
    # (pdl_supported is patched to say yes each time, so each PDL call tries and warns)
    assert len(got["warned"]) == 2 and all("no programmatic dependent launch" in w for w in got["warned"])


def test_a_timeline_asks_for_the_gpu_and_says_so() -> None:
    """The per-program timeline reads the global timer (inline PTX): on the CPU or the
    interpreter the call says why it cannot, instead of returning a buffer of zeros."""
    q = torch.randn(1, 8, 64).half()
    k = torch.randn(4, 16, 2, 64).half()
    bt = torch.arange(4, dtype=torch.int32)[None]
    lens = torch.tensor([50], dtype=torch.int32)
    stamps = torch.zeros(64, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match="global timer"):
        triton_decode.decode(q, k, k, bt, lens, **DEFAULTS, timeline=stamps)
