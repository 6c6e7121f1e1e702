"""`evokernel show DB`: the runs, elites and history in a database."""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

import msgspec

from evokernel.cli._common import chosen_run, existing_store, stdout_console


def add_parser(sub: Any) -> None:
    sh = sub.add_parser("show", help="print the runs, elites and history in a database")
    sh.add_argument("db", help="the search database: an SQLite file (e.g. evokernel.db) or a postgresql:// URL")
    sh.add_argument("--run", default=None, help="run id (or prefix); default: the latest run")
    sh.add_argument("--json", action="store_true", help="print JSON on stdout")


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    store = existing_store(args.db)
    run, runs = chosen_run(store, args.db, args.run)
    for r in runs:
        r.status = shown_status(store, r)
    history = store.history(run.id)
    elites = with_lineage(store.elites(run_id=run.id), history)
    gens = [p for kind, p, _ in store.events(run.id) if kind == "generation"]
    from evokernel.report.standing import standing

    stands = standing(store, run.id)
    if args.json:
        print(
            json.dumps(
                {
                    "runs": [msgspec.to_builtins(r) for r in runs],
                    "run": run.id,
                    "elites": msgspec.to_builtins(elites),
                    "generations": gens,
                    "counts": store.count(run.id),
                    "standing": stands,
                }
            )
        )
        return 0
    console = stdout_console()
    t = Table(title=f"runs in {store.path}")
    for col in ("run", "name", "status", "evaluations", "best ms", "gpu", "started"):
        t.add_column(col)
    for r in runs:
        best = r.summary.get("best_ms")
        if best is None:  # a run that did not finish (or an older one): its archive's best
            best = min((el.latency_ms for el in store.elites(run_id=r.id)), default=None)
        if best is None:  # its elites are earlier runs' (it beat none of them): its own best figure
            best = min(
                (e.result.latency_ms for e in store.history(r.id) if e.result.is_ok and not e.result.estimated),
                default=None,
            )
        t.add_row(
            r.id,
            r.name,
            r.status,
            str(store.count(r.id)["evaluations"]),
            f"{best:.6f}" if best else "-",
            shown_gpu(r),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created)),
        )
    console.print(t)
    e = Table(title=f"elites of run {run.id}")
    for col in ("niche", "latency ms", "noise", "genome", "params"):
        e.add_column(col)
    for el in elites:
        e.add_row(el.niche, f"{el.latency_ms:.6f}", f"{100 * el.noise:.1f}%", el.genome.id, el.genome.short())
    console.print(e)
    for label, line in stands.items():  # baseline, speed-up, fraction of peak: said even when unknown
        console.print(f"{label}: {line}", highlight=False, soft_wrap=True)
    h = Table(title=f"history of run {run.id}")
    for col in ("generation", "evaluations", "failed", "best ms"):
        h.add_column(col, justify="right")
    for g in gens:
        h.add_row(
            str(g["generation"]),
            str(g["evaluations"]),
            str(g["failed"]),
            f"{g['best_ms']:.6f}" if g["best_ms"] else "-",
        )
    console.print(h)
    statuses: dict[str, int] = {}
    for ev in history:
        if ev.kind == "eval":
            statuses[ev.result.status.value] = statuses.get(ev.result.status.value, 0) + 1
    c = store.count(run.id)
    console.print(
        f"{c['evaluations']} evaluations ({c['measured']} measurements, {c['cached']} reused), "
        f"{c['remeasurements']} re-measurements; " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
        highlight=False,
    )
    return 0


def with_lineage(elites: list[Any], history: list[Any]) -> list[Any]:
    """The elites, each genome with its lineage as the run's history records it (the store's
    elite table keeps the point, not where it came from)."""
    first: dict[str, Any] = {}
    for e in history:
        if e.kind == "eval":
            first.setdefault(e.genome.id, e.genome)
    return [msgspec.structs.replace(el, genome=first[el.genome.id]) if el.genome.id in first else el for el in elites]


def shown_status(store: Any, run: Any) -> str:
    """A run marked running that no process holds was killed (kill -9, a lost machine)."""
    if run.status == "running" and not store.running_elsewhere(run.id):
        return "killed"
    return run.status


GPU_NAME = re.compile(
    r"(?<![a-z0-9])(gb200|b200|b100|h200|h100|h20|h800|a100|a800|a10g|a10|l40s|l40|l4|"
    r"mi355x|mi325x|mi300x|mi300a|mi250x|rtx\d{4}|t4|v100)(?![a-z0-9])",
    re.IGNORECASE,
)


def shown_gpu(run: Any) -> str:
    """The GPU a run's results come from: for a replay, the landscape's (named in the run's
    name, as the shipped landscapes are), not the machine that replayed it."""
    evaluator = run.config.get("evaluator")
    if isinstance(evaluator, dict) and evaluator.get("evaluator") == "replay":
        m = GPU_NAME.search(run.name)
        return f"{m.group(1).upper()} (replay)" if m else "replay"
    return str(run.environment.get("gpu") or "cpu")
