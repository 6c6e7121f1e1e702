"""`evokernel export sglang-moe`: real fused-MoE searches on the CPU (Triton's interpreter, a
tiny model), exported in the layout and form SGLang's loader reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel import Budget, Search
from evokernel.evaluators import KernelEvaluator
from evokernel.integrations.sglang.export import GEMM_KEYS, sglang_file_name, sglang_moe
from evokernel.judge.gate import GateOptions
from evokernel.engine.search import SearchOptions
from evokernel.search_spaces import moe_shared_space, shared_params
from evokernel.search_spaces.moe.template import candidate_source
from evokernel.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "problems" / "moe_bf16.py"
QUICK = GateOptions(timing={"max_reps": 3, "min_reps": 2})


def _search(db: Path, m: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOKERNEL_MOE_MODEL", "tiny")
    monkeypatch.setenv("EVOKERNEL_MOE_DTYPE", "float16")  # the interpreter cannot do bf16 dots
    monkeypatch.setenv("EVOKERNEL_MOE_M", str(m))
    space = moe_shared_space()
    ev = KernelEvaluator(
        PROBLEM, lambda g: candidate_source(shared_params(g.params)), device="cpu", options=QUICK, workers=2
    )
    report = Search(
        space, ev, store=SQLiteStore(db), options=SearchOptions(population=2, remeasure=0, report_elites=1)
    ).run(Budget(evaluations=2), seed=m)
    assert report.best is not None, report.statuses


def test_file_names_follow_sglangs_loader():
    assert sglang_file_name(8, 14336, "NVIDIA H200") == "E=8,N=14336,device_name=NVIDIA_H200.json"
    assert (
        sglang_file_name(128, 768, "NVIDIA H100 80GB HBM3", down=True)
        == "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3_down.json"
    )
    assert (
        sglang_file_name(256, 256, "NVIDIA H200", dtype="fp8_w8a8", block_shape=[128, 128])
        == "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )
    assert sglang_file_name(4, 32, "NVIDIA H200", block_shape=[0, 0]) == "E=4,N=32,device_name=NVIDIA_H200.json"


@pytest.mark.slow
def test_moe_searches_export_to_sglang_config_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    db = tmp_path / "moe.db"
    for m in (8, 16):
        _search(db, m, monkeypatch)
    out = tmp_path / "sglang"
    folder = out / "configs" / "triton_3_6_0"
    folder.mkdir(parents=True)
    # an earlier export's batch size stays; the ones exported now are written
    keep = {
        "BLOCK_SIZE_M": 64,
        "BLOCK_SIZE_N": 64,
        "BLOCK_SIZE_K": 64,
        "GROUP_SIZE_M": 1,
        "num_warps": 4,
        "num_stages": 3,
    }
    (folder / "E=4,N=32,device_name=NVIDIA_H200.json").write_text(json.dumps({"1": keep}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVOKERNEL_MOE")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evokernel.cli",
            "export",
            "sglang-moe",
            str(db),
            "--out",
            str(out),
            "--device-name",
            "NVIDIA H200",
            "--triton-version",
            "3.6.0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == [
        "E=4,N=32,device_name=NVIDIA_H200.json",
        "E=4,N=32,device_name=NVIDIA_H200_down.json",
    ]
    up = json.loads((folder / "E=4,N=32,device_name=NVIDIA_H200.json").read_text())
    down = json.loads((folder / "E=4,N=32,device_name=NVIDIA_H200_down.json").read_text())
    assert list(up) == ["1", "8", "16"] and list(down) == ["8", "16"] and up["1"] == keep
    for table in (up, down):
        for m, cfg in table.items():
            assert m.isdigit() and list(cfg) == list(GEMM_KEYS)
            assert all(type(v) is int for v in cfg.values())
    assert up["8"] == down["8"]  # one config for both GEMMs in this space
    assert "M=8:" in proc.stdout and "M=16:" in proc.stdout


@pytest.mark.slow
def test_runs_that_cannot_be_exported_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    db = tmp_path / "moe.db"
    _search(db, 8, monkeypatch)
    report = sglang_moe(SQLiteStore(db, create=False), tmp_path / "out")  # a CPU run records no GPU
    assert not report.files and "recorded no GPU" in report.skipped[0]
    empty = tmp_path / "empty.db"
    SQLiteStore(empty).close()
    proc = subprocess.run(
        [sys.executable, "-m", "evokernel.cli", "export", "sglang-moe", str(empty), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no fused-MoE run" in proc.stderr


@pytest.mark.slow
def test_a_gemv_best_elite_exports_the_best_one_sglangs_kernel_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from evokernel.core.archive import Elite
    from evokernel.core.genome import Genome

    db = tmp_path / "moe.db"
    _search(db, 8, monkeypatch)
    store = SQLiteStore(db)
    run = store.runs()[0]
    [gemm_path] = store.elites(run_id=run.id)[:1]
    # the run's fastest elite takes the small-batch structure SGLang's kernel does not have
    gemv = Genome.of(dict(shared_params(gemm_path.genome.params), BLOCK_SIZE_M=16, GEMV=1))
    store.save_elites(
        run.id, run.archive_key, [gemm_path, Elite(niche="gemv", genome=gemv, latency_ms=gemm_path.latency_ms / 2)]
    )
    assert store.elites(run_id=run.id)[0].genome.params.get("GEMV") == 1
    report = sglang_moe(store, tmp_path / "out", device_name="NVIDIA H200", triton_version="3.6.0")
    [up_file] = [p for p in report.files if not p.name.endswith("_down.json")]
    up = json.loads(up_file.read_text())["8"]
    assert up == {k: int(gemm_path.genome.params[k]) for k in GEMM_KEYS}
    assert "GEMV" in report.notes[0] and "exported the best one SGLang's kernel runs" in report.notes[0]


@pytest.mark.slow
def test_when_every_elite_has_a_structure_the_runs_fastest_plain_candidate_is_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Call V: FUSE_SILU won every niche by ~1%, so no elite was a config SGLang's kernel runs
    and the configs package was not exported at all; the run's history still held the plain
    candidates it had measured."""
    from evokernel.core.archive import Elite
    from evokernel.core.genome import Genome

    db = tmp_path / "moe.db"
    _search(db, 8, monkeypatch)
    store = SQLiteStore(db)
    run = store.runs()[0]
    plain = sorted((e for e in store.history(run.id) if e.result.is_ok), key=lambda e: e.result.latency_ms)[0]
    # every niche's elite replaced by a fused twin (faster, as on the H200)
    store.save_elites(
        run.id,
        run.archive_key,
        [
            Elite(niche=e.niche, genome=Genome.of(dict(e.genome.params, FUSE_SILU=1)), latency_ms=e.latency_ms / 2)
            for e in store.elites(run_id=run.id)
        ],
    )
    assert all(e.genome.params.get("FUSE_SILU") for e in store.elites(run_id=run.id))
    report = sglang_moe(store, tmp_path / "out", device_name="NVIDIA H200", triton_version="3.6.0")
    [up_file] = [p for p in report.files if not p.name.endswith("_down.json")]
    assert json.loads(up_file.read_text())["8"] == {k: int(plain.genome.params[k]) for k in GEMM_KEYS}
    assert "FUSE_SILU" in report.notes[0] and "fastest candidate of the run SGLang's kernel runs" in report.notes[0]
