"""A throwaway PostgreSQL server in a temporary folder, for tests of code that uses a
PostgreSQL store: evokernel's own tests (`tests/_postgres.py`, the store outage tests), the
store soak benchmark (`benchmarks/store_soak.py`), and a plug-in's or a user's tests that
want a real server rather than a mock.

It listens on a Unix socket only (`listen_addresses=''`), in the same folder as its data,
and is stopped and deleted by `stop()` (or on leaving a `with` block). initdb refuses to run
as root, so as root the server runs as the `postgres` user (its folder is handed to that
user). Every failure to start says why, with the server's own log. It needs the PostgreSQL
server binaries (initdb, pg_ctl: Debian's `postgresql` package) and, for
`create_database`, psycopg (the `postgres` extra).

    from evokernel.store import open_store
    from evokernel.testing.postgres import PostgresServer

    with PostgresServer() as server:
        url = server.create_database("t1")   # postgresql://postgres@/t1?host=/tmp/...
        store = open_store(url)
        ...

A pytest fixture of one server per session and a fresh database per test:

    @pytest.fixture(scope="session")
    def pg_server():
        with PostgresServer() as server:
            yield server

    @pytest.fixture
    def store_url(pg_server, request):
        return pg_server.create_database(request.node.name.lower())

`durable=False` (the default) turns fsync off, as tests want; `down()` and `up()` stop and
restart it keeping its data (an outage).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["PostgresServer", "bindir"]


def bindir() -> Path:
    """The folder of initdb and pg_ctl: `pg_config --bindir` where it has them, else the
    newest /usr/lib/postgresql/*/bin."""
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10).stdout.strip()
        if out and (Path(out) / "initdb").exists():
            return Path(out)
    except (OSError, subprocess.SubprocessError):
        pass
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise RuntimeError(
            "no PostgreSQL server binaries (initdb, pg_ctl): not in `pg_config --bindir` nor /usr/lib/postgresql/*/bin; "
            "install the postgresql package"
        )
    return Path(found[-1]).parent


class PostgresServer:
    """Start on construction; `url(db)` / `create_database(name)`; `stop()` removes it all.

    durable=False turns fsync off (tests: the server outlives every client it serves, so a
    killed client loses nothing fsync would keep); the soak benchmark measures with it on."""

    def __init__(self, *, durable: bool = False, port: int = 5432) -> None:
        self.bin = bindir()
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="evokernel-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as: list[str] = []
        try:
            if os.geteuid() == 0:
                self._as = ["runuser", "-u", "postgres", "--"]
                shutil.chown(self.root, "postgres", "postgres")
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
            options = f"-c listen_addresses='' -k {self.root} -p {port} -c max_connections=200"
            if not durable:
                options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            self._options = options
            self.up()
        except BaseException:
            self.stop()
            raise

    def up(self) -> None:
        """Start the server (again, after `down()`)."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", self._options, "-w", "-t", "60", "start")

    def down(self) -> None:
        """Stop the server as an outage would (`pg_ctl stop -m fast`: every session is ended),
        keeping its data for `up()` (the store's fault tests)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def _run(self, tool: str, *args: str) -> None:
        cmd = [*self._as, str(self.bin / tool), *args]
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.root)
        if got.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"PostgreSQL {tool} failed (exit {got.returncode}): {' '.join(cmd)}\n{got.stdout}{got.stderr}{log}"
            )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@/{database}?host={self.root}&port={self.port}"

    def create_database(self, name: str) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        with psycopg.connect(host=str(self.root), port=self.port, user="postgres", dbname="postgres") as conn:
            conn.autocommit = True
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists() and (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")
            except (RuntimeError, subprocess.SubprocessError):
                pass
        for _ in range(3):
            shutil.rmtree(self.root, ignore_errors=True)
            if not self.root.exists():
                break
            time.sleep(0.1)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
