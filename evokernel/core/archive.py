"""The elite archive: the best genome per niche, replaced only by a gain larger than the noise.

A niche is a feature descriptor of a genome (for a matmul, its tile class `BMxBN`), so the
archive keeps good kernels of different kinds rather than many copies of one. Elites from
earlier runs on the same problem and hardware seed a new run.

>>> from evokernel.core.genome import Genome
>>> from evokernel.core.result import Result
>>> a = Archive(noise_z=1.0)
>>> a.consider(Genome.of({"x": 1}), Result.ok(1.00, noise=0.02))
<Verdict.NEW_NICHE: 'new_niche'>
>>> a.consider(Genome.of({"x": 2}), Result.ok(0.99, noise=0.02))  # 1% gain, 2.8% noise
<Verdict.WITHIN_NOISE: 'within_noise'>
>>> a.consider(Genome.of({"x": 3}), Result.ok(0.90, noise=0.02)).improved
True
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable

import msgspec

from evokernel.core._html import html_table
from evokernel.core.genome import Genome
from evokernel.core.result import Result

__all__ = ["Elite", "Verdict", "Archive", "Descriptor"]

Descriptor = Callable[[Genome], str]


class Elite(msgspec.Struct, frozen=True, kw_only=True):
    niche: str
    genome: Genome
    latency_ms: float
    noise: float = 0.0
    run_id: str = ""

    def _repr_html_(self) -> str:
        """A one-row table, for notebooks."""
        row = [
            self.niche,
            self.latency_ms,
            f"{100 * self.noise:.1f}%",
            self.genome.id,
            self.genome.short(),
            self.run_id,
        ]
        return html_table(["niche", "latency ms", "noise", "genome", "params", "run"], [row])


class Verdict(str, enum.Enum):
    NEW_NICHE = "new_niche"
    IMPROVED = "improved"
    WITHIN_NOISE = "within_noise"  # faster, but not by more than the measured noise
    WORSE = "worse"
    FAILED = "failed"
    ESTIMATED = "estimated"  # a figure estimated from a cheaper fidelity: never an elite

    @property
    def improved(self) -> bool:
        return self in (Verdict.NEW_NICHE, Verdict.IMPROVED)


def significant_gain(new: float, new_noise: float, old: float, old_noise: float, z: float) -> bool:
    """Is `new` faster than `old` by more than `z` combined relative noises?"""
    if not math.isfinite(old):
        return math.isfinite(new)
    threshold = z * math.hypot(new_noise, old_noise)
    return (old - new) / old > threshold


class Archive:
    def __init__(self, descriptor: Descriptor | None = None, *, noise_z: float = 1.0) -> None:
        self.descriptor = descriptor
        self.noise_z = noise_z
        self._elites: dict[str, Elite] = {}
        self.changed: set[str] = set()  # niches changed since the last `take_changes`

    def niche(self, genome: Genome) -> str:
        return self.descriptor(genome) if self.descriptor else "*"

    def consider(self, genome: Genome, result: Result, run_id: str = "") -> Verdict:
        if not result.is_ok:
            return Verdict.FAILED
        if result.estimated:  # elites are measured at full fidelity, never estimated
            return Verdict.ESTIMATED
        niche = self.niche(genome)
        incumbent = self._elites.get(niche)
        cand = Elite(niche=niche, genome=genome, latency_ms=result.fitness, noise=result.noise, run_id=run_id)
        if incumbent is None:
            verdict = Verdict.NEW_NICHE
        elif significant_gain(cand.latency_ms, cand.noise, incumbent.latency_ms, incumbent.noise, self.noise_z):
            verdict = Verdict.IMPROVED
        elif cand.latency_ms < incumbent.latency_ms:
            return Verdict.WITHIN_NOISE
        else:
            return Verdict.WORSE
        self._elites[niche] = cand
        self.changed.add(niche)
        return verdict

    def seed(self, elites: Iterable[Elite]) -> None:
        """Load elites of earlier runs (kept only where they beat what is there)."""
        for e in elites:
            cur = self._elites.get(e.niche)
            if cur is None or e.latency_ms < cur.latency_ms:
                self._elites[e.niche] = e

    def set(self, elite: Elite) -> None:
        """Overwrite a niche's entry (after re-measurement)."""
        self._elites[elite.niche] = elite
        self.changed.add(elite.niche)

    def take_changes(self) -> list[Elite]:
        out = [self._elites[n] for n in sorted(self.changed)]
        self.changed.clear()
        return out

    def get(self, niche: str) -> Elite | None:
        return self._elites.get(niche)

    def best(self) -> Elite | None:
        return min(self._elites.values(), key=lambda e: e.latency_ms, default=None)

    def top(self, k: int | None = None) -> list[Elite]:
        ranked = sorted(self._elites.values(), key=lambda e: (e.latency_ms, e.genome.id))
        return ranked if k is None else ranked[:k]

    def __len__(self) -> int:
        return len(self._elites)

    def __contains__(self, genome_id: object) -> bool:
        return any(e.genome.id == genome_id for e in self._elites.values())
