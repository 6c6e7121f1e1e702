"""Tune a Triton bf16 matmul (M=2048, N=6144, K=4096) for the H200.

The space is declared in Python (search_spaces/matmul/space.py) with the constraints that rule
out configurations that cannot fit the GPU. Its fitness is the recorded H200 sweep of
that shape, replayed with 3% measurement noise, so the search runs on any machine.

    evokernel search examples/matmul.py --budget 200      # run it; kill it; run it again
    evokernel show evokernel.db                           # elites and history
    python examples/matmul.py                             # the same through the Python API
"""

from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin
from evokernel.search_spaces import matmul_space, tile_class

space = matmul_space()
evaluator = ReplayEvaluator(builtin("matmul_bf16_h200_M2048_N6144_K4096"), noise=0.03)
descriptor = tile_class  # the archive keeps the best kernel of each output-tile shape
name = "matmul-bf16-M2048-N6144-K4096"

if __name__ == "__main__":
    from evokernel import Budget, Search, open_store

    search = Search(space, evaluator, descriptor=descriptor, store=open_store("evokernel.db"), name=name)
    report = search.run(Budget(evaluations=200), seed=0)
    for elite in report.elites:
        print(f"{elite.latency_ms:.5f} ms  {elite.niche:8s}  {elite.genome.short()}")
