"""The store's schema, once, for every back end: SQLAlchemy Core tables.

The queries (`evokernel.store._sql`) are written against these tables, and the migrations
(`evokernel/store/migrations/versions/`) build them: revision 0001 is schema 1 (what the
first release wrote, knowledge tables included), 0002 adds `claims`. `HEAD` names the newest
revision this code knows; a database at a newer one is refused, an older one upgraded.

JSON (configs, lineage, records) is kept as text, as schema 1 kept it, so that one query
implementation reads both back ends and the SQLite files written by the first release.

>>> sorted(METADATA.tables)[:4]
['claims', 'elites', 'evaluations', 'events']
>>> HEAD, SCHEMA_VERSION
('0002', 2)
"""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["METADATA", "HEAD", "SCHEMA_VERSION"]

#: The newest migration revision (migrations/versions/) this code reads and writes.
HEAD = "0002"
#: `meta.schema_version` at HEAD: what the first release checks (it reads 1 and refuses others).
SCHEMA_VERSION = 2

# an autoincrementing 64-bit id on PostgreSQL, SQLite's INTEGER PRIMARY KEY (the rowid) there
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

METADATA = sa.MetaData()

meta = sa.Table(
    "meta",
    METADATA,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

runs = sa.Table(
    "runs",
    METADATA,
    sa.Column("seq", _ID, primary_key=True, autoincrement=True),
    sa.Column("id", sa.Text, nullable=False, unique=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("archive_key", sa.Text, nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("config", sa.Text, nullable=False),
    sa.Column("environment", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
    sa.Column("summary", sa.Text, nullable=False, server_default="{}"),
    sqlite_autoincrement=True,
)

genomes = sa.Table(
    "genomes",
    METADATA,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("params", sa.Text, nullable=False),
    sa.Column("source", sa.Text),
    sa.Column("lineage", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)

# one measurement of one genome under one evaluator fingerprint
results = sa.Table(
    "results",
    METADATA,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("genome_id", sa.Text, sa.ForeignKey("genomes.id"), nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("latency_ms", sa.Float),
    sa.Column("noise", sa.Float, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Index("results_by_genome", "genome_id", "fingerprint"),
    sqlite_autoincrement=True,
)

# a run's history: which genome it looked at, in order, with the lineage of that visit.
# seq: position in the run's history for kind 'eval', repetition number for 'remeasure'
evaluations = sa.Table(
    "evaluations",
    METADATA,
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("genome_id", sa.Text, sa.ForeignKey("genomes.id"), nullable=False),
    sa.Column("result_id", _ID, sa.ForeignKey("results.id"), nullable=False),
    sa.Column("cached", sa.Integer, nullable=False),
    sa.Column("parents", sa.Text, nullable=False),
    sa.Column("operator", sa.Text, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)
_EVAL = sa.text("kind = 'eval'")
_REMEASURE = sa.text("kind = 'remeasure'")
sa.Index(
    "one_eval_per_seq", evaluations.c.run_id, evaluations.c.seq, unique=True, sqlite_where=_EVAL, postgresql_where=_EVAL
)
sa.Index(
    "one_eval_per_genome",
    evaluations.c.run_id,
    evaluations.c.genome_id,
    unique=True,
    sqlite_where=_EVAL,
    postgresql_where=_EVAL,
)
sa.Index(
    "one_remeasure_per_rep",
    evaluations.c.run_id,
    evaluations.c.genome_id,
    evaluations.c.seq,
    unique=True,
    sqlite_where=_REMEASURE,
    postgresql_where=_REMEASURE,
)

elites = sa.Table(
    "elites",
    METADATA,
    sa.Column("run_id", sa.Text, sa.ForeignKey("runs.id"), primary_key=True),
    sa.Column("archive_key", sa.Text, nullable=False),
    sa.Column("niche", sa.Text, primary_key=True),
    sa.Column("genome_id", sa.Text, sa.ForeignKey("genomes.id"), nullable=False),
    sa.Column("latency_ms", sa.Float, nullable=False),
    sa.Column("noise", sa.Float, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
)

# events with a key are written once per run (a resumed run replays them)
events = sa.Table(
    "events",
    METADATA,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("key", sa.Text),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sqlite_autoincrement=True,
)
_KEYED = sa.text("key IS NOT NULL")
sa.Index("one_event_per_key", events.c.run_id, events.c.key, unique=True, sqlite_where=_KEYED, postgresql_where=_KEYED)

# -- knowledge (evokernel.store.knowledge) and workload profiles (evokernel.model.profile) --
lessons = sa.Table(
    "lessons",
    METADATA,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("gpu", sa.Text, nullable=False),
    sa.Column("toolchain", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("evidence", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)

kernels = sa.Table(
    "kernels",
    METADATA,
    sa.Column("genome_id", sa.Text, primary_key=True),
    sa.Column("op", sa.Text, nullable=False),
    sa.Column("gpu", sa.Text, nullable=False),
    sa.Column("record", sa.Text, nullable=False),
    sa.Column("latency_ms", sa.Float, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)

profiles = sa.Table(
    "profiles",
    METADATA,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("device", sa.Text, nullable=False),
    sa.Column("toolchain", sa.Text, nullable=False),
    sa.Column("rows", sa.Text, nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sqlite_autoincrement=True,
)

# -- revision 0002 ---------------------------------------------------------------------
# who is measuring a genome under a fingerprint now: drivers sharing a store measure each
# genome once (evokernel.engine.claims). owner: host:pid:run; run_id: the owner's run, whose
# run lock says whether the owner is alive; expires: a time.time() after which another driver
# takes the claim over (its owner hung)
claims = sa.Table(
    "claims",
    METADATA,
    sa.Column("genome_id", sa.Text, primary_key=True),
    sa.Column("fingerprint", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
)
sa.Index("claims_by_owner", claims.c.owner)
