"""The serving A/B's CPU parts: the trace in the form SGLang's serving benchmark replays
(mooncake: arrival times, prompt blocks, output lengths), its result file (fields of
sglang.benchmark.serving 0.5.17, recorded by hand to that schema), the per-round summary
and the ratios to the baseline, and the error path without SGLang."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from evokernel.evaluators.sglang_serving import BASELINE, METRICS, ServingComparison, parse_result, summarise_rounds
from evokernel.model.workload import Request, Trace

RECORDED = Path(__file__).parent / "recorded"


def test_the_trace_becomes_a_mooncake_replay_with_its_arrival_times(tmp_path: Path):
    trace = Trace([Request(260, 5, 1.5), Request(100, 7, 0.5), Request(1000, 3, 2.0)])
    assert trace.to_mooncake(tmp_path / "t.jsonl") == 3
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0, 1000, 1500]  # ms from the first arrival, in arrival order
    assert [len(r["hash_ids"]) for r in rows] == [1, 2, 8] and [r["output_length"] for r in rows] == [7, 5, 3]
    ids = [i for r in rows for i in r["hash_ids"]]
    assert len(ids) == len(set(ids))  # no shared prefixes between requests
    assert trace.to_mooncake(tmp_path / "u.jsonl", limit=2) == 2


def test_results_are_parsed_and_summarised_against_the_baseline(tmp_path: Path):
    got = parse_result(RECORDED / "sglang" / "serving_result.jsonl")
    assert got["median_ttft_ms"] == 48.1 and got["output_throughput"] == 992.7 and set(got) == set(METRICS)
    faster = {
        k: (v * 0.8 if k.endswith("_ms") else v * 1.25 if k == "output_throughput" else v) for k, v in got.items()
    }
    doc = summarise_rounds({BASELINE: [got, got], "cand": [faster, faster]})
    assert doc["vs_baseline"]["cand"]["median_tpot_ms"] == pytest.approx(1.25)
    assert doc["vs_baseline"]["cand"]["output_throughput"] == pytest.approx(1.25)
    assert doc["variants"]["cand"]["p99_e2e_latency_ms"]["median"] == pytest.approx(0.8 * 5012.9)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="wrote no result"):
        parse_result(tmp_path / "empty.jsonl")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed: the GPU run covers it")
def test_without_sglang_each_server_fails_with_its_reason(tmp_path: Path):
    trace = Trace([Request(100, 4), Request(200, 4)])
    cmp = ServingComparison(["--model-path", str(tmp_path)], trace, rounds=1, log_dir=tmp_path / "s", load_timeout_s=60)
    from evokernel.evaluators.sglang import Variant

    doc = cmp.compare({"cand": tmp_path, "kv32": Variant(args=("--triton-attention-num-kv-splits", "32"))})
    assert set(doc["errors"]) == {BASELINE, "cand", "kv32"} and "the server exited" in doc["errors"][BASELINE]
    assert doc["engines"]["kv32"] == {"package": None, "args": ["--triton-attention-num-kv-splits", "32"]}
    assert doc["engines"]["cand"]["package"] == str(tmp_path)
    assert doc["runs"] == {} and doc["vs_baseline"] == {}
    assert "No module named 'sglang'" in (tmp_path / "s" / f"server_{BASELINE}.log").read_text()
