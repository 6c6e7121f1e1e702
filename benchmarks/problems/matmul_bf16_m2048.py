"""examples/problems/matmul_bf16.py restricted to one landscape shape (M=2048, N=6144,
K=4096), as the throughput and fidelity benchmarks tune one shape at a time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# a module of this one's own (its parameters, e.g. dtype, are this problem's: Problem.load's
# `params` reach it), registered so that its Params' annotations resolve
_spec = importlib.util.spec_from_file_location(
    f"{__name__}_base", Path(__file__).resolve().parents[2] / "examples" / "problems" / "matmul_bf16.py"
)
_base = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _base
_spec.loader.exec_module(_base)

Params, P = _base.Params, _base.P
make_inputs = _base.make_inputs
reference = _base.reference
flops = _base.flops
bytes = _base.bytes  # noqa: A001
TOLERANCE = _base.TOLERANCE
FAMILY = "matmul_bf16"
SHAPES = [{"M": 2048, "N": 6144, "K": 4096}]
HELDOUT_SHAPES = [{"M": 512, "N": 4096, "K": 11008}]
