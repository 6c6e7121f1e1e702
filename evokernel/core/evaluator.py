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
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from evokernel.core.genome import Genome, canonical_json
from evokernel.core.result import Result

__all__ = ["Evaluator", "fingerprint_hash"]


@runtime_checkable
class Evaluator(Protocol):
    name: str

    def fingerprint(self) -> dict[str, Any]:
        """What results depend on: problem, shapes, GPU, driver, CUDA, torch and triton versions."""
        ...

    def evaluate(self, genomes: Sequence[Genome]) -> Iterable[Result]:
        """One result per genome, in order; may be a generator that yields as results arrive.

        A candidate that fails is a result with a failure status; raise only when the
        evaluator itself cannot go on (the search stops and can be resumed)."""
        ...


def fingerprint_hash(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(fingerprint)).hexdigest()[:16]
