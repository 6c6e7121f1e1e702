"""The mutator protocol: parents in, one proposed genome out. Mutators never touch the GPU.

A mutator has a `name`, an `arity` (how many parents it wants: 0, 1 or 2) and `propose`.
Optional capabilities are protocols of their own, checked with `isinstance` by the engine:
`Learns` (it `observe`s every evaluated genome of the run: samplers that learn, such as
Optuna's), `Resets` (it forgets what it learned when a new run starts), `Costly` (it charges
money, LLM operators: the operators a cost cap switches off), `Exhaustible` (it knows
when it has nothing left to offer) and `Primed` (it learns from earlier measurements of the
kernel family before the run starts: the cost model).

>>> class Flip:
...     name, arity = "flip", 1
...     def propose(self, parents, ctx):
...         return parents[0].replace(use_tma=not parents[0]["use_tma"])
>>> isinstance(Flip(), Mutator), isinstance(Flip(), Learns)
(True, False)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.core.space import SearchSpace

if TYPE_CHECKING:
    from evokernel.core.archive import Archive

__all__ = [
    "Mutator",
    "Learns",
    "Resets",
    "Costly",
    "Exhaustible",
    "Primed",
    "CAPABILITIES",
    "Context",
    "observe",
    "reset",
]


@dataclass
class Context:
    """What a mutator may read (and the one thing it may do: charge a cost)."""

    space: SearchSpace
    rng: np.random.Generator
    generation: int
    archive: Archive
    charge: Callable[[float, str], None] = field(default=lambda amount, what: None)
    # when the run's wall-time budget ends (time.monotonic()), or None: a slow operator (an
    # LLM call) keeps within it
    deadline: float | None = None
    # what is left of the run's cost budget (USD), or None when it has none: a costly
    # operator starts no request that could cost more
    money_left: Callable[[], float | None] = field(default=lambda: None)

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


@runtime_checkable
class Mutator(Protocol):
    name: str
    arity: int

    def propose(self, parents: Sequence[Genome], ctx: Context) -> Genome | None:
        """A new genome (lineage is filled in by the search), or None for nothing to offer."""
        ...


# -- optional capabilities --------------------------------------------------------------


@runtime_checkable
class Learns(Protocol):
    """Learns from evaluations (a sampler such as Optuna's, local search, the LLM operator).

    Called by the engine after every evaluation of the run, whichever operator proposed the
    genome, measured, resumed from the store or reused from an earlier run, in the run's
    order: a stateful mutator's proposals depend on its seed and on this history alone."""

    def observe(self, genome: Genome, result: Result) -> None: ...


@runtime_checkable
class Resets(Protocol):
    """Keeps state across calls that belongs to one run.

    Called by the engine when a run starts, before its first proposal, so that a mutator
    object reused by a second run (or a resumed one) starts as a fresh one would."""

    def reset(self) -> None: ...


@runtime_checkable
class Costly(Protocol):
    """May charge money (`Context.charge`), such as an LLM operator.

    Read by the engine before each proposal: once a run's `Budget.cost` is spent, mutators
    whose `costly` is true are no longer chosen (the search goes on with the others)."""

    costly: bool


@runtime_checkable
class Exhaustible(Protocol):
    """Offers a finite supply of genomes (the transfer operator's list of other shapes' genomes).

    Read by the engine before each proposal: a mutator whose `exhausted` is true is no
    longer chosen."""

    exhausted: bool


@runtime_checkable
class Primed(Protocol):
    """Learns from what was measured before the run (the cost model).

    Called by the engine when a run starts, after `reset` and before the first generation,
    with an `evokernel.engine.priors.PriorSource`: the run's kernel family and shape, and
    `rows()`, every earlier measurement of that family in the store and in the shipped
    landscapes. A primed mutator may then fill the first generation's open places (before
    random points) by proposing with no parents."""

    def prime(self, source: Any) -> None: ...


#: The optional capabilities, for tools and the contract suite (tests/contracts).
CAPABILITIES: tuple[type, ...] = (Learns, Resets, Costly, Exhaustible, Primed)


def reset(mutator: Mutator) -> None:
    """Let a stateful mutator forget the last run, if it keeps state."""
    if isinstance(mutator, Resets):
        mutator.reset()


def observe(mutator: Mutator, genome: Genome, result: Result) -> None:
    """Tell a learning mutator about an evaluation, if it listens."""
    if isinstance(mutator, Learns):
        mutator.observe(genome, result)
