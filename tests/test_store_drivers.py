"""Many drivers, one store: several search processes writing one database lose no result and
measure no genome twice; a genome another driver is measuring is waited for and reused; a
dead driver's claims hold nothing up. On PostgreSQL (the store made for it) and SQLite."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from evokernel import Budget, Search
from evokernel.core.evaluator import fingerprint_hash
from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator
from evokernel.store import open_store

SMALL, LARGE = "matmul_bf16_h200_M16_N4096_K4096", "matmul_bf16_h200_M2048_N6144_K4096"

# a replay search whose drivers start measuring together (a barrier of files), slowly enough
# to overlap: EVOKERNEL_TEST_BARRIER (a folder), EVOKERNEL_TEST_DRIVERS (how many)
TARGET = """
import os, time
from pathlib import Path
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin

barrier = Path(os.environ["EVOKERNEL_TEST_BARRIER"])
(barrier / str(os.getpid())).touch()
deadline = time.monotonic() + 60
while len(list(barrier.iterdir())) < int(os.environ["EVOKERNEL_TEST_DRIVERS"]) and time.monotonic() < deadline:
    time.sleep(0.01)

evaluator = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"), delay_s=0.02)
space = evaluator.space
"""


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(
        url.replace("postgresql://", "postgresql+psycopg://") if "://" in url else f"sqlite:///{url}"
    )


def _measured_twice(url: str) -> list:
    """(genome, fingerprint) pairs measured by more than one search evaluation (re-measurements of
    elites are each run's own, and not counted)."""
    engine = _engine(url)
    with engine.connect() as c:
        rows = c.execute(
            sa.text(
                "SELECT r.genome_id, r.fingerprint, COUNT(*) FROM results r JOIN evaluations e"
                " ON e.result_id = r.id AND e.kind = 'eval' AND e.cached = 0"
                " GROUP BY r.genome_id, r.fingerprint HAVING COUNT(*) > 1"
            )
        ).all()
        orphans = c.execute(
            sa.text("SELECT COUNT(*) FROM results WHERE id NOT IN (SELECT result_id FROM evaluations)")
        ).scalar()
    engine.dispose()
    assert orphans == 0, f"{orphans} results no evaluation refers to"
    return rows


def _search(evokernel_cmd: list[str], what: str, url: str, budget: int, seed: int, *extra: str) -> list[str]:
    # the whole budget (no early stop): the counts below are the budget
    return [
        *evokernel_cmd,
        "search",
        what,
        "--db",
        url,
        "--budget",
        str(budget),
        "--patience",
        "0",
        "--seed",
        str(seed),
        "--json",
        *extra,
    ]


@pytest.mark.slow
def test_four_drivers_on_one_postgres_lose_nothing_and_measure_nothing_twice(
    pg_url: str, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    budget = 80
    drivers = [(SMALL, 1), (SMALL, 2), (LARGE, 1), (LARGE, 2)]  # two shapes, two seeds each
    procs = [
        subprocess.Popen(
            _search(evokernel_cmd, shape, pg_url, budget, seed, "--quiet"),
            env=cli_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for shape, seed in drivers
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    store = open_store(pg_url, create=False)
    try:
        runs = store.runs()
        assert sorted(r.id for r in runs) == sorted(r["run_id"] for r in reports)
        assert all(r.status == "finished" for r in runs)
        total = {"results": 0, "evaluations": 0}
        for report in reports:
            counts = store.count(report["run_id"])
            assert counts["evaluations"] == counts["distinct_genomes"] == budget == report["evaluations"]
            assert report["measured"] + report["reused"] == budget
            assert counts["measured"] == report["measured"] + counts["remeasurements"]
            total["results"] += counts["measured"]
            total["evaluations"] += counts["evaluations"] + counts["remeasurements"]
        whole = store.count()
        assert whole["results"] == total["results"] and whole["evaluations"] == total["evaluations"]
    finally:
        store.close()
    assert _measured_twice(pg_url) == []


@pytest.mark.slow
def test_two_drivers_proposing_the_same_genomes_measure_each_once(
    store_url: str, tmp_path: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    target, barrier = tmp_path / "target.py", tmp_path / "barrier"
    target.write_text(TARGET)
    barrier.mkdir()
    env = {**cli_env, "EVOKERNEL_TEST_BARRIER": str(barrier), "EVOKERNEL_TEST_DRIVERS": "2"}
    # the same seed under two names: two runs proposing the same genomes, at the same time
    procs = [
        subprocess.Popen(
            _search(evokernel_cmd, str(target), store_url, 48, 5, "--name", name, "--quiet"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("left", "right")
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    assert reports[0]["run_id"] != reports[1]["run_id"]
    assert [r["best_ids"] for r in reports][0] == reports[1]["best_ids"]  # one search, told twice
    assert all(r["measured"] + r["reused"] == 48 for r in reports)
    # every genome measured once: what one driver measured, the other waited for and reused
    assert reports[0]["measured"] + reports[1]["measured"] == 48
    assert _measured_twice(store_url) == []


def _first_generation(ev: ReplayEvaluator, seed: int) -> list:
    scratch = open_store(":memory:")
    Search(ev.space, ev, store=scratch).run(Budget(evaluations=8), seed=seed)
    [run] = scratch.runs()
    return [e.genome for e in scratch.history(run.id) if e.kind == "eval"]


def test_a_genome_another_live_driver_holds_is_waited_for_and_reused(store_url: str):
    ev = ReplayEvaluator(builtin(SMALL))
    genomes, fp = _first_generation(ev, seed=4), fingerprint_hash(ev.fingerprint())
    other = open_store(store_url)
    other.begin_run("other", name="o", archive_key="k", fingerprint=fp, config={}, environment={})
    assert other.claim("other", [g.id for g in genomes], fp, "other-driver", 600) == {g.id for g in genomes}

    def measure_later() -> None:  # the other driver measures them, a little later
        time.sleep(1.0)
        for seq, (g, result) in enumerate(zip(genomes, ReplayEvaluator(builtin(SMALL)).evaluate(genomes))):
            other.record("other", seq, g, fp, result)
        other.release("other-driver")

    thread = threading.Thread(target=measure_later)
    thread.start()
    store = open_store(store_url)
    try:
        t0 = time.monotonic()
        report = Search(ev.space, ev, store=store).run(Budget(evaluations=8), seed=4)
        thread.join()
        assert report.reused == 8 and report.measured == 0 and time.monotonic() - t0 >= 0.9
        assert _measured_twice(store_url) == []
    finally:
        store.close()
        other.close()


def test_a_dead_drivers_claims_hold_nothing_up(store_url: str):
    ev = ReplayEvaluator(builtin(SMALL))
    genomes, fp = _first_generation(ev, seed=6), fingerprint_hash(ev.fingerprint())
    ghost = open_store(store_url)
    # claimed for 10 minutes by a run no process is running (its driver was killed)
    assert ghost.claim("killed-run", [g.id for g in genomes], fp, "host:1:killed-run", 600)
    ghost.close()
    store = open_store(store_url)
    try:
        t0 = time.monotonic()
        report = Search(ev.space, ev, store=store).run(Budget(evaluations=8), seed=6)
        assert report.measured == 8 and time.monotonic() - t0 < 30
    finally:
        store.close()
