"""Sweeps: measure every valid point of a space and write a landscape CSV.

The CSV has one column per parameter, then `latency_ms` (empty where the configuration
failed) and `error`. Rows are appended as results arrive, so a sweep that is killed loses
at most the evaluations in flight, and running it again measures only the points the file
does not hold yet. The result is what `evokernel replay` and `ReplayEvaluator` read.

>>> import tempfile, os
>>> from evokernel.evaluators import ReplayEvaluator
>>> from evokernel.engine.landscape import builtin
>>> ev = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
>>> out = os.path.join(tempfile.mkdtemp(), "copy.csv")
>>> sweep(ev.space, ev, out, limit=5).measured
5
>>> sweep(ev.space, ev, out, limit=5).measured  # resumes: 5 more
5
>>> sum(1 for _ in open(out)) - 1
10
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evokernel.core.errors import ConfigError
from evokernel.core.evaluator import Evaluator
from evokernel.core.genome import Genome
from evokernel.core.space import SearchSpace

__all__ = ["sweep", "SweepReport"]


@dataclass
class SweepReport:
    path: str
    points: int  # valid points of the space
    already: int  # rows the file held before
    measured: int  # rows written now
    failed: int  # of those, configurations that did not run
    wall_s: float


def _cell(value: Any) -> str:
    return str(value)


def sweep(
    space: SearchSpace,
    evaluator: Evaluator,
    path: str | os.PathLike[str],
    *,
    limit: int | None = None,
    shuffle: int | None = 0,
    wall_s: float | None = None,
    batch: int = 64,
    on_result: Callable[[Genome, Any], None] | None = None,
) -> SweepReport:
    """Measure the valid points of `space` that `path` does not hold yet (in a shuffled order
    when `shuffle` is a seed, so that an interrupted sweep is a uniform sample), appending a
    row per result."""
    t0 = time.monotonic()
    names = list(space.names)
    header = names + ["latency_ms", "error"]
    done: set[tuple[str, ...]] = set()
    path = Path(path)
    if path.exists() and path.stat().st_size > 0:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            head = next(reader, None)
            if head != header:
                raise ConfigError(f"{path} has columns {head}, this space needs {header}: use another file")
            for row in reader:
                if len(row) == len(header):
                    done.add(tuple(row[: len(names)]))
    already = len(done)
    points = space.valid_points()
    order = list(range(len(points)))
    if shuffle is not None:
        np.random.default_rng(shuffle).shuffle(order)
    todo = [points[i] for i in order if tuple(_cell(points[i][n]) for n in names) not in done]
    if limit is not None:
        todo = todo[:limit]
    new_file = not path.exists() or path.stat().st_size == 0
    path.parent.mkdir(parents=True, exist_ok=True)
    measured = failed = 0
    with open(path, "a", newline="") as f:
        writer = csv.writer(f)
        if new_file:
            writer.writerow(header)
            f.flush()
        for start in range(0, len(todo), batch):
            if wall_s is not None and time.monotonic() - t0 > wall_s:
                break
            genomes = [Genome.of(p) for p in todo[start : start + batch]]
            for genome, result in zip(genomes, evaluator.evaluate(genomes)):
                ok = result.is_ok
                latency = f"{result.latency_ms:.6f}" if ok and result.latency_ms is not None else ""
                error = "" if ok else " ".join(f"{result.status.value}: {result.error}".split())[:300]
                writer.writerow([_cell(genome.params[n]) for n in names] + [latency, error])
                f.flush()
                measured += 1
                failed += not ok
                if on_result is not None:
                    on_result(genome, result)
                if wall_s is not None and time.monotonic() - t0 > wall_s:
                    break
    return SweepReport(
        path=str(path),
        points=len(points),
        already=already,
        measured=measured,
        failed=failed,
        wall_s=time.monotonic() - t0,
    )
