"""SQLite store: one database file in WAL mode, one transaction per write.

The queries are `evokernel.store._sql.SQLStore`'s, shared with PostgreSQL; this module opens
the file (and says, in the file system's words, why it cannot), keeps it in WAL mode, and
upgrades its schema (evokernel.store._migrate). Beside it, `<db>-lock` carries one OS lock
per run in progress: a second process starting the same run is refused (`RunBusyError`)
instead of measuring the same genomes again, and a run marked running that no process holds
was killed.

>>> store = SQLiteStore(":memory:")
>>> store.count()
{'genomes': 0, 'results': 0, 'evaluations': 0, 'runs': 0}
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.pool import StaticPool

from evokernel.core.errors import StoreError
from evokernel.store._migrate import SchemaState
from evokernel.store._sql import SQLStore
from evokernel.store.schema import SCHEMA_VERSION

__all__ = ["SQLiteStore"]


def _unusable(path: str, exc: sqlite3.Error, *, write: bool) -> StoreError:
    """Why SQLite cannot open (or write) `path`, in the file system's words where it is the cause:
    a missing or read-only folder, an immutable file, a read-only file system."""
    if path == ":memory:":
        return StoreError(f"cannot open an in-memory database ({exc})")
    shown, path = path, os.path.abspath(path)
    folder = os.path.dirname(path)
    if not os.path.exists(path):
        above = folder
        while not os.path.exists(above):
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            return StoreError(f"cannot create database {shown}: {above} is not a directory")
        if above != folder:
            return StoreError(f"cannot create database {shown}: no such directory {folder}")
        why = _os_refusal(folder, probe_dir=True)
        if why:
            return StoreError(f"cannot create database {shown}: cannot write in {folder} ({why})")
        return StoreError(f"cannot create database {shown} ({exc})")
    why = _os_refusal(path, probe_dir=False)
    if why and write:
        return StoreError(f"cannot write database {shown}: {why}")
    if write and getattr(exc, "sqlite_errorname", "") in ("SQLITE_READONLY", "SQLITE_CANTOPEN"):
        dir_why = _os_refusal(folder, probe_dir=True)
        if dir_why:
            return StoreError(
                f"cannot write database {shown}: its journal files (-wal, -shm) cannot be created "
                f"in {folder} ({dir_why})"
            )
        return StoreError(f"cannot write database {shown} ({exc})")
    if dir_why := (_os_refusal(folder, probe_dir=True) if "unable to open" in str(exc) else None):
        # WAL databases need their -wal and -shm files next to them, even to be read
        return StoreError(
            f"cannot open database {shown}: its journal files (-wal, -shm) cannot be created in {folder} ({dir_why})"
        )
    return StoreError(f"{shown} is not an SQLite database ({exc})")


def _os_refusal(path: str, *, probe_dir: bool) -> str | None:
    """The OS's reason a file cannot be opened for writing (or a file created in folder `path`),
    e.g. 'Read-only file system', 'Operation not permitted' (immutable); None if it can."""
    import errno
    import tempfile

    try:
        if probe_dir:
            with tempfile.TemporaryFile(dir=path):
                pass
        else:
            os.close(os.open(path, os.O_RDWR))
    except OSError as exc:
        text = exc.strerror or str(exc)
        if exc.errno == errno.EPERM:
            text += ", e.g. immutable (lsattr shows an i)"
        return text
    return None


class SQLiteStore(SQLStore):
    """The default store. `path` is a file (created if missing) or ":memory:"."""

    def __init__(self, path: str | os.PathLike[str] = "evokernel.db", *, create: bool = True) -> None:
        super().__init__()
        self.path = str(path)
        self._lock_file: Any = None  # "<db>-lock": one byte-range lock per running run (see _lock)
        self._writing = False  # the next transaction writes: BEGIN IMMEDIATE (see _tx)
        if self.path != ":memory:":
            if os.path.isdir(self.path):
                raise StoreError(f"{self.path} is a directory, not a database file")
            if not create and not os.path.exists(self.path):
                raise StoreError(f"no such database: {self.path}")
            if create and os.path.exists(self.path) and (why := _os_refusal(self.path, probe_dir=False)):
                # before SQLite leaves its -wal and -shm files next to a database it cannot write
                raise StoreError(f"cannot write database {self.path}: {why}")
        immutable = False
        try:
            tables = self._connect(self.path)
        except sqlite3.DatabaseError as exc:
            if create or not _os_refusal(os.path.dirname(os.path.abspath(self.path)), probe_dir=True):
                raise _unusable(self.path, exc, write=create) from None
            # to be read only, on read-only media (no -wal/-shm can be made): read it as it stands
            from urllib.parse import quote

            try:
                tables = self._connect(f"file:{quote(os.path.abspath(self.path))}?immutable=1", uri=True)
            except sqlite3.DatabaseError:
                raise _unusable(self.path, exc, write=False) from None
            immutable = True
        if tables and "meta" not in tables:
            self._raw.close()
            raise StoreError(f"{self.path} is an SQLite database but not an evokernel store")
        if self.path != ":memory:":
            try:
                self._raw.execute("PRAGMA journal_mode = WAL")
                self._raw.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.OperationalError as exc:  # read-only: a reader reads it in the mode it has
                if create:
                    self._raw.close()
                    raise _unusable(self.path, exc, write=True) from None
        self._raw.execute("PRAGMA foreign_keys = ON")
        schema = self._schema(tables)
        self._wrap()
        if not schema.current and not immutable and (create or "meta" in tables):
            try:
                self._migrate(create)
            except sa.exc.OperationalError as exc:
                # a first-release file opened to be read, where it cannot be written: read it as it stands
                if create or "meta" not in tables:
                    self.close()
                    raise _unusable(self.path, exc.orig, write=True) from None  # type: ignore[arg-type]
        elif create and self.path != ":memory:":
            self._probe_write("meta" in tables)

    def _connect(self, target: str, uri: bool = False) -> set[str]:
        """Connect; the names of the tables found."""
        self._raw = sqlite3.connect(target, isolation_level=None, timeout=30.0, uri=uri, check_same_thread=False)
        self._raw.execute("PRAGMA busy_timeout = 30000")
        return {r[0] for r in self._raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def _schema(self, tables: set[str]) -> SchemaState:
        """The file's schema, refused if newer than this code (or not an evokernel store's)."""
        revision = version = None
        if "alembic_version" in tables:
            revision = self._raw.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        if "meta" in tables:
            row = self._raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None or not str(row[0]).isdigit():
                self._raw.close()
                raise StoreError(
                    f"{self.path} has store schema {row[0] if row else '?'}, this evokernel reads up to {SCHEMA_VERSION}"
                )
            version = int(row[0])
        state = SchemaState(tables, revision, version)
        try:
            state.check(self.path)
        except StoreError:
            self._raw.close()
            raise
        return state

    def _wrap(self) -> None:
        """Hand the open connection to SQLAlchemy, whose transactions begin as SQLite's should:
        a write with BEGIN IMMEDIATE (waiting for the file's write lock up front, where a
        deferred transaction could fail to upgrade its read lock), a read with no BEGIN at
        all (each statement on its own, holding back no checkpoint)."""
        raw = self._raw
        engine = sa.create_engine("sqlite://", creator=lambda: raw, poolclass=StaticPool)

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            if self._writing:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        self._conn = engine.connect()
        self._insert = sqlite_dialect.insert

    @contextmanager
    def _tx(self) -> Iterator[sa.Connection]:
        self._writing = True
        try:
            tx = self._conn.begin()
        finally:
            self._writing = False
        with tx:
            yield self._conn

    def _probe_write(self, exists: bool) -> None:
        """A store opened to be written is found read-only now, not at the run's first result."""
        try:
            self._raw.execute("BEGIN IMMEDIATE")
            try:
                self._raw.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
            finally:
                self._raw.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if self._raw.in_transaction:
                self._raw.execute("ROLLBACK")
            if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) and exists:
                return  # another process is writing: a lock, not a read-only database; writes wait for it
            self.close()
            raise _unusable(self.path, exc, write=True) from None

    def close(self) -> None:
        if getattr(self, "_conn", None) is not None:
            super().close()
        self._raw.close()
        if self._lock_file is not None:
            self._lock_file.close()  # releases the runs this store held
            self._lock_file = None
            self._held.clear()

    def __enter__(self) -> SQLiteStore:
        return self

    # -- which runs are going on: an OS lock per run, dropped by the OS when its process dies ----
    def _lock(self, run_id: str, op: int) -> bool:
        """Take (op F_WRLCK) or drop (F_UNLCK) the lock of `run_id` without waiting; False if
        another process holds it. An open-file-description lock on one byte of `<db>-lock`
        (Linux; POSIX record locks elsewhere): the kernel drops it when the process dies, even
        by SIGKILL, so a killed run never looks alive. :memory: stores lock nothing."""
        import fcntl

        if self.path == ":memory:":
            return True
        if self._lock_file is None:
            try:
                self._lock_file = open(self.path + "-lock", "a+b")  # noqa: SIM115 - held while the store is open
            except OSError:
                return True  # a read-only folder: no lock (and no run can be written there anyway)
        offset = int(hashlib.sha256(run_id.encode()).hexdigest()[:15], 16)
        cmd = getattr(fcntl, "F_OFD_SETLK", fcntl.F_SETLK)
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padded
        arg = struct.pack("hhqqi4x", op, os.SEEK_SET, offset, 1, 0)
        try:
            fcntl.fcntl(self._lock_file.fileno(), cmd, arg)
        except OSError:
            return False
        return True

    def _try_lock(self, run_id: str) -> bool:
        import fcntl

        return self._lock(run_id, fcntl.F_WRLCK)

    def _unlock(self, run_id: str) -> None:
        import fcntl

        self._lock(run_id, fcntl.F_UNLCK)
