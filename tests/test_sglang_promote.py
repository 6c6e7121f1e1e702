"""The promotion cascade's end-to-end stage on the CPU: a package's changes, the groups
that attribute every verdict to one change, reverting what is not promoted, the decisions
from an A/B report, dead ends in the knowledge base, and the export leaving them out. The
A/B itself runs SGLang on the GPU (benchmarks/sglang_long_h200.py); here its report is
built from one_batch-shaped samples, and the recorded 0.912x case is replayed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evokernel.evaluators.sglang import BASELINE, CONTROL, ABReport, SGLangEvaluator
from evokernel.integrations.sglang.plugin import FORMAT, Package, PackageError
from evokernel.integrations.sglang.promote import (
    LESSON_OP,
    changes,
    dead_ends,
    decide,
    drop_dead_ends,
    groups,
    record,
    restrict,
)
from evokernel.search_spaces.moe.sglang import shipped_file

ROOT = Path(__file__).resolve().parents[1]
DEC = {"NUM_SPLITS": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "REDUCE": 0}
# a tuned M=1 entry that differs from SGLang's shipped one (16x64x64 g1 w4 s5)
UP = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}
NAME = "E=128,N=768,device_name=NVIDIA_H200.json"


def _package(root: Path) -> Path:
    """Decode entries at 1, 4 and 32; SGLang's shipped H200 file with its M=1 entry tuned;
    a down file (SGLang ships none for this shape: a change as a whole)."""
    (root / "kernels").mkdir(parents=True)
    decode = {"Hq=32,Hkv=4,D=128": {"1": dict(DEC, NUM_SPLITS=64), "4": DEC, "32": dict(DEC, NUM_SPLITS=2)}}
    (root / "kernels" / "decode_attention.json").write_text(json.dumps(decode))
    folder = root / "configs" / "triton_3_6_0"
    folder.mkdir(parents=True)
    shipped = shipped_file(128, 768, "NVIDIA H200")
    assert shipped is not None
    up = json.loads(shipped.read_text())
    up["1"] = UP
    (folder / NAME).write_text(json.dumps(up))
    (folder / NAME.replace(".json", "_down.json")).write_text(shipped.read_text())
    manifest = {
        "format": FORMAT,
        "configs": "configs",
        "kernels": [{"op": "decode_attention", "table": "kernels/decode_attention.json"}],
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def _run(decode_s: float, bs: int) -> dict:
    return {"batch_size": bs, "prefill_latency": 0.1, "median_decode_latency": decode_s,
            "median_decode_throughput": bs / decode_s}  # fmt: skip


def test_changes_groups_and_reverting_what_is_not_promoted(tmp_path: Path):
    root = _package(tmp_path / "pkg")
    found = changes(root)
    ops = sorted(((c.op, c.batch) for c in found), key=str)
    # three decode entries, the one tuned entry of the up file (the others equal SGLang's), the down file
    assert ops == [("configs", 1), ("configs", None), ("decode_attention", 1), ("decode_attention", 32),
                   ("decode_attention", 4)]  # fmt: skip
    assert [c.id for c in changes(root)] == [c.id for c in found]  # stable
    by = {(c.op, c.batch): c for c in found}
    assert by["decode_attention", 4].serves(4) and by["decode_attention", 4].serves(8)
    assert not by["decode_attention", 4].serves(16)  # out of reach: SGLang's kernel serves 16
    assert by["configs", 1].serves(1) and not by["configs", 1].serves(2)  # SGLang's file has 2
    assert by["configs", None].serves(256)
    grouped = groups(found, [1, 4, 32, 256])
    assert all(
        not (set(b for b in (1, 4, 32, 256) if x.serves(b)) & set(b for b in (1, 4, 32, 256) if y.serves(b)))
        for g in grouped
        for i, x in enumerate(g)
        for y in g[i + 1 :]
    )
    assert len(grouped) == 3  # the down file serves every point; batch 1 has a decode and an up-file change

    keep = {by["decode_attention", 1].id, by["configs", None].id}
    out = restrict(root, tmp_path / "kept", keep)
    package = Package.load(out)
    assert package.decode is not None
    assert package.decode.lookup(32, 4, 128, 1) == dict(DEC, NUM_SPLITS=64)
    assert package.decode.lookup(32, 4, 128, 4) is None and package.decode.lookup(32, 4, 128, 32) is None
    assert not (out / "configs" / "triton_3_6_0" / NAME).exists()  # M=1 back to SGLang's: SGLang reads its own
    assert (out / "configs" / "triton_3_6_0" / NAME.replace(".json", "_down.json")).exists()
    assert sorted(c.id for c in changes(out)) == sorted(keep)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["provenance"]["reverted"]) == 3
    bare = restrict(root, tmp_path / "bare", keep=set())
    assert Package.load(bare).config_dir is None and not (bare / "configs").exists()
    # a table whose keys are spelled otherwise than `changes` writes them (the plugin reads both)
    table = root / "kernels" / "decode_attention.json"
    table.write_text(json.dumps({"Hkv=4,Hq=32,D=128": json.loads(table.read_text())["Hq=32,Hkv=4,D=128"]}))
    out = restrict(root, tmp_path / "respelled", {by["decode_attention", 1].id})
    kept = Package.load(out).decode
    assert kept is not None and kept.lookup(32, 4, 128, 1) == dict(DEC, NUM_SPLITS=64)
    assert kept.lookup(32, 4, 128, 4) is None and kept.lookup(32, 4, 128, 32) is None


def test_decisions_from_the_ab_dead_ends_in_the_knowledge_base_and_the_export_leaves_them_out(tmp_path: Path):
    from evokernel.store import SQLiteStore

    root = _package(tmp_path / "pkg")
    found = changes(root)
    by = {(c.op, c.batch): c for c in found}
    ev = SGLangEvaluator(["--model-path", "m"], decode_points=[(1, 32768), (4, 16384), (32, 4096)], prefill_lens=())
    plan = ev.plan()
    report = ABReport(plan=plan)
    drift = (1.0, 1.2, 0.9, 1.1, 1.05)
    # step times (s) per point: the decode group is faster at 1, slower at 4, the same at 32;
    # the down file (its own group) is slower at 32
    steps = {
        BASELINE: (2.0, 2.0, 2.0),
        CONTROL: (2.0, 2.0, 2.0),
        "g_decode": (1.0, 2.4, 2.0),
        "g_down": (2.0, 2.0, 2.5),
        "g_up": (2.0, 2.0, 2.0),
    }
    for name, ts in steps.items():
        report.samples[name] = {
            p: [dict(_run(t * 1e-3 * d * (1 + 0.002 * (-1) ** r), int(p.split("_")[0][1:])), round=r)
                for r, d in enumerate(drift)]
            for p, t in zip(plan["decode_points"], ts)
        }  # fmt: skip
    variant_of = {c.id: "g_decode" for c in found if c.op == "decode_attention"}
    variant_of[by["configs", None].id] = "g_down"
    variant_of[by["configs", 1].id] = "g_up"
    decisions = {(d.change.op, d.change.batch): d for d in decide(report.to_json(), variant_of, found)}
    assert decisions["decode_attention", 1].verdict == "promoted"
    assert decisions["decode_attention", 4].verdict == "dead_end"
    assert decisions["decode_attention", 32].verdict == "no_gain"
    assert decisions["configs", None].verdict == "dead_end" and "b32_i4096_o32" in decisions["configs", None].points
    assert decisions["configs", 1].verdict == "no_gain"
    # two changes of one variant at a slower point: neither is called a dead end on that evidence
    shared = decide(report.to_json(), {**variant_of, by["decode_attention", 32].id: "g_down"}, found)
    got = {(d.change.op, d.change.batch): d for d in shared}
    assert got["configs", None].verdict == got["decode_attention", 32].verdict == "suspect"
    assert got["configs", None].shared_with == [by["decode_attention", 32].id]

    store = SQLiteStore(tmp_path / "k.db")
    lessons = record(store, list(decisions.values()), gpu="NVIDIA H200", toolchain={"triton": "3.6.0"})
    assert len(lessons) == 2 and all(le.op == LESSON_OP and le.kind == "caveat" for le in lessons)
    assert "slower end to end" in lessons[0].text and "A/A [" in lessons[0].text
    assert dead_ends(store, "NVIDIA H200") == {by["decode_attention", 4].id, by["configs", None].id}
    assert dead_ends(store, "NVIDIA H100") == set()
    dropped = drop_dead_ends(store, root, "NVIDIA H200")
    assert sorted(dropped) == sorted(dead_ends(store, "NVIDIA H200"))
    left = {(c.op, c.batch) for c in changes(root)}
    assert left == {("decode_attention", 1), ("decode_attention", 32), ("configs", 1)}
    assert drop_dead_ends(store, root, "NVIDIA H200") == []  # nothing left to drop


def test_prefill_entries_are_judged_on_the_prefill_latency_of_the_prompts_they_serve(tmp_path: Path):
    from evokernel.store import SQLiteStore

    root = tmp_path / "pkg"
    (root / "kernels").mkdir(parents=True)
    gluon = {
        "form": "gluon",
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "num_warps": 4,
        "num_stages": 2,
        "OVERLAP": 1,
        "PINGPONG": 1,
    }
    table = {"Hq=32,Hkv=4,D=128,causal=1": {"4096": gluon, "32768": dict(gluon, BLOCK_N=64)}}
    (root / "kernels" / "prefill_attention.json").write_text(json.dumps(table))
    manifest = {"format": FORMAT, "kernels": [{"op": "prefill_attention", "table": "kernels/prefill_attention.json"}]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    found = changes(root)
    by = {c.batch: c for c in found}
    # the plugin's lookup: the nearest tuned length within 4x
    assert by[4096].serves_prefill(8192) and by[4096].serves_prefill(16384) and by[32768].serves_prefill(24576)
    assert not by[4096].serves_prefill(32768) and not by[4096].serves_prefill(1000) and not by[4096].serves(4096)
    ev = SGLangEvaluator(["--model-path", "m"], decode_points=[(1, 32768), (8, 8192), (32, 4096)], prefill_lens=())
    plan = ev.plan()
    report = ABReport(plan=plan)
    drift = (1.0, 1.2, 0.9, 1.1, 1.05)
    # prefill seconds per point: the 32768 entry is 30% faster at 32768; the 4096 entry is 20% slower
    # at 8192 and 4096; decode steps the same everywhere
    prefill = {BASELINE: (0.21, 0.15, 0.22), CONTROL: (0.21, 0.15, 0.22), "g": (0.15, 0.18, 0.26)}
    for name, ts in prefill.items():
        report.samples[name] = {
            p: [dict(_run(2e-3 * d, _batch_of(p)), prefill_latency=t * d * (1 + 0.002 * (-1) ** r), round=r)
                for r, d in enumerate(drift)]
            for p, t in zip(plan["decode_points"], ts)
        }  # fmt: skip
    decisions = {d.change.batch: d for d in decide(report.to_json(), {c.id: "g" for c in found}, found)}
    assert decisions[32768].verdict == "promoted" and list(decisions[32768].points) == ["b1_i32768_o32"]
    assert decisions[4096].verdict == "dead_end"
    assert sorted(decisions[4096].points) == ["b32_i4096_o32", "b8_i8192_o32"]
    store = SQLiteStore(tmp_path / "k.db")
    (lesson,) = record(store, list(decisions.values()), gpu="NVIDIA H200", toolchain={})
    assert "prefill_attention" in lesson.text and "prefill latency ratio" in lesson.text
    # the promoted package keeps the faster entry only
    kept = restrict(root, tmp_path / "promoted", keep={by[32768].id})
    got = json.loads((kept / "kernels" / "prefill_attention.json").read_text())
    assert got["Hq=32,Hkv=4,D=128,causal=1"]["4096"] is None and got["Hq=32,Hkv=4,D=128,causal=1"]["32768"]


def _batch_of(point: str) -> int:
    return int(point.split("_")[0][1:])


def test_the_recorded_0912x_case_the_cascade_ships_none_of_what_regressed(tmp_path: Path):
    """Call X (2026-11-30, benchmarks/results/sglang_e2e.json): SGLang's own MoE kernel with
    the exported configs read 0.912x end to end. Its package: SGLang's shipped up file with
    the tuned M=1 entry, and a down file (copied from the up file; SGLang ships none). Replayed
    through the decisions: the down file is slower at b16 and b64, where it is the only change
    (a dead end); the M=1 entry is within noise at b1 (not promoted): nothing ships."""
    ab = json.loads((ROOT / "benchmarks" / "results" / "sglang_e2e.json").read_text())
    root = tmp_path / "pkg"
    folder = root / "configs" / "triton_3_6_0"
    folder.mkdir(parents=True)
    shipped = json.loads(shipped_file(128, 768, "NVIDIA H200").read_text())
    (folder / NAME).write_text(json.dumps(dict(shipped, **{"1": UP})))
    (folder / NAME.replace(".json", "_down.json")).write_text(json.dumps(dict(shipped, **{"1": UP})))
    (root / "manifest.json").write_text(json.dumps({"format": FORMAT, "configs": "configs", "kernels": []}))
    found = changes(root)
    decisions = {(d.change.key.endswith("_down.json"), d.change.batch): d for d in
                 decide(ab, {c.id: "evokernel_configs" for c in found}, found)}  # fmt: skip
    assert decisions[True, None].verdict == "dead_end"
    assert sorted(decisions[True, None].points) == sorted(ab["plan"]["decode_points"])
    assert [p for p, v in decisions[True, None].points.items() if v["verdict"] == "slower"] == [
        "b16_i512_o32",
        "b64_i512_o32",
    ]
    assert decisions[False, 1].verdict == "no_gain"
    assert not any(d.verdict == "promoted" for d in decisions.values())


@pytest.mark.parametrize("missing", ["manifest.json"])
def test_a_package_without_its_manifest_is_refused(tmp_path: Path, missing: str):
    from evokernel.integrations.sglang.plugin import PackageError

    root = _package(tmp_path / "pkg")
    (root / missing).unlink()
    with pytest.raises(PackageError, match="no manifest.json"):
        changes(root)


@pytest.mark.slow
def test_the_promote_command_refuses_with_one_line(tmp_path: Path, evokernel_cmd, cli_env):
    """`evokernel promote`: a folder that is no package, a package that changes nothing, a
    malformed point, and (without SGLang or a GPU) why it cannot run engines."""
    import importlib.util
    import subprocess

    from .test_cli import assert_one_line_error

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*evokernel_cmd, "promote", *args], env=cli_env, capture_output=True, text=True, timeout=120
        )

    out = tmp_path / "out"
    assert_one_line_error(run(str(tmp_path), "--model-path", "m", "--out", str(out)), "holds no manifest.json")
    empty = restrict(_package(tmp_path / "pkg"), tmp_path / "empty", keep=set())
    assert_one_line_error(run(str(empty), "--model-path", "m", "--out", str(out)), "makes no change")
    assert_one_line_error(
        run(str(tmp_path / "pkg"), "--model-path", "m", "--out", str(out), "--point", "1x3"), "expected BATCH:CONTEXT"
    )
    assert_one_line_error(
        run(str(tmp_path / "pkg"), "--model-path", "m", "--out", str(out), "--heads", "32,4"), "expected HQ,HKV,D"
    )
    if importlib.util.find_spec("sglang") is None:
        assert_one_line_error(run(str(tmp_path / "pkg"), "--model-path", "m", "--out", str(out)), "needs SGLang")
    assert not out.exists()
    # the package itself (or a folder inside it) as --out: refused before any A/B, the package kept
    pkg = tmp_path / "pkg"
    assert_one_line_error(run(str(pkg), "--model-path", "m", "--out", str(pkg)), "would replace the package")
    assert_one_line_error(run(str(pkg), "--model-path", "m", "--out", str(pkg / "p")), "inside one another")
    assert (pkg / "manifest.json").exists() and changes(pkg)
    with pytest.raises(PackageError, match="would replace the package"):
        restrict(pkg, tmp_path / "x" / ".." / "pkg", keep=set())
    assert (pkg / "manifest.json").exists()


class _Engines:
    """SGLang engines as the A/B sees them, replayed: a variant's decode step at a point is
    the shipped step times the factor of each change of its package that serves the point
    (read from the package the promotion wrote for it), over drifting rounds."""

    def __init__(self, factors: dict[tuple[str, int | None], dict[int, float]], points: list[tuple[int, int]]):
        self.factors, self.points = factors, points
        self.seen: dict[str, list[str]] = {}

    def plan(self) -> dict:
        return SGLangEvaluator(["--model-path", "m"], decode_points=self.points, prefill_lens=()).plan()

    def compare(self, variants: dict, progress=None) -> ABReport:
        from evokernel.evaluators.sglang import Variant

        plan = self.plan()
        report = ABReport(plan=plan)
        for name, v in {BASELINE: None, CONTROL: None, **variants}.items():
            pkg = v.package if isinstance(v, Variant) else v
            mine = changes(pkg) if pkg else []
            self.seen[name] = [c.id for c in mine]
            for point in plan["decode_points"]:
                b = int(point.split("_")[0][1:])
                f = 1.0
                for c in mine:
                    if c.serves(b):
                        f *= self.factors.get((c.op, c.batch), {}).get(b, 1.0)
                report.samples.setdefault(name, {})[point] = [
                    dict(_run(2e-3 * f * d * (1 + 0.003 * (-1) ** (r + len(name))), b), round=r)
                    for r, d in enumerate((1.0, 1.1, 0.95, 1.05, 1.0))
                ]
            if progress is not None:
                progress(report)
        return report


@pytest.mark.slow
def test_promote_runs_each_group_as_an_engine_and_ships_only_what_was_faster(tmp_path: Path):
    from evokernel.integrations.sglang.promote import promote
    from evokernel.store import SQLiteStore

    root = _package(tmp_path / "pkg")
    engines = _Engines(
        {
            ("decode_attention", 1): {1: 0.6},
            ("decode_attention", 4): {4: 1.3},
            ("configs", None): {1: 1.0, 32: 1.2},
            ("configs", 1): {1: 0.9},
        },  # fmt: skip
        [(1, 32768), (4, 16384), (32, 4096)],
    )
    store = SQLiteStore(tmp_path / "k.db")
    saved: list[int] = []
    got = promote(
        engines, root, tmp_path / "out", work=tmp_path / "work", store=store, gpu="NVIDIA H200",
        progress=lambda rep: saved.append(len(rep.samples)),
    )  # fmt: skip
    verdicts = {(d.change.op, d.change.batch): d.verdict for d in got.decisions}
    assert verdicts == {
        ("decode_attention", 1): "promoted",
        ("decode_attention", 4): "dead_end",
        ("decode_attention", 32): "no_gain",
        ("configs", 1): "promoted",
        ("configs", None): "dead_end",
    }
    # three engines of changes: no two changes of one engine serve the same batch size
    assert len(got.groups) == 3 and sorted(len(g) for g in got.groups) == [1, 1, 3]
    for name, ids in engines.seen.items():
        if name.startswith("changes"):
            assert ids and set(ids) <= {i for g in got.groups for i in g}
    assert got.package is not None and saved
    shipped = {(c.op, c.batch) for c in changes(got.package)}
    assert shipped == {("decode_attention", 1), ("configs", 1)}
    assert len(dead_ends(store, "NVIDIA H200")) == 2
