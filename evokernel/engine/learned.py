"""Learned constraints: configurations that ran out of a resource teach the space.

A configuration that fails to compile or launch for lack of shared memory or registers
says that every configuration at least as large fails the same way. `FailureModel` keeps
those failures and predicts a point fails when it matches a failed one on every unordered
parameter and is at least as large on every ordered one. A point that then runs after all
(a success that dominates a failure) removes that failure from the model, so a wrong
lesson does not keep costing good configurations.

>>> from evokernel.core.result import Result, Status
>>> from evokernel.core.space import SearchSpace, PowerOfTwo
>>> from evokernel.core.genome import Genome
>>> space = SearchSpace([PowerOfTwo("BM", 16, 256), PowerOfTwo("BK", 16, 256)])
>>> model = FailureModel(space)
>>> model.learn(Genome.of({"BM": 128, "BK": 64}),
...             Result.failed(Status.COMPILE_ERROR, "OutOfResources: out of resource: shared memory"))
True
>>> model.predict({"BM": 256, "BK": 64})
'predicted to run out of shared memory like BK=64 BM=128'
>>> model.predict({"BM": 64, "BK": 256}) is None
True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evokernel.core.genome import Genome
from evokernel.core.result import Result, Status
from evokernel.core.space import SearchSpace

__all__ = ["FailureModel", "resource_kind"]

_RESOURCES = (
    ("shared memory", re.compile(r"shared memory|shared_memory|smem", re.I)),
    ("registers", re.compile(r"register", re.I)),
    ("launch resources", re.compile(r"too many resources requested|out of resource", re.I)),
)


def resource_kind(result: Result) -> str | None:
    """Which resource a failed result ran out of, if that is why it failed."""
    if result.status not in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.CRASH):
        return None
    text = result.error or ""
    if not re.search(r"out ?of ?resources?|outofresources|too many resources|exceeds|insufficient", text, re.I):
        return None
    for kind, pattern in _RESOURCES:
        if pattern.search(text):
            return kind
    return None


class FailureModel:
    """Monotone failure prediction from resource failures; see the module's docstring."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._ordered = [p for p in space.params if p.ordered and not isinstance(p.values[0], bool)]
        self._unordered = [p for p in space.params if p not in self._ordered]
        self.failures: dict[str, tuple[tuple[int, ...], tuple[Any, ...], str, str]] = {}
        self.dropped = 0  # failures a later success contradicted

    def _key(self, point: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[Any, ...]] | None:
        try:
            ranks = tuple(p.index(point[p.name]) for p in self._ordered)
            fixed = tuple(point[p.name] for p in self._unordered)
        except KeyError:
            return None
        if any(r is None for r in ranks):
            return None
        return ranks, fixed  # type: ignore[return-value]

    def learn(self, genome: Genome, result: Result) -> bool:
        """Take one evaluation into account; True if it taught a new failure."""
        key = self._key(genome.params)
        if key is None:
            return False
        ranks, fixed = key
        if result.is_ok:
            wrong = [
                gid
                for gid, (r, f, _, _) in self.failures.items()
                if f == fixed and all(a <= b for a, b in zip(r, ranks))
            ]
            for gid in wrong:
                del self.failures[gid]
            self.dropped += len(wrong)
            return False
        kind = resource_kind(result)
        if kind is None or genome.id in self.failures:
            return False
        self.failures[genome.id] = (ranks, fixed, kind, genome.short())
        return True

    def predict(self, point: Mapping[str, Any]) -> str | None:
        """Why `point` is expected to fail, or None."""
        key = self._key(point)
        if key is None:
            return None
        ranks, fixed = key
        for r, f, kind, label in self.failures.values():
            if f == fixed and all(a <= b for a, b in zip(r, ranks)):
                return f"predicted to run out of {kind} like {label}"
        return None

    def __len__(self) -> int:
        return len(self.failures)
