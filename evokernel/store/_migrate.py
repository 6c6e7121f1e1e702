"""Bring a store's schema to `schema.HEAD` with Alembic, or refuse one written by a newer evokernel.

The migrations ship inside the package (`migrations/`) and run programmatically on the
store's own connection, inside a transaction the caller opened and holds the schema lock
in: one opener migrates, the others wait and find the schema current.

A database the first release wrote (schema 1, no `alembic_version` table) is upgraded like
any other: revision 0001 creates only what it lacks, alembic stamps it, 0002 follows.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from evokernel.core.errors import StoreError
from evokernel.store.schema import HEAD, SCHEMA_VERSION

__all__ = ["SchemaState", "state", "upgrade", "MIGRATIONS"]

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


def upgrade(conn: sa.Connection) -> None:
    """Run the migrations from the database's revision (none: an empty or first-release one) to HEAD.

    `conn` must be in a transaction: the upgrade is part of it."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, HEAD)
