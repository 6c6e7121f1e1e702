"""Benchmark scripts run end to end on the CPU, as checks of the scripts (the figures they
print mean nothing here): benchmarks/launch_overhead.py in the Triton interpreter and
benchmarks/model_level_h200.py on tiny models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench


def test_the_overhead_benchmark_runs_on_the_cpu(tmp_path: Path) -> None:
    """benchmarks/launch_overhead.py, as a check of the script: two rows in the interpreter."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "launch_overhead.py"),
            "--device",
            "cpu",
            "--clip",
            "48",
            "--n",
            "2",
            "--min-n",
            "1",
            "--reps",
            "1",
            "--warmup",
            "1",
            "--max-rows",
            "2",
            "--out",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "launch_overhead.json").read_text())
    assert [r["M"] for r in doc["rows"]] == [16, 48] and all(r["same_as_gemm"] for r in doc["rows"])
    assert "| llama3-8b | qkv | 16 |" in (tmp_path / "launch_overhead.md").read_text()


@pytest.mark.slow
def test_the_model_level_benchmark_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "model_level_h200.py"),
            "--device",
            "cpu",
            "--tiny",
            "--models",
            "flux,qwen",
            "--budget",
            "3",
            "--no-compiled-sites",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "model_level.json").read_text())
    assert set(doc["geomean"]) == {"eager_cudagraph", "torch_compile"} and doc["geomean"]["eager_cudagraph"] > 0
    assert set(doc["models"]) == {"flux-dit", "qwen3-moe-stack"} and doc["mode"].startswith("cpu-tiny")
    flux = doc["models"]["flux-dit"]
    assert flux["timing"] == "cpu-wall" and flux["search"]["evaluations"] == 3 and flux["torch_compile_ms"] > 0
    assert "geomean" in (tmp_path / "model_level.md").read_text()
    from evokernel import SQLiteStore

    with SQLiteStore(str(tmp_path / "model_level.db")) as store:
        assert {p["name"] for p in store.profiles()} == {"flux-dit", "qwen3-moe-stack"}
