"""Record a fused-MoE landscape: every valid point of the shared-config space (one config
for both GEMMs, as SGLang's MoE tuner searches) measured by the sandboxed judge on a GPU.

The model and batch size come from EVOKERNEL_MOE_MODEL and EVOKERNEL_MOE_M (see
`examples/problems/moe_bf16.py`). The CSV it writes is a landscape `evokernel replay` and
`benchmarks/search_efficiency.py` read:

    EVOKERNEL_MOE_MODEL=qwen3-30b-a3b EVOKERNEL_MOE_M=64 \\
        evokernel sweep examples/moe_landscape_h200.py --out moe_bf16_h200_qwen3-30b-a3b_M64.csv

It is also a search file: `evokernel search examples/moe_landscape_h200.py --budget 50`.
"""

from pathlib import Path

from evokernel.evaluators import KernelEvaluator
from evokernel.search_spaces import moe_shared_space, shared_params
from evokernel.search_spaces.moe.template import candidate_source

PROBLEM = Path(__file__).resolve().parent / "problems" / "moe_bf16.py"

space = moe_shared_space()
evaluator = KernelEvaluator(PROBLEM, lambda genome: candidate_source(shared_params(genome.params)), device="cuda")
name = "fused-moe-shared-h200"
