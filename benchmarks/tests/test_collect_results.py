"""benchmarks/collect_results.py as a user runs it: a call's result file merged into the
record (one row per shape, the latest call's), the summary recomputed; on small fixtures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench
SCRIPT = ROOT / "benchmarks" / "collect_results.py"


def _collect(results: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--results", str(results), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _row(layer: str, m: int, bm: int, cublas: float, triton: float | None, winner_ms: float = 0.1) -> dict:
    return {
        "model": "llama3-8b",
        "layer": layer,
        "M": m,
        "N": 4096,
        "K": 4096,
        "winner": {"BM": bm, "BN": 128},
        "winner_ms": winner_ms,
        "baselines": {"cublas": cublas * winner_ms, "triton_default": triton and triton * winner_ms},
        "speedup": {"cublas": cublas, "triton_default": triton},
        "winner_is_baseline": None,
        "timing": {"gate": {"mode": "graph", "sets": 3}},
    }  # (as search_against writes it)


def _write(path: Path, rows: list[dict], command: str, date: str) -> Path:
    path.write_text(json.dumps({"device": "NVIDIA H200", "date": date, "command": command, "rows": rows}))
    return path


def test_a_new_call_replaces_the_rows_at_its_shapes_and_the_geomeans_follow(tmp_path: Path):
    results = tmp_path / "results"
    results.mkdir()
    first = _write(
        tmp_path / "a.json",
        [
            _row("qkv", 16, 64, 1.0, 2.0),
            _row("o", 16, 64, 0.5, 1.0),
            _row("down", 16, 64, 2.0, None),
        ],  # (down: triton_default failed)
        "gemm_h200.py --jobs a",
        "2026-12-01T00:00:00",
    )
    out = _collect(results, "--add", "gemm", str(first), "--call", "A")
    assert "a search file, 3 rows of gemm from call A" in out
    rec = json.loads((results / "gemm.json").read_text())
    assert [r["layer"] for r in rec["rows"]] == ["qkv", "o", "down"]
    assert math.isclose(rec["geomean"]["cublas"], (1.0 * 0.5 * 2.0) ** (1 / 3))
    # a row whose every baseline failed says nothing about the target: left out
    failed = dict(_row("gate_up", 16, 64, 1.0, 1.0), speedup={"cublas": None, "triton_default": None})
    # call B: o again (a faster winner), a new shape; the pick kept cuBLAS's tile at M=256 (1.0, not its noise)
    kept = dict(_row("qkv", 256, 128, 1.02, 1.5), winner_is_baseline="cublas")
    second = _write(
        tmp_path / "b.json",
        [_row("o", 16, 128, 1.5, 3.0), kept, failed],
        "gemm_h200.py --jobs b",
        "2026-12-02T00:00:00",
    )
    _collect(results, "--add", "gemm", str(second), "--call", "B")
    rec = json.loads((results / "gemm.json").read_text())
    rows = {(r["layer"], r["M"]): r for r in rec["rows"]}
    assert list(rows) == [("qkv", 16), ("o", 16), ("down", 16), ("qkv", 256)]  # the order kept, the new appended
    assert rows["o", 16]["call"] == "B" and rows["o", 16]["command"] == "gemm_h200.py --jobs b"
    assert rows["o", 16]["winner"]["BM"] == 128 and rows["qkv", 16]["call"] == "A"
    assert rows["qkv", 256]["speedup"]["cublas"] == 1.0
    assert math.isclose(rec["geomean"]["cublas"], (1.0 * 1.5 * 2.0 * 1.0) ** (1 / 4))
    assert math.isclose(rec["geomean_m256"]["cublas"], 1.0)
    assert set(rec["sources"]) == {"A", "B"} and rec["date"] == "2026-12-02T00:00:00"
    assert "call A: gemm_h200.py --jobs a; call B: gemm_h200.py --jobs b" == rec["command"]


def test_a_footing_call_re_measures_rows_and_keeps_the_search_figures(tmp_path: Path):
    results = tmp_path / "results"
    results.mkdir()
    _collect(
        results,
        "--add",
        "gemm",
        str(_write(tmp_path / "a.json", [_row("qkv", 16, 64, 1.0, 2.0)], "gemm_h200.py", "2026-12-01")),
        "--call",
        "A",
    )
    side = {
        "footing": {"mode": "graph"},
        "ms": {"winner": 0.08, "cublas": 0.088, "triton_default": 0.16},
        "speedup": {"cublas": 1.1, "triton_default": 2.0, "winner_gemm_call": 0.5},
        "host_us": {"winner": 20.0, "cublas": 18.0, "triton_default": 21.0},
    }
    footing = {
        "date": "2026-12-02",
        "command": "footing_h200.py --families gemm",
        "rows": [
            {
                "model": "llama3-8b",
                "layer": "qkv",
                "M": 16,
                "graph": side,
                "eager": dict(side, footing={"mode": "eager"}, speedup={"cublas": 0.9}),
            },
            {"model": "llama3-8b", "layer": "o", "M": 16, "graph": side, "eager": side},
        ],
    }  # not recorded
    out = _collect(
        results,
        "--add",
        "gemm",
        str(_write(tmp_path / "f.json", footing["rows"], footing["command"], footing["date"])),
        "--call",
        "F",
    )
    assert "a footing file, 1 rows" in out
    rec = json.loads((results / "gemm.json").read_text())
    [row] = rec["rows"]
    assert row["speedup"] == {"cublas": 1.1, "triton_default": 2.0}  # the diagnostic launch path is no baseline
    assert row["speedup_eager"] == {"cublas": 0.9} and row["winner_ms"] == 0.08
    assert row["call"] == "F" and row["command"] == "footing_h200.py --families gemm"
    assert row["recorded"]["call"] == "A" and row["recorded"]["command"] == "gemm_h200.py"
    assert row["timing"]["host_us"] == 20.0 and rec["host_us_over_cublas"]["max"] == 2.0
    assert set(rec["sources"]) == {"A"} and set(rec["footing"]) == {"F"}
    assert math.isclose(rec["geomean"]["cublas"], 1.1) and math.isclose(rec["geomean_eager"]["cublas"], 0.9)


def test_a_launch_overhead_call_times_the_recorded_winners(tmp_path: Path):
    results = tmp_path / "results"
    results.mkdir()
    _collect(
        results,
        "--add",
        "gemm",
        str(
            _write(
                tmp_path / "a.json",
                [_row("qkv", 16, 64, 1.0, 2.0), _row("o", 16, 64, 1.0, 2.0)],
                "gemm_h200.py",
                "2026-12-01",
            )
        ),
        "--call",
        "A",
    )
    timed = [
        dict(
            model="llama3-8b",
            layer=layer,
            M=16,
            N=4096,
            K=4096,
            winner={"BM": bm, "BN": 128},
            matmul_host_us=10.0,
            launcher_host_us=10.0 + over,
            over_matmul_us=over,
            within_target=over <= 10,
            same_as_gemm=True,
            gemm_host_us=150.0,
        )
        for layer, bm, over in [("qkv", 64, 3.0), ("o", 128, 1.0)]
    ]
    # (o's winner there is not the recorded one)
    out = _collect(
        results,
        "--add",
        "gemm",
        str(_write(tmp_path / "l.json", timed, "launch_overhead.py", "2026-12-02")),
        "--call",
        "L",
    )
    assert "a launch file, 1 rows" in out
    rec = json.loads((results / "gemm.json").read_text())
    assert rec["rows"][0]["host_launch"]["over_matmul_us"] == 3.0 and "host_launch" not in rec["rows"][1]
    assert rec["rows"][0]["host_launch"]["gemm_us"] == 150.0  # the JIT path's host time, beside the launcher's
    summary = rec["host_launch"]
    assert (
        summary["rows"] == 1
        and summary["within_10us"] == 1
        and summary["calls"]["L"]["command"] == "launch_overhead.py"
    )
    # a later search with the same winner at the shape keeps its launch figures; a new winner drops them
    _collect(
        results,
        "--add",
        "gemm",
        str(_write(tmp_path / "b.json", [_row("qkv", 16, 64, 1.1, 2.0)], "gemm_h200.py", "2026-12-03")),
        "--call",
        "B",
    )
    assert json.loads((results / "gemm.json").read_text())["host_launch"]["rows"] == 1
    _collect(
        results,
        "--add",
        "gemm",
        str(_write(tmp_path / "c.json", [_row("qkv", 16, 32, 1.2, 2.0)], "gemm_h200.py", "2026-12-04")),
        "--call",
        "C",
    )
    rec = json.loads((results / "gemm.json").read_text())
    assert rec["host_launch"] is None and set(rec["sources"]) == {"A", "C"}


def test_an_attention_file_gives_each_record_its_own_kind_of_row(tmp_path: Path):
    results = tmp_path / "results"
    results.mkdir()
    rows = [
        {
            "kind": "prefill",
            "model": "llama3-8b",
            "shape": "4x2048",
            "winner_ms": 1.0,
            "speedup": {"sdpa_flash": 1.5, "sdpa_cudnn": 0.8},
        },
        {
            "kind": "decode",
            "model": "llama3-8b",
            "spec": "1:32768",
            "winner_ms": 0.2,
            "speedup": {"sglang_default": 1.7, "sdpa_gathered": 2.9},
        },
    ]
    path = _write(tmp_path / "attn.json", rows, "attention_h200.py", "2026-12-01")
    _collect(results, "--add", "attention_prefill", str(path), "--call", "T")
    _collect(results, "--add", "attention_decode", str(path), "--call", "T")
    prefill = json.loads((results / "attention_prefill.json").read_text())
    decode = json.loads((results / "attention_decode.json").read_text())
    assert [r["kind"] for r in prefill["rows"]] == ["prefill"] and [r["kind"] for r in decode["rows"]] == ["decode"]
    assert decode["geomean"] == {"split_kv_default": 1.7, "sdpa": 2.9}  # the issues' names for the baselines
    out = _collect(results, "--summary")
    assert "attention_prefill: 1 rows from calls T" in out and "gemm" not in out
