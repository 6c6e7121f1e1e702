"""The default early stop: a search whose best has not improved by more than 0.5% (relative) for
8 generations stops, with the stop reason 'no improvement in 8 generations'; `--patience 0` /
`SearchOptions(patience=0)` runs the whole budget; a run's id is the same at the default and off
(what runs before the early stop recorded)."""

from __future__ import annotations

import json

import pytest

from evokernel import Budget, ConfigError, Search, SearchOptions
from evokernel.cli import main
from evokernel.engine.landscape import builtin
from evokernel.engine.options import DEFAULT_PATIENCE, MIN_IMPROVEMENT
from evokernel.evaluators import ReplayEvaluator
from evokernel.mutators import PointMutation, RandomRestart
from evokernel.store import open_store

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"  # 480 points; the model strategy finds its best early
BUDGET = 400


def _replay(tmp_path, *extra: str) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = str(tmp_path / "run.db")
    code = main(["replay", LANDSCAPE, "--budget", str(BUDGET), "--db", db, "--quiet", "--json", *extra])
    assert code == 0
    store = open_store(db, create=False)
    (run,) = store.runs()
    return {"run": run, "evaluations": store.count(run.id)["evaluations"]}


def test_a_replay_that_found_its_best_early_stops_before_its_budget(tmp_path, capsys) -> None:
    got = _replay(tmp_path)
    report = json.loads(capsys.readouterr().out)
    assert report["stop_reason"] == f"no improvement in {DEFAULT_PATIENCE} generations"
    assert got["run"].summary["stop_reason"] == report["stop_reason"]
    assert report["evaluations"] < BUDGET and got["evaluations"] < BUDGET


def test_patience_0_runs_the_whole_budget_and_keeps_the_run_id(tmp_path, capsys) -> None:
    early = _replay(tmp_path / "a")
    capsys.readouterr()
    full = _replay(tmp_path / "b", "--patience", "0")
    report = json.loads(capsys.readouterr().out)
    assert report["stop_reason"] == "budget: evaluations" and report["evaluations"] == BUDGET
    assert full["run"].id == early["run"].id  # the early stop is no part of the run's identity


def _search(options: SearchOptions) -> Search:
    ev = ReplayEvaluator(builtin(LANDSCAPE))
    return Search(ev.space, ev, mutators=[PointMutation(), RandomRestart()], options=options)


def test_default_identity_is_what_runs_before_the_early_stop_recorded() -> None:
    default, off = _search(SearchOptions()), _search(SearchOptions(patience=0))
    # the ids these searches had before the default early stop existed (computed at commit 1ca87c3)
    assert default.run_id(0) == "0dacbd674ce6c08d"
    assert _search(SearchOptions(patience=3)).run_id(0) == "5c00fc8479cda794"
    assert default.config(0)["options"]["patience"] is None
    assert "min_improvement" not in default.config(0)["options"]
    assert default.run_id(0) == off.run_id(0)
    assert _search(SearchOptions(patience=3)).config(0)["options"]["patience"] == 3  # as recorded before
    assert SearchOptions().stop_after == DEFAULT_PATIENCE and SearchOptions(patience=0).stop_after is None
    assert MIN_IMPROVEMENT == 0.005


def test_gains_below_the_threshold_do_not_restart_the_count() -> None:
    """A best creeping down by 0.02% a generation (4 evaluations of 0.005% each) is no improvement:
    patience runs out; counted from the best when the count restarted, not generation by generation."""

    class Creeping:
        name = "creeping"

        def __init__(self) -> None:
            self.n = 0

        def fingerprint(self):
            return {"evaluator": "creeping"}

        def evaluate(self, genomes):
            from evokernel import Result

            for _ in genomes:
                self.n += 1
                yield Result.ok(0.99995**self.n)

    space = ReplayEvaluator(builtin(LANDSCAPE)).space
    opts = SearchOptions(population=4, patience=3, remeasure=0)
    report = Search(space, Creeping(), mutators=[RandomRestart()], options=opts).run(Budget(evaluations=200), seed=0)
    assert report.stop_reason == "no improvement in 3 generations" and report.evaluations < 200
    loose = SearchOptions(population=4, patience=3, remeasure=0, min_improvement=0.0)
    report = Search(space, Creeping(), mutators=[RandomRestart()], options=loose).run(Budget(evaluations=60), seed=0)
    assert report.stop_reason == "budget: evaluations"


@pytest.mark.parametrize("bad", [dict(patience=-1), dict(min_improvement=-0.1), dict(min_improvement=1.0)])
def test_bad_patience_is_a_config_error(bad) -> None:
    with pytest.raises(ConfigError):
        SearchOptions(**bad)
