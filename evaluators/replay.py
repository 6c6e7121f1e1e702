"""Replay evaluator: the fitness of a genome is its row in a recorded landscape.

It is the default fitness on a machine without a GPU and the ground on which search
strategies are tested on the CPU. Optional multiplicative noise, drawn per evaluation,
makes it behave like a real GPU measurement.

>>> from evokernel.engine.landscape import builtin
>>> ev = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> g = ev.space.genome(BM=64, BN=64, BK=128, GROUP_M=1, num_warps=4, num_stages=5)
>>> next(iter(ev.evaluate([g]))).latency_ms
0.019488
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from evokernel.core.genome import Genome
from evokernel.engine.landscape import Landscape
from evokernel.core.result import Result, Status
from evokernel.core.space import SearchSpace

__all__ = ["ReplayEvaluator"]


class ReplayEvaluator:
    """Looks genomes up in a landscape.

    noise: sigma of a log-normal factor applied to each evaluation (0.05 is about +-5%).
    seed: seeds the noise; the draw depends on (seed, genome, how many times it was drawn).
    delay_s: sleep per evaluation, to stand in for a slow measurement in tests and demos.
    """

    name = "replay"

    def __init__(
        self,
        landscape: Landscape | str | os.PathLike[str],
        *,
        noise: float = 0.0,
        seed: int = 0,
        delay_s: float = 0.0,
    ) -> None:
        if not (math.isfinite(noise) and noise >= 0):
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.landscape = landscape if isinstance(landscape, Landscape) else Landscape.load(landscape)
        self.noise = float(noise)
        self.seed = seed
        self.delay_s = delay_s
        self._draws: dict[str, int] = {}
        self.fidelity_name = "replay"  # its label as a level of a cascade

    @property
    def space(self) -> SearchSpace:
        """The space inferred from the landscape's parameter columns."""
        return self.landscape.space

    def transfer_key(self) -> dict[str, Any]:
        """Kernel family and shape, from the landscape's name (`..._M2048_N6144_K4096`)."""
        from evokernel.engine.transfer import family_of_name

        family, shape = family_of_name(self.landscape.name)
        return {"family": f"replay:{family}", "shape": shape}

    def fingerprint(self) -> dict[str, Any]:
        return {"evaluator": "replay", "landscape": self.landscape.sha256, "noise": self.noise}

    def fidelities(self) -> list[ReplayEvaluator]:
        """A cheap level standing in for a short measurement: the same landscape with the
        noise of a few samples (log-sigma 0.1, or three times this one's) and a tenth of the
        delay, then this evaluator."""
        cheap = ReplayEvaluator(
            self.landscape, noise=max(0.1, 3 * self.noise), seed=self.seed + 1, delay_s=self.delay_s / 10
        )
        cheap.fidelity_name = "short"
        return [cheap, self]

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        for genome in genomes:
            if self.delay_s:
                time.sleep(self.delay_s)
            yield self._one(genome)

    def restored(self, genomes: Sequence[Genome]) -> None:
        """The search read these genomes' results back from the store (a resumed run): count
        their draws as drawn, so the next measurement of each gets the draw it would have had
        in an uninterrupted run (noise depends on seed, genome and the measurement's number)."""
        if self.noise:
            for genome in genomes:
                self._draws[genome.id] = self._draws.get(genome.id, 0) + 1

    def true_latency(self, genome: Genome) -> float:
        """The recorded (noise-free) latency, infinite where the configuration failed."""
        row = self.landscape.lookup(genome.params)
        return math.inf if row is None or row.latency_ms is None else row.latency_ms

    def _one(self, genome: Genome) -> Result:
        row = self.landscape.lookup(genome.params)
        if row is None:
            return Result.failed(Status.INVALID, f"not recorded in landscape {self.landscape.name}")
        if row.latency_ms is None:
            status = Status.COMPILE_ERROR if _is_compile_error(row.error) else Status.RUNTIME_ERROR
            return Result.failed(status, row.error)
        latency = row.latency_ms
        if self.noise:
            k = self._draws.get(genome.id, 0)
            self._draws[genome.id] = k + 1
            rng = np.random.default_rng([self.seed, int(genome.id, 16), k])
            latency *= math.exp(self.noise * float(rng.standard_normal()))
        return Result.ok(latency, noise=self.noise, samples=(latency,))


def _is_compile_error(text: str) -> bool:
    low = text.lower()
    return any(s in low for s in ("outofresources", "out of resource", "compil", "ptxas", "register"))
