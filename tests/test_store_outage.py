"""A PostgreSQL outage in the middle of a search (issue 52, item 3), on a real server of the
test's own (`pg_ctl stop -m fast`, as a restart or a crash ends every session): back within
the store's retry time, the search goes on and finishes; down for longer, the search ends in
one line with everything recorded before the outage kept, and the same command resumes it."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evokernel import Budget, Search, SearchOptions
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin
from evokernel.store import open_store
from evokernel.testing.postgres import PostgresServer

pytestmark = pytest.mark.slow  # a server of its own (initdb), stopped and started

LANDSCAPE = "matmul_bf16_h200_M8192_N8192_K1024"
TARGET = f"""
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin
from evokernel.search_spaces import matmul_space

space = matmul_space()
evaluator = ReplayEvaluator(builtin({LANDSCAPE!r}), delay_s=0.05)
name = "outage-test"
"""


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    srv = PostgresServer()
    try:
        yield srv
    finally:
        srv.stop()


def _count(url: str) -> int:
    """Evaluations stored so far (0 while the server is down or the schema not made)."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return int(conn.execute("SELECT count(*) FROM evaluations").fetchone()[0])
    except Exception:  # noqa: BLE001 - not there yet
        return 0


def _wait_for(cond: Any, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_a_search_survives_the_server_going_down_and_coming_back(server: PostgresServer):
    url = server.create_database("outage")
    ev = ReplayEvaluator(builtin(LANDSCAPE), delay_s=0.03)
    out: dict[str, Any] = {}

    def search() -> None:
        try:
            store = open_store(url)
            out["report"] = Search(ev.space, ev, store=store, options=SearchOptions(population=4, patience=0)).run(
                Budget(evaluations=60), seed=1
            )
            store.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["raised"] = exc

    thread = threading.Thread(target=search, daemon=True)
    thread.start()
    _wait_for(lambda: _count(url) >= 12, 60)
    server.down()  # (was: a 186-line traceback, exit 1)
    time.sleep(3.0)
    server.up()
    thread.join(90)
    assert not thread.is_alive()
    assert "raised" not in out, f"{type(out['raised']).__name__}: {out['raised']}"
    report = out["report"]
    assert report.evaluations == 60 and report.stop_reason == "budget: evaluations"
    store = open_store(url, create=False)
    evals = [e for e in store.history(report.run_id) if e.kind == "eval"]
    assert sorted(e.seq for e in evals) == list(range(60))  # (none lost, none twice)
    assert store.run(report.run_id).status == "finished"
    store.close()


def test_a_server_that_stays_down_ends_the_search_in_one_line_and_keeps_what_was_found(
    server: PostgresServer, tmp_path: Path, cli_env: dict[str, str], evokernel_cmd: list[str]
):
    url = server.create_database("outage")
    target = tmp_path / "target.py"
    target.write_text(TARGET)
    cmd = [
        *evokernel_cmd,
        "search",
        str(target),
        "--db",
        url,
        "--budget",
        "80",
        "--patience",
        "0",
        "--seed",
        "3",
        "--quiet",
    ]
    env = {**cli_env, "EVOKERNEL_STORE_RETRY_S": "3"}
    errors = tmp_path / "stderr.txt"
    with errors.open("w") as sink:  # (a file, not a pipe nobody reads while it runs)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=sink, text=True)
    try:
        _wait_for(lambda: _count(url) >= 12 or proc.poll() is not None, 60)
        assert proc.poll() is None, errors.read_text()[-3000:]
        server.down()
        t0 = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = errors.read_text()
    assert proc.returncode != 0 and took < 20, (proc.returncode, took)
    assert "Traceback" not in err, err[-3000:]
    ours = [ln for ln in err.splitlines() if ln.startswith("evokernel:")]
    assert len(ours) == 1 and "unreachable after 3 s of retries" in ours[0] and "resume" in ours[0], err[-3000:]
    server.up()
    kept = _count(url)
    assert kept >= 12
    # the same command resumes: what was stored is not measured again, and the run finishes
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    store = open_store(url, create=False)
    [run] = store.runs()
    evals = [e for e in store.history(run.id) if e.kind == "eval"]
    assert run.status == "finished" and sorted(e.seq for e in evals) == list(range(80))
    store.close()
