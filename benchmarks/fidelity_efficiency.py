"""Fidelity levels on recorded landscapes (CPU: replay, no GPU): quality against cost.

For each landscape and seed, a search judging every genome at full fidelity and one that
judges through a cascade (`SearchOptions(promotion=...)`: the replay's cheap level has the
noise of a short measurement) are run with the same strategy. Cost is counted in full
evaluations: a cheap judgement costs `--cheap-cost` of one (a kernel on one of four shapes
with short timing is about 0.25; a model timed for 3 of 12 rounds, 0.25). At each cost
checkpoint: the fraction of the optimum reached by the search's best measured genome
(optimum / its recorded latency).

    python benchmarks/fidelity_efficiency.py --seeds 10 --noise 0.02 \\
        --out benchmarks/results/fidelity_efficiency.json

Prints a Markdown table; writes one JSON record per (landscape, mode).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from evokernel import Budget, Promotion, Search, SearchOptions
from evokernel.engine.landscape import builtin, builtin_names
from evokernel.evaluators import ReplayEvaluator

CHECKPOINTS = (10, 25, 50)


class _Costs:
    """An observer: the cost spent and the best measured genome's true latency after each evaluation."""

    def __init__(self, full: ReplayEvaluator, cheap_cost: float) -> None:
        self.full, self.cheap_cost = full, cheap_cost
        self.cost = 0.0
        self.points: list[tuple[float, float]] = []  # (cost so far, true latency of the best so far)

    def on_start(self, *a: Any) -> None: ...
    def on_generation(self, *a: Any) -> None: ...
    def on_finish(self, *a: Any) -> None: ...

    def on_evaluation(self, ind: Any, best: Any, n: int) -> None:
        info = ind.result.meta.get("fidelity") if isinstance(ind.result.meta, dict) else None
        if isinstance(info, dict):
            judged = info.get("seconds", {})
            self.cost += sum(1.0 if name == "full" else self.cheap_cost for name in judged)
        else:
            self.cost += 1.0
        true = self.full.true_latency(best.genome) if best is not None else math.inf
        self.points.append((self.cost, true))


def _at(points: list[tuple[float, float]], cost: float) -> float:
    """True latency of the best measured genome once `cost` was spent (inf before any)."""
    seen = [t for c, t in points if c <= cost + 1e-9]
    return min(seen) if seen else math.inf


def run(name: str, seeds: int, noise: float, cheap_cost: float, strategy: str, margin: float) -> list[dict[str, Any]]:
    out = []
    for mode in ("full", "cascade"):
        fractions: dict[int, list[float]] = {c: [] for c in CHECKPOINTS}
        promoted: list[float] = []
        for seed in range(seeds):
            full = ReplayEvaluator(builtin(name), noise=noise, seed=seed)
            optimum = full.landscape.optimum()[1]
            costs = _Costs(full, cheap_cost)
            options = SearchOptions(promotion=Promotion(margin=margin) if mode == "cascade" else None, patience=0)
            search = Search(full.space, full, strategy=strategy, options=options, observers=[costs])
            evaluations = max(CHECKPOINTS) if mode == "full" else int(max(CHECKPOINTS) / cheap_cost) + 8
            search.run(Budget(evaluations=min(evaluations, full.space.size)), seed=seed)
            for c in CHECKPOINTS:
                t = _at(costs.points, c)
                fractions[c].append(optimum / t if math.isfinite(t) else 0.0)
            if mode == "cascade":
                split = search.evaluator.split()  # type: ignore[attr-defined]
                promoted.append(split["promoted"] / max(1, split["evaluations"]))
        rec = {
            "landscape": name,
            "mode": mode,
            "strategy": strategy,
            "noise": noise,
            "cheap_cost": cheap_cost,
            "margin": margin,
            "seeds": seeds,
            **{f"at_{c}": statistics.fmean(v) for c, v in fractions.items()},
        }
        if promoted:
            rec["promoted_share"] = statistics.fmean(promoted)
        out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--landscapes", nargs="*", default=None, help="default: every shipped matmul and MoE landscape")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--noise", type=float, default=0.02, help="full level's noise (log-sigma)")
    ap.add_argument("--cheap-cost", type=float, default=0.25)
    ap.add_argument("--margin", type=float, default=0.10)
    ap.add_argument("--strategy", default="default")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    names = args.landscapes or [n for n in builtin_names() if n.startswith(("matmul", "moe"))]
    records = []
    for name in names:
        records += run(name, args.seeds, args.noise, args.cheap_cost, args.strategy, args.margin)
    cols = [f"at_{c}" for c in CHECKPOINTS]
    print("| landscape | mode | " + " | ".join(f"@{c} full evals" for c in CHECKPOINTS) + " | promoted |")
    print("|---|---|" + "---|" * len(cols) + "---|")
    for r in records:
        share = f"{r['promoted_share']:.0%}" if "promoted_share" in r else "-"
        print(f"| {r['landscape']} | {r['mode']} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + f" | {share} |")
    for mode in ("full", "cascade"):
        rows = [r for r in records if r["mode"] == mode]
        print(f"| mean | {mode} | " + " | ".join(f"{statistics.fmean(r[c] for r in rows):.3f}" for c in cols) + " | |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"records": records, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1)
        )


if __name__ == "__main__":
    main()
