"""The Ray path's cost on one GPU (issue 25): the same matmul search, in process and through
a `RayEvaluator` with one actor, in alternating windows (A B B A ...), so drift of the card
(heat, clocks) falls on both alike.

Each window is a fresh search (its own seed, a fresh Triton cache, an in-memory store) on the
bf16 matmul problem at M=2048, the gate on, for `--window` seconds of wall time; a window
reports the candidates measured per minute (built, checked and timed), counted from the
store. The evaluators are built (and their judges set up) before each window's clock starts;
the Ray actor's start-up is reported on its own.

    python benchmarks/ray_overhead.py --out $OUT [--window 50] [--pairs 2] [--deadline 520]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "benchmarks/problems/matmul_bf16_m2048.py"
T0 = time.monotonic()


def log(out: Path, record: dict[str, Any]) -> None:
    record = {"t": round(time.monotonic() - T0, 1), **record}
    with open(out / "ray_overhead.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record)[:400], flush=True)


def render(genome: Any) -> str:
    from evokernel.search_spaces.matmul.template import candidate_source

    return candidate_source(genome.params)


class Build:
    """The evaluator of one window, built where it runs (this process or the Ray actor), with
    a Triton cache of its own so no window compiles from another's cache."""

    def __init__(self, cache: str) -> None:
        self.cache = cache

    def __call__(self) -> Any:
        os.environ["TRITON_CACHE_DIR"] = self.cache
        from evokernel.evaluators import KernelEvaluator

        ev = KernelEvaluator(PROBLEM, render, device="cuda", template="matmul-ray-overhead")
        ev.judge  # the judge's buffers are set up before the window's clock starts
        return ev


def window(mode: str, seed: int, seconds: float, out: Path) -> dict[str, Any]:
    from evokernel.engine.options import Budget, SearchOptions
    from evokernel.engine.search import Search
    from evokernel.search_spaces import matmul_space
    from evokernel.store import open_store

    build = Build(tempfile.mkdtemp(prefix=f"triton-{mode}-{seed}-"))
    t = time.monotonic()
    if mode == "ray":
        from evokernel.runtime.ray import RayEvaluator

        ev: Any = RayEvaluator(build, gpus=1)
    else:
        ev = build()
    startup = time.monotonic() - t
    store = open_store(":memory:")
    search = Search(
        matmul_space(), ev, store=store, options=SearchOptions(remeasure=0, report_elites=1), name=f"{mode}-{seed}"
    )
    t = time.monotonic()
    report = search.run(Budget(wall_s=seconds), seed=seed)
    wall = time.monotonic() - t
    ev.close()
    row = {
        "mode": mode,
        "seed": seed,
        "startup_s": round(startup, 2),
        "wall_s": round(wall, 2),
        "measured": report.measured,
        "evaluations": report.evaluations,
        "per_min": round(60 * report.measured / wall, 1),
        "best_ms": report.best.latency_ms if report.best else None,
        "statuses": report.statuses,
    }
    log(out, row)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--window", type=float, default=50.0)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=520.0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    order = []
    for p in range(args.pairs):
        order += ["inproc", "ray"] if p % 2 == 0 else ["ray", "inproc"]
    for i, mode in enumerate(order):
        if args.deadline - (time.monotonic() - T0) < args.window + 40:
            log(args.out, {"stopped": "deadline", "done": i})
            break
        try:
            rows.append(window(mode, 100 + i, args.window, args.out))
        except Exception as exc:  # one window's failure is a row, not the end of the benchmark
            log(args.out, {"mode": mode, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    by = {m: [r["per_min"] for r in rows if r["mode"] == m] for m in ("inproc", "ray")}
    summary: dict[str, Any] = {"windows": rows, "window_s": args.window}
    if by["inproc"] and by["ray"]:
        a, b = statistics.mean(by["inproc"]), statistics.mean(by["ray"])
        summary.update(
            inproc_per_min=round(a, 1),
            ray_per_min=round(b, 1),
            ray_over_inproc=round(b / a, 3),
            target="ray_over_inproc >= 0.95",
        )
    (args.out / "ray_overhead.json").write_text(json.dumps(summary, indent=1))
    log(args.out, {k: v for k, v in summary.items() if k != "windows"})


if __name__ == "__main__":
    main()
