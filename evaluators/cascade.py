"""Fidelity levels: judge every genome cheaply, and only the promising ones at full cost.

A `Cascade` is an evaluator over levels, cheapest first, ending with the full one: a kernel
evaluator on one shape with short timing before all shapes with full timing; a
microbenchmark before a model's forward or an engine's A/B; a short timing before a long
one. Each batch is judged at the first level; `Promotion` (the rule: the best of the
batch, anything within a margin of the best figure seen at that level, anything whose
calibrated figure is within the margin of the best full one; at most a share of the batch)
decides which genomes go on.
A promoted genome's result is its full-level result. The others keep their cheap figure
calibrated to the full level (the median ratio of full to cheap figures so far), marked
`estimated` (`Result.estimated`; the ratio's spread in `meta`): the search learns from them,
but the elite archive takes measured figures only, and the final re-measurement judges the
elites at the full level.

Each result's `meta["fidelity"]` records the level it stopped at, every level's figure
and reported seconds, and whether it was promoted; `Cascade.split()` counts the genomes
judged and the wall seconds spent at each level (the budget's split between levels). The
promotion state follows the run's results (`observed`), so a resumed run promotes exactly as
the uninterrupted one did. A batch's results come out once all its levels are judged (the
promotions need the whole batch's cheap figures), so a kill loses the batch in flight.

>>> from evokernel.engine.landscape import builtin
>>> from evokernel.evaluators import ReplayEvaluator
>>> full = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> cascade = Cascade([ReplayEvaluator(full.landscape, noise=0.2, seed=1), full])
>>> from evokernel import Budget, Search
>>> report = Search(full.space, cascade).run(Budget(evaluations=60), seed=0)
>>> split = cascade.split()
>>> split["judged"]["L0"], 0 < split["judged"]["L1"] < 60
(60, True)
>>> report.best.latency_ms == full.true_latency(report.best.genome)  # measured in full
True
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

from evokernel.core.errors import ConfigError
from evokernel.core.evaluator import Evaluator, HasFidelities, HasTransferKey, Remeasures, Restores
from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.engine.options import Promotion

__all__ = ["Cascade", "Promotion", "cascade_of"]


class Cascade:
    """Evaluator over `levels` (cheapest first, the full one last) under a promotion rule.

    `names` label the levels in results and reports (default: "L0", "L1", ...; the last is
    always the full level)."""

    name = "cascade"

    def __init__(
        self,
        levels: Sequence[Evaluator],
        promotion: Promotion | None = None,
        *,
        names: Sequence[str] | None = None,
    ) -> None:
        levels = list(levels)
        if len(levels) < 2:
            raise ConfigError(f"a cascade needs at least two levels (a cheap one and the full one), got {len(levels)}")
        for i, level in enumerate(levels):
            if not isinstance(level, Evaluator):
                raise ConfigError(f"cascade level {i} is a {type(level).__name__}, not an evaluator")
        self.levels = levels
        self.promotion = promotion or Promotion()
        self.names = list(names) if names is not None else [f"L{i}" for i in range(len(levels))]
        if len(self.names) != len(levels) or len(set(self.names)) != len(self.names):
            raise ConfigError(f"cascade names must be {len(levels)} distinct labels, got {self.names}")
        self._best = [math.inf] * len(levels)  # best ok figure seen at each level
        self._ratios: list[list[float]] = [[] for _ in levels[:-1]]  # log(next / this), per level
        # what this process measured: genomes, those promoted to the full level, per level
        self._evaluations = self._promoted = 0
        self._judged = dict.fromkeys(self.names, 0)
        self._seconds = dict.fromkeys(self.names, 0.0)

    # -- the evaluator protocol ------------------------------------------------------
    @property
    def full(self) -> Evaluator:
        return self.levels[-1]

    @property
    def space(self) -> Any:
        return getattr(self.full, "space", None)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "evaluator": "cascade",
            "levels": [{"name": n, **lv.fingerprint()} for n, lv in zip(self.names, self.levels)],
            "promotion": {"margin": self.promotion.margin, "top": self.promotion.top, "share": self.promotion.share},
        }

    def transfer_key(self) -> dict[str, Any] | None:
        """The full level's: the family and shape this cascade's results are for."""
        return self.full.transfer_key() if isinstance(self.full, HasTransferKey) else None

    def remeasure(self, genomes: Sequence[Genome]) -> list[Result]:
        """Measured again at the full level only (side by side where it can)."""
        if isinstance(self.full, Remeasures):
            results = list(self.full.remeasure(genomes))
        else:
            results = list(self.full.evaluate(genomes))
        return [self._mark(r, len(self.levels) - 1, {self.names[-1]: _figure(r)}, {}, promoted=True) for r in results]

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        genomes = list(genomes)
        if not genomes:
            return
        n = len(self.levels)
        at: list[dict[int, Result]] = [{} for _ in genomes]  # genome index -> level -> result
        best = list(self._best)
        ratios = [list(r) for r in self._ratios]
        reached = [0] * len(genomes)  # the highest level each genome was judged at
        self._judge(0, list(range(len(genomes))), genomes, at, best)
        ranked_once = [False] * n  # the batch's best go up once per level, in the first pass
        room = [max(self.promotion.top, math.ceil(self.promotion.share * len(genomes)))] * n  # per level
        changed = True
        while changed:  # until no figure of this batch promotes another genome
            changed = False
            for level in range(n - 1):
                here = [i for i in range(len(genomes)) if reached[i] == level and at[i][level].is_ok]
                up = self._promote(level, here, at, best, ratios, top=0 if ranked_once[level] else None)
                up = sorted(up, key=lambda i: (at[i][level].fitness, i))[: room[level]]
                room[level] -= len(up)
                ranked_once[level] = True
                if up:
                    self._judge(level + 1, up, genomes, at, best)
                    for i in up:
                        reached[i] = level + 1
                        if at[i][level + 1].is_ok:
                            ratios[level].append(math.log(at[i][level + 1].fitness / at[i][level].fitness))
                    changed = True
        self._evaluations += len(genomes)
        self._promoted += sum(r == n - 1 for r in reached)
        for i, results in enumerate(at):
            yield self._result(results, reached[i], ratios)

    # -- state from the run's results --------------------------------------------------
    def observed(self, genome: Genome, result: Result, origin: str) -> None:
        """Fold a result of the run into the promotion bar and the calibration (whether this
        cascade measured it, a resumed run read it back, or another run's was reused)."""
        info = result.meta.get("fidelity") if isinstance(result.meta, dict) else None
        if not isinstance(info, dict) or not isinstance(info.get("figures"), dict):
            return
        figures = {k: v for k, v in info["figures"].items() if isinstance(v, (int, float)) and v > 0}
        for level, name in enumerate(self.names):
            if name in figures:
                self._best[level] = min(self._best[level], float(figures[name]))
        for level in range(len(self.levels) - 1):
            a, b = figures.get(self.names[level]), figures.get(self.names[level + 1])
            if a and b:
                self._ratios[level].append(math.log(b / a))
        if origin == "resumed":  # levels whose draws count measurements advance as if measured
            for level, name in enumerate(self.names):
                if name in info.get("seconds", {}) and isinstance(self.levels[level], Restores):
                    self.levels[level].restored([genome])

    def split(self) -> dict[str, Any]:
        """What this cascade measured so far (in this process): genomes, how many reached
        the full level, and the genomes judged and wall seconds spent at each level."""
        return {
            "evaluations": self._evaluations,
            "promoted": self._promoted,
            "judged": dict(self._judged),
            "seconds": {k: round(v, 3) for k, v in self._seconds.items()},
        }

    # -- steps -------------------------------------------------------------------------
    def _judge(
        self, level: int, idx: list[int], genomes: list[Genome], at: list[dict[int, Result]], best: list[float]
    ) -> None:
        t0 = time.monotonic()
        results = list(self.levels[level].evaluate([genomes[i] for i in idx]))
        self._seconds[self.names[level]] += time.monotonic() - t0  # wall time of the level
        self._judged[self.names[level]] += len(idx)
        if len(results) != len(idx):
            raise ConfigError(f"cascade level {self.names[level]} gave {len(results)} results for {len(idx)} genomes")
        for i, r in zip(idx, results):
            at[i][level] = r
            if r.is_ok:
                best[level] = min(best[level], r.fitness)

    def _promote(
        self,
        level: int,
        here: list[int],
        at: list[dict[int, Result]],
        best: list[float],
        ratios: list[list[float]],
        *,
        top: int | None = None,
    ) -> list[int]:
        if not here:
            return []
        rule = self.promotion
        ranked = sorted(here, key=lambda i: (at[i][level].fitness, i))
        up = set(ranked[: rule.top if top is None else top])
        bar = best[level] * (1 + rule.margin)
        up |= {i for i in here if at[i][level].fitness <= bar}
        factor = _calibration(ratios, level)
        if factor is not None and math.isfinite(best[-1]):
            full_bar = best[-1] * (1 + rule.margin)
            up |= {i for i in here if at[i][level].fitness * factor[0] <= full_bar}
        return sorted(up)

    def _result(self, results: dict[int, Result], reached: int, ratios: list[list[float]]) -> Result:
        figures = {self.names[k]: _figure(r) for k, r in results.items()}
        seconds = {self.names[k]: round(r.elapsed_s, 6) for k, r in results.items()}
        last = results[reached]
        full = len(self.levels) - 1
        if reached == full or not last.is_ok:
            out = self._mark(last, reached, figures, seconds, promoted=reached == full)
            return _with(
                out, elapsed_s=sum(r.elapsed_s for r in results.values()), cost=sum(r.cost for r in results.values())
            )
        factor = _calibration(ratios, reached)
        scale, spread = factor if factor is not None else (1.0, 1.0)
        estimate = Result.ok(
            last.fitness * scale,
            noise=last.noise,
            elapsed_s=sum(r.elapsed_s for r in results.values()),
            cost=sum(r.cost for r in results.values()),
            meta=dict(last.meta),
        )
        return self._mark(
            estimate, reached, figures, seconds, promoted=False, estimated=True, scale=scale, spread=spread
        )

    def _mark(
        self,
        result: Result,
        level: int,
        figures: dict[str, float | None],
        seconds: dict[str, float],
        *,
        promoted: bool,
        estimated: bool = False,
        scale: float | None = None,
        spread: float | None = None,
    ) -> Result:
        info: dict[str, Any] = {
            "level": self.names[level],
            "promoted": promoted,
            "estimated": estimated,
            "figures": figures,
            "seconds": seconds,
        }
        if scale is not None:  # the calibration applied, and its relative spread
            info["scale"] = round(scale, 6)
            info["spread"] = round(spread or 0.0, 6)
        return _with(result, meta={**(result.meta or {}), "fidelity": info})


def cascade_of(evaluator: Evaluator, promotion: Promotion) -> Cascade:
    """The cascade a search with `SearchOptions.promotion` judges through: `evaluator` itself
    when it is one, else one over the levels it offers (`HasFidelities`)."""
    if isinstance(evaluator, Cascade):
        return evaluator
    if not isinstance(evaluator, HasFidelities):
        raise ConfigError(
            f"the {getattr(evaluator, 'name', type(evaluator).__name__)!r} evaluator offers no fidelity levels "
            "(no fidelities()): build a Cascade of your own levels, or search without promotion"
        )
    levels = list(evaluator.fidelities())
    if len(levels) < 2 or levels[-1] is not evaluator:
        raise ConfigError("fidelities() must give the cheaper levels, cheapest first, then the evaluator itself")
    names = [str(getattr(lv, "fidelity_name", f"L{i}")) for i, lv in enumerate(levels[:-1])] + ["full"]
    if len(set(names)) != len(names):
        names = [f"L{i}" for i in range(len(levels) - 1)] + ["full"]
    return Cascade(levels, promotion, names=names)


def _calibration(ratios: list[list[float]], level: int) -> tuple[float, float] | None:
    """The factor from `level`'s figures to the full level's (the product of each step's
    median ratio), and its relative spread; None while some step has no pair yet."""
    logs, spread = 0.0, 0.0
    for step in ratios[level:]:
        if not step:
            return None
        mid = statistics.median(step)
        logs += mid
        dev = statistics.median(abs(x - mid) for x in step) * 1.4826 if len(step) > 1 else 0.5
        spread = math.hypot(spread, dev)
    return math.exp(logs), min(1.0, spread)


def _figure(result: Result) -> float | None:
    return result.latency_ms if result.is_ok else None


def _with(result: Result, **changes: Any) -> Result:
    return msgspec.structs.replace(result, **changes)
