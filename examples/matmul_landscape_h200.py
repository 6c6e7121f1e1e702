"""Record a matmul landscape: every valid point of `matmul_space()` measured by the sandboxed
judge on a GPU, for the shape in EVOKERNEL_MATMUL_SHAPE ("M,N,K"; see
`benchmarks/problems/matmul_bf16_shape.py`). The CSV it writes is a landscape that
`evokernel replay` and `benchmarks/search_efficiency.py` read:

    EVOKERNEL_MATMUL_SHAPE=64,6144,4096 \\
        evokernel sweep examples/matmul_landscape_h200.py --out matmul_bf16_h200_M64_N6144_K4096.csv

It is also a search file: `evokernel search examples/matmul_landscape_h200.py --budget 50`.
"""

import os
from pathlib import Path

from evokernel.evaluators import KernelEvaluator
from evokernel.search_spaces import matmul_space, tile_class
from evokernel.search_spaces.matmul.template import candidate_source

PROBLEM = Path(__file__).resolve().parents[1] / "benchmarks" / "problems" / "matmul_bf16_shape.py"

space = matmul_space()
evaluator = KernelEvaluator(PROBLEM, lambda genome: candidate_source(genome.params), device="cuda")
descriptor = tile_class
name = "matmul-bf16-M{}-N{}-K{}-h200".format(*os.environ.get("EVOKERNEL_MATMUL_SHAPE", "2048,6144,4096").split(","))
