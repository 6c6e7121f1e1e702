"""Kill a real search process with SIGKILL mid-run, re-run the same command, and prove
from the database that nothing was evaluated twice and nothing was lost: on an SQLite file
and on PostgreSQL (`store_url`)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from evokernel.store import open_store

BUDGET = 120

TARGET = '''
import os
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin
from evokernel.search_spaces import matmul_space, tile_class

class Logged(ReplayEvaluator):
    """Appends the id of every genome it measures to a log, before returning the result."""
    def _one(self, genome):
        result = super()._one(genome)
        with open(os.environ["EVOKERNEL_TEST_LOG"], "a") as f:
            f.write(genome.id + "\\n")
        return result

space = matmul_space()
evaluator = Logged(builtin("matmul_bf16_h200_M8192_N8192_K1024"), noise=0.03, delay_s=0.008)
descriptor = tile_class
name = "resume-test"
'''


def _cmd(evokernel: list[str], target: Path, db: Path | str) -> list[str]:
    # --patience 0: the kill points count on the whole budget (the default early stop would end the run sooner)
    return [
        *evokernel, "search", str(target), "--db", str(db), "--budget", str(BUDGET), "--seed", "11", "--json",
        "--patience", "0",
    ]  # fmt: skip


def _env(cli_env: dict[str, str], log: Path) -> dict[str, str]:
    return {**cli_env, "EVOKERNEL_TEST_LOG": str(log)}


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _eval_ids(db: Path | str, run_id: str) -> list[str]:
    store = open_store(db, create=False)
    try:
        return [e.genome.id for e in store.history(run_id) if e.kind == "eval"]
    finally:
        store.close()


@pytest.fixture
def target(tmp_path: Path) -> Path:
    path = tmp_path / "search_target.py"
    path.write_text(TARGET)
    return path


@pytest.fixture
def reference(tmp_path: Path, target: Path, cli_env: dict[str, str], evokernel_cmd: list[str]) -> dict:
    db, log = tmp_path / "ref.db", tmp_path / "ref.log"
    out = subprocess.run(
        _cmd(evokernel_cmd, target, db), env=_env(cli_env, log), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    report["history"] = _eval_ids(db, report["run_id"])
    return report


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [1, 45, BUDGET + 3])  # first generation, mid-run, re-measuring
def test_sigkill_then_rerun_resumes_without_repeats_or_losses(
    tmp_path: Path,
    target: Path,
    cli_env: dict[str, str],
    evokernel_cmd: list[str],
    reference: dict,
    kill_after: int,
    store_url: str,
):
    db, log = store_url, tmp_path / "run.log"
    env = _env(cli_env, log)
    proc = subprocess.Popen(
        _cmd(evokernel_cmd, target, db), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while len(_lines(log)) < kill_after and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert proc.poll() is None, "the search finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = _lines(log)

    # the database is intact and holds what was measured before the kill
    if not db.startswith("postgresql://"):
        con = sqlite3.connect(db)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.close()
    store = open_store(db, create=False)
    [run] = store.runs()
    run_id, status = run.id, run.status
    stored_before = {e.genome.id for e in store.history(run_id)}  # (every result is this run's)
    assert store.count()["results"] == store.count(run_id)["measured"]
    store.close()
    assert status == "running" and run_id == reference["run_id"]
    assert len(set(killed) - stored_before) <= 1  # at most the evaluation in flight is lost

    out = subprocess.run(_cmd(evokernel_cmd, target, db), env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    after = _lines(log)[len(killed) :]

    store = open_store(db, create=False)
    counts = store.count(run_id)
    assert counts["evaluations"] == counts["distinct_genomes"] == counts["measured"] - counts["remeasurements"]
    assert counts["evaluations"] == BUDGET and report["resumed"] and report["evaluations"] == BUDGET
    # every evaluator call of both processes is a stored measurement, except at most the one
    # in flight at the kill (measured again after the restart): nothing was evaluated twice
    calls = len(killed) + len(after)
    assert counts["measured"] <= calls <= counts["measured"] + 1
    # and nothing measured before the kill was lost
    eval_ids = {e.genome.id for e in store.history(run_id) if e.kind == "eval"}
    assert set(killed) <= eval_ids
    # and the resumed run retraced the uninterrupted run exactly
    assert _eval_ids(db, run_id) == reference["history"]
    assert report["trace"] == reference["trace"] and report["best_ids"] == reference["best_ids"]
    assert store.runs()[0].status == "finished"
    store.close()
