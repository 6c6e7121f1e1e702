"""Shared fixtures: a small synthetic landscape with a known optimum, and stores (SQLite and
a real PostgreSQL: `store_url` gives a fresh one of each)."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from evokernel.engine.landscape import Landscape

from ._postgres import pg_server, pg_url  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[1]

# the corpus holds candidates (some of them hostile) and problems: data for the gate, not
# test modules; importing a cheating candidate at collection time could kill pytest
collect_ignore_glob = ["corpus/*"]


def small_landscape_csv() -> str:
    """48 configurations (a x b x layout), 6 of them failing, one clear optimum."""
    lines = ["a,b,layout,latency_ms,error"]
    for a, b, layout in itertools.product([1, 2, 4, 8], [1, 2, 3, 4, 5, 6], ["row", "col"]):
        if a == 8 and b >= 4:
            lines.append(f"{a},{b},{layout},,OutOfResources: out of resource: shared memory")
            continue
        # optimum at a=4, b=3, layout=col
        lat = 1.0 + 0.3 * abs(a.bit_length() - 3) + 0.1 * abs(b - 3) + (0.05 if layout == "row" else 0.0)
        lines.append(f"{a},{b},{layout},{lat:.4f},")
    return "\n".join(lines) + "\n"


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    path.write_text(small_landscape_csv())
    return path


@pytest.fixture
def small(small_csv: Path) -> Landscape:
    return Landscape.load(small_csv)


@pytest.fixture
def cli_env() -> dict[str, str]:
    """Environment for running the CLI in a subprocess with this interpreter."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture
def evokernel_cmd() -> list[str]:
    """The CLI, run with this interpreter (as the installed `evokernel` script would)."""
    return [sys.executable, "-m", "evokernel.cli"]


@pytest.fixture(scope="session")
def cli_env_session() -> dict[str, str]:
    """`cli_env` for session-scoped fixtures (tests/test_gate.py runs the corpus once, concurrently)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh store lives: an SQLite file, or a fresh database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "e.db")
    return request.getfixturevalue("pg_url")
