"""Tune bf16 GEMMs at LLM projection shapes and compare them with cuBLAS.

    python examples/gemm_search.py [--budget 40] [--ms 16 256 2048 8192] [--epilogue bias+silu]

On a GPU: a search per shape of the Hopper GEMM template (tiles, split-K, persistent tiles,
swap-AB, TMA loads and stores, 96-320-wide tiles, warp specialisation, clusters, register
cap, and the warp-specialised Gluon kernel as one more gene; judged by the sandboxed gate),
seeded with the space's known-good points, then the winner, torch.matmul (cuBLAS) and the
template's default config re-measured together, interleaved, in fresh processes
(`evokernel.engine.tuning.search_against`); the table of winners against the baselines is
printed at the end. (`benchmarks/gemm_h200.py` runs the same searches for the benchmark
record, with more seeds: earlier winners, cuBLAS's own tiles, the plain-matmul sweeps.)

Without a GPU: the plain Triton matmul space (no split-K, TMA or persistence) is searched
on its recorded H200 landscapes, and the baseline is cuBLAS as recorded next to them (same
method, `evokernel/landscapes/README.md`). It says so when it starts. `--device cpu
--shapes tiny:qkv` runs the real search instead, Triton in its interpreter (a check of
this script, not a measurement).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "gemm_bf16.py"
#: torch.matmul on the landscapes' shapes, timed with the same method as the sweeps (ms).
CUBLAS_RECORDED = {
    "M16_N4096_K4096": 0.01768,
    "M256_N4096_K14336": 0.05328,
    "M2048_N6144_K4096": 0.13437,
    "M8192_N8192_K1024": 0.20003,
}


def replay(budget: int) -> None:
    from evokernel import Budget, Search
    from evokernel.evaluators import ReplayEvaluator
    from evokernel.engine.landscape import Landscape, builtin

    print(
        "no GPU: replaying the recorded H200 landscapes of the plain Triton matmul (matmul_bf16_h200_*), "
        "3% noise; cuBLAS as recorded with them"
    )
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


def _gluon() -> bool:
    """Whether this Triton has Gluon's Hopper API (the GLUON gene's kernel)."""
    try:
        import evokernel.search_spaces.gemm.template_gluon  # noqa: F401
    except Exception:  # an older Triton: the gene stays out of the space
        return False
    return True


def tune(shapes: list[str], ms: list[int], *, budget: int, epilogue: str, out: Path, device: str) -> None:
    """A search per MODEL:LAYER shape and batch size M, each winner re-measured against
    cuBLAS and the template's default; prints the table."""
    from evokernel import Genome
    from evokernel.engine.tuning import geomean, search_against
    from evokernel.evaluators import KernelEvaluator
    from evokernel.judge.problem import Problem
    from evokernel.search_spaces import gemm_class, gemm_seeds, gemm_space, wave_seeds
    from evokernel.search_spaces.gemm.template import DEFAULTS, candidate_source, torch_source
    from evokernel.store import SQLiteStore

    out.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(out / "gemm.db")
    from evokernel.judge.device import is_cuda

    gluon = is_cuda(device) and _gluon()
    space = gemm_space(swap_ab=True, tma_store=True, bn_tail=True, gluon=gluon)
    off = {"SWAP_AB": 0, "TMA_STORE": 0, "BN_TAIL": 0, **({"GLUON": 0} if gluon else {})}  # genes a seed may lack
    print("| model | layer | M | winner | winner ms | cuBLAS ms | speedup | Triton default ms | speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    speedups: dict[str, list[float | None]] = {"cublas": [], "triton_default": []}
    for model, layer in (s.split(":") for s in shapes):
        for m in sorted(ms):
            params: dict[str, Any] = {"model": model, "layer": layer, "m": [m], "epilogue": epilogue}
            if device == "cpu":
                params["dtype"] = "float16"  # (the interpreter has no bf16 dots)
            problem = Problem.load(PROBLEM, params=params)
            epi = dict(problem.module.EPILOGUE)
            ev = KernelEvaluator(problem, lambda g, epi=epi: candidate_source(g.params, **epi), device=device)
            n = int(problem.shapes[0]["N"])
            seeds = gemm_seeds(m, swap_ab=True, tma_store=True, bn_tail=True, gluon=gluon) + (
                wave_seeds(m, n, tma_store=True, top=6) if m >= 64 else []
            )
            seeds = [q for q in ({**off, **p} for p in seeds) if space.is_valid(q)]
            seeds = [p for i, p in enumerate(seeds) if p not in seeds[:i]][: max(1, budget // 2)]
            baselines = {
                "cublas": Genome.of({"baseline": "cublas"}, source=torch_source(**epi)),
                "triton_default": Genome.of(dict(DEFAULTS)),
            }
            try:
                part, report = search_against(
                    space,
                    ev,
                    store=store,
                    descriptor=gemm_class,
                    seeds=seeds,
                    baselines=baselines,
                    name=f"gemm-{model}-{layer}-M{m}",
                    evaluations=budget,
                    wall_s=600.0,
                )
            finally:
                ev.close()
            if part is None:
                print(f"| {model} | {layer} | {m} | no candidate passed the gate ({report.statuses}) | | | | | |")
                continue
            cells = []
            for name in ("cublas", "triton_default"):
                speedups[name].append(part["speedup"].get(name))
                ms_, x = part["baselines"].get(name), part["speedup"].get(name)
                cells.append(f"{ms_:.4f} | {x:.3f}" if ms_ and x else "- | -")
            print(
                f"| {model} | {layer} | {m} | {Genome.of(part['winner']).short()} | {part['winner_ms']:.4f} | "
                f"{' | '.join(cells)} |",
                flush=True,
            )
    gm = {k: geomean(v) for k, v in speedups.items()}
    print("| **geomean** | | | | | | " + " | | ".join(f"**{gm[k]:.3f}**" if gm[k] else "-" for k in gm) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument(
        "--shapes",
        nargs="+",
        default=["llama3-8b:qkv", "llama3-8b:down", "qwen3-30b-a3b:qkv"],
        help="MODEL:LAYER of examples/problems/gemm_bf16.py",
    )
    ap.add_argument("--ms", nargs="+", type=int, default=[16, 256, 2048, 8192])
    ap.add_argument("--epilogue", default="none", help="e.g. bias+silu (cuBLAS's side then runs it in eager torch)")
    ap.add_argument("--out", default="gemm-out", help="the search database goes here")
    ap.add_argument(
        "--device",
        default=None,
        help="where to search: cuda, cuda:N or cpu (default: the GPU if there is one, else replay the recorded "
        "landscapes)",
    )
    args = ap.parse_args()
    import torch

    from evokernel.judge.device import use_device

    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device is not None:
        use_device(device, f"--device {device}")  # (a ConfigError: no such GPU here, and how many there are)
    if device is None:
        replay(max(args.budget, 60))
        return
    tune(args.shapes, args.ms, budget=args.budget, epilogue=args.epilogue, out=Path(args.out), device=device)


if __name__ == "__main__":
    main()
