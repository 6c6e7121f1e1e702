"""The long-context report (benchmarks/sglang_long_h200.py) recomputed from the H200 record
(`benchmarks/results/sglang_long/sglang_long.json`, session 21): the Amdahl predictions on GPU
kernel time per step against the measured ratios, and the table."""

from __future__ import annotations

import doctest
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "sglang_long"


def _module():
    spec = importlib.util.spec_from_file_location("sglang_long_h200", ROOT / "benchmarks" / "sglang_long_h200.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_scripts_doctests():
    got = doctest.testmod(_module())
    assert got.attempted >= 3 and got.failed == 0


def test_gpu_time_predictions_from_the_h200_record(tmp_path: Path):
    mod = _module()
    shutil.copy(RECORD / "sglang_long.json", tmp_path / "sglang_long.json")
    shutil.copy(RECORD / "sglang_long.md", tmp_path / "sglang_long.md")
    mod.render(tmp_path / "sglang_long.json", layers=4)
    doc = json.loads((tmp_path / "sglang_long.json").read_text())
    rows = {(r["batch"], r["context"]): r for r in doc["rows"]}
    b1 = rows[(1, 32768)]
    # shipped: 1.891 ms of GPU time per step, 1.530 of it decode attention; the winner 4 x 0.0412 ms
    assert b1["vs_sglang_shipped"]["predicted_kernel_time"] == pytest.approx(3.603, abs=2e-3)
    assert b1["vs_sglang_shipped"]["kernel_time"] == pytest.approx(3.791, abs=2e-3)
    # vs shipped every point within a quarter of the gain; vs the best flag, three under-predicted
    assert not any(r["vs_sglang_shipped"]["missed_kernel_time"] for r in rows.values())
    missed = sorted(k for k, r in rows.items() if r["vs_sglang_best_flag"]["missed_kernel_time"])
    assert missed == [(1, 32768), (4, 16384), (8, 8192)]
    for k in missed:
        got = rows[k]["vs_sglang_best_flag"]
        assert got["predicted_kernel_time"] < got["kernel_time"]
    md = (tmp_path / "sglang_long.md").read_text()
    assert "| GPU time vs shipped (predicted) |" in md and "| b1 x 32768 |" in md
    assert "3.791 (3.603)" in md
    assert "promotion (A/B verdicts per change)" in md  # the rest of the report is kept
