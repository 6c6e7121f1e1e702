"""README's test command, as `.ci/run` extracts and runs it (`bash -euo pipefail -c`), with
every tool it calls replaced by a stub on PATH that records its call: both pytest lanes run
whatever the first one gives, and the command fails when either lane fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# python3 -m venv DIR makes DIR/bin/activate (empty: PATH keeps the stubs); every other tool
# exits with the code $STUB_<NAME> gives (pytest: $STUB_PYTEST_FAST / $STUB_PYTEST_SLOW by lane)
_STUB = """#!/bin/sh
name=$(basename "$0")
echo "$name $*" >> "$STUB_LOG"
case "$name" in
  python3) if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin" && : > "$3/bin/activate"; fi; exit 0 ;;
  pytest) if [ "$2" = slow ]; then exit "${STUB_PYTEST_SLOW:-0}"; else exit "${STUB_PYTEST_FAST:-0}"; fi ;;
  ruff) exit "${STUB_RUFF:-0}" ;;
  *) exit 0 ;;
esac
"""


def readme_test_command() -> str:
    """The command exactly as `.ci/run` extracts it from README.md (its own `cmd=` line)."""
    (line,) = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.startswith("cmd=")]
    out = subprocess.run(["bash", "-c", f'{line}\nprintf %s "$cmd"'], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    return out.stdout


def run_with_stubs(tmp_path: Path, **codes: int) -> tuple[int, list[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("python3", "pip", "ruff", "mypy", "pytest"):
        (bin_dir / tool).write_text(_STUB)
        (bin_dir / tool).chmod(0o755)
    log = tmp_path / "calls.log"
    log.unlink(missing_ok=True)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "STUB_LOG": str(log),
        **{f"STUB_{k.upper()}": str(v) for k, v in codes.items()},
    }
    work = tmp_path / "clone"
    work.mkdir(exist_ok=True)
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_test_command()],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return out.returncode, calls, out.stdout + out.stderr


def lanes(calls: list[str]) -> list[str]:
    return [c for c in calls if c.startswith("pytest")]


@pytest.mark.parametrize(
    ("fast", "slow", "fails"),
    [(1, 0, True), (0, 1, True), (1, 1, True), (0, 0, False), (5, 0, True)],
)
def test_both_lanes_run_and_either_failing_fails_the_command(tmp_path, fast, slow, fails):
    code, calls, output = run_with_stubs(tmp_path, pytest_fast=fast, pytest_slow=slow)
    assert lanes(calls) == ["pytest -m not slow", "pytest -m slow"], (calls, output)
    assert (code != 0) == fails, (code, output)
    # the install, then lint, format and types, then the two lanes
    assert [c.split()[0] for c in calls] == ["python3", "pip", "pip", "ruff", "ruff", "mypy", "pytest", "pytest"]
    assert f"fast lane: exit {fast}" in output and f"slow lane: exit {slow}" in output, output


def test_a_lint_failure_stops_the_command_before_the_tests(tmp_path):
    code, calls, output = run_with_stubs(tmp_path, ruff=1)
    assert code != 0 and lanes(calls) == [], (calls, output)
