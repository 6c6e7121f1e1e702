"""What the device benchmarks share: the geometric mean, and the final pick of a search.

A search's best is chosen on one measurement among many: with a 1% noise and dozens of
candidates within 1% of each other, the one that measured fastest is not reliably the
fastest (the winner's curse; call N's MoE row at M=1 lost 3% to a seed it had beaten once).
`pick` re-measures the search's top elites together, interleaved, in fresh processes, and
returns the fastest; the benchmarks then re-measure that winner against the baselines in a
second, separate `remeasure`, so the figure they report was not the one used to choose.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["geomean", "pick", "landscape_seeds"]


def geomean(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x and math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in ys) / len(ys)) if ys else None


def pick(ev: Any, report: Any, *, finalists: int = 3, rounds: int = 2) -> tuple[Any, dict[str, Any]]:
    """The fastest of the report's best `finalists` elites, re-measured together; with what
    was measured (genome id -> ms) for the record."""
    elites = sorted((e for e in report.elites if e.latency_ms is not None), key=lambda e: e.latency_ms)
    top, seen = [], set()
    for e in elites:
        if e.genome.id not in seen:
            seen.add(e.genome.id)
            top.append(e.genome)
        if len(top) == finalists:
            break
    if len(top) < 2:
        return report.best.genome, {"finalists": [g.id for g in top], "ms": {}}
    results = ev.remeasure(top, rounds=rounds)
    ms = {g.id: r.latency_ms for g, r in zip(top, results) if r.is_ok}
    winner = min((g for g in top if g.id in ms), key=lambda g: ms[g.id], default=report.best.genome)
    return winner, {"finalists": [g.id for g in top], "ms": ms, "search_best": report.best.genome.id}


def landscape_seeds(path: Any, space: Any, *, top: int = 6) -> list[dict[str, Any]]:
    """The `top` fastest points of a recorded landscape (`evokernel sweep` CSV) that are valid
    in `space`, as seeds: what a sweep of a neighbouring shape found starts the search (call
    R's partial prefill sweep found 128x128 tiles 13% faster than call N's budget-16 winner).
    A missing file gives no seeds."""
    from pathlib import Path

    from evokernel.landscape import Landscape

    if not Path(path).exists():
        return []
    land = Landscape.load(path)
    names = list(land.space.names)
    ranked = sorted(((row.latency_ms, key) for key, row in land.rows.items() if row.latency_ms is not None),
                    key=lambda t: t[0])
    seeds: list[dict[str, Any]] = []
    for _, key in ranked:
        point = dict(zip(names, key))
        if set(point) == set(space.names) and space.is_valid(point):
            seeds.append(point)
        if len(seeds) == top:
            break
    return seeds
