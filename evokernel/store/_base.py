"""The store interface: what the search needs from a database, and nothing more.

Every write is one transaction (a result, its genome and its place in the run together),
so a process killed at any moment leaves a consistent database, and a re-run resumes.
SQLite is the default back end; PostgreSQL (evokernel.store.postgres) implements the same
protocol, with the same queries (evokernel.store._sql).

`Store` is what a search needs. What tools need besides is declared as capabilities, small
protocols of their own (`ForgetsMeasured`, `FindsRuns`, `KeepsKnowledge`, `KeepsProfiles`,
`Located`, `Claims`, `DropsElites`, `EditsRuns`);
`CompleteStore` is all of them together, what `SQLiteStore` and `PostgresStore` are and what
the CLI expects.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from evokernel.core.archive import Elite
from evokernel.core.genome import Genome
from evokernel.core.result import Result

__all__ = [
    "Store",
    "ForgetsMeasured",
    "FindsRuns",
    "KeepsKnowledge",
    "KeepsProfiles",
    "Located",
    "Claims",
    "DropsElites",
    "EditsRuns",
    "CompleteStore",
    "CAPABILITIES",
    "RunInfo",
    "Hit",
    "Evaluation",
]


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

    def record_remeasurement(self, run_id: str, rep: int, genome: Genome, fingerprint: str, result: Result) -> None: ...

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


# -- optional capabilities ------------------------------------------------------------------


@runtime_checkable
class ForgetsMeasured(Protocol):
    """Can take back a batch of measurements.

    Called by the engine when an evaluator returned more results than genomes: which result
    belongs to which genome is then unknown, so none of the batch's is kept (the search stops
    with an EvaluatorError; a re-run measures them again). A store without it keeps them."""

    def forget_measured(self, run_id: str, genome_ids: list[str]) -> None:
        """Drop the run's evaluations of these genomes and the results measured for them."""
        ...


@runtime_checkable
class FindsRuns(Protocol):
    """Finds a run by id prefix, and says whether another process is running it.

    Called by the CLI (`show`, `resume`: which run is meant; whether a run marked running
    is alive elsewhere or was killed)."""

    def run(self, run_id: str) -> RunInfo:
        """The run whose id is or starts with `run_id`; StoreError if none or several."""
        ...

    def running_elsewhere(self, run_id: str) -> bool: ...


@runtime_checkable
class KeepsKnowledge(Protocol):
    """The knowledge base (lessons) and the kernel database.

    Written by `evokernel.store.knowledge.KnowledgeRecorder` (an observer the CLI adds to a
    search whose evaluator judges a problem) and by `evokernel.model.ablation`; read by the
    LLM operator's prompts (`knowledge.lessons_for`, `knowledge.kernels`) and the CLI's `lessons`."""

    def save_lessons(self, lessons: list[Any]) -> None:
        """Insert or replace `evokernel.store.knowledge.Lesson`s (by id)."""
        ...

    def lessons(self, *, op: str | None = None, gpu: str | None = None) -> list[Any]:
        """Stored lessons, oldest first, of an op and a GPU if given."""
        ...

    def save_kernel(self, record: dict[str, Any]) -> None:
        """Insert or replace a kernel record (keys: genome_id, op, gpu, latency_ms, ...)."""
        ...

    def kernels(self, *, op: str | None = None, gpu: str | None = None) -> list[dict[str, Any]]:
        """Stored kernel records, fastest first."""
        ...


@runtime_checkable
class KeepsProfiles(Protocol):
    """Workload profiles (`evokernel.model.profile`).

    Written by the CLI's `profile` and the model-level benchmark; read back by id or name."""

    def save_profile(self, record: dict[str, Any]) -> int:
        """Store a profile (keys: name, rows, and optionally device_name, toolchain); its id."""
        ...

    def profiles(self, *, name: str | None = None) -> list[dict[str, Any]]:
        """Stored profiles, oldest first: id, created, name, device, toolchain, rows, summary."""
        ...

    # -- views ---------------------------------------------------------------------------
    def results_frame(self, run: str | list[str] | None = None) -> Any:
        """Every stored evaluation of the runs (ids or prefixes; None: all) as a pandas
        DataFrame, the columns pinned by `evokernel.report.data.RESULT_COLUMNS` (needs
        `evokernel[report]`)."""
        ...


@runtime_checkable
class Located(Protocol):
    """Says where it lives: a file path, `:memory:`, or a URL.

    Read by tools that record where results came from (the SGLang export's record of what it
    exported) and name the store in messages; a store without it is recorded as ''."""

    path: str


@runtime_checkable
class Claims(Protocol):
    """Says who is measuring a genome now, so that drivers sharing a store measure it once.

    Called by the engine (evokernel.engine.claims) before it measures genomes no stored result
    covers: it measures those it holds and waits for the others' results (taking a claim over
    once its owner's run is no longer running, or its lease has run out). A store without it
    lets every driver measure."""

    def claim(self, run_id: str, genome_ids: list[str], fingerprint: str, owner: str, lease_s: float) -> set[str]:
        """Claim the genomes under the fingerprint for `owner` (of run `run_id`) for `lease_s`
        seconds; the ids `owner` holds now (not those with a stored result, nor those another
        live owner holds)."""
        ...

    def release(self, owner: str, genome_ids: list[str] | None = None) -> None:
        """Drop `owner`'s claims: all of them, or those of these genomes."""
        ...


@runtime_checkable
class DropsElites(Protocol):
    """Can take a niche's elite out of a run's archive.

    Called by the engine's final re-measurement when a run's stored elite failed it (a flaky
    kernel) and no other genome of its niche passed: it is not left to seed later runs or to
    be exported. A store without it keeps the entry."""

    def drop_elite(self, run_id: str, niche: str) -> None:
        """Remove the run's elite of the niche (nothing if there is none)."""
        ...


@runtime_checkable
class EditsRuns(Protocol):
    """Can delete a run, or give it another name.

    Called by the CLI's `evokernel runs delete` and `evokernel runs rename`. Both refuse a run
    another process is running (RunBusyError); a run marked running that no process holds
    (killed) may be deleted or renamed."""

    def delete_run(self, run_id: str) -> dict[str, int]:
        """Delete the run and everything of it in one transaction (results another run reused
        are kept); the number of rows deleted, by table."""
        ...

    def rename_run(self, run_id: str, name: str) -> None:
        """Rename the run (its id stays); StoreError for a name another run has."""
        ...


@runtime_checkable
class CompleteStore(
    Store, ForgetsMeasured, FindsRuns, KeepsKnowledge, KeepsProfiles, Located, Claims, DropsElites, EditsRuns, Protocol
):
    """Everything the engine and the tools call on a store (SQLiteStore and PostgresStore are)."""


#: The optional capabilities, for tools and the contract suite (tests/contracts).
CAPABILITIES: tuple[type, ...] = (
    ForgetsMeasured,
    FindsRuns,
    KeepsKnowledge,
    KeepsProfiles,
    Located,
    Claims,
    DropsElites,
    EditsRuns,
)
