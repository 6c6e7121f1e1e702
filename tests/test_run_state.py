"""Issue 27, data and state, hangs and faults: what a run leaves in its database when it is
started twice, killed, piped into `head`, resumed with noise, hung, or broken by its
evaluator. Real processes (the CLI) wherever processes matter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from evokernel import Budget, Search
from evokernel.core.errors import EvaluatorError
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import Landscape, builtin
from evokernel.core.result import Result
from evokernel.engine.search import SearchOptions
from evokernel.store import SQLiteStore, open_store

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"

# a search file whose evaluator logs every genome it measures, sleeps `EVOKERNEL_TEST_DELAY`
# per genome, and from the `EVOKERNEL_TEST_HANG_AT`-th measurement on hangs or raises
TARGET = """
import os, time
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin

class Logged(ReplayEvaluator):
    n = 0
    def _one(self, genome):
        Logged.n += 1
        at = int(os.environ.get("EVOKERNEL_TEST_HANG_AT", "0"))
        if at and Logged.n >= at:
            if os.environ.get("EVOKERNEL_TEST_EXIT"):
                raise SystemExit(int(os.environ["EVOKERNEL_TEST_EXIT"]))
            time.sleep(3600)
        time.sleep(float(os.environ.get("EVOKERNEL_TEST_DELAY", "0")))
        with open(os.environ["EVOKERNEL_TEST_LOG"], "a") as f:
            f.write(genome.id + "\\n")
        return super()._one(genome)

evaluator = Logged(builtin("matmul_bf16_h200_M16_N4096_K4096"))
space = evaluator.space
name = "state-test"
"""


@pytest.fixture
def target(tmp_path: Path) -> Path:
    path = tmp_path / "target.py"
    path.write_text(TARGET)
    return path


def _env(cli_env: dict[str, str], log: Path, **extra: str) -> dict[str, str]:
    return {**cli_env, "EVOKERNEL_TEST_LOG": str(log), **{f"EVOKERNEL_TEST_{k.upper()}": v for k, v in extra.items()}}


def _runs(db: Path | str) -> list:
    store = open_store(db, create=False)
    try:
        return store.runs()
    finally:
        store.close()


# -- data and state ----------------------------------------------------------------------
@pytest.mark.slow
def test_the_same_search_started_twice_runs_once_and_the_second_is_refused_in_one_line(
    tmp_path: Path, target: Path, cli_env: dict[str, str], evokernel_cmd: list[str], store_url: str
):
    db, log = store_url, tmp_path / "twice.log"
    cmd = [*evokernel_cmd, "search", str(target), "--db", str(db), "--budget", "60", "--json"]
    env = _env(cli_env, log, delay="0.1")
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)  # the first is measuring
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert second.returncode == 2 and second.stdout == ""
    assert second.stderr.count("\n") == 1 and "already running in another process" in second.stderr
    assert "Traceback" not in second.stderr
    [run] = _runs(db)
    assert run.status == "finished"
    store = open_store(db, create=False)
    counts = store.count(run.id)
    # no genome measured twice: every measurement the evaluator made is the first run's own
    # (60 evaluations, each of a distinct genome, plus its re-measurements of the elites)
    assert counts["evaluations"] == counts["distinct_genomes"] == 60
    assert len(log.read_text().split()) == counts["measured"] == 60 + counts["remeasurements"]
    store.close()
    # once the first is done, the same command reads its results back, measuring nothing
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and json.loads(again.stdout)["measured"] == 0


class TooMany:
    """Yields one result more than it was given genomes (a stale result first)."""

    name = "too-many"

    def __init__(self, inner: ReplayEvaluator, *, as_list: bool) -> None:
        self.inner, self.as_list, self.calls = inner, as_list, 0

    def fingerprint(self) -> dict:
        return {"evaluator": "too-many"}

    def evaluate(self, genomes):
        self.calls += 1
        out = list(self.inner.evaluate(genomes))
        if self.calls == 2:
            out = [Result.ok(0.001)] + out  # the second batch: everything attributed one genome late
        return out if self.as_list else iter(out)


@pytest.mark.parametrize("as_list", [True, False])
def test_an_evaluator_that_returns_more_results_than_genomes_fails_and_stores_none_of_them(
    small: Landscape, as_list: bool, store_url: str
):
    store = open_store(store_url)
    ev = TooMany(ReplayEvaluator(small), as_list=as_list)
    with pytest.raises(EvaluatorError, match="more results than genomes"):
        Search(small.space, ev, options=SearchOptions(population=4), store=store).run(Budget(evaluations=20))
    [run] = store.runs()
    assert run.status == "failed"
    history = [e for e in store.history(run.id) if e.kind == "eval"]
    assert len(history) == 4  # the first generation; nothing of the batch that cannot be matched
    assert all(e.result.latency_ms != 0.001 for e in history)
    assert store.count()["results"] == 4


def _closed_pipe() -> int:
    """The write end of a pipe whose reader is gone: every write to it fails with EPIPE."""
    r, w = os.pipe()
    os.close(r)
    return w


@pytest.mark.slow
@pytest.mark.parametrize("closed", ["stdout", "stdout+stderr"])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_closed_pipe_never_changes_a_run(
    tmp_path: Path, cli_env: dict[str, str], evokernel_cmd: list[str], closed: str, as_json: bool
):
    db = tmp_path / "pipe.db"
    cmd = [*evokernel_cmd, "search", LANDSCAPE, "--db", str(db), "--budget", "30", *(["--json"] if as_json else [])]
    done = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [before] = _runs(db)
    w = _closed_pipe()
    try:
        err_to = w if closed == "stdout+stderr" else subprocess.PIPE
        piped = subprocess.run(cmd, env=cli_env, stdout=w, stderr=err_to, text=True, timeout=120)
    finally:
        os.close(w)
    assert piped.returncode == 141  # as a command killed by SIGPIPE
    assert not piped.stderr or "Traceback" not in piped.stderr and "Broken pipe" not in piped.stderr
    [after] = _runs(db)
    assert after.status == "finished" and after.summary["best_ms"] == before.summary["best_ms"]
    assert "error" not in after.summary


@pytest.mark.slow
def test_show_reports_best_so_far_of_a_failed_run_killed_runs_and_the_replayed_gpu(
    tmp_path: Path, target: Path, cli_env: dict[str, str], evokernel_cmd: list[str], store_url: str
):
    db, log = store_url, tmp_path / "show.log"
    # a run whose evaluator breaks after 20 measurements: failed, with its best so far
    broken = subprocess.run(
        [*evokernel_cmd, "search", str(target), "--db", str(db), "--budget", "40", "--json"],
        env=_env(cli_env, log, hang_at="21", exit="3"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert broken.returncode == 1
    # a run killed with SIGKILL while measuring
    proc = subprocess.Popen(
        [*evokernel_cmd, "search", str(target), "--db", str(db), "--budget", "40", "--seed", "1", "--json"],
        env=_env(cli_env, log, delay="0.05"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while len(log.read_text().split()) < 20 + 18 and time.monotonic() < deadline:  # two generations
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    # a replay of an H200 landscape, on this CPU-only machine
    assert (
        subprocess.run(
            [*evokernel_cmd, "search", LANDSCAPE, "--db", str(db), "--budget", "16", "--quiet"],
            env=cli_env,
            capture_output=True,
            timeout=60,
        ).returncode
        == 0
    )
    shown = subprocess.run(
        [*evokernel_cmd, "show", str(db), "--json"], env=cli_env, capture_output=True, text=True, timeout=60
    )
    failed, killed, replay = json.loads(shown.stdout)["runs"]
    assert failed["status"] == "failed" and failed["summary"]["best_ms"] > 0
    assert "SystemExit: 3" in failed["summary"]["error"]
    assert killed["status"] == "killed"
    text = subprocess.run(
        [*evokernel_cmd, "show", str(db)], env=cli_env, capture_output=True, text=True, timeout=60
    ).stdout
    # columns: run, name, status, evaluations, best ms, gpu, started
    rows = {
        cells[0]: cells
        for cells in ([c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.count("│") == 8)
    }
    assert rows[failed["id"]][2] == "failed" and rows[failed["id"]][4] == f"{failed['summary']['best_ms']:.6f}"
    assert rows[killed["id"]][2] == "killed" and float(rows[killed["id"]][4]) > 0
    assert rows[replay["id"]][5] == "H200 (replay)"


@pytest.mark.slow
def test_an_interrupted_run_keeps_its_best_so_far(
    tmp_path: Path, target: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    db, log = tmp_path / "int.db", tmp_path / "int.log"
    proc = subprocess.Popen(
        # a budget it cannot finish before the Ctrl-C, even when this process is starved of CPU
        # for seconds on a loaded machine (CI: 60 evaluations of 0.05 s once finished first)
        [*evokernel_cmd, "search", str(target), "--db", str(db), "--budget", "2000", "--json"],
        env=_env(cli_env, log, delay="0.05"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (log.exists() and len(log.read_text().split()) >= 20) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err, err[-3000:]
    [run] = _runs(db)
    assert run.status == "interrupted" and run.summary["evaluations"] >= 20 and run.summary["best_ms"] > 0
    shown = subprocess.run([*evokernel_cmd, "show", str(db)], env=cli_env, capture_output=True, text=True, timeout=60)
    assert f"{run.summary['best_ms']:.6f}" in shown.stdout


class _Killed(ReplayEvaluator):
    """Stops the process (as a kill would) at its `at`-th measurement."""

    def __init__(self, *args, at: int, **kw) -> None:
        super().__init__(*args, **kw)
        self.at, self.n = at, 0

    def _one(self, genome):
        self.n += 1
        if self.n == self.at:
            raise KeyboardInterrupt
        return super()._one(genome)


@pytest.mark.slow
def test_a_resumed_noisy_replay_ends_where_the_uninterrupted_run_does(tmp_path: Path, store_url: str):
    def search(store: Any, kill_at: int = 0):  # a fresh evaluator: as a fresh process has
        ev = (
            _Killed(builtin(LANDSCAPE), noise=0.05, seed=3, at=kill_at)
            if kill_at
            else ReplayEvaluator(builtin(LANDSCAPE), noise=0.05, seed=3)
        )
        return Search(ev.space, ev, store=store).run(Budget(evaluations=120), seed=3)

    whole = search(SQLiteStore(tmp_path / "whole.db"))
    parts = open_store(store_url)
    with pytest.raises(KeyboardInterrupt):
        search(parts, kill_at=101)  # killed after 100 evaluations, before re-measuring its elites ...
    resumed = search(parts)  # ... and resumed by another process
    assert resumed.resumed and resumed.resumed_hits == 100
    assert resumed.best_ids == whole.best_ids
    assert [(e.genome.id, e.samples) for e in resumed.elites] == [(e.genome.id, e.samples) for e in whole.elites]
    assert resumed.best.latency_ms == whole.best.latency_ms


# -- hangs and faults --------------------------------------------------------------------
@pytest.mark.slow
def test_the_wall_time_stops_an_evaluation_that_hangs(
    tmp_path: Path, target: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    db, log = tmp_path / "hang.db", tmp_path / "hang.log"
    t0 = time.monotonic()
    out = subprocess.run(
        # the default strategy: the count below assumes its start-up (the matmul family's own,
        # `model`, first loads and fits its priors, seconds on a loaded machine)
        [*evokernel_cmd, "search", str(target), "--db", str(db), "--budget", "100", "--wall-time", "4", "--json"]
        + ["--strategy", "default"],
        env=_env(cli_env, log, hang_at="12"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert took < 4 + 10  # the budget, plus starting Python and importing
    report = json.loads(out.stdout)
    assert report["stop_reason"] == "budget: wall time" and report["evaluations"] == 11
    assert report["best"] is not None and report["skipped"]["stopped by the wall time"] == 1
    [run] = _runs(db)
    store = SQLiteStore(db, create=False)
    [stop] = [p for kind, p, _ in store.events(run.id) if kind == "wall_time_stop"]
    assert run.status == "finished" and stop["genome"] not in log.read_text()


def test_an_evaluator_raising_system_exit_fails_the_run_with_one_line(
    tmp_path: Path, target: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    db, log = tmp_path / "exit.db", tmp_path / "exit.log"
    out = subprocess.run(
        [*evokernel_cmd, "search", str(target), "--db", str(db), "--budget", "30", "--quiet"],
        env=_env(cli_env, log, hang_at="5", exit="3"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "SystemExit: 3" in out.stderr and "Traceback" not in out.stderr
    [run] = _runs(db)
    assert run.status == "failed" and run.summary["evaluations"] == 4
