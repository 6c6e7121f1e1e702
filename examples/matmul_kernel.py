"""Tune the Triton matmul template against the real gate, on whatever machine this is.

On a GPU, candidates are compiled, checked and timed on it; without one, the judge runs
Triton through its interpreter on the CPU (small fp32 shapes: slow, for trying the
machinery, not for speed figures). Add `--llm` to let Claude rewrite kernels as well
(needs ANTHROPIC_API_KEY; without it the search says the operator is off and runs
without it):

    evokernel search examples/matmul_kernel.py --budget 20
    evokernel search examples/matmul_kernel.py --budget 20 --llm --llm-dollars 2
"""

from pathlib import Path

import torch

from evokernel.evaluators import KernelEvaluator
from evokernel.search_spaces import matmul_space, tile_class
from evokernel.search_spaces.matmul.template import candidate_source

ROOT = Path(__file__).resolve().parent
GPU = torch.cuda.is_available()
PROBLEM = (
    ROOT.parent / "benchmarks" / "problems" / "matmul_bf16_m2048.py"
    if GPU
    else ROOT.parent / "tests" / "corpus" / "problems" / "matmul_small.py"
)

space = matmul_space()
evaluator = KernelEvaluator(PROBLEM, lambda genome: candidate_source(genome.params))
descriptor = tile_class
name = "matmul-kernel-" + ("gpu" if GPU else "interpreter")
