"""Where a run's best kernel stands: against its baseline and against the card's peak.

Read from what the run stored, with no plotting dependency (`evokernel show` prints these
lines; the HTML report's header carries them too). The best genome's stored results say:

- its baseline, where the evaluator timed one beside it (`meta["baseline_ms"]`, e.g. the
  model evaluator's eager module): the baseline's latency and the speed-up, baseline over
  the best genome's time in that same measurement, with the footing both were timed on
  (`meta["timing"]`, or the gate's per-shape `footing`);
- its fraction of peak, where the gate computed one (`meta["timings"][i]["roofline_pct"]`:
  the problem declares its FLOPs and bytes, and the card's peaks are known,
  `evokernel.judge.hardware`).

Where either is missing the line says so ("no baseline recorded", "peak unknown") rather
than being left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["standing"]


def standing(store: Any, run_id: str) -> dict[str, str]:
    """The lines `baseline`, `speed-up` and `fraction of peak` for the run's best genome."""
    best = _best(store, run_id)
    if best is None:
        return {
            "baseline": "no baseline recorded (no genome passed)",
            "speed-up": "-",
            "fraction of peak": "peak unknown (no genome passed)",
        }
    genome_id, best_ms = best
    results = [e.result for e in store.history(run_id) if e.genome.id == genome_id and e.result.is_ok and e.result.meta]
    return {**_baseline(results, best_ms), "fraction of peak": _peak(results)}


def _best(store: Any, run_id: str) -> tuple[str, float] | None:
    elites = [e for e in store.elites(run_id=run_id) if math.isfinite(e.latency_ms)]
    if elites:
        e = min(elites, key=lambda e: e.latency_ms)
        return e.genome.id, e.latency_ms
    ok = [e for e in store.history(run_id) if e.result.is_ok and not e.result.estimated]
    if not ok:
        return None
    e = min(ok, key=lambda e: e.result.latency_ms)
    return e.genome.id, e.result.latency_ms


def _footing(meta: Mapping[str, Any]) -> str:
    timing = meta.get("timing")
    if isinstance(timing, str) and timing:
        return timing
    for t in meta.get("timings") or []:
        f = t.get("footing") if isinstance(t, Mapping) else None
        if isinstance(f, Mapping):
            from evokernel.judge.footing import Footing

            try:
                return Footing(**f).describe()
            except (TypeError, ValueError):  # a footing of another version: its mode at least
                return str(f.get("mode", "footing not recorded"))
    return "footing not recorded"


def _baseline(results: list[Any], best_ms: float) -> dict[str, str]:
    with_base = [r for r in results if isinstance(r.meta.get("baseline_ms"), (int, float))]
    if not with_base:
        return {"baseline": "no baseline recorded", "speed-up": "- (no baseline recorded)"}
    r = with_base[-1]  # the latest: a re-measurement's, where there is one
    base = float(r.meta["baseline_ms"])
    footing = _footing(r.meta)
    return {
        "baseline": f"{base:.6g} ms (timed beside the best, {footing})",
        "speed-up": f"{base / r.latency_ms:.3f}x (baseline {base:.6g} ms / best {r.latency_ms:.6g} ms, "
        f"both timed in the same measurement: {footing}; reported best {best_ms:.6g} ms)",
    }


def _peak(results: list[Any]) -> str:
    timings = [t for r in results[-1:] for t in (r.meta.get("timings") or []) if isinstance(t, Mapping)]
    if not timings:
        return "peak unknown (the evaluator recorded no work or roofline for the best genome)"
    parts = []
    for t in timings:
        pct = t.get("roofline_pct")
        shape = t.get("shape", "?")
        if isinstance(pct, (int, float)):
            parts.append(f"{shape}: {pct:.1f}% of the measured peak")
        elif t.get("tflops") is None and t.get("gbps") is None:
            parts.append(f"{shape}: peak unknown (the problem declares no FLOPs or bytes)")
        else:
            parts.append(f"{shape}: peak unknown (the card's peak is not known, evokernel/judge/hardware.py)")
    return "; ".join(parts)
