"""Where results, lineage, elites and runs are kept. SQLite by default, PostgreSQL for many drivers.

>>> store = open_store(":memory:")
>>> isinstance(store, Store), isinstance(store, CompleteStore)
(True, True)
"""

from __future__ import annotations

import os

from evokernel.core.errors import ConfigError
from evokernel.store._base import (
    Claims,
    CompleteStore,
    Evaluation,
    FindsRuns,
    ForgetsMeasured,
    Hit,
    KeepsKnowledge,
    KeepsProfiles,
    Located,
    RunInfo,
    Store,
)
from evokernel.store.postgres import PostgresStore
from evokernel.store.sqlite import SQLiteStore

__all__ = [
    "Store",
    "CompleteStore",
    "Claims",
    "ForgetsMeasured",
    "FindsRuns",
    "KeepsKnowledge",
    "KeepsProfiles",
    "Located",
    "RunInfo",
    "Hit",
    "Evaluation",
    "SQLiteStore",
    "PostgresStore",
    "open_store",
]


def open_store(url: str | os.PathLike[str], *, create: bool = True) -> CompleteStore:
    """A store from a path, `sqlite:///path`, `:memory:`, or a `postgresql://` (also
    `postgres://`, `postgresql+psycopg://`) URL; `create=False` refuses one that does not exist."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://", "postgresql+")):
        return PostgresStore(text, create=create)
    if "://" in text and not text.startswith("sqlite:///"):
        raise ConfigError(f"no store for {text!r}: give a file path, sqlite:///path, :memory: or postgresql://...")
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") :]
    return SQLiteStore(text, create=create)
