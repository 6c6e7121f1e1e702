"""The end of a run: the best candidates measured again and ranked by their median.

A lucky draw during the search is exposed here. The candidates are the run's fastest
genomes and its archive's best elites (`finalists`); an evaluator that can measure several
genomes side by side (`remeasure`, interleaved in fresh processes) ranks them by that one
measurement, any other measures each `options.remeasure` more times. Every re-measurement
is stored, so a resumed run reads them back instead of measuring again; a niche's elite
becomes its best re-measured genome.

The re-measurement can take longer than the search (each finalist timed again, several
times): every step is told to the run's observers (`Observer.on_remeasure`: a progress
display says "re-measuring finalists k/n" and which candidate) and logged in the store as a
"remeasure" event (`done`, `total`, the genomes being measured), so a quiet or `--json` run
leaves the same trace.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from evokernel.core.archive import Elite
from evokernel.core.errors import EvaluatorError
from evokernel.core.evaluator import Remeasures
from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.engine._stream import ResultStream
from evokernel.engine.report import Individual, ReportedElite
from evokernel.store._base import DropsElites

if TYPE_CHECKING:
    from evokernel.core.archive import Archive
    from evokernel.engine.search import _Run

__all__ = ["finalists", "remeasure"]


def finalists(history: list[Individual], archive: Archive, k: int, run_id: str) -> list[Elite]:
    """The `k` fastest genomes of `history` (first found first among equals), then those of the
    archive's `k` best elites that are not among them."""
    top: list[Elite] = []
    ranked = sorted((i for i in history if i.result.is_ok), key=lambda i: (i.fitness, i.seq))
    for ind in ranked[:k]:
        top.append(
            Elite(
                niche=archive.niche(ind.genome),
                genome=ind.genome,
                latency_ms=ind.fitness,
                noise=ind.result.noise,
                run_id=run_id,
            )
        )
    for e in archive.top(k):
        if all(t.genome.id != e.genome.id for t in top):
            top.append(e)
    return top


def remeasure(run: _Run) -> list[ReportedElite]:
    """Measure the run's finalists again, interleaved, and rank them by their median; the
    archive's changes are stored."""
    opt, store, run_id, evaluator = run.opt, run.s.store, run.run.id, run.s.evaluator
    top = finalists(run.history, run.archive, opt.report_elites, run_id)
    samples: dict[str, list[float]] = {e.genome.id: [e.latency_ms] for e in top}
    failed: set[str] = set()
    together = evaluator.remeasure if isinstance(evaluator, Remeasures) else None
    noises: dict[str, float] = {}
    if run._out_of_time():
        # the time is spent: report what the search measured, without measuring again
        return _reported(run, top, samples, failed, noises)
    if together is not None and opt.remeasure and top:
        # the evaluator measures them side by side: rank by that measurement alone
        stored = [store.remeasurement(run_id, e.genome.id, 0) for e in top]
        got: list[Result]
        if any(r is None for r in stored):
            _tell(run, 0, len(top), [e.genome for e in top])
            try:
                got = list(together([e.genome for e in top]))
            except (Exception, SystemExit) as exc:
                raise EvaluatorError(
                    f"evaluator {evaluator.name!r} failed re-measuring: {type(exc).__name__}: {exc}"
                ) from exc
            if len(got) != len(top) or not all(isinstance(r, Result) for r in got):
                raise EvaluatorError(f"evaluator {evaluator.name!r} re-measured {len(got)} of {len(top)}")
            for e, r, before in zip(top, got, stored):
                # a run resumed with a larger budget re-measures its new finalists beside the
                # earlier ones; the earlier ones' first re-measurement stays on record
                if before is None:
                    store.record_remeasurement(run_id, 0, e.genome, run.fingerprint, r)
                run.cost += r.cost
            _tell(run, len(top), len(top), [])
        else:
            got = [r for r in stored if r is not None]
            run._restored([e.genome for e in top])
        for e, r in zip(top, got):
            samples[e.genome.id] = [r.fitness] if r.is_ok else samples[e.genome.id]
            noises[e.genome.id] = r.noise
            if not r.is_ok:
                failed.add(e.genome.id)
    rounds = opt.remeasure if together is None else 0
    total, done, told = rounds * len(top), 0, False
    for rep in range(rounds):
        todo: list[Genome] = []
        restored: list[Genome] = []
        for e in top:
            prior = store.remeasurement(run_id, e.genome.id, rep)
            if prior is None:
                todo.append(e.genome)
            else:
                restored.append(e.genome)
                _add_sample(e.genome.id, prior, samples, failed)
        run._restored(restored)
        done += len(restored)
        if not todo or run._out_of_time():
            continue  # (out of time: what is stored is read, nothing new is started)
        results = ResultStream(evaluator, todo, run._deadline())
        try:
            for g in todo:
                _tell(run, done, total, [g])  # the one whose result is awaited
                told = True
                result = results.next()
                if result is None:
                    break
                done += 1
                store.record_remeasurement(run_id, rep, g, run.fingerprint, result)
                run.cost += result.cost
                _add_sample(g.id, result, samples, failed)
            else:
                results.expect_end()
        finally:
            results.close()
    if told:
        _tell(run, done, total, [])
    return _reported(run, top, samples, failed, noises)


def _tell(run: _Run, done: int, total: int, genomes: Sequence[Genome]) -> None:
    """A step of the re-measurement, to the observers and the store's event log: `done` of
    `total` re-measurements finished, `genomes` being measured now (none: it is over)."""
    run.s.store.log_event(
        run.run.id,
        "remeasure",
        {"done": done, "total": total, "genomes": [g.id for g in genomes], "params": [g.params for g in genomes]},
    )
    for o in run.s.observers:
        hook = getattr(o, "on_remeasure", None)  # (an observer written before the hook has none)
        if hook is not None:
            hook(done, total, list(genomes))


def _reported(
    run: _Run, top: list[Elite], samples: dict[str, list[float]], failed: set[str], noises: dict[str, float]
) -> list[ReportedElite]:
    store, run_id = run.s.store, run.run.id
    out = []
    for e in top:
        xs = samples[e.genome.id]
        med = math.inf if e.genome.id in failed else statistics.median(xs)
        noise = statistics.pstdev(xs) / med if len(xs) > 1 and math.isfinite(med) else e.noise
        noise = noises.get(e.genome.id, noise)
        out.append(
            ReportedElite(
                niche=e.niche, genome=e.genome, latency_ms=med, noise=noise, samples=tuple(xs), first_ms=e.latency_ms
            )
        )
    out.sort(key=lambda r: (r.latency_ms, r.genome.id))
    if run.opt.remeasure:
        measured = {r.genome.id for r in out}
        done: set[str] = set()
        for r in out:  # fastest first: the first of each niche is its best re-measured genome
            if r.niche in done or not math.isfinite(r.latency_ms):
                continue
            done.add(r.niche)
            cur = run.archive.get(r.niche)
            if cur is None or cur.genome.id in measured or r.latency_ms < cur.latency_ms:
                run.archive.set(
                    Elite(niche=r.niche, genome=r.genome, latency_ms=r.latency_ms, noise=r.noise, run_id=run_id)
                )
        dropped = _unseat_failed(run, failed, done)
    else:
        dropped = []
    store.save_elites(run_id, run.archive_key, run.archive.take_changes())
    if dropped and isinstance(store, DropsElites):
        for niche in dropped:
            store.drop_elite(run_id, niche)
    return out


def _unseat_failed(run: _Run, failed: set[str], done: set[str]) -> list[str]:
    """Niches whose elite failed its re-measurement and that no re-measured genome took: the
    elite becomes the niche's fastest genome that passed (and was not disqualified); the
    niches with none are returned, for their stored entry to be dropped (a flaky kernel
    seeds no later run and is not exported)."""
    dropped = []
    for niche in sorted({e.niche for e in run.archive.top()} - done):
        cur = run.archive.get(niche)
        if cur is None or cur.genome.id not in failed:
            continue
        passed = [
            i
            for i in run.history
            if i.result.is_ok
            and not i.result.estimated
            and i.genome.id not in failed
            and run.archive.niche(i.genome) == niche
        ]
        best = min(passed, key=lambda i: (i.fitness, i.seq), default=None)
        if best is None:
            dropped.append(niche)
            continue
        run.archive.set(
            Elite(niche=niche, genome=best.genome, latency_ms=best.fitness, noise=best.result.noise, run_id=run.run.id)
        )
    return dropped


def _add_sample(gid: str, result: Result, samples: dict[str, list[float]], failed: set[str]) -> None:
    """A re-measurement that fails disqualifies the genome (flaky kernels are not elites)."""
    if result.is_ok:
        samples[gid].append(result.fitness)
    else:
        failed.add(gid)
