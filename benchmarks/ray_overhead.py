"""The Ray path's cost on one GPU (issue 25): the same matmul search, in process and through
a `RayEvaluator` with one actor, in alternating windows (A B B A ...), so drift of the card
(heat, clocks) falls on both alike.

Each window is a fresh search in a fresh process (the pair's seed, a fresh Triton cache, an
in-memory store) on the bf16 matmul problem at M=2048, the gate on, for `--window` seconds of
wall time or `--evaluations` candidates; a window reports the candidates measured per minute
(built, checked and timed), counted from the store. The evaluators are built (and their judges set up) before each window's clock starts;
the Ray actor's start-up is reported on its own.

    python benchmarks/ray_overhead.py --out $OUT [--window 50] [--pairs 2] [--deadline 520] [--evaluations N]

Run it where `import evokernel` finds the whole package (an installed or editable evokernel):
Ray puts the driver's working directory at the front of its workers' sys.path, so started from
a checkout that is only on PYTHONPATH, the actors would import the bare `evokernel/` folder of
the checkout (device.sh runs it from its installed copy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def window(mode: str, seed: int, seconds: float, out: Path, evaluations: int | None = None) -> dict[str, Any]:
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
        matmul_space(),
        ev,
        store=store,
        options=SearchOptions(remeasure=0, report_elites=1, patience=0),
        name=f"{mode}-{seed}",
    )
    t = time.monotonic()
    # a window of wall time counts whole generations (8 candidates, about 6% of a minute's
    # count); a fixed number of evaluations, timed to the last result, has no such step
    budget = Budget(evaluations=evaluations, wall_s=3 * seconds) if evaluations else Budget(wall_s=seconds)
    report = search.run(budget, seed=seed)
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
    ap.add_argument("--evaluations", type=int, default=None, help="each window measures this many candidates (timed)")
    ap.add_argument("--one", default=None, help="MODE:SEED: run that one window in this process (what main() spawns)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        mode, seed = args.one.split(":")
        row = window(mode, int(seed), args.window, args.out, args.evaluations)
        (args.out / f"row-{mode}-{seed}.json").write_text(json.dumps(row))
        return
    rows: list[dict[str, Any]] = []
    # each pair runs the same search (one seed) once in process and once through Ray, the
    # pairs alternating which goes first (A B B A ...)
    order: list[tuple[str, int]] = []
    for p in range(args.pairs):
        modes = ["inproc", "ray"] if p % 2 == 0 else ["ray", "inproc"]
        order += [(m, 100 + p) for m in modes]
    for i, (mode, seed) in enumerate(order):
        if args.deadline - (time.monotonic() - T0) < args.window + 40:
            log(args.out, {"stopped": "deadline", "done": i})
            break
        # every window in a fresh process: a process that has already run a search is warm
        # (imports, the compile pool's start-up), a new Ray actor never is
        cmd = [
            sys.executable,
            __file__,
            "--out",
            str(args.out),
            "--one",
            f"{mode}:{seed}",
            "--window",
            str(args.window),
        ]
        cmd += ["--evaluations", str(args.evaluations)] if args.evaluations else []
        try:
            proc = subprocess.run(cmd, timeout=4 * args.window + 60, capture_output=True, text=True)
            row_file = args.out / f"row-{mode}-{seed}.json"
            if row_file.exists():
                rows.append(json.loads(row_file.read_text()))
            else:  # one window's failure is a row, not the end of the benchmark
                log(args.out, {"mode": mode, "seed": seed, "error": f"rc {proc.returncode}: {proc.stderr[-1500:]}"})
        except subprocess.TimeoutExpired:
            log(args.out, {"mode": mode, "seed": seed, "error": "window timed out"})
    by = {m: [r["per_min"] for r in rows if r["mode"] == m] for m in ("inproc", "ray")}
    summary: dict[str, Any] = {"windows": rows, "window_s": args.window, "evaluations": args.evaluations}
    if by["inproc"] and by["ray"]:
        a, b = statistics.mean(by["inproc"]), statistics.mean(by["ray"])
        summary.update(
            inproc_per_min=round(a, 1),
            ray_per_min=round(b, 1),
            ray_over_inproc=round(b / a, 3),
            pairs={
                seed: round(r["per_min"] / i["per_min"], 3)
                for i in rows
                for r in rows
                if i["mode"] == "inproc" and r["mode"] == "ray" and (seed := i["seed"]) == r["seed"]
            },
            target="ray_over_inproc >= 0.95",
        )
    (args.out / "ray_overhead.json").write_text(json.dumps(summary, indent=1))
    log(args.out, {k: v for k, v in summary.items() if k != "windows"})


if __name__ == "__main__":
    main()
