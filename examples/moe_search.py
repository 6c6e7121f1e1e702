"""Tune the fused-MoE kernel of Qwen3-30B-A3B and compare it with what SGLang would run.

    python examples/moe_search.py [--budget 60] [--ms 64 1024]

On a GPU: a search per batch size (the template's up and down GEMM configs, judged by the
sandboxed gate), then the winner, SGLang's default-config heuristic and SGLang's shipped
H200 config re-measured together (`benchmarks/moe_h200.py`, which this runs); the table of
winners against the baselines is printed at the end, and `evokernel export sglang-moe
<out>/moe.db --out DIR` writes the winners where SGLang reads them.

Without a GPU: the same search replays the recorded H200 landscapes of this kernel (M=64
and M=1024, one config for both GEMMs), and the baselines are those landscapes' recorded
figures for SGLang's two configs. It says so when it starts.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def replay(budget: int, ms: list[int]) -> None:
    from evokernel import Budget, Search
    from evokernel.evaluators import ReplayEvaluator
    from evokernel.engine.landscape import Landscape, builtin
    from evokernel.search_spaces.moe.sglang import default_config, shipped_config

    print("no GPU: replaying the recorded H200 landscapes (moe_bf16_h200_qwen3-30b-a3b_M*), with 3% noise")
    print(
        "| M | winner (one config for both GEMMs) | winner ms | SGLang default ms | speedup | SGLang H200 ms | speedup |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in ms:
        L = Landscape.load(builtin(f"moe_bf16_h200_qwen3-30b-a3b_M{m}"))
        ev = ReplayEvaluator(L, noise=0.03, seed=m)
        report = Search(L.space, ev).run(Budget(evaluations=budget), seed=m)
        won = ev.true_latency(report.best.genome)
        base = []
        for cfg in (default_config(m, 128), shipped_config(128, 768, m, "NVIDIA H200")):
            row = L.rows.get(tuple(cfg[n] for n in L.space.names)) if cfg else None
            base.append(row.latency_ms if row is not None and row.latency_ms else None)
        cells = " | ".join(f"{b:.4f} | {b / won:.3f}" if b else "not in the recorded space | -" for b in base)
        print(f"| {m} | {report.best.genome.short()} | {won:.4f} | {cells} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--ms", nargs="+", type=int, default=[64, 1024])
    ap.add_argument("--out", default="moe-out")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        replay(args.budget, [m for m in args.ms if m in (64, 1024)] or [64, 1024])
        return
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "moe_h200.py"),
            "--out",
            args.out,
            "--models",
            "qwen3-30b-a3b",
            "--ms",
            *map(str, args.ms),
            "--budget",
            str(args.budget),
        ],
        check=True,
    )
    print((Path(args.out) / "moe.md").read_text())


if __name__ == "__main__":
    main()
