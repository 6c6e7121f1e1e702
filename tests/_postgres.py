"""A real PostgreSQL server for the tests: one per session, a fresh database per test.

Started by `evokernel.testing.postgres.PostgresServer` (the store soak benchmark starts its
own the same way). A server that cannot start fails the tests that need it, saying why: the
PostgreSQL store is tested, never skipped.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from evokernel.testing.postgres import PostgresServer

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    try:
        server = PostgresServer()
    except Exception as exc:  # noqa: BLE001 - any reason is the message
        pytest.fail(f"cannot start the PostgreSQL server the store tests need: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's server."""
    return pg_server.create_database(f"test_{next(_names)}")
