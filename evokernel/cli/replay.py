"""`evokernel replay LANDSCAPE`: run a strategy against a recorded landscape, and say how close
to the landscape's optimum it came."""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

from evokernel.cli._common import add_run_options, load_target
from evokernel.cli._progress import SearchProgress
from evokernel.cli.search import make_search, print_report, run_search


def add_parser(sub: Any) -> None:
    r = sub.add_parser("replay", help="run a strategy against a recorded landscape")
    r.add_argument("landscape", help="landscape CSV, or the name of a shipped landscape")
    add_run_options(r, db_default=None)


def run(args: argparse.Namespace) -> int:
    from evokernel.store import open_store

    spec = load_target(args, args.landscape)
    evaluator = spec.evaluator
    store = open_store(args.db or ":memory:")
    progress = None if (args.quiet or args.json) else SearchProgress(args.budget)
    search = make_search(args, spec, store, [progress] if progress else [])
    t0 = time.monotonic()
    report = run_search(search, args, progress)
    _, optimum = evaluator.landscape.optimum()
    genomes = {e.genome.id: e.genome for e in store.history(report.run_id)}
    # the recorded (noise-free) latency of what the search believed best after each evaluation
    trace = [evaluator.true_latency(genomes[gid]) if gid else None for gid in report.best_ids]
    best = report.best
    out = {
        "landscape": evaluator.landscape.name,
        "strategy": search.strategy,
        "seed": args.seed,
        "noise": evaluator.noise,
        "evaluations": report.evaluations,
        "best_latency_ms": evaluator.true_latency(best.genome) if best else None,
        "optimum_latency_ms": optimum,
        "fraction_of_optimum": optimum / evaluator.true_latency(best.genome) if best else 0.0,
        "best_params": best.genome.params if best else None,
        "measured_best_ms": best.latency_ms if best else None,
        "trace": [None if t is None or math.isinf(t) else t for t in trace],
        "stop_reason": report.stop_reason,
        "statuses": report.statuses,
        "operators": report.operators,
        "priors": report.priors,
        "wall_s": time.monotonic() - t0,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print_report(report, args.db)
        print(
            f"optimum of {out['landscape']}: {optimum:.6f} ms; found {out['best_latency_ms']:.6f} ms "
            f"({out['fraction_of_optimum']:.3f} of optimum) in {report.evaluations} evaluations"
        )
    return 0
