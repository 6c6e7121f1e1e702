"""The store interface: what the search needs from a database, and nothing more.

Every write is one transaction (a result, its genome and its place in the run together),
so a process killed at any moment leaves a consistent database, and a re-run resumes.
SQLite is the default back end; a PostgreSQL one implements the same protocol.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from evokernel.core.archive import Elite
from evokernel.core.genome import Genome
from evokernel.core.result import Result

__all__ = ["Store", "RunInfo", "Hit", "Evaluation"]


class RunInfo(msgspec.Struct, kw_only=True):
    id: str
    seq: int
    name: str
    archive_key: str
    fingerprint: str
    config: dict[str, Any]
    environment: dict[str, Any]
    status: str
    created: float
    updated: float
    summary: dict[str, Any] = msgspec.field(default_factory=dict)
    resumed: bool = False


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    """A stored result for a genome: from this run (resume) or an earlier one (reuse)."""

    result: Result
    result_id: int
    in_run: bool


class Evaluation(msgspec.Struct, frozen=True, kw_only=True):
    """One row of a run's history."""

    run_id: str
    seq: int
    kind: str  # "eval" or "remeasure"
    genome: Genome
    result: Result
    cached: bool
    created: float


@runtime_checkable
class Store(Protocol):
    # -- runs --------------------------------------------------------------------------
    def begin_run(
        self,
        run_id: str,
        *,
        name: str,
        archive_key: str,
        fingerprint: str,
        config: dict[str, Any],
        environment: dict[str, Any],
    ) -> RunInfo:
        """Create the run, or reopen it (resumed=True) if it exists."""
        ...

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None: ...

    def runs(self) -> list[RunInfo]: ...

    # -- results -----------------------------------------------------------------------
    def lookup(self, run_id: str, genome_id: str, fingerprint: str) -> Hit | None:
        """This run's result for the genome, else any stored result under the fingerprint."""
        ...

    def record(
        self,
        run_id: str,
        seq: int,
        genome: Genome,
        fingerprint: str,
        result: Result,
        *,
        reuse: int | None = None,
    ) -> None:
        """Append a genome's evaluation to the run; `reuse` names a stored result (by id)
        instead of a new measurement."""
        ...

    def remeasurement(self, run_id: str, genome_id: str, rep: int) -> Result | None: ...

    def record_remeasurement(
        self, run_id: str, rep: int, genome: Genome, fingerprint: str, result: Result
    ) -> None: ...

    def history(self, run_id: str) -> list[Evaluation]: ...

    def count(self, run_id: str | None = None) -> dict[str, int]:
        """Counts of stored rows (results, evaluations, genomes), for checks and `show`."""
        ...

    # -- archive and events ------------------------------------------------------------
    def save_elites(self, run_id: str, archive_key: str, elites: list[Elite]) -> None: ...

    def elites(
        self,
        *,
        run_id: str | None = None,
        archive_key: str | None = None,
        before_seq: int | None = None,
    ) -> list[Elite]:
        """Best elite per niche among the selected runs' archives."""
        ...

    def log_event(self, run_id: str, kind: str, payload: dict[str, Any], *, key: str | None = None) -> None:
        """Append an event; an event with a `key` is written at most once per run."""
        ...

    def events(self, run_id: str) -> list[tuple[str, dict[str, Any], float]]: ...

    def close(self) -> None: ...
