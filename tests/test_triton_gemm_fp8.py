"""The fp8 GEMM template (per-tensor and per-block scales, split-K) through Triton's
interpreter against the problem's dequantised reference, its space, and a generated
candidate through the real `evokernel check` on the CPU (the interpreter does fp8 e4m3
dots correctly; bf16 is only stored)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel.search_spaces.gemm.space_fp8 import gemm_fp8_space
from evokernel.search_spaces.gemm.template_fp8 import DEFAULTS, candidate_source

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "gemm_fp8.py"

CASES = [  # (scales, overrides, (M, N, K))
    ("tensor", {"BM": 16, "BN": 32, "BK": 64}, (33, 72, 200)),
    ("tensor", {"BM": 32, "BN": 64, "BK": 64, "SPLIT_K": 3}, (40, 130, 320)),
    ("block", {"BM": 16, "BN": 64, "BK": 64}, (33, 200, 256)),
    ("block", {"BM": 32, "BN": 32, "BK": 128, "SPLIT_K": 2, "GROUP_M": 1}, (50, 150, 384)),
]


@pytest.mark.slow
def test_every_path_matches_the_dequantised_reference_in_the_interpreter():
    code = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
from evokernel.judge.problem import Problem
from evokernel.search_spaces.gemm.template_fp8 import DEFAULTS, gemm_fp8
cases = json.loads(sys.argv[1])
for scales, over, (M, N, K) in cases:
    os.environ["EVOKERNEL_FP8_SCALES"] = scales
    os.environ["EVOKERNEL_GEMM_MODEL"] = "tiny"
    problem = Problem.load(sys.argv[2])
    a, b, sa, sb = problem.make_inputs({"M": M, "N": N, "K": K}, 3, "cpu")
    assert a.dtype == torch.float8_e4m3fn and (sa.numel() == 1) == (scales == "tensor")
    want = problem.reference(a, b, sa, sb).float()
    for _ in range(2):  # twice: the split-K workspace starts from zero every call
        out = gemm_fp8(a, b, sa, sb, **dict(DEFAULTS, **over))
        got = out.float()
        err = (got - want).abs().max().item()
        assert out.dtype == torch.bfloat16 and out.shape == (M, N) and err <= 2e-2 * want.abs().max().item() + 2e-2, (scales, over, err)
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(CASES), str(PROBLEM)],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith("EVOKERNEL_")},
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_the_space_keeps_bk_within_the_scale_groups_and_the_source_is_well_formed():
    assert "does not divide the 128-wide scale groups" in gemm_fp8_space(blockwise=True).why_invalid(
        dict(DEFAULTS, BK=256)
    )
    assert "registers" in gemm_fp8_space(blockwise=False).why_invalid(dict(DEFAULTS, BM=256, BN=256, num_warps=4))
    assert '"SPLIT_K": 1' in candidate_source(DEFAULTS)
    with pytest.raises(ValueError, match="exactly"):
        candidate_source({"BM": 64})


@pytest.mark.slow
def test_a_generated_fp8_candidate_passes_the_gate_on_the_cpu(tmp_path: Path):
    cand = tmp_path / "fp8_candidate.py"
    cand.write_text(candidate_source(dict(DEFAULTS, BM=16, BN=64, BK=64, SPLIT_K=2)))
    env = {**os.environ, "EVOKERNEL_GEMM_MODEL": "tiny", "EVOKERNEL_GEMM_M": "24", "EVOKERNEL_FP8_SCALES": "block"}
    env.pop("TRITON_INTERPRET", None)
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
