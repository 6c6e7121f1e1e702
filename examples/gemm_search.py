"""Tune bf16 GEMMs at LLM projection shapes and compare them with cuBLAS.

    python examples/gemm_search.py [--budget 40] [--ms 16 256 2048 8192] [--epilogue bias+silu]

On a GPU: a search per shape of the Hopper GEMM template (tiles, split-K, persistent tiles,
swap-AB, TMA loads and stores, 96-320-wide tiles, warp specialisation, clusters, register
cap, and the warp-specialised Gluon kernel as one more gene; judged by the sandboxed gate),
then the
winner, torch.matmul (cuBLAS) and the template's default config re-measured together
(`benchmarks/gemm_h200.py`, which this runs); the table of winners against the baselines is
printed at the end.

Without a GPU: the plain Triton matmul space (no split-K, TMA or persistence) is searched
on its recorded H200 landscapes, and the baseline is cuBLAS as recorded next to them (same
method, `evokernel/landscapes/README.md`). It says so when it starts.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: torch.matmul on the landscapes' shapes, timed with the same method as the sweeps (ms).
CUBLAS_RECORDED = {"M16_N4096_K4096": 0.01768, "M256_N4096_K14336": 0.05328, "M2048_N6144_K4096": 0.13437,
                   "M8192_N8192_K1024": 0.20003}


def replay(budget: int) -> None:
    from evokernel import Budget, Search
    from evokernel.evaluators import ReplayEvaluator
    from evokernel.engine.landscape import Landscape, builtin

    print("no GPU: replaying the recorded H200 landscapes of the plain Triton matmul (matmul_bf16_h200_*), "
          "3% noise; cuBLAS as recorded with them")
    print("| shape | winner | winner ms | cuBLAS ms | speedup |")
    print("|---|---|---|---|---|")
    speedups = []
    for shape, cublas in CUBLAS_RECORDED.items():
        L = Landscape.load(builtin(f"matmul_bf16_h200_{shape}"))
        ev = ReplayEvaluator(L, noise=0.03, seed=1)
        report = Search(L.space, ev).run(Budget(evaluations=budget), seed=1)
        won = ev.true_latency(report.best.genome)
        speedups.append(cublas / won)
        print(f"| {shape} | {report.best.genome.short()} | {won:.5f} | {cublas:.5f} | {cublas / won:.3f} |")
    print(f"| **geomean** | | | | **{math.exp(sum(map(math.log, speedups)) / len(speedups)):.3f}** |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--shapes", nargs="+", default=["llama3-8b:qkv", "llama3-8b:down", "qwen3-30b-a3b:qkv"])
    ap.add_argument("--ms", nargs="+", type=int, default=[16, 256, 2048, 8192])
    ap.add_argument("--epilogue", default="none")
    ap.add_argument("--out", default="gemm-out")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        replay(max(args.budget, 60))
        return
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gemm_h200.py"), "--out", args.out, "--shapes",
                    *args.shapes, "--ms", *map(str, args.ms), "--budget", str(args.budget), "--epilogue",
                    args.epilogue], check=True)
    print((Path(args.out) / "gemm.md").read_text())


if __name__ == "__main__":
    main()
