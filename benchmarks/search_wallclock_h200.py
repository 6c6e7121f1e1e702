"""Searches against the clock on the GPU: the cost model, TPE, the default strategy, an
exhaustive sweep, fidelity levels, and a second search that learns from the first.

Subcommands (each one process, so a problem read from the environment is loaded afresh):

- `sweep TARGET --out CSV --times JSONL --wall S`: every valid point of the search file's
  space in the space's own order (what Triton's autotuner does with a config list), with the
  time each result landed.
- `search TARGET --db DB --log JSONL [--strategy S] [--fidelity M] [--no-shipped] [--wall S]
  [--budget N] [--seed K]`: a search through the Python API; every evaluation's time, genome,
  figure and fidelity is appended to the log as it lands.
- `remeasure TARGET --genomes JSON --out JSON`: the genomes judged again side by side
  (interleaved rounds, `KernelEvaluator.remeasure`), so figures from different searches
  compare on one footing.

`benchmarks/device.sh wallclock` runs the whole protocol; `summarise` (on any machine) turns
the logs into `benchmarks/results/search_wallclock.json` and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any


def _spec(target: str) -> Any:
    from evokernel.engine.assemble import SearchSpec

    return SearchSpec.from_file(target)


class _Log:
    """An observer appending one line per evaluation (seconds since the run began)."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "a")
        self.t0 = time.monotonic()

    def on_start(self, run_id: str, budget: Any, resumed: bool) -> None:
        self.t0 = time.monotonic()
        self.f.write(json.dumps({"event": "start", "run": run_id}) + "\n")
        self.f.flush()

    def on_generation(self, generation: int, summary: dict[str, Any]) -> None:
        self.f.write(json.dumps({"event": "generation", **summary, "t": time.monotonic() - self.t0}) + "\n")
        self.f.flush()

    def on_finish(self, report: Any) -> None:
        best = report.best
        self.f.write(
            json.dumps(
                {
                    "event": "finish",
                    "t": time.monotonic() - self.t0,
                    "evaluations": report.evaluations,
                    "best": best.genome.params if best else None,
                    "best_ms": best.latency_ms if best else None,
                }
            )
            + "\n"
        )
        self.f.flush()

    def on_evaluation(self, ind: Any, best: Any, n: int) -> None:
        r = ind.result
        info = r.meta.get("fidelity") if isinstance(r.meta, dict) else None
        self.f.write(
            json.dumps(
                {
                    "t": time.monotonic() - self.t0,
                    "n": n,
                    "params": ind.genome.params,
                    "status": r.status.value,
                    "ms": r.latency_ms,
                    "estimated": r.estimated,
                    "fidelity": info,
                    "origin": ind.origin,
                    "best": best.genome.params if best else None,
                    "best_ms": best.latency_ms if best else None,
                }
            )
            + "\n"
        )
        self.f.flush()


def cmd_sweep(a: argparse.Namespace) -> None:
    from evokernel.engine.sweep import sweep

    spec = _spec(a.target)
    t0 = time.monotonic()
    with open(a.times, "a") as f:

        def on_result(genome: Any, result: Any) -> None:
            f.write(json.dumps({"t": time.monotonic() - t0, "params": genome.params, "ms": result.latency_ms}) + "\n")
            f.flush()

        rep = sweep(spec.space, spec.evaluator, a.out, shuffle=None, wall_s=a.wall, on_result=on_result)
    print(json.dumps({"points": rep.points, "measured": rep.measured, "failed": rep.failed, "wall_s": rep.wall_s}))


def cmd_search(a: argparse.Namespace) -> None:
    from evokernel import Budget, Promotion, Search, SearchOptions
    from evokernel.store import open_store

    spec = _spec(a.target)
    options = SearchOptions(
        shipped_priors=not a.no_shipped,
        patience=0,  # searches against the clock: no early stop
        promotion=Promotion(margin=a.fidelity) if a.fidelity is not None else None,
    )
    store = open_store(a.db)
    log = _Log(a.log)
    search = Search(spec.space, spec.evaluator, strategy=a.strategy, options=options, store=store, observers=[log])
    report = search.run(Budget(evaluations=a.budget, wall_s=a.wall), seed=a.seed)
    split = search.evaluator.split() if hasattr(search.evaluator, "split") else None
    print(
        json.dumps(
            {
                "evaluations": report.evaluations,
                "best_ms": report.best.latency_ms if report.best else None,
                "split": split,
            }
        )
    )


def cmd_remeasure(a: argparse.Namespace) -> None:
    from evokernel.core.genome import Genome

    spec = _spec(a.target)
    wanted = json.loads(Path(a.genomes).read_text())  # {label: params}
    labels = list(wanted)
    genomes = [Genome.of(wanted[k]) for k in labels]
    results = spec.evaluator.remeasure(genomes)
    out = {
        k: {"params": wanted[k], "status": r.status.value, "ms": r.latency_ms, "noise": r.noise}
        for k, r in zip(labels, results)
    }
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v["ms"] for k, v in out.items()}))


# -- summarising (any machine) ---------------------------------------------------------------


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def time_to_within(evals: list[dict[str, Any]], truth: dict[str, float], best: float, within: float) -> float | None:
    """Seconds until the run first judged a genome whose figure in the exhaustive sweep is
    within `within` of the sweep's best (None: never)."""
    for e in evals:
        ms = truth.get(_key(e["params"])) if e.get("params") else None
        if ms is not None and ms <= best * (1 + within):
            return e["t"]
    return None


def cmd_summarise(a: argparse.Namespace) -> None:
    root = Path(a.dir)
    sweep = _lines(root / "sweep_times.jsonl")
    truth = {_key(e["params"]): e["ms"] for e in sweep if e.get("ms")}
    best = min(truth.values()) if truth else math.inf
    out: dict[str, Any] = {"sweep": {}, "searches": [], "second": {}, "fidelity": {}}
    if sweep:
        t_full = max(e["t"] for e in sweep)
        t_best = next(e["t"] for e in sweep if e.get("ms") and e["ms"] <= best * 1.02)
        out["sweep"] = {
            "points": len(sweep),
            "ok": len(truth),
            "best_ms": best,
            "wall_s": t_full,
            "t_within_2pct": t_best,
        }
    for log in sorted(root.glob("X_*.jsonl")):
        _, strategy, seed = log.stem.split("_", 2)
        evals = [e for e in _lines(log) if "n" in e]
        if not evals:
            continue
        found = min((truth.get(_key(e["params"]), math.inf) for e in evals if e["status"] == "ok"), default=math.inf)
        out["searches"].append(
            {
                "strategy": strategy,
                "seed": int(seed),
                "evaluations": len(evals),
                "wall_s": evals[-1]["t"],
                "t_within_2pct": time_to_within(evals, truth, best, 0.02),
                "t_within_5pct": time_to_within(evals, truth, best, 0.05),
                "fraction_of_sweep_best": best / found if math.isfinite(found) else 0.0,
            }
        )
    for path in (root / "second_remeasure.json", root / "fidelity_remeasure.json"):
        if path.exists():
            out["second" if "second" in path.name else "fidelity"]["remeasured"] = json.loads(path.read_text())
    for log in sorted(root.glob("Y_*.jsonl")) + sorted(root.glob("F_*.jsonl")):
        evals = [e for e in _lines(log) if "n" in e]
        gens = [e for e in _lines(log) if e.get("event") == "generation"]
        which = "second" if log.stem.startswith("Y_") else "fidelity"
        out[which][log.stem] = {
            "evaluations": len(evals),
            "wall_s": evals[-1]["t"] if evals else None,
            "generation0_best_ms": gens[0]["best_ms"] if gens else None,
            "best_ms": gens[-1]["best_ms"] if gens else None,
            "promoted": sum(bool(e.get("fidelity") and e["fidelity"].get("promoted")) for e in evals),
            "estimated": sum(bool(e.get("estimated")) for e in evals),
        }
    rows = out["searches"]
    for strategy in sorted({r["strategy"] for r in rows}):
        mine = [r for r in rows if r["strategy"] == strategy]
        ts = [r["t_within_2pct"] for r in mine]
        out.setdefault("by_strategy", {})[strategy] = {
            "runs": len(mine),
            "reached_2pct": sum(t is not None for t in ts),
            "median_t_within_2pct": statistics.median(t for t in ts if t is not None)
            if any(t is not None for t in ts)
            else None,
            "mean_fraction": statistics.fmean(r["fraction_of_sweep_best"] for r in mine),
        }
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("target")
    s.add_argument("--out", required=True)
    s.add_argument("--times", required=True)
    s.add_argument("--wall", type=float, default=None)
    s.set_defaults(fn=cmd_sweep)
    s = sub.add_parser("search")
    s.add_argument("target")
    s.add_argument("--db", required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--strategy", default="default")
    s.add_argument("--fidelity", type=float, default=None)
    s.add_argument("--no-shipped", action="store_true")
    s.add_argument("--wall", type=float, default=None)
    s.add_argument("--budget", type=int, default=10_000)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(fn=cmd_search)
    s = sub.add_parser("remeasure")
    s.add_argument("target")
    s.add_argument("--genomes", required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_remeasure)
    s = sub.add_parser("summarise")
    s.add_argument("dir")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_summarise)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
