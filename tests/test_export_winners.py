"""Export winners per shape, re-exports into a package, promotion of another model's entries.

Runs are compared at each table key by their elite's time at that shape (`Result.per_shape`),
never one run's aggregate over its shapes against another's time at one shape; a re-export
keeps the tables the package already named; promotion told the model's shapes spends no
engine on another model's entries and records no dead end for them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace as NS
from typing import Any

from evokernel.core.archive import Elite
from evokernel.core.genome import Genome
from evokernel.core.result import Result, Status
from evokernel.integrations.sglang.export import (
    MoeExport,
    _decode_winners,
    _winners,
    add_prefill_table,
    sglang_plugin_package,
)
from evokernel.integrations.sglang.plugin import Package
from evokernel.judge.problem import shape_key
from evokernel.store import SQLiteStore

MOE = {"E": 128, "I": 768, "H": 2048, "topk": 8}
EV = {"gpu": "NVIDIA H200", "triton": "3.6.0"}
DEC = {"NUM_SPLITS": 4, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "REDUCE": 0}


def _moe_genome(bm: int) -> Genome:
    return Genome.of(
        {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}
    )


def _dec_genome(splits: int) -> Genome:
    return Genome.of(dict(DEC, NUM_SPLITS=splits))


def _dec_shape(b: int, c: int) -> dict[str, int]:
    return {"B": b, "C": c, "Hq": 32, "Hkv": 4, "D": 128, "P": 1}


def _run(store: SQLiteStore, run_id: str, shapes: list[dict[str, Any]], genome: Genome, times: list[float]) -> None:
    """A run over `shapes` whose one elite measured `times` there (the gate's per-shape
    medians, named by `shape_key`), its latency their geometric mean."""
    agg = 1.0
    for t in times:
        agg *= t
    agg **= 1 / len(times)
    store.begin_run(
        run_id, name=run_id, archive_key=run_id, fingerprint="fp", config={"evaluator": dict(EV, shapes=shapes)},
        environment={},
    )  # fmt: skip
    per = {shape_key(sh): t for sh, t in zip(shapes, times)}
    store.record(run_id, 0, genome, "fp", Result.ok(agg, per_shape=per))
    store.save_elites(run_id, run_id, [Elite(niche="a", genome=genome, latency_ms=agg, run_id=run_id)])


def test_a_run_tuned_for_one_batch_size_beats_a_shared_one_at_it(tmp_path: Path):
    store = SQLiteStore(tmp_path / "s.db")
    _run(store, "dedicated256", [dict(MOE, M=256)], _moe_genome(64), [0.050])
    # one config for M=1 and M=256: geomean 0.0245 ms, but 0.060 ms at M=256
    _run(store, "shared1_256", [dict(MOE, M=1), dict(MOE, M=256)], _moe_genome(16), [0.010, 0.060])
    best = _winners(store, MoeExport(), device_name=None, triton_version=None, shared_m=True)
    by_m = {k[4]: v for k, v in best.items()}
    assert by_m[256][3] == "dedicated256" and by_m[256][1]["BLOCK_SIZE_M"] == 64 and by_m[256][0] == 0.050
    assert by_m[1][3] == "shared1_256" and by_m[1][0] == 0.010
    assert {k[1:3] for k in best} == {(128, 768)}


def test_e_and_n_are_read_per_shape(tmp_path: Path):
    store = SQLiteStore(tmp_path / "s.db")
    other = {"E": 64, "I": 512, "H": 2048, "topk": 8}
    _run(store, "two", [dict(MOE, M=8), dict(other, M=8)], _moe_genome(16), [0.02, 0.03])
    best = _winners(store, MoeExport(), device_name=None, triton_version=None, shared_m=True)
    assert {k[1:3] + (v[0],) for k, v in best.items()} == {(128, 768, 0.02), (64, 512, 0.03)}


def test_decode_a_short_context_run_does_not_take_a_long_context_runs_batch(tmp_path: Path):
    store = SQLiteStore(tmp_path / "s.db")
    _run(store, "long", [_dec_shape(1, 32768)], _dec_genome(64), [0.090])
    _run(store, "short", [_dec_shape(1, 512)], _dec_genome(2), [0.012])
    report = MoeExport()
    [(key, won)] = _decode_winners(store, report).items()
    assert key == (32, 4, 128, 1) and won[2] == "long" and won[1]["NUM_SPLITS"] == 64 and won[3] == 32768
    assert any("run short left out" in n and "32768" in n for n in report.notes)


def test_decode_runs_at_one_context_compare_their_time_at_that_shape(tmp_path: Path):
    store = SQLiteStore(tmp_path / "s.db")
    _run(store, "dedicated", [_dec_shape(8, 4096)], _dec_genome(8), [0.040])
    _run(store, "shared", [_dec_shape(1, 4096), _dec_shape(8, 4096)], _dec_genome(16), [0.010, 0.050])
    best = _decode_winners(store, MoeExport())
    assert best[(32, 4, 128, 8)][2] == "dedicated" and best[(32, 4, 128, 1)][2] == "shared"


def test_without_per_shape_times_the_most_specific_run_wins_with_a_note():
    runs = [
        NS(id="dedicated256", config={"evaluator": dict(EV, shapes=[dict(MOE, M=256)])}),
        NS(id="shared1_256", config={"evaluator": dict(EV, shapes=[dict(MOE, M=1), dict(MOE, M=256)])}),
    ]
    elites = {
        "dedicated256": [Elite(niche="a", genome=_moe_genome(64), latency_ms=0.050, run_id="dedicated256")],
        "shared1_256": [Elite(niche="a", genome=_moe_genome(16), latency_ms=0.0245, run_id="shared1_256")],
    }
    store = NS(runs=lambda: runs, elites=lambda run_id: elites[run_id])  # no history: no per-shape times
    report = MoeExport()
    best = _winners(store, report, device_name=None, triton_version=None, shared_m=True)
    assert {k[4]: v[3] for k, v in best.items()} == {1: "shared1_256", 256: "dedicated256"}
    [note] = report.notes
    assert "M=256" in note and "run dedicated256 over run shared1_256" in note and "fewer shapes" in note


def test_reexport_keeps_the_packages_prefill_table_and_merges_its_decode_table(tmp_path: Path):
    store = SQLiteStore(tmp_path / "s.db")
    _run(store, "dec1", [_dec_shape(1, 4096)], _dec_genome(4), [0.05])
    out = tmp_path / "pkg"
    sglang_plugin_package(store, out)
    gluon = {"form": "gluon", "BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "OVERLAP": 1,
             "PINGPONG": 1}  # fmt: skip
    add_prefill_table(out, {(32, 4, 128, True): {4096: gluon}}, provenance={"from": "prefill_gluon.json"})
    _run(store, "dec8", [_dec_shape(8, 4096)], _dec_genome(8), [0.07])
    report = sglang_plugin_package(store, out)  # the same export again, after another decode run
    package = Package.load(out)
    assert package.prefill is not None and package.prefill.entries[(32, 4, 128, True)][4096]["PINGPONG"] == 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["provenance"]["prefill_attention"] == {"from": "prefill_gluon.json"}
    assert any("prefill_attention" in n and "kept" in n for n in report.notes)
    assert set(package.decode.entries[(32, 4, 128)]) == {1, 8}


def test_reexport_merges_into_a_table_it_exports_again(tmp_path: Path):
    store = SQLiteStore(tmp_path / "s.db")
    _run(store, "dec1", [_dec_shape(1, 4096)], _dec_genome(4), [0.05])
    out = tmp_path / "pkg"
    sglang_plugin_package(store, out)
    # an earlier export's decode entry for other heads stays when the decode table is written again
    path = out / "kernels" / "decode_attention.json"
    table = json.loads(path.read_text())
    table["Hq=64,Hkv=8,D=128"] = {"2": dict(DEC, NUM_SPLITS=32)}
    path.write_text(json.dumps(table))
    sglang_plugin_package(store, out)
    entries = Package.load(out).decode.entries
    assert entries[(64, 8, 128)][2]["NUM_SPLITS"] == 32 and entries[(32, 4, 128)][1]["NUM_SPLITS"] == 4


# -- promotion: another model's entries ------------------------------------------------------
class _AB:
    """An A/B whose every change variant is faster at every decode point."""

    def __init__(self, batches: list[int]) -> None:
        self.points = [f"b{b}_i1024_o64" for b in batches]
        self.variants: list[str] = []

    def plan(self) -> dict[str, Any]:
        return {"decode_points": self.points}

    def compare(self, variants: dict[str, Any]) -> Any:
        self.variants = list(variants)
        v = {"verdict": "faster", "median": 1.2, "low": 1.1, "high": 1.3}
        paired = {name: {p: dict(v) for p in self.points} for name in variants}
        return NS(to_json=lambda: {"plan": {"decode_points": self.points}, "paired": {"decode_throughput": paired}})


def _two_model_package(root: Path) -> Path:
    (root / "kernels").mkdir(parents=True)
    table = {"Hq=32,Hkv=4,D=128": {"1": DEC}, "Hq=64,Hkv=8,D=128": {"1": dict(DEC, NUM_SPLITS=16)}}
    (root / "kernels" / "decode_attention.json").write_text(json.dumps(table))
    (root / "manifest.json").write_text(
        json.dumps({"format": "evokernel-sglang/1", "kernels": [
            {"op": "decode_attention", "table": "kernels/decode_attention.json"}]})
    )  # fmt: skip
    return root


def test_promote_told_the_models_heads_leaves_other_heads_unmeasured_and_kept(tmp_path: Path):
    from evokernel.integrations.sglang.promote import changes, dead_ends, promote

    root = _two_model_package(tmp_path / "pkg")
    ab = _AB([1])
    store = SQLiteStore(tmp_path / "k.db")
    got = promote(ab, root, tmp_path / "out", work=tmp_path / "work", store=store, gpu="G", heads=(32, 4, 128))
    verdicts = {d.change.key: (d.verdict, d.reason) for d in got.decisions}
    assert verdicts["Hq=32,Hkv=4,D=128"] == ("promoted", "")
    assert verdicts["Hq=64,Hkv=8,D=128"][0] == "unmeasured" and "another model" in verdicts["Hq=64,Hkv=8,D=128"][1]
    assert ab.variants == ["changes"]  # one engine: the other model's entry spent none
    assert got.package is not None and {c.key for c in changes(got.package)} == set(verdicts)
    assert not dead_ends(store, "G")


def test_promote_without_the_models_shapes_judges_every_entry(tmp_path: Path):
    from evokernel.integrations.sglang.promote import promote

    root = _two_model_package(tmp_path / "pkg")
    ab = _AB([1])
    got = promote(ab, root, tmp_path / "out", work=tmp_path / "work")
    assert sorted(ab.variants) == ["changes_0", "changes_1"]
    assert {d.verdict for d in got.decisions} == {"promoted"}


def test_when_no_elite_is_runnable_each_shape_gets_the_runs_fastest_runnable_candidate_there(tmp_path: Path):
    """Every elite has FUSE_SILU (SGLang's kernel has none): the history's plain candidates are
    compared at each shape. BLOCK_SIZE_M 16 is fastest at M=1 and 64 at M=256, though 16 has the
    lower geomean (and a third, failed once, the lowest single reading: it does not count)."""
    store = SQLiteStore(tmp_path / "s.db")
    shapes = [dict(MOE, M=1), dict(MOE, M=256)]
    store.begin_run(
        "r", name="r", archive_key="r", fingerprint="fp", config={"evaluator": dict(EV, shapes=shapes)},
        environment={},
    )  # fmt: skip
    keys = [shape_key(sh) for sh in shapes]
    small, big, flaky = _moe_genome(16), _moe_genome(64), _moe_genome(32)
    seq = 0
    for genome, times in ((small, (0.010, 0.080)), (big, (0.030, 0.050)), (flaky, (0.005, 0.030))):
        agg = (times[0] * times[1]) ** 0.5
        store.record("r", seq, genome, "fp", Result.ok(agg, per_shape=dict(zip(keys, times))))
        seq += 1
    store.record_remeasurement("r", 0, flaky, "fp", Result.failed(Status.CRASH, "illegal memory access"))
    fused = Genome.of(dict(small.params, FUSE_SILU=1))
    store.save_elites("r", "r", [Elite(niche="a", genome=fused, latency_ms=0.01, run_id="r")])
    report = MoeExport()
    best = _winners(store, report, device_name=None, triton_version=None, shared_m=True)
    by_m = {k[4]: v for k, v in best.items()}
    assert by_m[1][1]["BLOCK_SIZE_M"] == 16 and by_m[1][0] == 0.010
    assert by_m[256][1]["BLOCK_SIZE_M"] == 64 and by_m[256][0] == 0.050
    assert "at each shape (2 of them" in report.notes[0] and "FUSE_SILU" in report.notes[0]
