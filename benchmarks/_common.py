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
    """`evokernel.landscape.landscape_seeds` (the fastest recorded points valid in `space`)."""
    from evokernel.landscape import landscape_seeds as seeds

    return seeds(path, space, top=top)
