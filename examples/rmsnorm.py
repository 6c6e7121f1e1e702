"""Tune the fused add-RMSNorm template (search_spaces/rmsnorm/) against the real gate.

On a GPU, candidates are compiled, checked and timed on it at the problem's LLM shapes;
without one, the judge runs Triton through its interpreter on the CPU at the problem's
CPU_SHAPES (seconds a candidate: for trying the machinery, not for speed figures). The
first generation starts from the family's seeds (one block a row; a loop over the row).

    evokernel search examples/rmsnorm.py --budget 12
    EVOKERNEL_RMSNORM_DTYPE=bfloat16 evokernel search examples/rmsnorm.py --budget 200   # on a GPU
    python examples/rmsnorm.py                                                           # the Python API
"""

import torch

from evokernel.evaluators import KernelEvaluator
from evokernel.judge.problem import Problem
from evokernel.search_spaces.rmsnorm import PROBLEMS, candidate_source, rmsnorm_class, rmsnorm_seeds, rmsnorm_space

GPU = torch.cuda.is_available()
problem = Problem.load(PROBLEMS / "rmsnorm_fp16.py")
problem = problem if GPU else problem.on_cpu()
hidden = max(shape["N"] for shape in problem.shapes + problem.heldout)

space = rmsnorm_space(hidden)
evaluator = KernelEvaluator(problem, lambda genome: candidate_source(genome.params))
descriptor = rmsnorm_class  # the archive keeps the best kernel of each block shape (ROWS x BLOCK_N)
seeds = rmsnorm_seeds(hidden, space)
name = "rmsnorm-" + ("gpu" if GPU else "interpreter")

if __name__ == "__main__":
    from evokernel import Budget, Search, open_store

    with evaluator:
        search = Search(
            space, evaluator, descriptor=descriptor, store=open_store("evokernel.db"), name=name, seeds=seeds
        )
        report = search.run(Budget(evaluations=12), seed=0)
    for elite in report.elites:
        print(f"{elite.latency_ms:.5f} ms  {elite.niche:8s}  {elite.genome.short()}")
