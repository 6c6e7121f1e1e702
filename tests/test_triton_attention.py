"""The flash-attention prefill template: every structural gene (masking split, exp2, lazy
rescaling, persistent programs, TMA descriptors, warp specialisation, KV order) through
Triton's interpreter, causal and not, GQA, uneven lengths; its space; the SDPA baselines;
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

from evokernel.judge.problem import Problem, load_module
from evokernel.search_spaces import attention_class, attention_space
from evokernel.search_spaces.attention import template_prefill as triton_attention
from evokernel.search_spaces.attention.template_prefill import DEFAULTS, PARAMS, candidate_source, sdpa_source

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "attention_prefill_bf16.py"

# (config overrides, lengths, (H_q, H_kv, D), dtype, causal, spike); base config BLOCK_M=16,
# BLOCK_N=16. "spike": every 23rd key aligned with a direction all queries share, so running
# maxima jump by ~20 (natural log units) after the first block: the lazy rescale must rescale
# there, and skips rescaling on the blocks between.
CASES = [
    ({}, [37, 16, 50], (4, 2, 64), "float16", True, False),
    ({}, [37, 16, 50], (4, 2, 64), "float16", False, False),
    ({"CAUSAL_SKIP": 0}, [37, 16, 50], (4, 2, 64), "float32", True, False),
    ({"CAUSAL_SKIP": 0}, [45, 3], (2, 2, 64), "float16", False, False),
    ({"BLOCK_M": 32, "REVERSE_KV": 1}, [37, 70], (4, 1, 64), "float16", True, False),
    ({"BLOCK_N": 32, "CAUSAL_SKIP": 0, "REVERSE_KV": 1}, [50, 9], (4, 2, 64), "float32", True, False),
    ({"LAZY_RESCALE": 1}, [60, 33], (4, 2, 64), "float32", True, True),
    ({"LAZY_RESCALE": 1, "EXP2": 0, "BLOCK_M": 32}, [60, 33], (4, 2, 64), "float16", False, True),
    ({"EXP2": 0}, [37, 16, 50], (4, 2, 64), "float16", True, False),
    ({"PERSISTENT": 1}, [21, 40, 1], (8, 2, 128), "float16", False, False),
    ({"TMA": 1, "BLOCK_N": 32}, [37, 16, 50], (4, 2, 64), "float16", True, False),
    ({"TMA": 1, "WARP_SPEC": 1}, [33, 20], (4, 4, 128), "float32", False, False),
    ({"TMA": 1, "WARP_SPEC": 1, "PERSISTENT": 1, "BLOCK_M": 32}, [37, 16, 50], (4, 2, 64), "float16", True, False),
    (
        {"CAUSAL_SKIP": 0, "REVERSE_KV": 1, "LAZY_RESCALE": 1, "EXP2": 0, "PERSISTENT": 1, "TMA": 1, "WARP_SPEC": 1},
        [44, 29],
        (4, 2, 64),
        "float16",
        True,
        True,
    ),
    ({}, [0, 33, 1, 0], (2, 1, 64), "float16", True, False),  # empty sequences and a one-token one
    ({"BLOCK_M": 32, "BLOCK_N": 32}, [64, 32], (2, 1, 64), "float16", True, False),  # lengths on block edges
]

_SCRIPT = r"""
import json, math, sys, torch
from evokernel.search_spaces.attention.template_prefill import DEFAULTS, attention
out = []
for over, lens, (hq, hkv, d), dtype, causal, spike in json.loads(sys.argv[1]):
    dt = getattr(torch, dtype)
    T = sum(lens)
    g = torch.Generator().manual_seed(T * hq + d)
    q = 1.5 * torch.randn(T, hq, d, generator=g)
    k = 1.5 * torch.randn(T, hkv, d, generator=g)
    v = torch.randn(T, hkv, d, generator=g)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    if spike:  # queries share a direction u; keys 22, 45, ... point along it: the max jumps mid-sequence
        u = torch.randn(d, generator=g)
        q += u
        for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            k[s + 22:e:23] = 3.0 * u
    q, k, v = q.to(dt), k.to(dt), v.to(dt)
    want = torch.zeros(T, hq, d, dtype=torch.float64)
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        qs = q[s:e].double().transpose(0, 1)
        ks = k[s:e].double().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        vs = v[s:e].double().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        sc = qs @ ks.transpose(1, 2) / math.sqrt(d)
        if causal:
            sc = sc.masked_fill(~torch.ones(e - s, e - s, dtype=torch.bool).tril(), float("-inf"))
        want[s:e] = (sc.softmax(-1) @ vs).transpose(0, 1)
    o = attention(q, k, v, cu, causal=causal, **{**DEFAULTS, "BLOCK_M": 16, "BLOCK_N": 16, **over})
    err = ((o.double() - want).abs() / (want.abs() + 1)).max().item() if T else 0.0
    out.append({"err": err, "dtype": str(o.dtype), "shape": list(o.shape), "finite": bool(o.isfinite().all())})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted() -> list[dict]:
    return run_interpreted(_SCRIPT, json.dumps(CASES))


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(CASES)))
def test_every_path_matches_the_fp64_reference(interpreted: list[dict], i: int) -> None:
    over, lens, (hq, _, d), dtype, causal, _ = CASES[i]
    got = interpreted[i]
    assert got["shape"] == [sum(lens), hq, d] and got["dtype"] == f"torch.{dtype}" and got["finite"]
    assert got["err"] < (2e-3 if dtype == "float16" else 1e-5), (over, causal, got)


def test_space_rules_out_what_cannot_fit_and_renders_every_valid_point():
    space = attention_space(head_dim=128, causal=True)
    assert set(space.names) == set(PARAMS) and space.is_valid(DEFAULTS)
    assert "warp specialisation needs TMA" in space.why_invalid(dict(DEFAULTS, WARP_SPEC=1))
    assert "builds none for this kernel" in space.why_invalid(dict(DEFAULTS, WARP_SPEC=1, TMA=1))
    assert "shared memory" in space.why_invalid(dict(DEFAULTS, BLOCK_N=128, num_stages=5))
    assert "BLOCK_N=256 is not one of" in space.why_invalid(dict(DEFAULTS, BLOCK_M=256, BLOCK_N=256, num_warps=16))
    assert "registers" in space.why_invalid(dict(DEFAULTS, BLOCK_N=128, num_warps=4, BLOCK_M=128))
    # 16 warps leave 128 registers a thread: 256x64 at head_dim 128 spills there, 256x32 does not
    assert "at most 88" in space.why_invalid(dict(DEFAULTS, BLOCK_M=256, num_warps=16, num_stages=2))
    assert space.is_valid(dict(DEFAULTS, BLOCK_M=256, BLOCK_N=32, num_warps=16))
    assert "warps" in space.why_invalid(dict(DEFAULTS, BLOCK_M=64, num_warps=8))
    assert space.is_valid(dict(DEFAULTS, REVERSE_KV=1))
    assert "only for causal" in attention_space(causal=False).why_invalid(dict(DEFAULTS, REVERSE_KV=1))
    # head_dim 64 halves the accumulator: a tile that spills at 128 fits at 64
    wide = dict(DEFAULTS, BLOCK_M=128, BLOCK_N=64, num_warps=4)
    assert not space.is_valid(wide) and attention_space(head_dim=64).is_valid(wide)
    rng = np.random.default_rng(0)
    for _ in range(20):
        g = space.genome(space.sample(rng))
        assert "def kernel(q, k, v, cu_seqlens, max_seqlen, seqlens):" in candidate_source(g.params, causal=True)
        assert attention_class(g).startswith(f"{g['BLOCK_M']}x{g['BLOCK_N']}/")
    with pytest.raises(ValueError, match="exactly"):
        candidate_source({"BLOCK_M": 64}, causal=True)
    with pytest.raises(ValueError, match="integers"):
        candidate_source(dict(DEFAULTS, TMA=True), causal=True)


def test_the_problem_reads_its_shape_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("EVOKERNEL_ATTN_MODEL", "qwen3-30b-a3b")
    monkeypatch.setenv("EVOKERNEL_ATTN_SEQLENS", "1024")
    monkeypatch.setenv("EVOKERNEL_ATTN_BATCH", "3")
    p = Problem.load(PROBLEM)
    assert p.shapes == [{"T": 3072, "B": 3, "Hq": 32, "Hkv": 4, "D": 128, "lens": "1024x3"}]
    assert p.heldout[0]["lens"] == "517/1021" and p.family == "attention_prefill_bfloat16_d128_causal"
    assert p.flops(p.shapes[0]) == 4 * 32 * 128 * 3 * (1024 * 1025 // 2)
    monkeypatch.setenv("EVOKERNEL_ATTN_MODEL", "flux-dit")
    monkeypatch.delenv("EVOKERNEL_ATTN_SEQLENS")
    assert Problem.load(PROBLEM).shapes[0]["lens"] == "4608x3"  # BATCH repeats the model's single length
    monkeypatch.delenv("EVOKERNEL_ATTN_BATCH")
    p = Problem.load(PROBLEM)
    assert p.shapes[0]["lens"] == "4608x1" and not p.module.CAUSAL and p.flops(p.shapes[0]) == 4 * 24 * 128 * 4608**2


def _tiny_env(monkeypatch: pytest.MonkeyPatch, causal: int) -> Problem:
    monkeypatch.setenv("EVOKERNEL_ATTN_MODEL", "tiny")
    monkeypatch.setenv("EVOKERNEL_ATTN_DTYPE", "float32")
    monkeypatch.setenv("EVOKERNEL_ATTN_CAUSAL", str(causal))
    return Problem.load(PROBLEM)


@pytest.mark.parametrize("causal", [1, 0])
def test_sdpa_baselines_match_the_reference_on_equal_and_uneven_lengths(monkeypatch, tmp_path: Path, causal: int):
    problem = _tiny_env(monkeypatch, causal)
    path = tmp_path / "sdpa_math.py"
    path.write_text(sdpa_source("math", causal=bool(causal)))
    baseline = load_module(path, prefix="_sdpa_baseline")
    equal = dict(problem.shapes[0], lens="24x3", T=72, B=3)
    for shape in (problem.shapes[0], equal):  # a loop over sequences, and one call on views
        inputs = problem.make_inputs(shape, 0, "cpu")
        torch.testing.assert_close(baseline.kernel(*inputs), problem.reference(*inputs), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="backend"):
        sdpa_source("flashinfer", causal=True)


@pytest.mark.parametrize("causal", [1, 0])
def test_the_dense_layout_problem_is_the_packed_one_laid_out_as_sdpa_takes_it(monkeypatch, tmp_path: Path, causal: int):
    packed = _tiny_env(monkeypatch, causal)
    monkeypatch.setenv("EVOKERNEL_ATTN_SEQLENS", "24")
    monkeypatch.setenv("EVOKERNEL_ATTN_BATCH", "3")
    packed = Problem.load(PROBLEM)
    monkeypatch.setenv("EVOKERNEL_ATTN_LAYOUT", "bhsd")
    dense = Problem.load(PROBLEM)
    assert dense.module.FAMILY == packed.module.FAMILY + "_bhsd"
    (held,) = dense.heldout
    assert held["lens"] == "17x2"  # equal lengths, not a multiple of a block
    qp, kp, vp, *rest = packed.make_inputs(packed.shapes[0], 0, "cpu")
    q, k, v, *_ = dense.make_inputs(dense.shapes[0], 0, "cpu")
    assert q.shape == (3, 4, 24, 64) and k.shape == (3, 2, 24, 64) and q.is_contiguous()
    torch.testing.assert_close(q, qp.view(3, 24, 4, 64).transpose(1, 2))
    out = dense.reference(q, k, v, *rest)
    torch.testing.assert_close(out, packed.reference(qp, kp, vp, *rest).view(3, 24, 4, 64).transpose(1, 2))
    for expand in (False, True):  # SDPA takes the layout as it is
        path = tmp_path / f"sdpa_dense_{expand}.py"
        path.write_text(sdpa_source("math", causal=bool(causal), expand_gqa=expand))
        baseline = load_module(path, prefix="_sdpa_dense")
        torch.testing.assert_close(baseline.kernel(q, k, v, *rest), out, rtol=1e-4, atol=1e-4)
    monkeypatch.setenv("EVOKERNEL_ATTN_SEQLENS", "24,30")
    with pytest.raises(ValueError, match="one length"):
        Problem.load(PROBLEM)


def test_the_expanded_gqa_baseline_expands_once_per_input_and_again_when_it_changes(monkeypatch, tmp_path: Path):
    problem = _tiny_env(monkeypatch, 1)
    path = tmp_path / "sdpa_math_x.py"
    path.write_text(sdpa_source("math", causal=True, expand_gqa=True))
    baseline = load_module(path, prefix="_sdpa_baseline_x")
    q, k, v, *rest = problem.make_inputs(problem.shapes[0], 0, "cpu")
    assert q.shape[1] != k.shape[1]  # grouped-query heads: the baseline expands K and V
    for _ in range(2):
        torch.testing.assert_close(
            baseline.kernel(q, k, v, *rest), problem.reference(q, k, v, *rest), rtol=1e-4, atol=1e-4
        )
    assert len(baseline._EXPANDED) == 2  # K's and V's, made once
    k.mul_(-1)  # changed in place: a stale expansion would give the old result
    torch.testing.assert_close(baseline.kernel(q, k, v, *rest), problem.reference(q, k, v, *rest), rtol=1e-4, atol=1e-4)
    assert len(baseline._EXPANDED) == 3


@pytest.mark.slow
def test_generated_candidates_pass_the_gate_on_the_cpu(tmp_path: Path):
    env = {**os.environ, "EVOKERNEL_ATTN_MODEL": "tiny", "EVOKERNEL_ATTN_DTYPE": "float16"}
    env.pop("TRITON_INTERPRET", None)

    def check(source: str, *extra: str) -> tuple[int, dict]:
        cand = tmp_path / "attention_candidate.py"
        cand.write_text(source)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "evokernel.cli",
                "check",
                str(PROBLEM),
                str(cand),
                "--device",
                "cpu",
                "--json",
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        return proc.returncode, json.loads(proc.stdout)

    config = dict(DEFAULTS, BLOCK_M=16, BLOCK_N=32, num_warps=4, PERSISTENT=1, TMA=1, LAZY_RESCALE=1, REVERSE_KV=1)
    rc, data = check(candidate_source(config, causal=True))
    assert rc == 0 and data["accepted"], data["reason"]
    assert [t["shape"] for t in data["timings"]] == ["T=121,B=3,Hq=4,Hkv=2,D=64,lens=37/64/20"]
    # the same kernel without the causal mask is wrong for this problem, and the gate says so
    rc, data = check(candidate_source(config, causal=False), "--no-time")
    assert rc == 1 and not data["accepted"] and "off by more than tolerance" in data["reason"]


# --- sm_90 builds without a GPU ---------------------------------------------------------------


def compile_sm90(fn, types: dict[str, str], constexprs: dict, *, num_warps: int, num_stages: int):
    """Compile a kernel for an H100/H200 (sm_90) with Triton's bundled ptxas: no GPU needed.
    Arguments not in `types` or `constexprs` are i32; pointers and strides get the 16-byte
    divisibility a real launch specialises on (without it nothing pipelines). Skips where this
    Triton has no NVIDIA toolchain or the kernels were built for the interpreter."""
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        pytest.skip(f"no ahead-of-time compiler API: {exc}")
    if not hasattr(fn, "arg_names") or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("kernels built for the interpreter")
    names = list(fn.arg_names)
    sig = {n: "constexpr" if n in constexprs else types.get(n, "i32") for n in names}
    const = {(i,): constexprs[n] for i, n in enumerate(names) if n in constexprs}
    attrs = {
        (i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n].startswith("*") or n.startswith("stride")
    }
    try:
        return triton.compile(
            ASTSource(fn, sig, const, attrs=attrs),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": num_warps, "num_stages": num_stages},
        )
    except (FileNotFoundError, RuntimeError) as exc:
        if "ptxas" in str(exc).lower() and "not found" in str(exc).lower():
            pytest.skip(f"no ptxas: {exc}")
        raise


def _prefill_sm90(params: dict[str, int], *, head_dim: int = 128, causal: bool = True):
    p = dict(DEFAULTS, **params)
    tma, ws, pers = bool(p["TMA"]), bool(p["WARP_SPEC"]), bool(p["PERSISTENT"])
    desc = {
        name: f"tensordesc<bf16[{rows}, {head_dim}]>"
        for name, rows in (("q_desc", p["BLOCK_M"]), ("k_desc", p["BLOCK_N"]), ("v_desc", p["BLOCK_N"]))
    }
    types = {
        **{n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")},
        "cu_ptr": "*i32",
        "qk_scale": "fp32",
        **(desc if tma else {}),
    }
    consts = {
        "GROUP": 4,
        "HEAD_DIM": head_dim,
        "BLOCK_M": p["BLOCK_M"],
        "BLOCK_N": p["BLOCK_N"],
        "BLOCK_B": 8,
        "CAUSAL": causal,
        "CAUSAL_SKIP": bool(p["CAUSAL_SKIP"]),
        "EXP2": bool(p["EXP2"]),
        "LAZY": bool(p["LAZY_RESCALE"]),
        "PERSISTENT": pers,
        "TMA": tma,
        "WS_TILES": ws and pers,
        "WS_KV": ws and not pers,
        "REVERSE": bool(p["REVERSE_KV"]),
        "INPUT_PRECISION": "tf32",
        **({} if tma else {"q_desc": None, "k_desc": None, "v_desc": None}),
    }
    return compile_sm90(
        triton_attention._attn_kernel, types, consts, num_warps=p["num_warps"], num_stages=p["num_stages"]
    )


def _ptx_code(kernel) -> str:
    return "\n".join(
        line for line in kernel.asm["ptx"].splitlines() if not line.strip().startswith((".loc", ".file", "//"))
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "over",
    [
        {},
        {"PERSISTENT": 1},
        {"BLOCK_M": 256, "BLOCK_N": 32, "num_warps": 16, "num_stages": 2},
        {"BLOCK_M": 64, "num_warps": 4, "LAZY_RESCALE": 1},
    ],
)
def test_warp_specialisation_builds_the_same_sm90_kernel(over: dict[str, int]):
    """Why the space rules WARP_SPEC out: with 8-16 warps (and with 4 where it builds at all,
    with the lazy rescale), the KV (or tile) loop marked `warp_specialize` compiles to the
    very PTX of the unmarked one (no partition), so a search measuring both measures one
    kernel twice."""
    plain = _prefill_sm90({"TMA": 1, **over})
    marked = _prefill_sm90({"TMA": 1, "WARP_SPEC": 1, **over})
    assert "ttg.warp_specialize" not in marked.asm["ttgir"] and marked.metadata.num_warps == plain.metadata.num_warps
    assert _ptx_code(marked) == _ptx_code(plain)


@pytest.mark.slow
@pytest.mark.parametrize(
    "over",
    [
        {},
        {"CAUSAL_SKIP": 0, "REVERSE_KV": 1, "LAZY_RESCALE": 1, "EXP2": 0},
        {"TMA": 1},
        {"TMA": 1, "PERSISTENT": 1, "LAZY_RESCALE": 1, "REVERSE_KV": 1},
        {"BLOCK_M": 256, "BLOCK_N": 32, "num_warps": 16, "num_stages": 2, "PERSISTENT": 1},
    ],
)
def test_variants_build_for_sm90_within_the_predicted_shared_memory(over: dict[str, int]):
    """Every kind of variant compiles to an sm_90 cubin (TMA descriptors, the data-dependent
    lazy rescale, the persistent loop), and the space's shared-memory prediction bounds what
    the build allocates."""
    kernel = _prefill_sm90(over)
    p = dict(DEFAULTS, **over)
    predicted = (p["BLOCK_M"] * 128 + 2 * p["num_stages"] * p["BLOCK_N"] * 128) * 2
    assert attention_space().is_valid(p) and 0 < kernel.metadata.shared <= predicted + 2048, kernel.metadata.shared
