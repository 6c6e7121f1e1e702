"""Alembic's environment for the store's migrations: run programmatically only.

`evokernel.store._migrate.upgrade` passes the open connection in `config.attributes`,
already inside the transaction that holds the schema lock, so the whole upgrade is one
transaction (on SQLite and PostgreSQL alike, whose DDL is transactional): a concurrent
opener sees the old schema or the new one, never half of it.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - the alembic command line is not how the store migrates
    raise RuntimeError("evokernel's store migrations run through evokernel.store._migrate, with a connection")

context.configure(connection=connection, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
