"""The final re-measurement of the finalists is told, step by step: to the observers (the
progress display says "re-measuring finalists k/n" and which candidate) and to the store's
event log (what a quiet or --json run leaves behind), never a silent "n/n evaluations"."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from evokernel import Budget, Genome, Result, Search, SearchOptions, SearchSpace
from evokernel.cli._progress import SearchProgress
from evokernel.core.space import PowerOfTwo
from evokernel.engine.search import Observer
from evokernel.mutators import PointMutation
from evokernel.store import SQLiteStore

SPACE = SearchSpace([PowerOfTwo("BM", 16, 256), PowerOfTwo("BN", 16, 256)], name="toy")


class Bowl:
    """A plain evaluator: latency is a bowl around BM=64, BN=128 (no noise)."""

    name = "bowl"

    def fingerprint(self) -> dict[str, Any]:
        return {"evaluator": "bowl"}

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        for g in genomes:
            yield Result.ok(1.0 + abs(g["BM"] - 64) / 64 + abs(g["BN"] - 128) / 128)


class SideBySideBowl(Bowl):
    """The same, and re-measures its finalists side by side (the `Remeasures` capability)."""

    name = "bowl-side-by-side"

    def remeasure(self, genomes: Sequence[Genome]) -> list[Result]:
        return list(self.evaluate(genomes))


class Recorder(Observer):
    def __init__(self) -> None:
        self.steps: list[tuple[int, int, list[str]]] = []
        self.evaluations_at_first_step: int | None = None
        self.evaluations = 0

    def on_evaluation(self, individual: Any, best: Any, evaluations: int) -> None:
        self.evaluations = evaluations

    def on_remeasure(self, done: int, total: int, genomes: list[Genome]) -> None:
        if self.evaluations_at_first_step is None:
            self.evaluations_at_first_step = self.evaluations
        self.steps.append((done, total, [g.id for g in genomes]))


def _search(evaluator: Any, observers: list[Any], store: SQLiteStore) -> Any:
    opt = SearchOptions(population=4, report_elites=2, remeasure=2)
    return Search(SPACE, evaluator, [PointMutation()], options=opt, store=store, observers=observers).run(
        Budget(evaluations=8), seed=0
    )


def test_each_remeasurement_is_told_to_observers_and_logged(tmp_path):
    store = SQLiteStore(tmp_path / "r.db")
    rec = Recorder()
    report = _search(Bowl(), [rec], store)
    finalists = [e.genome.id for e in report.elites]
    n = 2 * len(finalists)  # remeasure=2 rounds of every finalist
    assert rec.evaluations_at_first_step == 8  # after the search's own evaluations
    steps = rec.steps
    assert [s[0] for s in steps] == list(range(n + 1))  # 0/n .. n/n
    assert all(total == n for _, total, _ in steps)
    measured = [s[2] for s in steps[:-1]]
    assert all(len(g) == 1 for g in measured)  # one candidate named at a time
    k = len(finalists)
    for round_ in (measured[:k], measured[k:]):  # each round measures every finalist once
        assert sorted(g for (g,) in round_) == sorted(finalists)
    assert steps[-1][2] == []  # it is over
    logged = [p for kind, p, _ in store.events(report.run_id) if kind == "remeasure"]
    assert [(p["done"], p["total"], p["genomes"]) for p in logged] == steps
    assert all(len(p["params"]) == len(p["genomes"]) for p in logged)


def test_side_by_side_remeasurement_is_told_too(tmp_path):
    store = SQLiteStore(tmp_path / "r.db")
    rec = Recorder()
    report = _search(SideBySideBowl(), [rec], store)
    n = len(report.elites)
    assert [(done, total) for done, total, _ in rec.steps] == [(0, n), (n, n)]
    assert sorted(rec.steps[0][2]) == sorted(e.genome.id for e in report.elites)  # all at once
    assert rec.steps[1][2] == []
    assert [p["done"] for k, p, _ in store.events(report.run_id) if k == "remeasure"] == [0, n]


def test_progress_lines_say_re_measuring_finalists(tmp_path, capsys: pytest.CaptureFixture[str]):
    store = SQLiteStore(tmp_path / "r.db")
    progress = SearchProgress(8)  # off a terminal (captured): a line per step
    report = _search(Bowl(), [progress], store)
    err = capsys.readouterr().err
    n = 2 * len(report.elites)
    first = report.elites[0].genome
    assert f"re-measuring finalists 0/{n}: " in err
    lines = re.findall(r"re-measuring finalists (\d+)/(\d+): (\S+) \((.*)\)", err)
    assert len(lines) == n and {int(t) for _, t, _, _ in lines} == {n}
    assert any(gid == first.id and short == first.short() for _, _, gid, short in lines)
    assert f"re-measured finalists {n}/{n}" in err
