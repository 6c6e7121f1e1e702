"""A store written by the first release (schema 1, no alembic_version) is upgraded on open,
not refused, and every row it held reads back as that release read it; the same upgrade path
runs on PostgreSQL. The schema the migrations build is the schema the queries use.

tests/fixtures/store_v1.db was written by the first release's own code
(tests/fixtures/make_store_v1.py), and store_v1.json is what that code read back from it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from evokernel import Genome, Result
from evokernel.store import CompleteStore, open_store
from evokernel.store import schema
from evokernel.store._migrate import MIGRATIONS

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "store_v1.json").read_text())


def _as_first_release_read(store: CompleteStore) -> dict[str, Any]:
    """What make_store_v1.py recorded, read through the new code."""
    return json.loads(
        json.dumps(
            {
                "runs": [[r.id, r.status, r.summary] for r in store.runs()],
                "history": {
                    rid: [
                        [e.kind, e.seq, e.genome.id, e.result.status.value, e.result.latency_ms, e.cached]
                        for e in store.history(rid)
                    ]
                    for rid in ("run-aaa1", "run-bbb2")
                },
                "elites": [[e.niche, e.genome.id, e.latency_ms, e.run_id] for e in store.elites(archive_key="k")],
                "events": [[k, p] for k, p, _ in store.events("run-aaa1")],
                "counts": store.count(),
                "lessons": [le.id for le in store.lessons()],
                "kernels": [k["genome_id"] for k in store.kernels()],
                "profiles": [[p["name"], p["rows"]] for p in store.profiles()],
            },
            sort_keys=True,
        )
    )


def _still_writable(store: CompleteStore) -> None:
    """The upgraded store takes new runs, results (ids after the old ones) and claims."""
    store.begin_run("run-ccc3", name="third", archive_key="k", fingerprint="fp", config={}, environment={})
    g = Genome.of({"BM": 999})
    store.record("run-ccc3", 0, g, "fp", Result.ok(0.1))
    assert store.lookup("run-ccc3", g.id, "fp").result_id > EXPECTED["counts"]["results"]
    assert store.claim("run-ccc3", ["new"], "fp", "me", 60) == {"new"}
    assert store.run("run-c").id == "run-ccc3" and store.run("run-a").id == "run-aaa1"


def test_a_first_release_sqlite_store_is_upgraded_on_open_and_reads_back_whole(tmp_path: Path):
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "store_v1.db", db)
    before = sqlite3.connect(db)
    assert before.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("1",)
    assert "alembic_version" not in {r[0] for r in before.execute("SELECT name FROM sqlite_master")}
    before.close()

    store = open_store(db, create=False)  # as `evokernel show` opens it
    con = sqlite3.connect(db)
    assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(schema.HEAD,)]
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (str(schema.SCHEMA_VERSION),)
    assert "claims" in {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert _as_first_release_read(store) == EXPECTED
    _still_writable(store)
    store.close()
    again = open_store(db)  # at HEAD now: opened without migrating
    assert again.run("run-ccc3").name == "third"
    again.close()


def test_a_first_release_file_without_its_knowledge_tables_gets_them(tmp_path: Path):
    db = tmp_path / "older.db"
    shutil.copy(FIXTURES / "store_v1.db", db)
    con = sqlite3.connect(db)
    con.executescript("DROP TABLE lessons; DROP TABLE kernels; DROP TABLE profiles;")
    con.close()
    store = open_store(db)
    assert store.lessons() == [] and store.kernels() == [] and store.profiles() == []
    assert len(store.history("run-aaa1")) == len(EXPECTED["history"]["run-aaa1"])
    store.close()


def _alembic(conn: sa.Connection, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


def test_a_postgres_store_at_revision_0001_is_upgraded_on_open_and_reads_back_whole(pg_url: str):
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    old = sqlite3.connect(FIXTURES / "store_v1.db")
    with engine.begin() as c:
        _alembic(c, "0001")
        tables = set(sa.inspect(c).get_table_names())
        assert "claims" not in tables and "runs" in tables
        # the first release's rows, as a 0001 store on PostgreSQL would hold them
        for table in (
            "runs",
            "genomes",
            "results",
            "evaluations",
            "elites",
            "events",
            "lessons",
            "kernels",
            "profiles",
        ):
            cursor = old.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cursor.description]
            rows = [dict(zip(columns, row)) for row in cursor]
            if rows:
                c.execute(sa.table(table, *(sa.column(n) for n in columns)).insert(), rows)
        for table, column in (("runs", "seq"), ("results", "id"), ("events", "id"), ("profiles", "id")):
            c.execute(
                sa.text(f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), max({column})) FROM {table}")
            )
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "0001"
    old.close()

    store = open_store(pg_url, create=False)
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == schema.HEAD
        assert c.execute(sa.text("SELECT value FROM meta WHERE key='schema_version'")).scalar() == "2"
    engine.dispose()
    assert _as_first_release_read(store) == EXPECTED
    _still_writable(store)
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_migrations_build_the_schema_the_queries_use_and_a_fresh_store_has(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    url = f"sqlite:///{tmp_path / 'm.db'}" if backend == "sqlite" else request.getfixturevalue("pg_url")
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as c:
        _alembic(c, "head")  # every migration, from an empty database
    with engine.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), schema.METADATA)
    engine.dispose()
    # (types SQLite reports loosely, server defaults' quoting: not differences of schema)
    assert [d for d in diff if d[0] not in ("modify_type", "modify_default")] == []
    # and a store on it reads the migrated schema as current (a fresh store gets schema.METADATA)
    store = open_store(url)
    assert store.count() == {"genomes": 0, "results": 0, "evaluations": 0, "runs": 0}
    store.close()


def test_head_is_the_newest_migration():
    from alembic.script import ScriptDirectory
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_current_head() == schema.HEAD
