"""PostgreSQL store: many drivers, on many hosts, writing one database.

The queries are `evokernel.store._sql.SQLStore`'s, shared with SQLite: one transaction per
result, so a driver killed at any moment loses at most the evaluation it had in flight. A
run in progress holds a session-level advisory lock on a hash of its id: a second process
starting the same run is refused (`RunBusyError`), and the server drops the lock when the
holder's connection dies (a killed driver's run no longer looks alive), as the OS drops
SQLite's lock file lock when its process dies.

Needs the `postgres` extra (psycopg): `pip install 'evokernel[postgres]'`.

    store = PostgresStore("postgresql://evokernel@db-host/evokernel")
"""

from __future__ import annotations

import hashlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.pool import NullPool

from evokernel.core.errors import ConfigError, StoreError
from evokernel.store import _migrate
from evokernel.store._sql import SQLStore

__all__ = ["PostgresStore", "psycopg_url"]

# advisory lock keys of the store's own (a run's key is a hash of its id, below 2**60)
_SCHEMA_LOCK = -0x65766F6B65726E  # "evokern": schema upgrades
_CLAIMS_LOCK = -0x636C61696D73  # "claims": claim transactions, in one order


def psycopg_url(url: str) -> sa.URL:
    """`postgresql://` or `postgres://` as SQLAlchemy's psycopg (3) URL; ConfigError without psycopg."""
    if url.startswith("postgres://"):  # (what Heroku and others write)
        url = "postgresql://" + url[len("postgres://") :]
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"not a database URL: {url!r} ({exc})") from None
    if parsed.drivername not in ("postgresql", "postgresql+psycopg"):
        raise ConfigError(f"the PostgreSQL store takes postgresql:// or postgresql+psycopg:// URLs, not {url!r}")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise ConfigError(
            "the PostgreSQL store needs psycopg: pip install 'evokernel[postgres]' (or pip install 'psycopg[binary]')"
        ) from None
    return parsed.set(drivername="postgresql+psycopg")


class PostgresStore(SQLStore):
    """A store in a PostgreSQL database (an empty one is given the schema; `create=False`
    refuses a database without it). `path` is the URL without its password."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        super().__init__()
        parsed = psycopg_url(url)
        shown = parsed._replace(password=None)  # (URL.set cannot unset a field)
        self.path = shown.render_as_string(hide_password=False).replace("+psycopg", "", 1)
        engine = sa.create_engine(parsed, poolclass=NullPool)
        try:
            self._conn = engine.connect()
        except sa.exc.OperationalError as exc:
            engine.dispose()
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise StoreError(f"cannot connect to PostgreSQL at {self.path}: {reason}") from None
        self._insert = postgresql.insert
        try:
            with self._read() as c:
                now = _migrate.state(c)
            now.check(self.path)
            if now.tables and "meta" not in now.tables:
                raise StoreError(
                    f"{self.path} holds tables but not an evokernel store; give the store a database of its own"
                )
            if not create and "meta" not in now.tables:
                raise StoreError(f"no evokernel store in {self.path}")
            if not now.current:
                self._migrate(create)
        except BaseException:
            self.close()
            raise

    def _lock_schema(self, conn: sa.Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK)))

    def _lock_claims(self, conn: sa.Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_CLAIMS_LOCK)))

    # -- which runs are going on: a session-level advisory lock per run ---------------------
    def _try_lock(self, run_id: str) -> bool:
        with self._tx() as c:
            return bool(c.execute(sa.select(sa.func.pg_try_advisory_lock(_run_key(run_id)))).scalar())

    def _unlock(self, run_id: str) -> None:
        with self._tx() as c:
            c.execute(sa.select(sa.func.pg_advisory_unlock(_run_key(run_id))))

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _run_key(run_id: str) -> int:
    """A run's advisory lock key: 60 bits of a hash of its id (the store's own keys are negative)."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:15], 16)
