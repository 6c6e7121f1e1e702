"""The evaluator protocol: genomes in, results out. Evaluators never decide what to try next.

An evaluator states what its results depend on (`fingerprint`: the problem, the hardware,
the toolchain); results are cached under that fingerprint, so a genome is measured once per
problem and machine, across runs.

>>> class Constant:
...     name = "constant"
...     def fingerprint(self): return {"evaluator": "constant"}
...     def evaluate(self, genomes): return [Result.ok(1.0) for _ in genomes]
>>> isinstance(Constant(), Evaluator)
True

Beyond the protocol an evaluator may offer capabilities, each a small protocol of its own
that the engine or a tool checks with `isinstance` before it calls it; an evaluator without
one gets the behaviour each docstring describes:

>>> isinstance(Constant(), Remeasures), isinstance(Constant(), HasTransferKey)
(False, False)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from evokernel.core.genome import Genome, canonical_json
from evokernel.core.result import Result

__all__ = [
    "Evaluator",
    "Remeasures",
    "HasTransferKey",
    "Restores",
    "DescribesEnvironment",
    "JudgesProblem",
    "Sandboxed",
    "HasFidelities",
    "Observes",
    "CAPABILITIES",
    "fingerprint_hash",
]


@runtime_checkable
class Evaluator(Protocol):
    name: str

    def fingerprint(self) -> dict[str, Any]:
        """What results depend on: problem, shapes, GPU, driver, CUDA, torch and triton versions."""
        ...

    def evaluate(self, genomes: Sequence[Genome]) -> Iterable[Result]:
        """One result per genome, in order; may be a generator that yields as results arrive.

        A candidate that fails is a result with a failure status; raise only when the
        evaluator itself cannot go on (the search stops and can be resumed). When the engine
        stops reading early (the wall time ran out), it calls the iterable's `close()` if it
        has one (a generator's: its `finally` blocks run, its processes end)."""
        ...


# -- optional capabilities --------------------------------------------------------------


@runtime_checkable
class Remeasures(Protocol):
    """Measures several genomes again side by side (interleaved), so their figures compare
    like for like.

    Called by the engine once, after the loop (`Search` re-measuring the reported elites,
    when `SearchOptions.remeasure` > 0), with the candidates to rank; their order in the
    report is then decided by this measurement alone. Without it the engine calls
    `evaluate` again `SearchOptions.remeasure` times and ranks by the median."""

    def remeasure(self, genomes: Sequence[Genome]) -> Sequence[Result]:
        """One result per genome, in order (a list, not a generator)."""
        ...


@runtime_checkable
class HasTransferKey(Protocol):
    """Says which kernel family and shape its results are for, so that runs on the nearest
    other shapes of the family seed this one.

    Called by the engine when a search is configured (`Search.config`, part of the run's
    identity) and when it seeds the first generation (`evokernel.engine.transfer`). A key
    that is None, not a dict, or raises means: no transfer."""

    def transfer_key(self) -> dict[str, Any] | None:
        """`{"family": str, "shape": {dimension: number}}`, or None (nothing transfers)."""
        ...


@runtime_checkable
class Restores(Protocol):
    """Keeps state that counts measurements (the replay's noise draws, for instance).

    Called by the engine when a resumed run reads results back from the store instead of
    measuring them again (re-measurements included), so that the evaluator advances as if it
    had measured them and the resumed run retraces the uninterrupted one."""

    def restored(self, genomes: Sequence[Genome]) -> None: ...


@runtime_checkable
class DescribesEnvironment(Protocol):
    """Says where its candidates run (a kernel evaluator: which sandbox protections hold).

    Called by the engine when a run begins; the dict is recorded with the run."""

    def environment(self) -> dict[str, Any]: ...


@runtime_checkable
class JudgesProblem(Protocol):
    """Judges kernel sources for a problem (a `KernelEvaluator`).

    Read by tools, not by the search loop: `evokernel.engine.assemble` (the CLI's search and
    the Python API's) wires a knowledge recorder
    (`evokernel.store.knowledge.KnowledgeRecorder.from_evaluator`: lessons and kernels
    filed under the problem's family) and, with an LLM model given, an LLM rewrite operator that
    prompts with `problem` and turns genomes into sources with `render`."""

    problem: Any  # an evokernel.judge.problem.Problem
    render: Callable[[Genome], str]


@runtime_checkable
class Sandboxed(Protocol):
    """Runs candidates in a sandbox and can say which protections hold here.

    Called by the CLI's `search` before the run, to print the protections (and to fail at
    once when `--require-sandbox` cannot be honoured)."""

    def sandbox(self) -> Any:
        """An `evokernel.judge._isolation.Report` (`on`, `off`), or raises SandboxUnavailable."""
        ...


@runtime_checkable
class HasFidelities(Protocol):
    """Can judge a genome more cheaply, less exactly: fewer timing samples, a subset of its
    shapes, a microbenchmark standing in for a model.

    Called when a search is asked to promote (`SearchOptions.promotion`, the CLI's
    `--fidelity`): the engine then judges through an `evokernel.evaluators.Cascade` of these
    levels, which promotes only the promising genomes to the expensive ones."""

    def fidelities(self) -> Sequence[Evaluator]:
        """The levels, cheapest first, ending with the evaluator itself (its full fidelity)."""
        ...


@runtime_checkable
class Observes(Protocol):
    """Keeps state that follows the run's results (a cascade's promotion bar and calibration).

    Called by the engine for every result the run accepts, in order: measured by this
    evaluator ("measured"), read back by a resumed run ("resumed") or reused from another
    run or driver ("reused"); so its state is the same whether a run was measured straight
    through, resumed or shared."""

    def observed(self, genome: Genome, result: Result, origin: str) -> None: ...


#: The optional capabilities, for tools and the contract suite (tests/contracts).
CAPABILITIES: tuple[type, ...] = (
    Remeasures,
    HasTransferKey,
    Restores,
    DescribesEnvironment,
    JudgesProblem,
    Sandboxed,
    HasFidelities,
    Observes,
)


def fingerprint_hash(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(fingerprint)).hexdigest()[:16]
