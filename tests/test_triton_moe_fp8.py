"""The fused-MoE template in fp8 w8a8 (per-tensor and 128x128 block scales): the kernel through
Triton's interpreter (x in fp32 / fp16, e4m3 weights) against `moe_fp8.py`'s reference, the
in-kernel activation quantisation value for value against `quantize`, the space's constraints,
and generated candidates through the real `evokernel check` on the CPU.

Kernels run in one fresh interpreter process (see tests/test_triton_matmul.py for why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch

from evokernel.search_spaces.moe import moe_space
from evokernel.search_spaces.moe.template import GEMM_KEYS, candidate_source, fused_moe

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "moe_fp8.py"
TINY = {"E": 4, "H": 64, "I": 32, "topk": 2}
# several 128-wide scale groups along H and along I, a partial one on each, a weight block
# straddling the gate and up rows (2I = 384)
WIDE = {"E": 4, "H": 320, "I": 192, "topk": 2}


def gemm(bm: int, bn: int, bk: int, group: int, warps: int = 4, stages: int = 2) -> dict[str, int]:
    return dict(zip(GEMM_KEYS, (bm, bn, bk, group, warps, stages)))


# (scales, up, down, M, x dtype, model): one token; M not a multiple of BLOCK_SIZE_M; the two
# GEMMs aligned once (same BLOCK_SIZE_M) and twice; block tiles inside one 128-row weight
# block (BN <= 128: one scale per tile) and across several (BN 256: one per column); BK
# smaller than the scale group (several steps per group) and equal to it; K masked (H=64)
CASES = [
    ("tensor", gemm(16, 32, 32, 1), gemm(16, 32, 32, 1), 1, "float32", TINY),
    ("tensor", gemm(16, 64, 64, 8), gemm(32, 32, 32, 1), 17, "float16", TINY),
    ("tensor", gemm(32, 128, 128, 4), gemm(32, 64, 64, 1, stages=3), 13, "float32", WIDE),
    ("block", gemm(16, 32, 32, 1), gemm(16, 32, 32, 1), 1, "float16", TINY),
    ("block", gemm(16, 256, 64, 8), gemm(32, 32, 128, 1), 9, "float32", WIDE),
    ("block", gemm(32, 64, 128, 1), gemm(32, 256, 32, 16), 21, "float16", WIDE),
    ("block", gemm(64, 128, 128, 1), gemm(16, 64, 64, 1), 5, "float32", TINY),
]


def _case_id(c: tuple) -> str:
    return f"{c[0]}-{c[1]['BLOCK_SIZE_M']}-{c[2]['BLOCK_SIZE_M']}-M{c[3]}-{c[4]}-H{c[5]['H']}"


def _problem(scales: str, dtype: str):
    os.environ.update(EVOKERNEL_MOE_MODEL="tiny", EVOKERNEL_MOE_DTYPE=dtype, EVOKERNEL_FP8_SCALES=scales)
    from evokernel.judge.problem import Problem

    return Problem.load(PROBLEM)


def _check_case(scales: str, up: dict, down: dict, m: int, dtype: str, model: dict) -> None:
    problem = _problem(scales, dtype)
    x, w1, w2, s1, s2, tw, ids = inputs = problem.make_inputs({"M": m, **model}, 0, "cpu")
    assert w1.dtype == w2.dtype == torch.float8_e4m3fn and x.dtype == getattr(torch, dtype)
    assert (s1.shape, s2.shape) == (
        ((4,), (4,))
        if scales == "tensor"
        else ((4, -(-2 * model["I"] // 128), -(-model["H"] // 128)), (4, -(-model["H"] // 128), -(-model["I"] // 128)))
    )
    got = fused_moe(
        x,
        w1,
        w2,
        tw,
        ids,
        up=up,
        down=down,
        w1_scale=s1,
        w2_scale=s2,
        block_shape=[128, 128] if scales == "block" else None,
    )
    want = problem.reference(*inputs)
    assert got.dtype == x.dtype and got.shape == x.shape
    torch.testing.assert_close(got, want, **problem.tolerance(dtype))


def _check_quantisation() -> None:
    """The kernel's dynamic quantisation (e4m3 rounding done in fp32, the interpreter's own
    cast mishandles carries) equals `quantize` value for value, gated (SiLU-and-mul) or not."""
    from evokernel.search_spaces.gemm.template_fp8 import quantize
    from evokernel.search_spaces.moe.template import _quantize_act

    g = torch.Generator().manual_seed(1)
    a = torch.randn(37, 2 * 300, generator=g) * torch.logspace(-4, 2, 600)  # tiny (subnormal) to large
    for block_k in (None, 128):
        for gated in (False, True):
            v = a[:, :300] * torch.sigmoid(a[:, :300]) * a[:, 300:] if gated else a
            q, s = _quantize_act(a, block_k, gated)
            q_ref, s_ref = quantize(v, blockwise=block_k is not None, weight=False)
            torch.testing.assert_close(s, s_ref, rtol=1e-6, atol=0)
            same = q.float() == q_ref.float()  # by value: -0 and +0 are one
            assert float(same.float().mean()) > (0.999 if gated else 1 - 1e-9), (block_k, gated, int((~same).sum()))


def _run_cases() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1"
    verdicts: dict[str, Any] = {}
    for i, case in enumerate([*CASES, "quantisation"]):
        try:
            _check_quantisation() if case == "quantisation" else _check_case(*case)
            verdicts[str(i)] = None
        except Exception:
            verdicts[str(i)] = traceback.format_exc(limit=-3)
    print("VERDICTS " + json.dumps(verdicts))


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str | None]:
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import {Path(__file__).stem} as t; t._run_cases()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOKERNEL_")}
    env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("VERDICTS ")]
    assert proc.returncode == 0 and lines, f"interpreter process failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1].removeprefix("VERDICTS "))


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(CASES)), ids=[_case_id(c) for c in CASES])
def test_fp8_fused_moe_matches_the_reference_in_the_interpreter(interpreted, i):
    assert interpreted[str(i)] is None, interpreted[str(i)]


def test_in_kernel_activation_quantisation_matches_quantize(interpreted):
    assert interpreted[str(len(CASES))] is None, interpreted[str(len(CASES))]


def test_the_fp8_space_keeps_bk_within_the_scale_groups_and_never_proposes_gemv():
    down = {f"down_{k}": v for k, v in gemm(64, 256, 64, 1).items() if k != "BLOCK_SIZE_M"}
    point = {**gemm(64, 128, 128, 32), **down}
    block, tensor = moe_space(fp8="block"), moe_space(fp8="tensor")
    assert block.is_valid(point) and tensor.is_valid(point) and block.name == "fused_moe_fp8_block"
    assert (
        block.why_invalid(dict(point, BLOCK_SIZE_K=256))
        == "scale groups: BLOCK_SIZE_K=256 does not divide the 128-wide scale groups"
    )
    assert "down_BLOCK_SIZE_K=256" in block.why_invalid(dict(point, down_BLOCK_SIZE_K=256))
    assert tensor.is_valid(dict(point, BLOCK_SIZE_K=256))  # one scale per tensor: any BK
    # 1-byte operands: a tile that overflows shared memory in bf16 fits in fp8
    big = dict(point, BLOCK_SIZE_M=128, BLOCK_SIZE_N=256, BLOCK_SIZE_K=128, num_stages=4)
    assert "shared memory (up GEMM)" in moe_space().why_invalid(big) and tensor.is_valid(big)
    assert "shared memory (up GEMM)" in tensor.why_invalid(dict(big, num_stages=5))
    gemv = moe_space(fp8="tensor", gemv=True)
    assert "bf16/fp16 only" in gemv.why_invalid(dict(point, GEMV=1)) and gemv.is_valid(dict(point, GEMV=0))
    rng = __import__("numpy").random.default_rng(0)
    assert not any(gemv.sample(rng).get("GEMV") for _ in range(50))
    with pytest.raises(ValueError):
        moe_space(fp8="row")


def test_fp8_candidates_and_the_gemv_refusal():
    params = {**gemm(16, 32, 64, 1), **{f"down_{k}": v for k, v in gemm(16, 32, 64, 1).items()}}
    src = candidate_source(params, fp8="tensor")
    assert "def kernel(x, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids):" in src and "BLOCK_SHAPE = None" in src
    assert "BLOCK_SHAPE = [128, 128]" in candidate_source(params, fp8="block")
    assert candidate_source(params) == candidate_source(params, fp8=None)  # bf16 unchanged
    assert "def kernel(x, w1, w2, topk_weights, topk_ids):" in candidate_source(params)
    with pytest.raises(ValueError, match="GEMV"):
        candidate_source(dict(params, GEMV=1), fp8="block")
    with pytest.raises(ValueError):
        candidate_source(params, fp8="row")
    # the call itself refuses before running anything
    w = torch.zeros(2, 64, 32, dtype=torch.float8_e4m3fn)
    x, ids, tw = torch.zeros(3, 32), torch.zeros(3, 1, dtype=torch.int32), torch.ones(3, 1)
    up = gemm(16, 32, 64, 1)
    with pytest.raises(ValueError, match="GEMV"):
        fused_moe(
            x,
            w,
            w.transpose(1, 2)[:, :, :32].contiguous(),
            tw,
            ids,
            up=up,
            down=up,
            gemv=True,
            w1_scale=torch.ones(2),
            w2_scale=torch.ones(2),
        )
    w2 = torch.zeros(2, 32, 32, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="w1_scale and w2_scale"):
        fused_moe(x, w, w2, tw, ids, up=up, down=up)
    with pytest.raises(ValueError, match="block_shape"):
        fused_moe(x, w, w2, tw, ids, up=up, down=up, w1_scale=torch.ones(2, 1, 1), w2_scale=torch.ones(2, 1, 1))
    with pytest.raises(ValueError, match="must divide the scale group"):
        fused_moe(
            x,
            w,
            w2,
            tw,
            ids,
            up=gemm(16, 32, 256, 1),
            down=up,
            w1_scale=torch.ones(2, 1, 1),
            w2_scale=torch.ones(2, 1, 1),
            block_shape=[128, 128],
        )


def test_the_moe_h200_fp8_baselines():
    """SGLang's default fp8 configs (its get_default_config, H200: not a low-shared-memory GPU)
    and the shipped-file lookup, which finds no fp8 file among the vendored ones
    (search_spaces/moe/sglang.py, the baselines of benchmarks/moe_h200.py --fp8)."""
    from evokernel.search_spaces.moe.sglang import default_fp8_config, shipped_fp8_config

    assert default_fp8_config(M=64, E=32, block=True) == gemm(64, 128, 128, 32, 4, 3)
    assert default_fp8_config(M=16, E=32, block=False) == gemm(64, 128, 128, 1, 4, 4)
    assert default_fp8_config(M=64, E=32, block=False) == gemm(128, 256, 128, 32, 8, 4)
    assert shipped_fp8_config(E=128, N=768, M=64, device_name="NVIDIA H200", block=True) is None
    space = moe_space(fp8="block")
    for m in (1, 64, 4096):  # the defaults are points of the space (the search is seeded from them)
        cfg = default_fp8_config(M=m, E=32, block=True)
        assert space.is_valid({**cfg, **{f"down_{k}": v for k, v in cfg.items() if k != "BLOCK_SIZE_M"}})


@pytest.mark.slow
@pytest.mark.parametrize("scales", ["block", "tensor"])
def test_a_generated_fp8_candidate_passes_the_gate_on_the_cpu(tmp_path, scales):
    """The real CLI, in its sandbox, Triton through the interpreter, fp32 x, tiny model."""
    params = {**gemm(16, 32, 32, 4), **{f"down_{k}": v for k, v in gemm(32, 64, 64, 1).items()}}
    cand = tmp_path / "moe_fp8_candidate.py"
    cand.write_text(candidate_source(params, fp8=scales))
    env = {
        **os.environ,
        "EVOKERNEL_MOE_MODEL": "tiny",
        "EVOKERNEL_MOE_DTYPE": "float32",
        "EVOKERNEL_MOE_M": "7",
        "EVOKERNEL_FP8_SCALES": scales,
    }
    env.pop("TRITON_INTERPRET", None)
    extra = [] if scales == "block" else ["--no-time"]
    proc = subprocess.run(
        [sys.executable, "-m", "evokernel.cli", "check", str(PROBLEM), str(cand), "--device", "cpu", "--json", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    data = json.loads(proc.stdout)
    assert proc.returncode == 0 and data["accepted"], data["reason"]
    if scales == "block":
        assert [t["shape"] for t in data["timings"]] == ["M=7,E=4,H=64,I=32,topk=2"]
