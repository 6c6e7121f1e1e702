"""What a search tells: each evaluated individual, the report at the end, and the hooks
(`Observer`) through which a progress display or a knowledge recorder follows a run.

A report shows itself as a table in a notebook (`_repr_html_`) and becomes a pandas frame
(`to_dataframe()`, with the `report` extra: `pip install 'evokernel-search[report]'`); the full
HTML page of a stored run is `evokernel report DB` (`evokernel.report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import html
import math

import msgspec

from evokernel.core._html import html_table
from evokernel.core.archive import Elite
from evokernel.core.errors import ConfigError
from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.engine.options import Budget

__all__ = [
    "Individual",
    "ReportedElite",
    "SearchReport",
    "Observer",
    "count_statuses",
    "run_summary",
    "noise_interval",
    "ELITE_COLUMNS",
]

#: the columns of `SearchReport.to_dataframe()`, in order, with their pandas dtypes (parameters
#: follow as `param.<name>` columns, their dtypes as pandas infers them)
ELITE_COLUMNS: dict[str, str] = {
    "rank": "int64",
    "niche": "object",
    "genome_id": "object",
    "latency_ms": "float64",
    "noise": "float64",
    "ci_low_ms": "float64",
    "ci_high_ms": "float64",
    "samples": "int64",
    "first_ms": "float64",
    "operator": "object",
    "generation": "int64",
    "parents": "object",
    "has_source": "bool",
}


def noise_interval(median_ms: float, noise: float, n: int) -> tuple[float, float]:
    """An approximate 95% interval of a latency: `median_ms` +- 1.96 standard errors, the
    standard error being the relative noise times the median over the root of the sample count.

    >>> noise_interval(1.0, 0.02, 4)
    (0.9804, 1.0196)
    """
    if not math.isfinite(median_ms):
        return (math.inf, math.inf)
    half = 1.96 * noise * median_ms / math.sqrt(max(n, 1))
    return (round(median_ms - half, 12), round(median_ms + half, 12))


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

    @property
    def interval(self) -> tuple[float, float]:
        """The latency's approximate 95% interval (`noise_interval`)."""
        return noise_interval(self.latency_ms, self.noise, len(self.samples))

    def _row(self, rank: int) -> list[Any]:
        low, high = self.interval
        lin = self.genome.lineage
        return [
            rank,
            self.niche,
            self.genome.id,
            self.latency_ms,
            f"{100 * self.noise:.1f}%",
            f"{low:.6g}-{high:.6g}",
            len(self.samples),
            self.first_ms,
            f"{lin.operator} (gen {lin.generation})",
            self.genome.short(),
        ]

    def _repr_html_(self) -> str:
        """A one-row table, for notebooks."""
        return html_table(_ELITE_HEADERS, [self._row(1)])


_ELITE_HEADERS = [
    "rank",
    "niche",
    "genome",
    "latency ms",
    "noise",
    "95% interval",
    "samples",
    "first ms",
    "found by",
    "params",
]


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
    # what a primed mutator (the cost model) learned from: `evokernel.engine.priors.describe`
    # (rows, sources, the shipped landscapes of the run's own shape held out or kept); None: none
    priors: dict[str, Any] | None = None
    # proposals no operator made: when none proposed a new genome in `SearchOptions.retries`
    # tries, the search took a random unseen point (the fallback; `SearchOptions.fallback`)
    fallbacks: int = 0

    def to_dataframe(self) -> Any:
        """The reported elites as a pandas DataFrame, fastest first: the columns of
        `ELITE_COLUMNS`, then one `param.<name>` column per parameter. Needs pandas (the
        `report` extra)."""
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - the report extra is part of dev
            raise ConfigError("to_dataframe needs pandas: pip install 'evokernel-search[report]'") from None
        rows = []
        for rank, e in enumerate(self.elites, 1):
            low, high = e.interval
            lin = e.genome.lineage
            row: dict[str, Any] = {
                "rank": rank,
                "niche": e.niche,
                "genome_id": e.genome.id,
                "latency_ms": e.latency_ms,
                "noise": e.noise,
                "ci_low_ms": low,
                "ci_high_ms": high,
                "samples": len(e.samples),
                "first_ms": e.first_ms,
                "operator": lin.operator,
                "generation": lin.generation,
                "parents": ",".join(lin.parents),
                "has_source": e.genome.source is not None,
            }
            row.update({f"param.{k}": v for k, v in e.genome.params.items()})
            rows.append(row)
        frame = pd.DataFrame(rows, columns=list(ELITE_COLUMNS) if not rows else None)
        return frame.astype(ELITE_COLUMNS)

    def _repr_html_(self) -> str:
        """The run in a notebook: one line of what it did, then its elites as a table."""
        best = f"{self.best.latency_ms:.6g} ms" if self.best else "none"
        head = (
            f"<p><b>run {html.escape(self.run_id)}</b> ({html.escape(self.name)}): {self.evaluations} evaluations, "
            f"{self.generations} generations, stopped by {html.escape(self.stop_reason or '-')}, best {best}, "
            f"{self.wall_s:.1f} s, ${self.cost:.2f}</p>"
        )
        rows = [e._row(rank) for rank, e in enumerate(self.elites, 1)]
        return head + html_table(_ELITE_HEADERS, rows)


class Observer:
    """Hooks for progress displays and logs; every method is optional."""

    def on_start(self, run_id: str, budget: Budget, resumed: bool) -> None: ...

    def on_evaluation(self, individual: Individual, best: Elite | None, evaluations: int) -> None: ...

    def on_generation(self, generation: int, summary: dict[str, Any]) -> None: ...

    def on_remeasure(self, done: int, total: int, genomes: list[Genome]) -> None:
        """The search is over and its finalists are measured again (`evokernel.engine.remeasure`):
        `done` of `total` re-measurements finished, `genomes` are being measured now (all the
        finalists at once for an evaluator that re-measures side by side; none: it is over)."""

    def on_finish(self, report: SearchReport) -> None:
        """The run ended; an observer that spends money for it (an LLM summary) adds that to
        `report.cost`, and the search charges it to the run."""


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
        "operators": report.operators,  # the bandit's view: pulls, successes, posterior mean
        "skipped": report.skipped,  # proposals never measured, by reason
        "fallbacks": report.fallbacks,  # proposals no operator made: random unseen points
    }
