"""`evokernel runs delete` and `evokernel runs rename`: a run goes with everything of it, in one
transaction, and nothing of another run goes with it; a run another process is running is
refused in one line; a rename refuses a name another run has. On SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from evokernel import Budget, Search
from evokernel.cli import main
from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator
from evokernel.store import open_store

LANDSCAPE = "matmul_bf16_h200_M16_N4096_K4096"


def _search(url: str, seed: int, name: str = "tidy") -> str:
    ev = ReplayEvaluator(builtin(LANDSCAPE))
    store = open_store(url)
    try:
        return Search(ev.space, ev, store=store, name=name).run(Budget(evaluations=24), seed=seed).run_id
    finally:
        store.close()


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(
        url.replace("postgresql://", "postgresql+psycopg://") if "://" in url else f"sqlite:///{url}"
    )


def _rows(url: str, sql: str, **params: object) -> list:
    engine = _engine(url)
    try:
        with engine.connect() as c:
            return list(c.execute(sa.text(sql), params))
    finally:
        engine.dispose()


def _begin(store, run_id: str, name: str = "busy"):
    return store.begin_run(run_id, name=name, archive_key="k", fingerprint="fp", config={}, environment={"pid": 4242})


def test_a_run_is_deleted_with_everything_of_it_and_nothing_of_another(store_url: str, capsys):
    first, second = _search(store_url, 0), _search(store_url, 1)
    store = open_store(store_url)
    before = store.count(second), len(store.history(second)), store.elites(run_id=second)
    store.close()
    # the second run reused results the first measured: those stay, as the second run's history
    reused = _rows(
        store_url,
        "SELECT COUNT(*) FROM evaluations e JOIN results r ON r.id = e.result_id WHERE e.run_id = :b AND r.run_id = :a",
        a=first,
        b=second,
    )[0][0]
    assert reused > 0, "the second run should reuse some of the first run's results"

    assert main(["runs", "delete", first, "--db", store_url]) == 0
    assert f"deleted run {first}" in capsys.readouterr().out

    for table in ("runs", "evaluations", "elites", "events", "claims", "lessons"):
        col = "id" if table == "runs" else "run_id"
        assert _rows(store_url, f"SELECT COUNT(*) FROM {table} WHERE {col} = :a", a=first)[0][0] == 0, table
    # of its results, only those the second run reused are left
    assert _rows(store_url, "SELECT COUNT(*) FROM results WHERE run_id = :a", a=first)[0][0] == reused
    orphans = _rows(
        store_url,
        "SELECT COUNT(*) FROM genomes g WHERE NOT EXISTS (SELECT 1 FROM results r WHERE r.genome_id = g.id)"
        " AND NOT EXISTS (SELECT 1 FROM evaluations e WHERE e.genome_id = g.id)"
        " AND NOT EXISTS (SELECT 1 FROM elites l WHERE l.genome_id = g.id)",
    )[0][0]
    assert orphans == 0
    store = open_store(store_url, create=False)
    assert [r.id for r in store.runs()] == [second]
    assert (store.count(second), len(store.history(second)), store.elites(run_id=second)) == before
    store.close()


def test_a_running_run_is_refused_in_one_line_and_a_killed_one_deleted(store_url: str, capsys):
    _search(store_url, 0)
    running = open_store(store_url)
    _begin(running, "busy-run")
    try:
        for argv in (["delete", "busy-run"], ["rename", "busy-run", "other"]):
            assert main(["runs", *argv, "--db", store_url]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "still running in another process (pid 4242)" in err, err
        assert len(_rows(store_url, "SELECT id FROM runs WHERE id = 'busy-run'")) == 1
    finally:
        running.close()  # as a killed process's: the run is still marked running, and nothing holds it
    assert main(["runs", "delete", "busy-run", "--db", store_url]) == 0
    assert _rows(store_url, "SELECT id FROM runs WHERE id = 'busy-run'") == []


def test_a_run_is_renamed_keeps_its_id_and_an_existing_name_is_refused(store_url: str, capsys):
    first, second = _search(store_url, 0, name="alpha"), _search(store_url, 1, name="beta")
    assert main(["runs", "rename", "alpha", "gamma", "--db", store_url]) == 0  # found by its name
    assert f"renamed run {first}: alpha -> gamma" in capsys.readouterr().out
    assert main(["runs", "rename", first[:6], "beta", "--db", store_url]) == 2  # by an id prefix
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run {second}" in err and "'beta' already" in err, err
    store = open_store(store_url, create=False)
    assert {r.id: r.name for r in store.runs()} == {first: "gamma", second: "beta"}
    store.close()
    assert _search(store_url, 0, name="alpha") == first  # the command that started it resumes it
    assert main(["runs", "delete", "nothing-like-it", "--db", store_url]) == 2
    assert "no run matches 'nothing-like-it'" in capsys.readouterr().err


def test_the_store_methods_refuse_what_the_command_refuses(tmp_path):
    url = str(tmp_path / "e.db")
    store = open_store(url)
    _begin(store, "r1", "one")
    from evokernel.core.errors import RunBusyError, StoreError

    with pytest.raises(RunBusyError, match="this process is running it"):
        store.delete_run("r1")
    store.finish_run("r1", "finished", {})
    _begin(store, "r2", "two")
    store.finish_run("r2", "finished", {})
    with pytest.raises(StoreError, match="named 'two' already"):
        store.rename_run("r1", "two")
    with pytest.raises(StoreError, match="cannot be empty"):
        store.rename_run("r1", " ")
    assert store.delete_run("r1")["runs"] == 1
    with pytest.raises(StoreError, match="no run"):
        store.delete_run("r1")
    store.close()
