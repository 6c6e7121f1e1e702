"""Tune the Triton bf16 matmul on a real GPU: every genome is compiled, checked against the
reference on fresh inputs (tuning and held-out shapes) and timed by the sandboxed judge.

The fitness is `KernelEvaluator` over `benchmarks/problems/matmul_bf16_m2048.py` (M=2048,
N=6144, K=4096, held-out M=512 N=4096 K=11008). It needs a CUDA GPU: on a CPU the judge
would run Triton through its interpreter, which cannot do bf16 dots.

    evokernel search examples/matmul_h200.py --budget 100        # a search on the GPU
    evokernel sweep examples/matmul_h200.py --out sweep.csv      # the whole space, as a landscape
"""

from pathlib import Path

from evokernel.evaluators import KernelEvaluator
from evokernel.search_spaces import matmul_space, tile_class
from evokernel.search_spaces.matmul.template import candidate_source

PROBLEM = Path(__file__).resolve().parents[1] / "benchmarks" / "problems" / "matmul_bf16_m2048.py"

space = matmul_space()
evaluator = KernelEvaluator(PROBLEM, lambda genome: candidate_source(genome.params), device="cuda")
descriptor = tile_class
name = "matmul-bf16-M2048-N6144-K4096-h200"
