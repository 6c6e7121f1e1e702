"""The trace replay client (`evokernel.integrations.sglang.replay`) against a local HTTP server
that streams the way SGLang's `/generate` does (SSE `data:` lines with cumulative
`meta_info.completion_tokens`, then `data: [DONE]`): SGLang's server needs a GPU, so the CPU
suite checks the client's pacing, timing and failure handling on this stand-in; the device
run drives the real server (benchmarks/sglang_long_h200.py --serving)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evokernel.integrations.sglang.replay import replay, summarise
from evokernel.model.workload import Request

TTFT_S, ITL_S = 0.06, 0.01


class _Generate(BaseHTTPRequestHandler):
    seen: list[tuple[float, dict]] = []

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((time.perf_counter(), body))
        n_in, params = len(body["input_ids"]), body["sampling_params"]
        if n_in == 13:  # the test's failing request
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"internal error")
            return
        if n_in == 17:  # the test's hanging request
            time.sleep(3.0)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(TTFT_S)
        for k in range(1, params["max_new_tokens"] + 1):
            if k > 1:
                time.sleep(ITL_S)
            chunk = {"text": "x" * k, "meta_info": {"completion_tokens": k, "prompt_tokens": n_in}}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def server() -> Iterator[int]:
    _Generate.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Generate)
    httpd.daemon_threads = True
    th = threading.Thread(target=httpd.serve_forever, daemon=True)
    th.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_requests_go_out_at_their_arrival_times_with_exact_lengths(server: int):
    trace = [Request(64, 5, 10.0), Request(32, 3, 10.25), Request(48, 4, 10.5)]
    got = replay("127.0.0.1", server, trace, timeout_s=30)
    assert [t.ok for t in got] == [True, True, True]
    # open loop: sent at 0, 0.25 and 0.5 s (relative to the first), not after each other's completion
    sent = sorted(s for s, _ in _Generate.seen)
    assert 0.2 < sent[1] - sent[0] < 0.4 and 0.45 < sent[2] - sent[0] < 0.65
    bodies = [b for _, b in sorted(_Generate.seen, key=lambda x: x[0])]
    assert [len(b["input_ids"]) for b in bodies] == [64, 32, 48]
    assert [b["sampling_params"]["max_new_tokens"] for b in bodies] == [5, 3, 4]
    assert all(b["sampling_params"]["ignore_eos"] and b["stream"] for b in bodies)
    # distinct prompts (no shared prefix for the server's cache), all ids in [100, vocab)
    assert bodies[0]["input_ids"][:8] != bodies[2]["input_ids"][:8]
    assert all(100 <= i < 10000 for b in bodies for i in b["input_ids"])
    assert [t.tokens for t in got] == [5, 3, 4]
    for t in got:
        assert TTFT_S * 0.9 < t.ttft_s < TTFT_S + 0.15
        assert ITL_S * 0.8 < t.tpot_s < ITL_S + 0.02
    m = summarise(got)
    assert m["completed"] == 3 and m["failed"] == 0
    assert TTFT_S * 900 < m["median_ttft_ms"] < (TTFT_S + 0.15) * 1000
    assert m["p99_ttft_ms"] >= m["median_ttft_ms"]
    assert 8 < m["median_tpot_ms"] < 30
    # 12 tokens over about 0.5 s + the last request's ~0.09 s
    assert 10 < m["output_throughput"] < 30


def test_a_failing_request_is_reported_and_the_others_are_kept(server: int):
    got = replay("127.0.0.1", server, [Request(20, 2, 0.0), Request(13, 2, 0.05)], timeout_s=30)
    assert got[0].ok and not got[1].ok
    assert got[1].error.startswith("HTTP 500")
    m = summarise(got)
    assert m["completed"] == 1 and m["failed"] == 1


def test_a_hanging_request_ends_at_the_replays_timeout(server: int):
    t = time.monotonic()
    got = replay("127.0.0.1", server, [Request(20, 2, 0.0), Request(17, 2, 0.0)], timeout_s=1.5)
    assert time.monotonic() - t < 2.8
    assert got[0].ok or got[1].ok
    hung = next(x for x in got if x.input_len == 17)
    assert not hung.ok and hung.error
    with pytest.raises(ValueError, match="no request completed"):
        summarise([hung])


def test_nothing_listening_is_an_error_per_request_not_a_crash():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    got = replay("127.0.0.1", port, [Request(8, 2, 0.0)], timeout_s=5)
    assert not got[0].ok and "Connection" in got[0].error
