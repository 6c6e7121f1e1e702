"""The reductions benchmark (benchmarks/decode_reduce_h200.py): its variants per package entry,
and its table re-rendered from the H200 record (`benchmarks/results/decode_reduce`, S24d)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("decode_reduce_h200", ROOT / "benchmarks" / "decode_reduce_h200.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_each_entry_is_timed_with_both_reductions_and_where_its_tile_cannot_group_a_wider_one() -> None:
    bench = _bench()
    table = json.loads((ROOT / "benchmarks/results/sglang_long_s24/package/kernels/decode_attention.json").read_text())
    entries = table["Hq=32,Hkv=4,D=128"]
    b4 = bench.variants(entries["4"], 16)  # 16 splits x 4 warps: two query heads a load
    assert list(b4) == ["separate", "separate_pdl", "fused"]
    assert b4["separate"]["REDUCE"] == 0 and b4["separate_pdl"]["PDL"] == 1 and b4["fused"]["REDUCE"] == 1
    assert "separate_w8" in bench.variants(entries["1"], 64)  # 64 splits fit a head a load only with 8 warps
    assert "fused_n128w4" in bench.variants(entries["16"], 16)  # one warp: also at 128 keys and 4 warps


def test_the_recorded_table_renders_from_its_json() -> None:
    bench = _bench()
    where = ROOT / "benchmarks/results/decode_reduce"
    doc = json.loads((where / "decode_reduce.json").read_text())
    assert bench.render(doc) == (where / "decode_reduce.md").read_text()
    b4 = next(r for r in doc["rows"] if r["point"] == "4:16384")
    assert b4["vs_separate"]["fused"]["hi"] < 1.0  # S24d: the grouped last-program reduction is slower at b4
