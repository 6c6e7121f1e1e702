from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from evokernel import Genome, Result, Status, StoreError
from evokernel.core.archive import Elite
from evokernel.store import SQLiteStore, Store, open_store


def _run(store: SQLiteStore, rid: str = "r1", key: str = "k") -> None:
    store.begin_run(rid, name="t", archive_key=key, fingerprint="fp", config={"x": 1}, environment={"gpu": None})


def test_store_protocol_and_wal(tmp_path: Path):
    store = open_store(tmp_path / "e.db")
    assert isinstance(store, Store)
    mode = sqlite3.connect(tmp_path / "e.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_lookup_prefers_this_run_then_reuses_earlier_runs(tmp_path: Path):
    store = SQLiteStore(tmp_path / "e.db")
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


def test_a_genome_is_evaluated_once_per_run(tmp_path: Path):
    store = SQLiteStore(tmp_path / "e.db")
    _run(store)
    g = Genome.of({"x": 1})
    store.record("r1", 0, g, "fp", Result.ok(0.5))
    with pytest.raises(sqlite3.IntegrityError):
        store.record("r1", 1, g, "fp", Result.ok(0.4))
    assert store.count()["results"] == 1  # the failed transaction left nothing behind


def test_failures_round_trip(tmp_path: Path):
    store = SQLiteStore(tmp_path / "e.db")
    _run(store)
    g = Genome.of({"x": 2})
    store.record("r1", 0, g, "fp", Result.failed(Status.TIMEOUT, "hung for 60 s"))
    r = store.lookup("r1", g.id, "fp").result
    assert r.status is Status.TIMEOUT and r.error == "hung for 60 s" and not r.is_ok


def test_remeasurements_and_elites(tmp_path: Path):
    store = SQLiteStore(tmp_path / "e.db")
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


def test_resuming_a_run_marks_it(tmp_path: Path):
    store = SQLiteStore(tmp_path / "e.db")
    _run(store)
    info = store.begin_run("r1", name="t", archive_key="k", fingerprint="fp", config={}, environment={})
    assert info.resumed and info.seq == 1
    store.finish_run("r1", "finished", {"best_ms": 0.1})
    assert store.runs()[0].summary == {"best_ms": 0.1} and store.run("r").id == "r1"


def test_events_with_a_key_are_written_once(tmp_path: Path):
    store = SQLiteStore(tmp_path / "e.db")
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
