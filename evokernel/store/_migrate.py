"""Bring a store's schema to `schema.HEAD` with Alembic, or refuse one written by a newer evokernel.

The migrations ship inside the package (`migrations/`) and run programmatically on the
store's own connection, inside a transaction the caller opened and holds the schema lock
in: one opener migrates, the others wait and find the schema current.

A database the first release wrote (schema 1, no `alembic_version` table) is upgraded like
any other: revision 0001 creates only what it lacks, alembic stamps it, 0002 follows.
An empty database is given the newest schema directly and stamped HEAD (`create`): what the
migrations build, as tests/test_store_migrations.py checks, at a fraction of the cost of
running them (a fresh in-memory store is made for every search that is given none).
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from evokernel.core.errors import StoreError
from evokernel.store.schema import HEAD, SCHEMA_VERSION

__all__ = ["SchemaState", "state", "create", "upgrade", "MIGRATIONS"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_KNOWN = tuple(f"{n:04d}" for n in range(1, int(HEAD) + 1))  # revisions are numbered 0001, 0002, ...


class SchemaState:
    """What a database holds: its tables, its alembic revision, its `meta.schema_version`."""

    def __init__(self, tables: set[str], revision: str | None, version: int | None) -> None:
        self.tables, self.revision, self.version = tables, revision, version

    @property
    def current(self) -> bool:
        return self.revision == HEAD

    def check(self, where: str) -> None:
        """Refuse a schema newer than this code knows: reading it could misread, writing it break it."""
        if self.revision is not None and self.revision not in _KNOWN:
            raise StoreError(
                f"{where} has store schema revision {self.revision}, newer than this evokernel knows (up to {HEAD}); "
                "upgrade evokernel to read it"
            )
        if self.version is not None and self.version > SCHEMA_VERSION:
            raise StoreError(f"{where} has store schema {self.version}, this evokernel reads up to {SCHEMA_VERSION}")


def state(conn: sa.Connection) -> SchemaState:
    """The schema state as seen by `conn` (inside the caller's transaction, if any)."""
    tables = set(sa.inspect(conn).get_table_names())
    revision = version = None
    if "alembic_version" in tables:
        revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    if "meta" in tables:
        value = conn.execute(sa.text("SELECT value FROM meta WHERE key = 'schema_version'")).scalar()
        try:
            version = int(value) if value is not None else None
        except ValueError:
            version = None
    return SchemaState(tables, revision, version)


# Alembic's own table, as Alembic creates it
_VERSION = sa.Table(
    "alembic_version",
    sa.MetaData(),
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


def create(conn: sa.Connection) -> None:
    """Give an empty database the newest schema, stamped HEAD. `conn` must be in a transaction."""
    from evokernel.store.schema import meta

    for statement in _ddl(conn.dialect):
        conn.exec_driver_sql(statement)
    conn.execute(_VERSION.insert().values(version_num=HEAD))
    conn.execute(meta.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))


_DDL: dict[str, tuple[str, ...]] = {}


def _ddl(dialect: sa.Dialect) -> tuple[str, ...]:
    """The newest schema's CREATE statements in the dialect, compiled once per process."""
    if dialect.name not in _DDL:
        from evokernel.store.schema import METADATA

        statements = []
        for table in [*METADATA.sorted_tables, _VERSION]:
            statements.append(str(sa.schema.CreateTable(table).compile(dialect=dialect)).strip())
            statements += [str(sa.schema.CreateIndex(i).compile(dialect=dialect)) for i in table.indexes]
        _DDL[dialect.name] = tuple(statements)
    return _DDL[dialect.name]


def upgrade(conn: sa.Connection) -> None:
    """Run the migrations from the database's revision (none: an empty or first-release one) to HEAD.

    `conn` must be in a transaction: the upgrade is part of it."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, HEAD)
