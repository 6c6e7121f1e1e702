"""Store soak (CPU): many search drivers writing one PostgreSQL database at once.

Starts a throwaway PostgreSQL server (evokernel.testing.postgres, as the tests do; fsync on
unless --no-durable), then `--drivers` processes, each a replay search of `--evaluations`
evaluations on the shipped matmul landscapes (four shapes, the seeds differing between
drivers of one shape, so drivers of one shape propose some of the same genomes and claim or
wait for them), under `--strategy` (default `random`: the cheapest proposals, so that the
store, not the search's own CPU time, is what is measured; `default` runs Optuna's TPE in
every driver). They start together (a barrier). Then, from the database: every evaluation
a driver reported is stored (none lost), no genome was measured twice under one fingerprint
(claims), no result is orphaned; and results written per second.

    python benchmarks/store_soak.py --drivers 8 --evaluations 500 --out benchmarks/results/store_soak.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = [
    "matmul_bf16_h200_M16_N4096_K4096",
    "matmul_bf16_h200_M2048_N6144_K4096",
    "matmul_bf16_h200_M256_N4096_K14336",
    "matmul_bf16_h200_M8192_N8192_K1024",
]


def _driver(i: int, url: str, evaluations: int, strategy: str, barrier: Any, out: Any) -> None:
    """One search process: a replay search of one shape, started with the others."""
    from evokernel import Budget, Search
    from evokernel.engine.landscape import builtin
    from evokernel.evaluators import ReplayEvaluator
    from evokernel.store import open_store

    shape, seed = SHAPES[i % len(SHAPES)], i // len(SHAPES)
    ev = ReplayEvaluator(builtin(shape))
    store = open_store(url)
    barrier.wait()
    t0 = time.time()
    search = Search(ev.space, ev, store=store, name=f"soak-{i}", strategy=strategy)
    report = search.run(Budget(evaluations=evaluations), seed=seed)
    t1 = time.time()
    store.close()
    out.put(
        {
            "driver": i,
            "shape": shape,
            "seed": seed,
            "run_id": report.run_id,
            "evaluations": report.evaluations,
            "measured": report.measured,
            "reused": report.reused,
            "stop_reason": report.stop_reason,
            "start": t0,
            "end": t1,
        }
    )


def _check(url: str, drivers: list[dict[str, Any]]) -> dict[str, Any]:
    """What the database holds against what the drivers reported."""
    import sqlalchemy as sa

    from evokernel.store import open_store

    store = open_store(url, create=False)
    lost = 0
    for d in drivers:
        counts = store.count(d["run_id"])
        d["stored_evaluations"] = counts["evaluations"]
        d["remeasurements"] = counts["remeasurements"]
        lost += d["evaluations"] - counts["evaluations"]
    totals = store.count()
    store.close()
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as c:
        twice = c.execute(
            sa.text(
                "SELECT COUNT(*) FROM (SELECT r.genome_id, r.fingerprint FROM results r JOIN evaluations e"
                " ON e.result_id = r.id AND e.kind = 'eval' AND e.cached = 0"
                " GROUP BY r.genome_id, r.fingerprint HAVING COUNT(*) > 1) AS dup"
            )
        ).scalar_one()
        orphans = c.execute(
            sa.text("SELECT COUNT(*) FROM results WHERE id NOT IN (SELECT result_id FROM evaluations)")
        ).scalar_one()
        per_seq_dups = c.execute(
            sa.text(
                "SELECT COUNT(*) FROM (SELECT run_id, seq FROM evaluations WHERE kind = 'eval'"
                " GROUP BY run_id, seq HAVING COUNT(*) > 1) AS dup"
            )
        ).scalar_one()
    engine.dispose()
    return {
        "totals": totals,
        "lost_evaluations": lost,
        "genomes_measured_twice": int(twice),
        "orphan_results": int(orphans),
        "duplicate_history_rows": int(per_seq_dups),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drivers", type=int, default=8)
    ap.add_argument("--evaluations", type=int, default=500, help="evaluations per driver")
    ap.add_argument("--strategy", default="random", help="the drivers' search strategy (default: random)")
    ap.add_argument("--no-durable", action="store_true", help="fsync off (the tests' setting)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/store_soak.json"))
    args = ap.parse_args()

    from evokernel.testing.postgres import PostgresServer

    with PostgresServer(durable=not args.no_durable) as server:
        url = server.create_database("soak")
        from evokernel.store import open_store

        open_store(url).close()  # the schema, before the drivers race for it
        ctx = mp.get_context("spawn")
        barrier, out = ctx.Barrier(args.drivers), ctx.Queue()
        procs = [
            ctx.Process(target=_driver, args=(i, url, args.evaluations, args.strategy, barrier, out))
            for i in range(args.drivers)
        ]
        for p in procs:
            p.start()
        drivers = [out.get(timeout=1800) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        failed = [p.exitcode for p in procs if p.exitcode != 0]
        checked = _check(url, drivers)
    start, end = min(d["start"] for d in drivers), max(d["end"] for d in drivers)
    wall = end - start
    stored = checked["totals"]["results"]
    record = {
        "benchmark": "store_soak",
        "backend": "postgresql",
        "durable": not args.no_durable,
        "drivers": args.drivers,
        "evaluations_per_driver": args.evaluations,
        "strategy": args.strategy,
        "wall_s": round(wall, 3),
        "evaluations": sum(d["evaluations"] for d in drivers),
        "measured": sum(d["measured"] for d in drivers),
        "reused": sum(d["reused"] for d in drivers),
        "results_stored": stored,
        "results_per_s": round(stored / wall, 1),
        "evaluations_per_s": round(sum(d["stored_evaluations"] for d in drivers) / wall, 1),
        **{k: v for k, v in checked.items() if k != "totals"},
        "stored_rows": checked["totals"],
        "driver_exit_codes_nonzero": failed,
        "per_driver": sorted(drivers, key=lambda d: d["driver"]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"{args.drivers} drivers x {args.evaluations}: {record['evaluations']} evaluations "
        f"({record['measured']} measured, {record['reused']} reused), {stored} results in {wall:.1f} s "
        f"= {record['results_per_s']} results/s; lost {checked['lost_evaluations']}, "
        f"measured twice {checked['genomes_measured_twice']}, orphans {checked['orphan_results']}"
    )
    ok = not failed and not any(checked[k] for k in ("lost_evaluations", "genomes_measured_twice", "orphan_results"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
