"""The serving A/B's CPU parts: the trace exported for SGLang's own serving benchmark
(mooncake: arrival times, prompt blocks, output lengths) and its result file (fields of
sglang.benchmark.serving 0.5.17, recorded by hand to that schema), the per-round summary and
the ratios to the baseline, the error path without SGLang, and the whole comparison (servers
launched per variant, evokernel's trace replay, rotated rounds) against stand-in servers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from evokernel.evaluators.sglang_serving import (
    BASELINE,
    CONTROL,
    METRICS,
    ServingComparison,
    parse_result,
    summarise_rounds,
)
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


_STAND_IN_SERVER = r'''
"""A stand-in for `python -m sglang.launch_server` (SGLang's server needs a GPU): /health and
a streamed /generate as SGLang 0.5.17 answers them, its first token slower without a package."""
import argparse, json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, required=True)
args, _ = ap.parse_known_args()
TTFT = 0.02 if os.environ.get("EVOKERNEL_SGLANG_PACKAGE") else 0.06
# (a server that fails prompts longer than this: the package's, where the test asks for it)
FAIL_OVER = int(os.environ.get("STAND_IN_FAIL_OVER", "0")) if os.environ.get("EVOKERNEL_SGLANG_PACKAGE") else 0
print("argv", json.dumps(sys.argv[1:]), flush=True)


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if FAIL_OVER and len(body["input_ids"]) > FAIL_OVER:
            self.send_response(500)
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()
        time.sleep(TTFT)
        for k in range(1, body["sampling_params"]["max_new_tokens"] + 1):
            time.sleep(0.005 if k > 1 else 0)
            self.wfile.write(b"data: " + json.dumps({"text": "x", "meta_info": {"completion_tokens": k}}).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


srv = ThreadingHTTPServer((args.host, args.port), H)
srv.daemon_threads = True
srv.serve_forever()
'''


@pytest.mark.slow
def test_the_comparison_launches_a_server_per_variant_and_replays_the_trace_in_rotated_rounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Against stand-in servers (`sglang.launch_server` on PYTHONPATH, the protocol of
    SGLang's /health and /generate): one server per variant with its package in the
    environment and its flags on the command line, the warm replay, rotated rounds, progress
    after every replay, the summary against the baseline."""
    import socket

    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(_STAND_IN_SERVER)
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{__import__('os').environ.get('PYTHONPATH', '')}")
    with socket.socket() as s:  # a free range of ports
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1] + 100
    from evokernel.evaluators.sglang import Variant

    trace = Trace([Request(64, 6, 0.0), Request(32, 4, 0.1), Request(48, 5, 0.2)])
    cmp = ServingComparison(
        ["--model-path", str(tmp_path)], trace, rounds=2, warm_prompts=1, log_dir=tmp_path / "s", port=port,
        load_timeout_s=60, run_timeout_s=30, control=True,
    )  # fmt: skip
    seen: list[int] = []
    doc = cmp.compare(
        {"evokernel": tmp_path, "kv32": Variant(args=("--triton-attention-num-kv-splits", "32"))},
        progress=lambda d: seen.append(sum(len(r) for r in d["runs"].values())),
    )
    assert doc["errors"] == {}, doc["errors"]
    assert seen == list(range(1, 9))  # 4 servers (the A/A control too) x 2 rounds, saved after each replay
    assert {k: len(v) for k, v in doc["runs"].items()} == {BASELINE: 2, CONTROL: 2, "evokernel": 2, "kv32": 2}
    assert all(r["completed"] == 3 and r["failed"] == 0 for rs in doc["runs"].values() for r in rs)
    # the package's server answers its first token sooner; the flag's server is the baseline's
    assert doc["vs_baseline"]["evokernel"]["median_ttft_ms"] > 1.8
    assert 0.6 < doc["vs_baseline"]["kv32"]["median_ttft_ms"] < 1.6
    assert 0.6 < doc["vs_baseline"][CONTROL]["median_ttft_ms"] < 1.6 and doc["engines"][CONTROL]["package"] is None
    log = (tmp_path / "s" / "server_kv32.log").read_text()
    assert "--triton-attention-num-kv-splits" in log and "--mem-fraction-static" in log
    timings = [json.loads(x) for x in (tmp_path / "s" / "run_evokernel_0.jsonl").read_text().splitlines()]
    assert [t["input_len"] for t in timings] == [64, 32, 48] and all(t["error"] is None for t in timings)


@pytest.mark.slow
def test_a_server_that_fails_some_requests_gets_no_ratio_from_the_ones_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The package's stand-in server answers short prompts fast and fails the long ones: over
    the requests it finished it would read faster than the baseline, so its replays are errors
    and it gets no ratio (the baseline still has its figures)."""
    import socket

    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "launch_server.py").write_text(_STAND_IN_SERVER)
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{__import__('os').environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("STAND_IN_FAIL_OVER", "40")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1] + 100
    trace = Trace([Request(32, 4, 0.0), Request(64, 6, 0.05), Request(16, 4, 0.1)])
    cmp = ServingComparison(
        ["--model-path", str(tmp_path)], trace, rounds=1, warm_prompts=1, log_dir=tmp_path / "s", port=port,
        load_timeout_s=60, run_timeout_s=30,
    )  # fmt: skip
    doc = cmp.compare({"evokernel": tmp_path})
    assert "1 of 3 requests failed" in doc["errors"]["evokernel"], doc["errors"]
    assert "evokernel" not in doc["runs"] and doc["vs_baseline"] == {}
    assert doc["runs"][BASELINE][0]["completed"] == 3
