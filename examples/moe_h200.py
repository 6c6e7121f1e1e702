"""Tune the fused-MoE Triton template for one model and batch size on a real GPU.

Fitness: `KernelEvaluator` over `examples/problems/moe_bf16.py` (the model and batch size
from EVOKERNEL_MOE_MODEL and EVOKERNEL_MOE_M, read when the problem loads; Qwen3-30B-A3B
at M=64 by default). Every genome sets the up and the down GEMM's tiles, grouping, warps
and stages; each is compiled, checked against the plain-torch reference on fresh inputs
and timed by the sandboxed judge. Needs a CUDA GPU.

    EVOKERNEL_MOE_M=256 evokernel search examples/moe_h200.py --budget 100
"""

from pathlib import Path

from evokernel.evaluators import KernelEvaluator
from evokernel.search_spaces import moe_space
from evokernel.search_spaces.moe.template import candidate_source

PROBLEM = Path(__file__).resolve().parent / "problems" / "moe_bf16.py"

space = moe_space()
evaluator = KernelEvaluator(PROBLEM, lambda genome: candidate_source(genome.params), device="cuda")
name = "fused-moe-h200"
