from __future__ import annotations

import math
from pathlib import Path

import pytest

from evokernel import Genome, LandscapeError, Status
from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import Landscape, builtin, builtin_names, resolve_landscape


def test_space_is_inferred_from_the_columns(small: Landscape):
    space = small.space
    assert space.names == ("a", "b", "layout")
    assert space["a"].values == (1, 2, 4, 8) and space["a"].ordered
    assert space["layout"].values == ("col", "row") and not space["layout"].ordered
    assert len(small) == 48 and space.size == 48
    assert small.optimum() == ({"a": 4, "b": 3, "layout": "col"}, 1.0)


def test_shipped_landscapes_load():
    names = builtin_names()
    matmul = [n for n in names if n.startswith("matmul_")]
    moe = [n for n in names if n.startswith("moe_")]
    assert len(matmul) == 4 and len(moe) == 2
    attention = [n for n in names if n.startswith("attention_")]
    assert len(attention) == 6  # decode at 3 batch x context shapes, causal prefill at 3
    for name in matmul:
        ls = Landscape.load(builtin(name))
        assert len(ls) == 960 and ls.space.size == 960
        assert sum(r.latency_ms is None for r in ls.rows.values()) == 112
    from evokernel.search_spaces import moe_shared_space

    shared = moe_shared_space()
    valid = [tuple(p.values()) for p in shared.valid_points()]
    for name in moe:  # the shared-config MoE space: only points within shared memory were swept
        ls = Landscape.load(builtin(name))
        assert ls.space.names == shared.names and 440 <= len(ls) <= 448
        assert set(ls.rows) <= set(valid) and all(r.latency_ms for r in ls.rows.values())
        # a point the sweep did not reach is not offered by the replayed space
        assert all(ls.space.is_valid(dict(zip(ls.space.names, p))) == (p in ls.rows) for p in valid)
    from evokernel.search_spaces.attention import attention_space, decode_space

    decode = Landscape.load(builtin("attention_decode_bf16_h200_llama3-8b_B1_C32768"))
    # the sweep's space
    dspace = decode_space(head_dim=128, group=4, max_splits=64, prefetch=False, pdl=False, thirds=False)
    assert decode.space.names == dspace.names and len(decode) == len(dspace.valid_points()) == 795
    for name in attention:  # every attention landscape is a sample of its template's space
        ls = Landscape.load(builtin(name))
        space = (
            decode_space(head_dim=128, group=4, prefetch=False, pdl=False)
            if "decode" in name
            else attention_space(head_dim=128, causal=True)
        )
        assert ls.space.names == space.names and len(ls) >= 50, name
        assert all(
            space.is_valid(dict(zip(space.names, p), WARP_SPEC=0) if "prefill" in name else dict(zip(space.names, p)))
            for p in ls.rows
        ), name
    prefill = Landscape.load(builtin("attention_prefill_bf16_h200_causal_Hq32_Hkv8_B4_S2048"))
    # its earlier name (before the shape moved into `_<Dim><number>` tokens) still resolves
    assert builtin("attention_prefill_bf16_h200_llama3-8b_4x2048_causal") == prefill.path
    assert resolve_landscape("attention_prefill_bf16_h200_llama3-8b_4x2048_causal") == prefill.path
    pspace = attention_space(head_dim=128, causal=True)
    assert prefill.space.names == pspace.names and 700 <= len(prefill)
    # partial (the sweep is resumable): 2624 points in the space since WARP_SPEC left it
    assert sum(pspace.is_valid(dict(zip(pspace.names, p))) for p in prefill.rows) < len(pspace.valid_points()) == 2624
    # every row is a point of the space once WARP_SPEC is off: the space has ruled the gene out
    # since the sweep, and the sweep's own rows say why. Its 4-warp WARP_SPEC=1 kernels failed
    # to build unless LAZY_RESCALE=1; what built ran as fast as its WARP_SPEC=0 twin (the PTX
    # is the same, tests/test_triton_attention.py)
    rows = [(dict(zip(pspace.names, p)), r) for p, r in prefill.rows.items()]
    assert all(pspace.is_valid(dict(p, WARP_SPEC=0)) for p, _ in rows)
    ws = [(p, r) for p, r in rows if p["WARP_SPEC"]]
    assert ws and not any(pspace.is_valid(p) for p, _ in ws)
    failed = [p for p, r in ws if r.latency_ms is None]
    assert failed and all(p["num_warps"] == 4 and not p["LAZY_RESCALE"] for p in failed)
    twins = {tuple(p.values()): r.latency_ms for p, r in rows}
    ratios = sorted(
        r.latency_ms / twins[tuple(dict(p, WARP_SPEC=0).values())]
        for p, r in ws
        if r.latency_ms and twins.get(tuple(dict(p, WARP_SPEC=0).values()))
    )
    assert len(ratios) >= 20 and abs(ratios[len(ratios) // 2] - 1.0) < 0.01


def test_replay_returns_recorded_rows_and_failures(small: Landscape):
    ev = ReplayEvaluator(small)
    ok, failed = list(
        ev.evaluate([Genome.of({"a": 4, "b": 3, "layout": "col"}), Genome.of({"a": 8, "b": 6, "layout": "row"})])
    )
    assert ok.status is Status.OK and ok.latency_ms == 1.0 and ok.noise == 0.0
    assert failed.status is Status.COMPILE_ERROR and "shared memory" in failed.error and failed.fitness == math.inf


def test_missing_configuration_is_an_invalid_point_not_an_error(tmp_path: Path):
    path = tmp_path / "sparse.csv"
    path.write_text("x,y,latency_ms,error\n1,1,0.5,\n1,2,0.4,\n2,1,0.3,\n")  # (2, 2) missing
    ls = Landscape.load(path)
    assert ls.space.why_invalid({"x": 2, "y": 2}) == "not recorded in landscape sparse"
    [r] = ReplayEvaluator(ls).evaluate([Genome.of({"x": 2, "y": 2})])
    assert r.status is Status.INVALID
    [r] = ReplayEvaluator(ls).evaluate([Genome.of({"x": 7, "zz": 2})])
    assert r.status is Status.INVALID


def test_noise_is_multiplicative_seeded_and_fresh_per_draw(small: Landscape):
    g = Genome.of({"a": 4, "b": 3, "layout": "col"})
    a = ReplayEvaluator(small, noise=0.05, seed=1)
    b = ReplayEvaluator(small, noise=0.05, seed=1)
    xs = [next(iter(a.evaluate([g]))).latency_ms for _ in range(200)]
    ys = [next(iter(b.evaluate([g]))).latency_ms for _ in range(200)]
    assert xs == ys and len(set(xs)) == 200
    logs = [math.log(x) for x in xs]
    mean = sum(logs) / len(logs)
    sd = (sum((v - mean) ** 2 for v in logs) / len(logs)) ** 0.5
    assert abs(mean) < 0.015 and 0.04 < sd < 0.06
    assert next(iter(ReplayEvaluator(small, noise=0.05, seed=2).evaluate([g]))).latency_ms != xs[0]
    assert a.true_latency(g) == 1.0


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty file"),
        ("a,b,error\n1,2,\n", "missing column 'latency_ms'"),
        ("a,latency_ms\n1,0.5\n", "missing column 'error'"),
        ("latency_ms,error\n0.5,\n", "no parameter columns"),
        ("a,latency_ms,error\n", "no rows"),
        ("a,latency_ms,error\n1,fast,\n", "latency_ms 'fast' is not a number"),
        ("a,latency_ms,error\n1,-1,\n", "must be positive"),
        ("a,latency_ms,error\n1,,\n", "neither latency_ms nor error"),
        ("a,latency_ms,error\n1,0.5\n", "2 fields, header has 3"),
        ("a,latency_ms,error\n1,0.5,\n1,0.6,\n", "recorded twice (a=1)"),
        ("a,latency_ms,error\n1,,boom\n", "every configuration failed"),
        ("a,a,latency_ms,error\n1,1,0.5,\n", "duplicate column"),
        # one typo in a numeric column is named, not a column silently turned into text
        (
            "a,b,latency_ms,error\n1,x,0.5,\n2,4,0.6,\n4,8,0.7,\n",
            "bad.csv:2: column 'b': 'x' is not a number, the column's other cells are (e.g. 4)",
        ),
        ("a,b,latency_ms,error\n1,2,0.5,\n2,,0.6,\n4,8,0.7,\n", "bad.csv:3: column 'b': empty is not a number"),
        (
            "a,latency_ms,error\nrow,0.5,\ncol,0.6,\n7,0.7,\n",
            "bad.csv:4: column 'a': '7' is a number, the column's other cells are not (e.g. 'row')",
        ),
        # a row is a measurement or a failure, not both
        (
            "a,latency_ms,error\n1,0.5,\n2,0.4,OutOfResources: shared memory\n",
            "bad.csv:3: both latency_ms (0.4) and error ('OutOfResources: shared memory') are set",
        ),
    ],
)
def test_malformed_landscapes_raise_one_clear_error(tmp_path: Path, text: str, message: str):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(LandscapeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Landscape.load(path)


def test_missing_and_binary_files(tmp_path: Path):
    with pytest.raises(LandscapeError, match="no such landscape file"):
        Landscape.load(tmp_path / "nope.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00\x00garbage")
    with pytest.raises(LandscapeError, match="not a UTF-8 text file"):
        Landscape.load(tmp_path / "bin.csv")


def test_the_readme_table_of_landscapes_matches_what_ships():
    readme = (Path(__file__).resolve().parents[1] / "docs" / "landscapes.md").read_text()  # moved from the README
    table = readme[readme.index("<!-- landscapes -->") : readme.index("<!-- /landscapes -->")]
    rows = {
        cells[0].strip("` "): int(cells[2].split()[0])
        for line in table.splitlines()[3:]
        if (cells := [c.strip() for c in line.strip("|").split("|")])
    }
    assert rows == {name: len(Landscape.load(builtin(name))) for name in builtin_names()}
