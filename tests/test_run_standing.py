"""A stored run's best kernel against its baseline and the card's peak, in `evokernel show`
and the HTML report's header: the figures where the run recorded them, and "no baseline
recorded" / "peak unknown" where it did not (never left out silently)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from evokernel import Budget, Genome, Result, Search, SearchOptions, SearchSpace
from evokernel.cli import main
from evokernel.core.space import PowerOfTwo
from evokernel.mutators import PointMutation
from evokernel.store import SQLiteStore

FOOTING = {"mode": "graph", "calls": 32, "flush_mb": 0, "sets": 8, "perturb": 0}


class WithBaseline:
    """A plain evaluator that times a baseline (1.5 ms) beside each candidate, as the model
    evaluator does, and reports a gate-like per-shape timing: one shape with a roofline
    fraction, one whose card's peak is unknown."""

    name = "with-baseline"

    def fingerprint(self) -> dict[str, Any]:
        return {"evaluator": "with-baseline"}

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        for g in genomes:
            ms = 0.5 + abs(g["BM"] - 64) / 64
            timings = [
                {"shape": "M16", "median_ms": ms, "footing": FOOTING, "tflops": 400.0, "roofline_pct": 42.0},
                {"shape": "M4096", "median_ms": ms, "footing": FOOTING, "tflops": 300.0, "roofline_pct": None},
            ]
            meta = {"baseline_ms": 1.5, "timings": timings}
            yield Result.ok(ms, meta=meta)


def _show(db: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, str], str]:
    capsys.readouterr()
    assert main(["show", str(db), "--json"]) == 0
    stands = json.loads(capsys.readouterr().out)["standing"]
    assert main(["show", str(db)]) == 0
    return stands, capsys.readouterr().out


def _header(db: Path) -> dict[str, str]:
    pytest.importorskip("pandas")
    from evokernel.report import data

    (run,) = data.load_runs(SQLiteStore(db))
    return dict(data.header(run))


def test_a_replay_says_no_baseline_and_peak_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    db = tmp_path / "replay.db"
    assert main(["replay", "matmul_bf16_h200_M16_N4096_K4096", "--budget", "8", "--db", str(db), "--quiet"]) == 0
    stands, text = _show(db, capsys)
    assert stands["baseline"] == "no baseline recorded"
    assert "no baseline recorded" in stands["speed-up"]
    assert stands["fraction of peak"].startswith("peak unknown")
    assert "baseline: no baseline recorded" in text and "fraction of peak: peak unknown" in text
    head = _header(db)
    assert head["baseline"] == "no baseline recorded" and head["fraction of peak"].startswith("peak unknown")


def test_a_run_with_a_baseline_shows_it_the_speed_up_and_the_fraction_of_peak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    db = tmp_path / "baseline.db"
    space = SearchSpace([PowerOfTwo("BM", 16, 256), PowerOfTwo("BN", 16, 64)], name="toy")
    opt = SearchOptions(population=4, report_elites=2, remeasure=1)
    report = Search(space, WithBaseline(), [PointMutation()], options=opt, store=SQLiteStore(db)).run(
        Budget(evaluations=8), seed=0
    )
    best = report.best.latency_ms
    stands, text = _show(db, capsys)
    assert stands["baseline"].startswith("1.5 ms")
    assert "graph" in stands["baseline"] and "32 calls per sample" in stands["baseline"]  # the footing
    assert stands["speed-up"].startswith(f"{1.5 / best:.3f}x")
    assert "same measurement" in stands["speed-up"]
    peak = stands["fraction of peak"]
    assert "M16: 42.0% of the measured peak" in peak
    assert "M4096: peak unknown" in peak  # a shape whose card's peak is not known says so
    assert f"speed-up: {1.5 / best:.3f}x" in text
    head = _header(db)
    assert head["speed-up"] == stands["speed-up"] and head["fraction of peak"] == peak
