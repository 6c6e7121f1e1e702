"""BENCHMARKS.md is rendered from the record under benchmarks/results/: prose and record cannot
disagree (re-render with `python benchmarks/render_benchmarks.py`)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench
PAGE = ROOT / "BENCHMARKS.md"


def _renderer():
    spec = importlib.util.spec_from_file_location("render_benchmarks", ROOT / "benchmarks" / "render_benchmarks.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # its dataclasses resolve their annotations through it
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod


def _table_rows(text: str) -> list[list[str]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    header, body = lines[0], lines[1:]
    assert header.startswith("| target | card |")
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in body]


def test_the_page_is_what_the_record_renders():
    rendered = _renderer().render()
    assert PAGE.read_text() == rendered, "BENCHMARKS.md is stale: run python benchmarks/render_benchmarks.py"
    assert _renderer().render() == rendered  # deterministic


def test_the_page_is_short():
    assert len(PAGE.read_text().splitlines()) < 300


def test_every_row_names_a_card_a_command_and_an_existing_page():
    rows = _table_rows(PAGE.read_text())
    assert len(rows) >= 10
    for cells in rows:
        target, card, figure, date, command, record = cells
        assert card, target
        assert card == "not recorded" or re.search(r"H100|H200|CPU", card), (target, card)
        assert figure and date, target
        assert command.startswith("`") and (
            "bash benchmarks/device.sh " in command or command.startswith("`python benchmarks/")
        ), (target, command)
        assert record, target
        (link,) = re.findall(r"\]\((docs/benchmarks/[\w.-]+\.md)\)", target)
        assert (ROOT / link).is_file(), link


def test_every_device_command_names_a_step_of_device_sh():
    steps = re.search(r"^\s*([a-z|-]+)\) ;;", (ROOT / "benchmarks" / "device.sh").read_text(), re.M)
    assert steps is not None
    known = set(steps.group(1).split("|"))
    for cells in _table_rows(PAGE.read_text()):
        for step in re.findall(r"bash benchmarks/device\.sh ([a-z-]+)", cells[4]):
            assert step in known, (cells[0], step)


def test_every_page_names_its_record_files():
    for page in sorted((ROOT / "docs" / "benchmarks").glob("*.md")):
        text = page.read_text()
        assert "benchmarks/results/" in text, page.name
        assert len(text.splitlines()) <= 120, page.name
