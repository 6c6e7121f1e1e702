"""Schema 1: what the first release (0.1.0) writes, its knowledge tables included.

Revision ID: 0001
Revises: none

Frozen here, not imported from `evokernel.store.schema` (which is the newest schema): a
migration builds what its revision was. Idempotent on purpose: a database written by the
first release has no `alembic_version` table, and running this revision on it creates only
what it lacks (the knowledge tables, which that release added to older files as they were
opened), then alembic stamps it 0001 and the later revisions upgrade it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_EVAL, _REMEASURE, _KEYED = sa.text("kind = 'eval'"), sa.text("kind = 'remeasure'"), sa.text("key IS NOT NULL")


def _schema_1() -> sa.MetaData:
    md = sa.MetaData()
    T, C, Text, Float, Int = sa.Table, sa.Column, sa.Text, sa.Float, sa.Integer
    T("meta", md, C("key", Text, primary_key=True), C("value", Text, nullable=False))
    T(
        "runs",
        md,
        C("seq", _ID, primary_key=True, autoincrement=True),
        C("id", Text, nullable=False, unique=True),
        *(
            C(c, Text, nullable=False)
            for c in ("name", "archive_key", "fingerprint", "config", "environment", "status")
        ),
        C("created", Float, nullable=False),
        C("updated", Float, nullable=False),
        C("summary", Text, nullable=False, server_default="{}"),
        sqlite_autoincrement=True,
    )
    T(
        "genomes",
        md,
        C("id", Text, primary_key=True),
        C("params", Text, nullable=False),
        C("source", Text),
        C("lineage", Text, nullable=False),
        C("created", Float, nullable=False),
    )
    T(
        "results",
        md,
        C("id", _ID, primary_key=True, autoincrement=True),
        C("genome_id", Text, sa.ForeignKey("genomes.id"), nullable=False),
        *(C(c, Text, nullable=False) for c in ("fingerprint", "run_id", "status")),
        C("latency_ms", Float),
        C("noise", Float, nullable=False),
        C("error", Text, nullable=False),
        C("record", Text, nullable=False),
        C("created", Float, nullable=False),
        sa.Index("results_by_genome", "genome_id", "fingerprint"),
        sqlite_autoincrement=True,
    )
    ev = T(
        "evaluations",
        md,
        C("run_id", Text, sa.ForeignKey("runs.id"), nullable=False),
        C("kind", Text, nullable=False),
        C("seq", Int, nullable=False),
        C("genome_id", Text, sa.ForeignKey("genomes.id"), nullable=False),
        C("result_id", _ID, sa.ForeignKey("results.id"), nullable=False),
        C("cached", Int, nullable=False),
        C("parents", Text, nullable=False),
        C("operator", Text, nullable=False),
        C("generation", Int, nullable=False),
        C("created", Float, nullable=False),
    )
    for name, cols, where in (
        ("one_eval_per_seq", (ev.c.run_id, ev.c.seq), _EVAL),
        ("one_eval_per_genome", (ev.c.run_id, ev.c.genome_id), _EVAL),
        ("one_remeasure_per_rep", (ev.c.run_id, ev.c.genome_id, ev.c.seq), _REMEASURE),
    ):
        sa.Index(name, *cols, unique=True, sqlite_where=where, postgresql_where=where)
    T(
        "elites",
        md,
        C("run_id", Text, sa.ForeignKey("runs.id"), primary_key=True),
        C("archive_key", Text, nullable=False),
        C("niche", Text, primary_key=True),
        C("genome_id", Text, sa.ForeignKey("genomes.id"), nullable=False),
        C("latency_ms", Float, nullable=False),
        C("noise", Float, nullable=False),
        C("updated", Float, nullable=False),
    )
    events = T(
        "events",
        md,
        C("id", _ID, primary_key=True, autoincrement=True),
        C("run_id", Text, nullable=False),
        C("kind", Text, nullable=False),
        C("key", Text),
        C("payload", Text, nullable=False),
        C("created", Float, nullable=False),
        sqlite_autoincrement=True,
    )
    sa.Index(
        "one_event_per_key", events.c.run_id, events.c.key, unique=True, sqlite_where=_KEYED, postgresql_where=_KEYED
    )
    T(
        "lessons",
        md,
        C("id", Text, primary_key=True),
        *(C(c, Text, nullable=False) for c in ("kind", "op", "gpu", "toolchain", "text", "evidence", "run_id")),
        C("created", Float, nullable=False),
    )
    T(
        "kernels",
        md,
        C("genome_id", Text, primary_key=True),
        C("op", Text, nullable=False),
        C("gpu", Text, nullable=False),
        C("record", Text, nullable=False),
        C("latency_ms", Float, nullable=False),
        C("created", Float, nullable=False),
    )
    T(
        "profiles",
        md,
        C("id", _ID, primary_key=True, autoincrement=True),
        C("created", Float, nullable=False),
        *(C(c, Text, nullable=False) for c in ("name", "device", "toolchain", "rows", "summary")),
        sqlite_autoincrement=True,
    )
    return md


def upgrade() -> None:
    bind = op.get_bind()
    md = _schema_1()
    md.create_all(bind, checkfirst=True)  # only the tables (and their indexes) a file lacks
    meta = md.tables["meta"]
    if bind.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).first() is None:
        op.execute(meta.insert().values(key="schema_version", value="1"))
