"""SQLite store: one database file in WAL mode, one transaction per write.

Beside it, `<db>-lock` carries one OS lock per run in progress: a second process starting
the same run is refused (`RunBusyError`) instead of measuring the same genomes again, and a
run marked running that no process holds was killed.

>>> store = SQLiteStore(":memory:")
>>> store.count()
{'genomes': 0, 'results': 0, 'evaluations': 0, 'runs': 0}
"""

# One module on purpose, though over 400 lines: `SQLiteStore` is one class implementing the whole Store protocol and
# its capabilities over one schema and one connection discipline (WAL, one transaction per write, the run lock); its
# methods share the schema, so splitting them by capability would scatter the schema.

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from evokernel.core.archive import Elite
from evokernel.core.errors import RunBusyError, StoreError
from evokernel.core.genome import Genome
from evokernel.core.result import Result
from evokernel.store._base import Evaluation, Hit, RunInfo

__all__ = ["SQLiteStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    archive_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    config TEXT NOT NULL,
    environment TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    summary TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS genomes (
    id TEXT PRIMARY KEY,
    params TEXT NOT NULL,
    source TEXT,
    lineage TEXT NOT NULL,
    created REAL NOT NULL
);
-- one measurement of one genome under one evaluator fingerprint
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    genome_id TEXT NOT NULL REFERENCES genomes(id),
    fingerprint TEXT NOT NULL,
    run_id TEXT NOT NULL,
    status TEXT NOT NULL,
    latency_ms REAL,
    noise REAL NOT NULL,
    error TEXT NOT NULL,
    record TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_genome ON results (genome_id, fingerprint);
-- a run's history: which genome it looked at, in order, with the lineage of that visit
CREATE TABLE IF NOT EXISTS evaluations (
    run_id TEXT NOT NULL REFERENCES runs(id),
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    genome_id TEXT NOT NULL REFERENCES genomes(id),
    result_id INTEGER NOT NULL REFERENCES results(id),
    cached INTEGER NOT NULL,
    parents TEXT NOT NULL,
    operator TEXT NOT NULL,
    generation INTEGER NOT NULL,
    created REAL NOT NULL
);
-- seq: position in the run's history for kind 'eval', repetition number for 'remeasure'
CREATE UNIQUE INDEX IF NOT EXISTS one_eval_per_seq
    ON evaluations (run_id, seq) WHERE kind = 'eval';
CREATE UNIQUE INDEX IF NOT EXISTS one_eval_per_genome
    ON evaluations (run_id, genome_id) WHERE kind = 'eval';
CREATE UNIQUE INDEX IF NOT EXISTS one_remeasure_per_rep
    ON evaluations (run_id, genome_id, seq) WHERE kind = 'remeasure';
CREATE TABLE IF NOT EXISTS elites (
    run_id TEXT NOT NULL REFERENCES runs(id),
    archive_key TEXT NOT NULL,
    niche TEXT NOT NULL,
    genome_id TEXT NOT NULL REFERENCES genomes(id),
    latency_ms REAL NOT NULL,
    noise REAL NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (run_id, niche)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT,  -- events with a key are written once per run (a resumed run replays them)
    payload TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS one_event_per_key ON events (run_id, key) WHERE key IS NOT NULL;
"""

# Tables added after schema 1: created when missing in any store that is opened (additive:
# older evokernels ignore them)
_KNOWLEDGE_SCHEMA = """
CREATE TABLE IF NOT EXISTS lessons (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    op TEXT NOT NULL,
    gpu TEXT NOT NULL,
    toolchain TEXT NOT NULL,
    text TEXT NOT NULL,
    evidence TEXT NOT NULL,
    run_id TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kernels (
    genome_id TEXT PRIMARY KEY,
    op TEXT NOT NULL,
    gpu TEXT NOT NULL,
    record TEXT NOT NULL,
    latency_ms REAL NOT NULL,
    created REAL NOT NULL
);
-- workload profiles (evokernel.model.profile): the ranked opportunities of one profiled model or trace
CREATE TABLE IF NOT EXISTS profiles (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    name TEXT NOT NULL,
    device TEXT NOT NULL,
    toolchain TEXT NOT NULL,
    rows TEXT NOT NULL,
    summary TEXT NOT NULL
);
"""


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


class SQLiteStore:
    """The default store. `path` is a file (created if missing) or ":memory:"."""

    def __init__(self, path: str | os.PathLike[str] = "evokernel.db", *, create: bool = True) -> None:
        self.path = str(path)
        self._lock_file: Any = None  # "<db>-lock": one byte-range lock per running run (see _hold)
        self._held: set[str] = set()
        if self.path != ":memory:":
            if os.path.isdir(self.path):
                raise StoreError(f"{self.path} is a directory, not a database file")
            if not create and not os.path.exists(self.path):
                raise StoreError(f"no such database: {self.path}")
            if create and os.path.exists(self.path) and (why := _os_refusal(self.path, probe_dir=False)):
                # before SQLite leaves its -wal and -shm files next to a database it cannot write
                raise StoreError(f"cannot write database {self.path}: {why}")
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
        if tables and "meta" not in tables:
            raise StoreError(f"{self.path} is an SQLite database but not an evokernel store")
        if self.path != ":memory:":
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                self._db.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.OperationalError as exc:  # read-only: a reader reads it in the mode it has
                if create:
                    self._db.close()
                    raise _unusable(self.path, exc, write=True) from None
        self._db.execute("PRAGMA foreign_keys = ON")
        if "meta" in tables:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None or int(row[0]) != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has store schema {row[0] if row else '?'}, this evokernel reads {SCHEMA_VERSION}"
                )
        try:
            if "meta" not in tables and create:
                # one script, one transaction: a concurrent opener sees all of the schema or none
                self._db.executescript(
                    "BEGIN IMMEDIATE;"
                    + _SCHEMA
                    + f"INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}'); COMMIT;"
                )
            elif create and self.path != ":memory:":
                # a store opened to be written is found read-only now, not at the run's first result
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
                finally:
                    self._db.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) and "meta" in tables:
                pass  # another process is writing: a lock, not a read-only database; writes wait for it
            else:
                self._db.close()
                raise _unusable(self.path, exc, write=True) from None
        if "meta" in tables or create:
            self._db.executescript("BEGIN IMMEDIATE;" + _KNOWLEDGE_SCHEMA + "COMMIT;")

    def _connect(self, target: str, uri: bool = False) -> set[str]:
        """Connect; the names of the tables found."""
        self._db = sqlite3.connect(target, isolation_level=None, timeout=30.0, uri=uri)
        self._db.execute("PRAGMA busy_timeout = 30000")
        return {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back on any error."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()
        if self._lock_file is not None:
            self._lock_file.close()  # releases the runs this store held
            self._lock_file = None
            self._held.clear()

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

    def running_elsewhere(self, run_id: str) -> bool:
        """Whether another process is running `run_id` now (a run marked running that no
        process holds was killed)."""
        import fcntl

        if run_id in self._held:
            return False
        if not self._lock(run_id, fcntl.F_WRLCK):
            return True
        self._lock(run_id, fcntl.F_UNLCK)
        return False

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs --------------------------------------------------------------------------
    def begin_run(
        self,
        run_id: str,
        *,
        name: str,
        archive_key: str,
        fingerprint: str,
        config: dict[str, Any],
        environment: dict[str, Any],
    ) -> RunInfo:
        import fcntl

        if run_id not in self._held:
            if not self._lock(run_id, fcntl.F_WRLCK):
                row = self._db.execute("SELECT environment, updated FROM runs WHERE id = ?", (run_id,)).fetchone()
                pid = json.loads(row[0]).get("pid") if row else None
                raise RunBusyError(
                    f"run {run_id} is already running in another process{f' (pid {pid})' if pid else ''} on "
                    f"{self.path}; wait for it to finish (re-running then reads its results back), or change "
                    "--seed or --db"
                )
            self._held.add(run_id)
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT seq FROM runs WHERE id = ?", (run_id,)).fetchone()
            resumed = row is not None
            if resumed:
                db.execute(
                    "UPDATE runs SET status='running', updated=?, config=?, environment=? WHERE id=?",
                    (now, _json(config), _json(environment), run_id),
                )
            else:
                db.execute(
                    "INSERT INTO runs (id, name, archive_key, fingerprint, config, environment, status,"
                    " created, updated) VALUES (?, ?, ?, ?, ?, ?, 'running', ?, ?)",
                    (run_id, name, archive_key, fingerprint, _json(config), _json(environment), now, now),
                )
        info = self._run(run_id)
        info.resumed = resumed
        return info

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        import fcntl

        with self._tx() as db:
            db.execute(
                "UPDATE runs SET status=?, summary=?, updated=? WHERE id=?",
                (status, _json(summary), time.time(), run_id),
            )
        if run_id in self._held:
            self._held.discard(run_id)
            self._lock(run_id, fcntl.F_UNLCK)

    def _run(self, run_id: str) -> RunInfo:
        row = self._db.execute(_RUN_COLUMNS + " WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        return _run_info(row)

    def runs(self) -> list[RunInfo]:
        return [_run_info(r) for r in self._db.execute(_RUN_COLUMNS + " ORDER BY seq")]

    def run(self, run_id: str) -> RunInfo:
        """A run by id or unique id prefix."""
        rows = self._db.execute(_RUN_COLUMNS + " WHERE id LIKE ? || '%'", (run_id,)).fetchall()
        if len(rows) != 1:
            raise StoreError(f"{'no' if not rows else 'more than one'} run matches {run_id!r} in {self.path}")
        return _run_info(rows[0])

    # -- results -----------------------------------------------------------------------
    def lookup(self, run_id: str, genome_id: str, fingerprint: str) -> Hit | None:
        row = self._db.execute(
            "SELECT r.id, r.record FROM evaluations e JOIN results r ON r.id = e.result_id"
            " WHERE e.run_id = ? AND e.genome_id = ? AND e.kind = 'eval'",
            (run_id, genome_id),
        ).fetchone()
        if row is not None:
            return Hit(result=Result.decode(row[1]), result_id=row[0], in_run=True)
        row = self._db.execute(
            "SELECT id, record FROM results WHERE genome_id = ? AND fingerprint = ? ORDER BY id LIMIT 1",
            (genome_id, fingerprint),
        ).fetchone()
        if row is not None:
            return Hit(result=Result.decode(row[1]), result_id=row[0], in_run=False)
        return None

    def record(
        self,
        run_id: str,
        seq: int,
        genome: Genome,
        fingerprint: str,
        result: Result,
        *,
        reuse: int | None = None,
    ) -> None:
        with self._tx() as db:
            self._put_genome(db, genome)
            result_id = reuse if reuse is not None else self._put_result(db, run_id, genome, fingerprint, result)
            self._put_evaluation(db, run_id, "eval", seq, genome, result_id, cached=reuse is not None)

    def forget_measured(self, run_id: str, genome_ids: list[str]) -> None:
        """Drop the run's evaluations of these genomes and the results measured for them: a
        batch whose results cannot be matched to its genomes (an evaluator that returned more
        results than genomes)."""
        with self._tx() as db:
            for gid in genome_ids:
                row = db.execute(
                    "SELECT result_id FROM evaluations WHERE run_id = ? AND genome_id = ? AND kind = 'eval'"
                    " AND cached = 0",
                    (run_id, gid),
                ).fetchone()
                db.execute(
                    "DELETE FROM evaluations WHERE run_id = ? AND genome_id = ? AND kind = 'eval'", (run_id, gid)
                )
                if row is not None:
                    db.execute("DELETE FROM results WHERE id = ? AND run_id = ?", (row[0], run_id))

    def remeasurement(self, run_id: str, genome_id: str, rep: int) -> Result | None:
        row = self._db.execute(
            "SELECT r.record FROM evaluations e JOIN results r ON r.id = e.result_id"
            " WHERE e.run_id = ? AND e.genome_id = ? AND e.kind = 'remeasure' AND e.seq = ?",
            (run_id, genome_id, rep),
        ).fetchone()
        return None if row is None else Result.decode(row[0])

    def record_remeasurement(self, run_id: str, rep: int, genome: Genome, fingerprint: str, result: Result) -> None:
        with self._tx() as db:
            self._put_genome(db, genome)
            result_id = self._put_result(db, run_id, genome, fingerprint, result)
            self._put_evaluation(db, run_id, "remeasure", rep, genome, result_id, cached=False)

    def _put_genome(self, db: sqlite3.Connection, genome: Genome) -> None:
        db.execute(
            "INSERT OR IGNORE INTO genomes (id, params, source, lineage, created) VALUES (?, ?, ?, ?, ?)",
            (
                genome.id,
                _json(genome.params),
                genome.source,
                msgspec.json.encode(genome.lineage).decode(),
                time.time(),
            ),
        )

    def _put_result(self, db: sqlite3.Connection, run_id: str, genome: Genome, fingerprint: str, result: Result) -> int:
        cur = db.execute(
            "INSERT INTO results (genome_id, fingerprint, run_id, status, latency_ms, noise, error, record,"
            " created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                genome.id,
                fingerprint,
                run_id,
                result.status.value,
                result.latency_ms,
                result.noise,
                result.error,
                result.encode().decode(),
                time.time(),
            ),
        )
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def _put_evaluation(
        self, db: sqlite3.Connection, run_id: str, kind: str, seq: int, genome: Genome, result_id: int, *, cached: bool
    ) -> None:
        lin = genome.lineage
        db.execute(
            "INSERT INTO evaluations (run_id, kind, seq, genome_id, result_id, cached, parents, operator,"
            " generation, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                kind,
                seq,
                genome.id,
                result_id,
                int(cached),
                _json(list(lin.parents)),
                lin.operator,
                lin.generation,
                time.time(),
            ),
        )

    def history(self, run_id: str) -> list[Evaluation]:
        rows = self._db.execute(
            "SELECT e.kind, e.seq, e.cached, e.parents, e.operator, e.generation, e.created,"
            " g.params, g.source, r.record FROM evaluations e"
            " JOIN genomes g ON g.id = e.genome_id JOIN results r ON r.id = e.result_id"
            " WHERE e.run_id = ? ORDER BY e.kind, e.seq, e.rowid",
            (run_id,),
        )
        out = []
        for kind, seq, cached, parents, op, gen, created, params, source, record in rows:
            genome = Genome.of(
                json.loads(params), source, parents=tuple(json.loads(parents)), operator=op, generation=gen
            )
            out.append(
                Evaluation(
                    run_id=run_id,
                    seq=seq,
                    kind=kind,
                    genome=genome,
                    result=Result.decode(record),
                    cached=bool(cached),
                    created=created,
                )
            )
        return out

    def count(self, run_id: str | None = None) -> dict[str, int]:
        q = self._db.execute
        if run_id is None:
            return {
                t: q(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("genomes", "results", "evaluations", "runs")
            }
        return {
            "evaluations": q("SELECT COUNT(*) FROM evaluations WHERE run_id=? AND kind='eval'", (run_id,)).fetchone()[
                0
            ],
            "distinct_genomes": q(
                "SELECT COUNT(DISTINCT genome_id) FROM evaluations WHERE run_id=? AND kind='eval'", (run_id,)
            ).fetchone()[0],
            "measured": q("SELECT COUNT(*) FROM results WHERE run_id=?", (run_id,)).fetchone()[0],
            "cached": q("SELECT COUNT(*) FROM evaluations WHERE run_id=? AND cached=1", (run_id,)).fetchone()[0],
            "remeasurements": q(
                "SELECT COUNT(*) FROM evaluations WHERE run_id=? AND kind='remeasure'", (run_id,)
            ).fetchone()[0],
        }

    # -- archive and events ------------------------------------------------------------
    def save_elites(self, run_id: str, archive_key: str, elites: list[Elite]) -> None:
        if not elites:
            return
        now = time.time()
        with self._tx() as db:
            for e in elites:
                self._put_genome(db, e.genome)
                db.execute(
                    "INSERT OR REPLACE INTO elites (run_id, archive_key, niche, genome_id, latency_ms, noise,"
                    " updated) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (run_id, archive_key, e.niche, e.genome.id, e.latency_ms, e.noise, now),
                )

    def elites(
        self,
        *,
        run_id: str | None = None,
        archive_key: str | None = None,
        before_seq: int | None = None,
    ) -> list[Elite]:
        sql = (
            "SELECT el.niche, el.latency_ms, el.noise, el.run_id, g.params, g.source FROM elites el"
            " JOIN genomes g ON g.id = el.genome_id JOIN runs r ON r.id = el.run_id WHERE 1=1"
        )
        args: list[Any] = []
        for clause, value in (
            ("el.run_id = ?", run_id),
            ("el.archive_key = ?", archive_key),
            ("r.seq < ?", before_seq),
        ):
            if value is not None:
                sql += f" AND {clause}"
                args.append(value)
        best: dict[str, Elite] = {}
        for niche, lat, noise, rid, params, source in self._db.execute(sql + " ORDER BY r.seq", args):
            if niche not in best or lat < best[niche].latency_ms:
                best[niche] = Elite(
                    niche=niche, genome=Genome.of(json.loads(params), source), latency_ms=lat, noise=noise, run_id=rid
                )
        return sorted(best.values(), key=lambda e: (e.latency_ms, e.genome.id))

    def log_event(self, run_id: str, kind: str, payload: dict[str, Any], *, key: str | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO events (run_id, kind, key, payload, created) VALUES (?, ?, ?, ?, ?)",
                (run_id, kind, key, _json(payload), time.time()),
            )

    # -- knowledge base and kernel database (evokernel.store.knowledge) ---------------------------
    def save_lessons(self, lessons: list[Any]) -> None:
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO lessons (id, kind, op, gpu, toolchain, text, evidence, run_id, created)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        le.id,
                        le.kind,
                        le.op,
                        le.gpu,
                        _json(le.toolchain),
                        le.text,
                        _json(le.evidence),
                        le.run_id,
                        le.created,
                    )
                    for le in lessons
                ],
            )

    def lessons(self, *, op: str | None = None, gpu: str | None = None) -> list[Any]:
        from evokernel.store.knowledge import Lesson

        sql, args = "SELECT id, kind, op, gpu, toolchain, text, evidence, run_id, created FROM lessons WHERE 1=1", []
        for clause, value in (("op = ?", op), ("gpu = ?", gpu)):
            if value is not None:
                sql += f" AND {clause}"
                args.append(value)
        return [
            Lesson(
                id=i, kind=k, op=o, gpu=g, toolchain=json.loads(t), text=x, evidence=json.loads(e), run_id=r, created=c
            )
            for i, k, o, g, t, x, e, r, c in self._db.execute(sql + " ORDER BY created", args)
        ]

    def save_kernel(self, record: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO kernels (genome_id, op, gpu, record, latency_ms, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (record["genome_id"], record["op"], record["gpu"], _json(record), record["latency_ms"], time.time()),
            )

    def kernels(self, *, op: str | None = None, gpu: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT record FROM kernels WHERE 1=1", []
        for clause, value in (("op = ?", op), ("gpu = ?", gpu)):
            if value is not None:
                sql += f" AND {clause}"
                args.append(value)
        return [json.loads(r) for (r,) in self._db.execute(sql + " ORDER BY latency_ms", args)]

    # -- workload profiles (evokernel.model.profile) ------------------------------------------------
    def save_profile(self, record: dict[str, Any]) -> int:
        """Store a profile (`Profile.to_dict()` plus `name` and `toolchain`); returns its id."""
        summary = {k: v for k, v in record.items() if k not in ("name", "device_name", "toolchain", "rows")}
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO profiles (created, name, device, toolchain, rows, summary) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    time.time(),
                    record["name"],
                    record.get("device_name") or record.get("device", ""),
                    _json(record.get("toolchain", {})),
                    _json(record["rows"]),
                    _json(summary),
                ),
            )
        return int(cur.lastrowid)  # type: ignore[arg-type]

    def profiles(self, *, name: str | None = None) -> list[dict[str, Any]]:
        """Stored profiles, oldest first: id, created, name, device, toolchain, rows, summary."""
        sql, args = "SELECT id, created, name, device, toolchain, rows, summary FROM profiles", []
        if name is not None:
            sql, args = sql + " WHERE name = ?", [name]
        return [
            {
                "id": i,
                "created": c,
                "name": n,
                "device": d,
                "toolchain": json.loads(t),
                "rows": json.loads(r),
                "summary": json.loads(s),
            }
            for i, c, n, d, t, r, s in self._db.execute(sql + " ORDER BY id", args)
        ]

    def events(self, run_id: str) -> list[tuple[str, dict[str, Any], float]]:
        return [
            (k, json.loads(p), c)
            for k, p, c in self._db.execute(
                "SELECT kind, payload, created FROM events WHERE run_id = ? ORDER BY id", (run_id,)
            )
        ]


_RUN_COLUMNS = (
    "SELECT id, seq, name, archive_key, fingerprint, config, environment, status, created, updated, summary FROM runs"
)


def _run_info(row: tuple[Any, ...]) -> RunInfo:
    rid, seq, name, key, fp, config, env, status, created, updated, summary = row
    return RunInfo(
        id=rid,
        seq=seq,
        name=name,
        archive_key=key,
        fingerprint=fp,
        config=json.loads(config),
        environment=json.loads(env),
        status=status,
        created=created,
        updated=updated,
        summary=json.loads(summary),
    )


def _json(obj: Any) -> str:
    return msgspec.json.encode(obj, order="sorted").decode()
