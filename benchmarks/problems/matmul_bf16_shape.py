"""examples/problems/matmul_bf16.py restricted to one shape given by the environment:
EVOKERNEL_MATMUL_SHAPE="M,N,K" (default 2048,6144,4096), for recording a matmul landscape
of that shape (`examples/matmul_landscape_h200.py`, `benchmarks/device.sh sweep-matmul`)."""

from __future__ import annotations

import importlib.util
import os
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
_M, _N, _K = (int(x) for x in os.environ.get("EVOKERNEL_MATMUL_SHAPE", "2048,6144,4096").split(","))
SHAPES = [{"M": _M, "N": _N, "K": _K}]
HELDOUT_SHAPES = [{"M": 512, "N": 4096, "K": 11008}]
