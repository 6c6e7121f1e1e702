"""The store's behaviour on both back ends (`store_url`: an SQLite file, a PostgreSQL
database), and what is SQLite's own: its file checks and WAL mode."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from evokernel import ConfigError, Genome, Result, Status, StoreError
from evokernel.core.archive import Elite
from evokernel.store import CompleteStore, SQLiteStore, Store, open_store


@pytest.fixture
def store(store_url: str) -> Iterator[CompleteStore]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


def _run(store: Store, rid: str = "r1", key: str = "k") -> None:
    store.begin_run(rid, name="t", archive_key=key, fingerprint="fp", config={"x": 1}, environment={"gpu": None})


def test_store_protocol_and_wal(tmp_path: Path):
    store = open_store(tmp_path / "e.db")
    assert isinstance(store, Store)
    mode = sqlite3.connect(tmp_path / "e.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_lookup_prefers_this_run_then_reuses_earlier_runs(store: CompleteStore):
    g = Genome.of({"x": 1}, operator="point", parents=("p",), generation=2)
    _run(store, "r1")
    assert store.lookup("r1", g.id, "fp") is None
    store.record("r1", 0, g, "fp", Result.ok(0.5))
    hit = store.lookup("r1", g.id, "fp")
    assert hit.in_run and hit.result.latency_ms == 0.5
    _run(store, "r2")
    hit2 = store.lookup("r2", g.id, "fp")
    assert not hit2.in_run and hit2.result_id == hit.result_id
    assert store.lookup("r2", g.id, "other-gpu") is None
    store.record("r2", 0, g, "fp", hit2.result, reuse=hit2.result_id)
    assert store.count() == {"genomes": 1, "results": 1, "evaluations": 2, "runs": 2}
    assert store.count("r2")["cached"] == 1
    [ev] = store.history("r1")
    assert ev.genome.lineage.operator == "point" and ev.genome.lineage.parents == ("p",)


def test_a_genome_is_evaluated_once_per_run(store: CompleteStore):
    _run(store)
    g = Genome.of({"x": 1})
    store.record("r1", 0, g, "fp", Result.ok(0.5))
    with pytest.raises(sa.exc.IntegrityError):
        store.record("r1", 1, g, "fp", Result.ok(0.4))
    assert store.count()["results"] == 1  # the failed transaction left nothing behind


def test_failures_round_trip(store: CompleteStore):
    _run(store)
    g = Genome.of({"x": 2})
    store.record("r1", 0, g, "fp", Result.failed(Status.TIMEOUT, "hung for 60 s"))
    r = store.lookup("r1", g.id, "fp").result
    assert r.status is Status.TIMEOUT and r.error == "hung for 60 s" and not r.is_ok


def test_remeasurements_and_elites(store: CompleteStore):
    _run(store, "r1", "k")
    g1, g2 = Genome.of({"x": 1}), Genome.of({"x": 2})
    store.record_remeasurement("r1", 0, g1, "fp", Result.ok(0.5))
    store.record_remeasurement("r1", 0, g2, "fp", Result.ok(0.6))
    assert store.remeasurement("r1", g1.id, 0).latency_ms == 0.5
    assert store.remeasurement("r1", g1.id, 1) is None
    store.save_elites("r1", "k", [Elite(niche="a", genome=g1, latency_ms=0.5)])
    _run(store, "r2", "k")
    store.save_elites(
        "r2", "k", [Elite(niche="a", genome=g2, latency_ms=0.4), Elite(niche="b", genome=g1, latency_ms=0.9)]
    )
    assert [e.latency_ms for e in store.elites(archive_key="k")] == [0.4, 0.9]
    assert [e.latency_ms for e in store.elites(archive_key="k", before_seq=2)] == [0.5]
    assert store.elites(archive_key="other") == []


def test_resuming_a_run_marks_it(store: CompleteStore):
    _run(store)
    info = store.begin_run("r1", name="t", archive_key="k", fingerprint="fp", config={}, environment={})
    assert info.resumed and info.seq == 1
    store.finish_run("r1", "finished", {"best_ms": 0.1})
    assert store.runs()[0].summary == {"best_ms": 0.1} and store.run("r").id == "r1"


def test_events_with_a_key_are_written_once(store: CompleteStore):
    _run(store)
    for _ in range(3):
        store.log_event("r1", "generation", {"n": 1}, key="generation:1")
    store.log_event("r1", "note", {"n": 2})
    assert [k for k, _, _ in store.events("r1")] == ["generation", "note"]


def test_not_a_store(tmp_path: Path):
    text = tmp_path / "notes.txt"
    text.write_text("hello " * 1000)
    with pytest.raises(StoreError, match="not an SQLite database"):
        SQLiteStore(text)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not an evokernel store"):
        SQLiteStore(other)
    with pytest.raises(StoreError, match="no such database"):
        SQLiteStore(tmp_path / "missing.db", create=False)
    with pytest.raises(StoreError, match="is a directory"):
        SQLiteStore(tmp_path)


# -- both back ends: claims, run locks, URLs, schema revisions ------------------------------
def test_claims_hold_one_live_owner_at_a_time_until_released_stored_expired_or_dead(store_url: str):
    mine, yours = open_store(store_url), open_store(store_url)  # two drivers
    _run(mine, "rA")
    _run(yours, "rB")
    assert mine.claim("rA", ["a", "b"], "fp", "me", 60) == {"a", "b"}
    assert yours.claim("rB", ["b", "c"], "fp", "you", 60) == {"c"}  # b is mine
    assert yours.claim("rB", ["b"], "other-fp", "you", 60) == {"b"}  # a claim is per fingerprint
    assert mine.claim("rA", ["a", "b"], "fp", "me", 60) == {"a", "b"}  # renewed
    mine.release("me", ["a"])
    assert yours.claim("rB", ["a"], "fp", "you", 60) == {"a"}
    g = Genome.of({"x": 1})
    mine.record("rA", 0, g, "fp", Result.ok(0.5))
    assert yours.claim("rB", [g.id], "fp", "you", 60) == set()  # measured already: nothing to claim
    assert yours.claim("rB", ["d"], "fp", "you", -1.0) == {"d"}  # a lease that has run out ...
    assert mine.claim("rA", ["d"], "fp", "me", 60) == {"d"}  # ... is taken over
    mine.release("me")
    assert yours.claim("rB", ["b"], "fp", "you", 60) == {"b"}
    yours.close()  # its driver dies: its run lock goes with it ...
    assert mine.claim("rA", ["b", "c"], "fp", "me", 60) == {"b", "c"}  # ... and so do its claims
    mine.close()


def test_a_second_store_starting_a_running_run_is_refused_until_the_first_finishes(store_url: str):
    from evokernel.core.errors import RunBusyError

    first, second = open_store(store_url), open_store(store_url)
    try:
        _run(first)
        assert second.running_elsewhere("r1") and not first.running_elsewhere("r1")
        with pytest.raises(RunBusyError, match="already running in another process"):
            _run(second)
        first.finish_run("r1", "finished", {})
        assert not second.running_elsewhere("r1")
        _run(second)
        assert second.runs()[0].status == "running"
    finally:
        first.close()
        second.close()


def test_a_schema_newer_than_this_code_is_refused(store_url: str):
    store = open_store(store_url)
    store.close()
    engine = sa.create_engine(
        "sqlite:///" + store_url
        if "://" not in store_url
        else store_url.replace("postgresql://", "postgresql+psycopg://")
    )
    with engine.begin() as c:
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    with pytest.raises(StoreError, match="schema revision 0099, newer than this evokernel knows"):
        open_store(store_url)


def test_open_store_takes_paths_sqlite_urls_memory_and_postgresql_urls(tmp_path: Path, pg_url: str):
    for url in (str(tmp_path / "a.db"), f"sqlite:///{tmp_path / 'b.db'}", ":memory:"):
        s = open_store(url)
        assert isinstance(s, SQLiteStore) and isinstance(s, CompleteStore)
        s.close()
    with_password = pg_url.replace("postgres@", "postgres:secret@")  # (the server trusts its socket)
    for url in (with_password, with_password.replace("postgresql://", "postgresql+psycopg://"),
                with_password.replace("postgresql://", "postgres://")):  # fmt: skip
        s = open_store(url)
        assert isinstance(s, CompleteStore) and "secret" not in s.path and s.path.startswith("postgresql://postgres@")
        s.close()
    with pytest.raises(ConfigError, match="no store for"):
        open_store("mysql://x/y")


def test_postgres_problems_are_one_clear_message(pg_url: str, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(StoreError, match="no evokernel store in"):
        open_store(pg_url, create=False)
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL at"):
        open_store("postgresql://postgres@/nowhere?host=/nonexistent-socket-dir")
    monkeypatch.setitem(__import__("sys").modules, "psycopg", None)
    with pytest.raises(ConfigError, match=r"pip install 'evokernel\[postgres\]'"):
        open_store(pg_url)
