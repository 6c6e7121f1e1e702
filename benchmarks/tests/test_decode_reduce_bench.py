"""The reductions benchmark (benchmarks/decode_reduce_h200.py): its variants per package entry,
and its table re-rendered from the H200 record (`benchmarks/results/decode_reduce`, S24d)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from evokernel.search_spaces.attention import decode_space

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench


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
    assert list(b4) == [
        "separate",
        "separate_pdl",
        "separate_pdl3",
        "separate_pdl7",
        "separate_l2",
        "separate_l2_pdl7",
        "fused",
        "fused_wait",
        "fused_early",
        "separate_splits_half",
        "separate_splits_x2",
    ]
    assert b4["separate_splits_half"] == dict(b4["separate"], NUM_SPLITS=8)  # one wave of one program an SM
    assert b4["separate_splits_x2"]["NUM_SPLITS"] == 32 and "separate_splits_x2" not in bench.variants(
        entries["1"], 128
    )
    assert b4["separate"]["REDUCE"] == 0 and b4["separate_pdl"]["PDL"] == 1 and b4["fused"]["REDUCE"] == 1
    assert b4["separate_pdl3"]["PDL"] == 3 and b4["fused_wait"] == dict(b4["fused"], PDL=2)
    assert b4["separate_l2"] == dict(b4["separate"], PREFETCH=2) and b4["separate_l2_pdl7"]["PDL"] == 7
    b1 = bench.variants(entries["1"], 64)  # 3 stages: the L2 variants at 2 (one K/V buffer, three programs an SM)
    assert entries["1"]["num_stages"] == 3 and b1["separate_l2"] == dict(b1["separate"], PREFETCH=2, num_stages=2)
    assert b1["separate_s2"] == dict(b1["separate"], num_stages=2) and "separate_s2" not in b4  # (b4 runs 2)
    space = decode_space(head_dim=128, group=8)
    assert all(space.is_valid(p) for p in b4.values())  # every variant a point of the search space
    assert "separate_w8" in bench.variants(entries["1"], 64)  # 64 splits fit a head a load only with 8 warps
    assert "fused_n128w4" in bench.variants(entries["16"], 16)  # one warp: also at 128 keys and 4 warps


def test_the_recorded_tables_render_from_their_json() -> None:
    bench = _bench()
    where = ROOT / "benchmarks/results/decode_reduce"
    doc = json.loads((where / "decode_reduce.json").read_text())
    assert bench.render(doc) == (where / "decode_reduce.md").read_text()
    b4 = next(r for r in doc["rows"] if r["point"] == "4:16384")
    assert b4["vs_separate"]["fused"]["hi"] < 1.0  # S24d: the grouped last-program reduction is slower at b4
    s25 = json.loads((where / "s25" / "decode_reduce.json").read_text())
    assert bench.render(s25) == (where / "s25" / "decode_reduce.md").read_text()
    b1 = next(r for r in s25["rows"] if r["point"] == "1:32768")
    assert b1["vs_separate"]["separate_pdl"]["lo"] > 1.0  # S25a: the early reduce launch pays at b1 only
    for run in ("s28_h100", "s28_h100/floor"):  # with per-program timelines (and the read floor)
        doc = json.loads((where / run / "decode_reduce.json").read_text())
        assert bench.render(doc) == (where / run / "decode_reduce.md").read_text()
        assert all(r.get("timeline") for r in doc["rows"])
    b1 = next(r for r in doc["rows"] if r["point"] == "1:32768")
    assert b1["vs_separate"]["floor_gather"]["lo"] > 1.0  # S28: a read of the same shape is faster, by < 10%
    assert b1["vs_separate"]["floor_gather"]["hi"] < 1.1


def test_a_package_is_refined_only_where_a_variant_beat_its_entry(tmp_path: Path) -> None:
    """S25a's record against S24's package: the early reduce launch (PDL=1) beat b1's entry by
    4.1% [0.8%, 5.2%]; at b32 it and the last-program reduction were 0.8% faster, under the 1%
    floor; nothing else beat its entry. The copy says what changed; the original is untouched."""
    bench = _bench()
    doc = json.loads((ROOT / "benchmarks/results/decode_reduce/s25/decode_reduce.json").read_text())
    package = ROOT / "benchmarks/results/sglang_long_s24/package"
    entries = bench._entries(str(package))
    new, changes = bench.refine(doc, entries)
    assert [(c["batch"], c["from"], c["to"]) for c in changes] == [(1, "separate", "separate_pdl")]
    assert new["1"] == dict(entries["1"], PDL=1) and all(new[b] == entries[b] for b in entries if b != "1")
    assert bench.refine(doc, entries, min_gain=0.0)[1][-1]["batch"] == 32  # without the floor, b32 changes too
    dest = tmp_path / "refined"
    assert bench.write_refined(str(package), dest, doc) == changes
    table = json.loads((dest / "kernels" / "decode_attention.json").read_text())[bench.HEADS]
    assert table["1"]["PDL"] == 1 and table["1"]["context"] == 32768
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["provenance"]["refined_on_graph_footing"]["changes"] == changes
    assert "PDL" not in bench._entries(str(package))["1"]


def test_the_long_context_report_predicts_a_refined_entry_from_its_refined_figure(tmp_path: Path) -> None:
    """The A/B's predictions (sglang_long_h200.refined_figures) read the refined package's
    manifest: b1's graph figure from the search divided by the 1.041x its refinement measured;
    the other points keep the search's."""
    bench = _bench()
    spec = importlib.util.spec_from_file_location("sglang_long_h200", ROOT / "benchmarks" / "sglang_long_h200.py")
    assert spec is not None and spec.loader is not None
    long = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(long)
    doc = json.loads((ROOT / "benchmarks/results/decode_reduce/s25/decode_reduce.json").read_text())
    dest = tmp_path / "refined"
    bench.write_refined(str(ROOT / "benchmarks/results/sglang_long_s24/package"), dest, doc)
    micro = json.loads((ROOT / "benchmarks/results/sglang_long_s25/attention.json").read_text())
    winners = {}
    for r in micro["rows"]:
        _, b, c = r["spec"].split(":")[:3]
        winners[(int(b), int(c))] = long.micro_figure(r)
    got = long.refined_figures(winners, json.loads((dest / "manifest.json").read_text()))
    speedup = doc["rows"][0]["vs_separate"]["separate_pdl"]["median"]
    assert abs(got[(1, 32768)][0] - winners[(1, 32768)][0] / speedup) < 1e-12 and "refined" in got[(1, 32768)][1]
    assert all(got[k] == winners[k] for k in winners if k != (1, 32768))


def test_the_decode_time_is_a_fixed_cost_plus_streaming_at_the_copy_bandwidth() -> None:
    """S25a, the separate reduction at b4 ... b32 (134-269 MB of KV a call): 7.6 us a call plus
    the bytes at 4.21 TB/s (0.98 of the copy bandwidth); b1 (67 MB, 64 splits) lies 2.6 us above
    that line. So the 0.8-of-copy target is a bound on the fixed cost: at most 3.9 us at b1,
    7.8 us at b4 and b8."""
    bench = _bench()
    doc = json.loads((ROOT / "benchmarks/results/decode_reduce/s25/decode_reduce.json").read_text())
    fixed, bw = bench.fixed_cost(doc, skip=("1:32768",))
    assert 7.0 < fixed < 8.1 and 0.96 < bw / bench.COPY_BW < 1.0
    b1 = doc["rows"][0]
    assert b1["point"] == "1:32768" and 2.0 < b1["ms"]["separate"] * 1e3 - (fixed + b1["bytes"] / bw * 1e6) < 3.2
    with pytest.raises(ValueError, match="two points"):
        bench.fixed_cost(doc, variant="separate_w8")
    got = bench.fits(doc)  # per variant and group; S25a timed b1 at one context, so no b1 line yet
    assert got["separate"]["b4+"]["fixed_us"] == pytest.approx(fixed, abs=0.01) and "b1" not in got["separate"]
    assert set(got) == {"separate", "separate_pdl", "fused", "sglang_default"}  # the variants timed at b4 ... b32
    assert "| separate | b4+ | 7." in bench.render(dict(doc, fits=got))
    # a batch-1 context scan: 10 us + bytes at 4 TB/s, b4 rows left to their own line
    scan = {
        "rows": [
            {"point": f"1:{c}", "bytes": c * 2048.0, "ms": {"separate": 1e-2 + c * 2048 / 4e9}}
            for c in (32768, 65536, 131072)
        ]
    }
    b1 = bench.fits(scan)["separate"]["b1"]
    assert b1["fixed_us"] == pytest.approx(10.0, abs=0.01) and b1["stream_bw_fraction"] == pytest.approx(
        4e12 / bench.COPY_BW, abs=1e-3
    )


def test_a_timeline_renders_as_its_own_table() -> None:
    """`--timeline` rows (per-program stamps, us) get a table of their own under the timings."""
    bench = _bench()
    tl = {"call": 25.1, "span": 21.0, "outside": 4.1, "s1_span": 17.5, "s1_bw": 0.89, "start_p50": 0.4,
          "start_p90": 7.9, "start_spread": 9.2, "prog_med": 8.1, "prog_max": 9.9, "loop_med": 7.6,
          "programs": 256, "sms_used": 132, "per_sm_max": 2, "gap": 1.2, "s2_span": 2.3}  # fmt: skip
    doc = {"rows": [{"point": "1:32768", "ms": {"separate": 0.0251}, "vs_separate": {}, "bw_fraction": {"separate": 0.62},
                     "max_err": {}, "timeline": {"separate": tl}}]}  # fmt: skip
    text = bench.render(doc)
    assert (
        "| b1 x 32768 | separate | 25.10 | 21.00 | 4.10 | 17.50 | 0.89 | 0.40 / 7.90 / 9.20 | 8.10 / 9.90 | 7.60 "
        in text
    )
    assert "| 256 / 132 / 2 | 1.20 / 2.30 |" in text


_FLOOR_SCRIPT = r"""
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("b", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
g = torch.Generator().manual_seed(0)
lens = [300, 77]
k = torch.randn(700, 1, 2, 64, generator=g).half()
v = torch.randn(700, 1, 2, 64, generator=g).half()
table = torch.randperm(700, generator=g)[:600].view(2, 300).to(torch.int32)
inputs = (None, k, v, table, torch.tensor(lens, dtype=torch.int32))
out = []
for gather, pipe in ((True, 0), (False, 0), (True, 1), (True, 2)):
    entry = {"BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "PIPE": pipe}
    got = bench.read_floor(inputs, entry, 4, gather)
    rows = [table[b, :n].long() if gather else torch.arange(b * 300, b * 300 + n) for b, n in enumerate(lens)]
    want = torch.stack([(k[r].float() + v[r].float()).sum((0, 1, 3)) for r in rows])
    out.append({"shape": list(got.shape), "err": float((got.sum(2) - want).abs().max())})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_read_floor_reads_each_row_of_its_split_once() -> None:
    """`read_floor` (the entry's shape reading K and V alone): each program's sum is over its
    split's rows, through the indices or in slot order, tile by tile or with one or two tiles'
    loads in flight (PIPE 1, 2: the last tile's look-ahead masked off), so the sums over splits
    are the sequences' sums (Triton's interpreter, fp16)."""
    from tests._interpreter import run_interpreted

    got = run_interpreted(_FLOOR_SCRIPT, str(ROOT / "benchmarks" / "decode_reduce_h200.py"))
    assert [g["shape"] for g in got] == [[2, 2, 4]] * 4
    assert all(g["err"] < 1e-2 for g in got), got


def test_the_floor_sweep_covers_the_kernels_shapes_without_spilling_ones() -> None:
    """`sweep_shapes`: splits halved to quadrupled (capped at the kernel's 128), every BLOCK_N and
    warps, tile by tile and with one or two tiles in flight, except tiles holding more than 256
    K values a thread (1 warp at 128 keys; with a second buffer, 1 warp at 64 and 2 at 128)."""
    bench = _bench()
    shapes = bench.sweep_shapes(64)
    assert sorted({s["NUM_SPLITS"] for s in shapes}) == [32, 64, 128]
    assert sorted({s["NUM_SPLITS"] for s in bench.sweep_shapes(8)}) == [4, 8, 16, 32]
    assert not any(s["BLOCK_N"] == 128 and s["num_warps"] == 1 for s in shapes)
    assert not any(s["BLOCK_N"] == 64 and s["num_warps"] == 1 and s["PIPE"] for s in shapes)
    assert {"NUM_SPLITS": 64, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2, "PIPE": 2} in shapes
    assert len(shapes) == 3 * (12 + 8 + 9)
    assert len({bench._shape_name(s) for s in shapes}) == len(shapes)


def test_a_floor_sweep_renders_its_screen_and_its_leaders() -> None:
    """`--floor-sweep` rows get a table: shapes screened (and how many failed), the screen's best,
    then each interleaved timing against the entry's attention; failures listed, not dropped."""
    bench = _bench()
    sweep = {
        "shapes": 99,
        "failed": {"s128 n128 w8 st4": "OutOfResources: shared memory"},
        "screen": [{"name": "s64 n64 w2 p2", "ms": 0.0201, "bw": 0.78}],
        "ms": {"separate": 0.0251, "floor_gather": 0.0221, "floor s64 n64 w2 p2": 0.0203},
        "vs_separate": {
            "separate": {"median": 1.0, "lo": 1.0, "hi": 1.0},
            "floor_gather": {"median": 1.136, "lo": 1.12, "hi": 1.15},
            "floor s64 n64 w2 p2": {"median": 1.236, "lo": 1.22, "hi": 1.25},
        },
        "bw_fraction": {"separate": 0.62, "floor_gather": 0.71, "floor s64 n64 w2 p2": 0.77},
        "errors": {"attn s64 n64 w2 p2": "max error 0.5 against the fp32 reference"},
    }
    doc = {"rows": [{"point": "1:32768", "ms": {"separate": 0.0251}, "vs_separate": {}, "bw_fraction": {"separate": 0.62},
                     "max_err": {}, "floor_sweep": sweep}]}  # fmt: skip
    text = bench.render(doc)
    assert (
        "| b1 x 32768 | 99 (1) | s64 n64 w2 p2 0.0201 (0.78) | separate | 0.0251 | 0.62 | 1.000 [1.000, 1.000] |"
        in text
    )
    assert "| | | | floor s64 n64 w2 p2 | 0.0203 | 0.77 | 1.236 [1.220, 1.250] |" in text
    assert "| | | | attn s64 n64 w2 p2 | failed: max error 0.5 against the fp32 reference | | |" in text


def test_the_attention_sweep_screens_light_grids_and_renders_like_the_floors() -> None:
    """`attn_shapes`: the entry's splits to four times them (at most 128), five (BLOCK_N, warps)
    from (32, 1) to (128, 4), three pipelines; every shape valid in the decode space. Its rows
    render in a table of their own."""
    bench = _bench()
    shapes = bench.attn_shapes(64)
    assert sorted({s["NUM_SPLITS"] for s in shapes}) == [64, 128] and len(shapes) == 2 * 5 * 3
    assert len(bench.attn_shapes(8)) == 3 * 5 * 3
    space = decode_space()
    for s in shapes:
        assert space.is_valid({**s, "PDL": 0}), s
    sweep = {
        "shapes": 30,
        "failed": {},
        "screen": [{"name": "attn s128 n32 w1 st3 pf1", "ms": 0.0281, "bw": 0.80}],
        "ms": {"separate": 0.0304, "attn s128 n32 w1 st3 pf1": 0.0283},
        "vs_separate": {
            "separate": {"median": 1.0, "lo": 1.0, "hi": 1.0},
            "attn s128 n32 w1 st3 pf1": {"median": 1.074, "lo": 1.07, "hi": 1.08},
        },
        "bw_fraction": {"separate": 0.74, "attn s128 n32 w1 st3 pf1": 0.79},
        "errors": {},
    }
    doc = {
        "rows": [
            {"point": "1:32768", "ms": {}, "vs_separate": {}, "bw_fraction": {}, "max_err": {}, "attn_sweep": sweep}
        ]
    }
    text = bench.render(doc)
    assert "the attention over light grids" in text and "the gather floor over" not in text
    assert "| | | | attn s128 n32 w1 st3 pf1 | 0.0283 | 0.79 | 1.074 [1.070, 1.080] |" in text


def test_an_attention_sweep_leader_that_beat_its_entry_refines_the_package() -> None:
    """A leader of `--attn-sweep` timed faster than the entry (paired interval above 1, at least
    1%) replaces it with its grid; one inside the entry's interval does not."""
    bench = _bench()
    entries = bench._entries(str(ROOT / "benchmarks/results/sglang_long_s24/package"))
    one = {"median": 1.0, "lo": 1.0, "hi": 1.0}
    fast = dict(entries["4"], NUM_SPLITS=64, BLOCK_N=64, num_warps=2, num_stages=3, PREFETCH=1, REDUCE=0, PDL=0)
    fast.pop("context")
    doc = {
        "rows": [
            {
                "point": "4:16384",
                "splits": 16,
                "vs_separate": {"separate": one},
                "attn_sweep": {
                    "params": {"attn a": fast, "attn b": dict(fast, NUM_SPLITS=32)},
                    "vs_separate": {
                        "separate": one,
                        "attn a": {"median": 1.05, "lo": 1.03, "hi": 1.06},
                        "attn b": {"median": 1.02, "lo": 0.99, "hi": 1.03},
                    },
                },
            },
            {
                "point": "8:8192",
                "splits": 8,
                "vs_separate": {"separate": one},
                "attn_sweep": {
                    "params": {"attn c": dict(fast, NUM_SPLITS=32)},
                    "vs_separate": {"attn c": {"median": 1.02, "lo": 0.995, "hi": 1.04}},
                },
            },
        ]
    }
    new, changes = bench.refine(doc, entries)
    assert [(c["batch"], c["to"]) for c in changes] == [(4, "attn a")]
    assert new["4"] == {**entries["4"], **fast} and new["8"] == entries["8"]
