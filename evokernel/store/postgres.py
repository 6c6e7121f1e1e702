"""PostgreSQL store: many drivers, on many hosts, writing one database.

The queries are `evokernel.store._sql.SQLStore`'s, shared with SQLite: one transaction per
result, so a driver killed at any moment loses at most the evaluation it had in flight. A
run in progress holds a session-level advisory lock on a hash of its id: a second process
starting the same run is refused (`RunBusyError`), and the server drops the lock when the
holder's connection dies (a killed driver's run no longer looks alive), as the OS drops
SQLite's lock file lock when its process dies.

The server may go away mid-search (a restart, a failover, a crash): every call of the store
that loses its connection is retried on a new one (SQLAlchemy invalidates the old one), with
backoff, for up to `retry_s` seconds (60 by default; EVOKERNEL_STORE_RETRY_S sets it), the
runs this store holds locked again. A server still down then is a StoreError in one line;
what was stored before is kept, and the same command resumes the run.

Needs the `postgres` extra (psycopg): `pip install 'evokernel[postgres]'`.

    store = PostgresStore("postgresql://evokernel@db-host/evokernel")
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.pool import NullPool

from evokernel.core.errors import ConfigError, RunBusyError, StoreError
from evokernel.store import _migrate
from evokernel.store._sql import SQLStore

__all__ = ["PostgresStore", "psycopg_url"]

# advisory lock keys of the store's own (a run's key is a hash of its id, below 2**60)
_SCHEMA_LOCK = -0x65766F6B65726E  # "evokern": schema upgrades
_CLAIMS_LOCK = -0x636C61696D73  # "claims": claim transactions, in one order

log = logging.getLogger("evokernel.store")


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

    def __init__(self, url: str, *, create: bool = True, retry_s: float | None = None) -> None:
        super().__init__()
        parsed = psycopg_url(url)
        shown = parsed._replace(password=None)  # (URL.set cannot unset a field)
        self.path = shown.render_as_string(hide_password=False).replace("+psycopg", "", 1)
        if retry_s is None:
            try:
                retry_s = float(os.environ.get("EVOKERNEL_STORE_RETRY_S", "60"))
            except ValueError:
                raise ConfigError("EVOKERNEL_STORE_RETRY_S must be a number of seconds") from None
        self.retry_s = max(0.0, retry_s)
        self._broken = False  # the connection was lost: the next call opens a new one
        self._gone = ""  # why the server is gone (it stayed away for retry_s): later calls try once
        self._retrying_now = False
        connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
        engine = sa.create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
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

    # -- a server that goes away ---------------------------------------------------------------
    def _retrying(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._retrying_now:  # (a method called by another: the outer call retries)
            return method(self, *args, **kwargs)
        self._retrying_now = True
        try:
            return self._retry(method, *args, **kwargs)
        finally:
            self._retrying_now = False

    def _retry(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        lost_at: float | None = None
        wait = 0.25
        while True:
            try:
                if self._broken:
                    self._reconnect()
                out = method(self, *args, **kwargs)
            except Exception as exc:
                if not _disconnected(exc):
                    raise
                self._broken = True
                now = time.monotonic()
                limit = 0.0 if self._gone else self.retry_s
                if lost_at is None:
                    lost_at = now
                    if limit > 0:
                        log.warning(
                            "lost the connection to PostgreSQL at %s (%s); retrying for up to %.0f s",
                            self.path,
                            _reason(exc),
                            limit,
                        )
                if now - lost_at >= limit:
                    if not self._gone:  # (said the same way by every call after: the first is the news)
                        self._gone = (
                            f"PostgreSQL at {self.path} is unreachable after {limit:.0f} s of retries "
                            f"({_reason(exc)}); everything stored before is kept: re-run the same command to resume"
                        )
                    raise StoreError(self._gone) from None
                time.sleep(min(wait, limit - (now - lost_at)))
                wait = min(wait * 2, 5.0)
                continue
            if lost_at is not None:
                log.warning("PostgreSQL at %s is back after %.1f s", self.path, time.monotonic() - lost_at)
            self._gone = ""
            return out

    def _reconnect(self) -> None:
        """A new connection for the lost one, with the locks of the runs this store runs."""
        engine = self._conn.engine
        with contextlib.suppress(Exception):
            self._conn.invalidate()  # (SQLAlchemy's: the DBAPI connection is discarded, not reused)
        with contextlib.suppress(Exception):
            self._conn.close()
        self._conn = engine.connect()
        for run_id in sorted(self._held):
            if not self._try_lock(run_id):
                self._held.discard(run_id)
                raise RunBusyError(
                    f"run {run_id} was taken by another process while PostgreSQL at {self.path} was away"
                )
        self._broken = False

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


def _disconnected(exc: BaseException) -> bool:
    """Whether `exc` says the server is out of reach (SQLAlchemy's disconnect detection, or
    a connection that cannot be opened), not that a statement was wrong."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, sa.exc.OperationalError):
        # a connection error (no class-specific SQLSTATE), or the server shutting sessions down
        code = getattr(exc.orig, "sqlstate", None)
        return code is None or code.startswith(("08", "57P"))
    return isinstance(exc, (sa.exc.PendingRollbackError, sa.exc.ResourceClosedError)) or (
        isinstance(exc, sa.exc.InvalidRequestError) and "reconnect" in str(exc)
    )


def _reason(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return lines[0][:200] if lines else type(orig).__name__


def _run_key(run_id: str) -> int:
    """A run's advisory lock key: 60 bits of a hash of its id (the store's own keys are negative)."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:15], 16)
