"""What a search tells: each evaluated individual, the report at the end, and the hooks
(`Observer`) through which a progress display or a knowledge recorder follows a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from evokernel.core.archive import Elite
from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.engine.options import Budget

__all__ = ["Individual", "ReportedElite", "SearchReport", "Observer", "count_statuses", "run_summary"]


@dataclass(frozen=True)
class Individual:
    genome: Genome
    result: Result
    seq: int  # position in the run's history
    origin: str  # "measured", "resumed" (this run, before a restart) or "reused" (an earlier run)

    @property
    def fitness(self) -> float:
        return self.result.fitness


class ReportedElite(msgspec.Struct, frozen=True, kw_only=True):
    niche: str
    genome: Genome
    latency_ms: float  # median of all measurements, after re-measurement
    noise: float
    samples: tuple[float, ...]
    first_ms: float  # what the search saw when it found it


class SearchReport(msgspec.Struct, kw_only=True):
    run_id: str
    name: str
    resumed: bool
    stop_reason: str
    evaluations: int
    measured: int
    resumed_hits: int
    reused: int
    generations: int
    statuses: dict[str, int]
    best: ReportedElite | None
    elites: list[ReportedElite]
    trace: list[float | None]  # best-so-far latency (the archive's) after each evaluation
    best_ids: list[str]  # the genome the search believed best after each evaluation
    operators: dict[str, dict[str, float]]
    skipped: dict[str, int]
    wall_s: float
    cost: float


class Observer:
    """Hooks for progress displays and logs; every method is optional."""

    def on_start(self, run_id: str, budget: Budget, resumed: bool) -> None: ...

    def on_evaluation(self, individual: Individual, best: Elite | None, evaluations: int) -> None: ...

    def on_generation(self, generation: int, summary: dict[str, Any]) -> None: ...

    def on_finish(self, report: SearchReport) -> None: ...


def count_statuses(history: list[Individual]) -> dict[str, int]:
    """How many of `history`'s results had each status."""
    out: dict[str, int] = {}
    for ind in history:
        out[ind.result.status.value] = out.get(ind.result.status.value, 0) + 1
    return out


def run_summary(report: SearchReport) -> dict[str, Any]:
    """The part of a report stored with a finished run."""
    best = report.best
    return {
        "stop_reason": report.stop_reason,
        "evaluations": report.evaluations,
        "measured": report.measured,
        "reused": report.reused,
        "generations": report.generations,
        "statuses": report.statuses,
        "best": best.genome.id if best else None,
        "best_ms": best.latency_ms if best else None,
        "best_params": best.genome.params if best else None,
        "wall_s": report.wall_s,
        "cost": report.cost,
    }
