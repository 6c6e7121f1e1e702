"""examples/problems/matmul_bf16.py restricted to one landscape shape (M=2048, N=6144,
K=4096), as the throughput and fidelity benchmarks tune one shape at a time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "evokernel_bench_matmul_bf16", Path(__file__).resolve().parents[2] / "examples" / "problems" / "matmul_bf16.py"
)
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

make_inputs = _base.make_inputs
reference = _base.reference
flops = _base.flops
bytes = _base.bytes  # noqa: A001
TOLERANCE = _base.TOLERANCE
FAMILY = "matmul_bf16"
SHAPES = [{"M": 2048, "N": 6144, "K": 4096}]
HELDOUT_SHAPES = [{"M": 512, "N": 4096, "K": 11008}]
