"""Fidelity levels: a cascade judges cheaply first and promotes only the promising genomes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel import Budget, ConfigError, Promotion, Search, SearchOptions
from evokernel.core.archive import Archive, Verdict
from evokernel.core.evaluator import CAPABILITIES, HasFidelities, Observes
from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.engine.landscape import builtin
from evokernel.evaluators import Cascade, KernelEvaluator, ReplayEvaluator
from evokernel.evaluators.cascade import cascade_of
from evokernel.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"


def _full() -> ReplayEvaluator:
    return ReplayEvaluator(builtin(LANDSCAPE), noise=0.02, seed=3)


def _history(store: SQLiteStore, run_id: str) -> list[tuple[str, float | None, bool]]:
    return [(e.genome.id, e.result.latency_ms, e.result.estimated) for e in store.history(run_id) if e.kind == "eval"]


def test_the_capabilities_are_declared():
    assert HasFidelities in CAPABILITIES and Observes in CAPABILITIES
    full = _full()
    assert isinstance(full, HasFidelities) and isinstance(Cascade([*full.fidelities()]), Observes)
    cheap, again = full.fidelities()
    assert again is full and cheap.noise > full.noise and cheap.fidelity_name == "short"


def test_promoted_genomes_carry_full_figures_and_the_rest_can_never_be_elites():
    full = _full()
    store = SQLiteStore(":memory:")
    search = Search(full.space, full, options=SearchOptions(promotion=Promotion(margin=0.1)), store=store)
    report = search.run(Budget(evaluations=80), seed=1)
    cascade = search.evaluator
    assert isinstance(cascade, Cascade)
    split = cascade.split()
    assert split["evaluations"] == 80 and split["judged"]["short"] == 80
    assert 0 < split["promoted"] == split["judged"]["full"] < 80
    rows = [e for e in store.history(report.run_id) if e.kind == "eval"]
    results = [e.result for e in rows]
    measured = [r for r in results if r.is_ok and not r.estimated]
    estimated = [r for r in results if r.estimated]
    assert measured and estimated
    for r in estimated:  # a calibrated figure, labelled, with the cheap level's figure beside it
        info = r.meta["fidelity"]
        assert info["level"] == "short" and not info["promoted"] and "full" not in info["figures"]
        assert r.latency_ms == pytest.approx(info["figures"]["short"] * info["scale"])
    for r in measured:
        info = r.meta["fidelity"]
        assert (
            info["promoted"] and info["figures"]["full"] == r.latency_ms and set(info["seconds"]) == {"short", "full"}
        )
    # the elites are measured at full fidelity: the best is a promoted genome's own figure
    never_measured = {e.genome.id for e in rows if e.result.estimated}
    assert report.best is not None and not any(e.genome.id in never_measured for e in report.elites)
    assert report.best.first_ms == pytest.approx(min(r.latency_ms for r in measured))


def test_an_estimate_is_never_an_elite():
    archive = Archive()
    g = Genome.of({"x": 1})
    est = Result.ok(0.001, meta={"fidelity": {"estimated": True}})
    assert est.estimated and archive.consider(g, est) is Verdict.ESTIMATED and archive.best() is None
    assert archive.consider(g, Result.ok(0.002)).improved


def test_the_cascade_finds_what_full_judging_finds_at_a_fraction_of_the_full_judgements():
    """On the recorded landscape, with the cheap level five times as noisy: at the same
    number of genomes the cascade's best (true latency) matches full judging's, having judged
    under half of them in full."""
    fractions = {"full": [], "cascade": []}
    promoted = []
    for seed in range(3):
        for mode in fractions:
            full = _full()
            options = SearchOptions(promotion=Promotion() if mode == "cascade" else None)
            search = Search(full.space, full, options=options)
            report = search.run(Budget(evaluations=100), seed=seed)
            fractions[mode].append(full.landscape.optimum()[1] / full.true_latency(report.best.genome))
            if mode == "cascade":
                promoted.append(search.evaluator.split()["promoted"])
    assert sum(fractions["cascade"]) / 3 >= sum(fractions["full"]) / 3 - 0.02, fractions
    assert max(promoted) < 50, promoted


def test_a_resumed_run_promotes_as_the_uninterrupted_one(tmp_path):
    """The promotion bar and the calibration follow the run's results (`observed`): a run
    stopped after 40 genomes and resumed to 80 retraces the straight run of 80."""
    straight = SQLiteStore(str(tmp_path / "straight.db"))
    full = _full()
    opts = SearchOptions(promotion=Promotion(), patience=0)  # (the whole budget, both ways)
    a = Search(full.space, full, options=opts, store=straight).run(Budget(evaluations=80), seed=2)
    resumed = SQLiteStore(str(tmp_path / "resumed.db"))
    full = _full()
    Search(full.space, full, options=opts, store=resumed).run(Budget(evaluations=40), seed=2)
    full = _full()
    search = Search(full.space, full, options=opts, store=resumed)
    b = search.run(Budget(evaluations=80), seed=2)
    assert b.resumed and b.resumed_hits == 40 and b.measured == 40
    assert _history(resumed, b.run_id)[-80:] == _history(straight, a.run_id)
    assert search.evaluator.split()["evaluations"] == 40  # measured by this process


def test_options_without_promotion_keep_the_run_id_and_with_it_record_the_rule():
    full = _full()
    plain = Search(full.space, full).config(0)
    assert "promotion" not in plain["options"]
    ruled = Search(full.space, full, options=SearchOptions(promotion=Promotion(margin=0.2, top=2))).config(0)
    assert ruled["options"]["promotion"] == {"margin": 0.2, "top": 2, "share": 0.25}
    assert ruled["evaluator"]["evaluator"] == "cascade"
    assert [lv["name"] for lv in ruled["evaluator"]["levels"]] == ["short", "full"]


def test_bad_cascades_and_rules_are_refused_with_a_reason():
    full = _full()
    with pytest.raises(ConfigError, match="at least two levels"):
        Cascade([full])
    with pytest.raises(ConfigError, match="not an evaluator"):
        Cascade([full, object()])
    with pytest.raises(ConfigError, match="margin"):
        Promotion(margin=-1)

    class NoLevels:
        name = "flat"

        def fingerprint(self):
            return {"evaluator": "flat"}

        def evaluate(self, genomes):
            return [Result.ok(1.0) for _ in genomes]

    with pytest.raises(ConfigError, match="offers no fidelity levels"):
        cascade_of(NoLevels(), Promotion())


def test_a_cheap_level_failure_is_the_result_and_goes_no_further():
    full = _full()
    cascade = Cascade(full.fidelities())
    missing = Genome.of({**full.landscape.optimum()[0], "BM": 3})
    [r] = list(cascade.evaluate([missing]))
    assert not r.is_ok and r.meta["fidelity"]["level"] == "L0" and not r.meta["fidelity"]["promoted"]
    assert cascade.levels[1]._draws == {}  # the full level never saw it


def test_the_kernel_evaluators_cheap_level_is_one_shape_short_timing_no_heldout():
    ev = KernelEvaluator(
        ROOT / "examples" / "problems" / "matmul_bf16.py",
        lambda g: "",
        device="cpu",
        template="t",
    )
    ev.problem = ev.problem.on_cpu()
    cheap, again = ev.fidelities()
    assert again is ev and cheap.device == ev.device and cheap.template == ev.template
    assert len(cheap.problem.shapes) == 1 and cheap.problem.shapes[0] in ev.problem.shapes
    assert cheap.problem.heldout == [] and ev.problem.heldout
    assert cheap.options.timing["max_reps"] == 60 and cheap.fingerprint() != ev.fingerprint()
    assert cheap.fidelity_name.startswith("short@")


def test_the_cli_searches_with_fidelity_levels(tmp_path):
    db = tmp_path / "f.db"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "evokernel.cli",
            "replay",
            LANDSCAPE,
            "--budget",
            "40",
            "--fidelity",
            "0.05",
            "--json",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout)
    assert report["evaluations"] == 40 and math.isfinite(report["best_latency_ms"])
    store = SQLiteStore(str(db))
    [run] = store.runs()
    config = run.config
    assert config["options"]["promotion"]["margin"] == 0.05 and config["evaluator"]["evaluator"] == "cascade"
