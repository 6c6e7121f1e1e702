"""Faults of the LLM operator through the Anthropic SDK's real HTTP transport, against a local
HTTP server on 127.0.0.1 that answers badly on purpose (issue 27): a truncated 200 response,
a connection that stalls, a model that keeps answering with the same kernel. Every test is
bounded in time: a call that would hang runs in a thread that the test stops waiting for."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

anthropic = pytest.importorskip("anthropic")

from evokernel import Budget, Search  # noqa: E402
from evokernel.core.archive import Archive  # noqa: E402
from evokernel.core.mutator import Context  # noqa: E402
from evokernel.mutators import PointMutation  # noqa: E402
from evokernel.mutators.llm import AnthropicProvider, LLMRewrite  # noqa: E402
from evokernel.core.result import Result  # noqa: E402
from evokernel.engine.search import SearchOptions  # noqa: E402
from evokernel.search_spaces import matmul_space  # noqa: E402
from evokernel.search_spaces.matmul.template import candidate_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ANSWER = (ROOT / "tests" / "recorded" / "anthropic" / "success_tool_use.json").read_bytes()
PROBLEM = ROOT / "tests" / "corpus" / "problems" / "matmul_small.py"
PARENT = matmul_space().genome(BM=32, BN=32, BK=32, GROUP_M=8, num_warps=4, num_stages=2)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        server: Any = self.server
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        server.requests.append(json.loads(body))
        if server.mode == "stall":  # accept, read, then say nothing
            server.release.wait(60)
            return
        if server.mode == "fail":  # an overloaded API: 529 to every request, retry at once
            payload = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
            self.send_response(529)
            self.send_header("content-type", "application/json")
            self.send_header("retry-after-ms", "1")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        payload = ANSWER[: len(ANSWER) // 2] if server.mode == "truncated" else ANSWER
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("request-id", "req_local")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server():
    srv: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.mode, srv.requests, srv.release = "answer", [], threading.Event()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.release.set()
    srv.shutdown()
    srv.server_close()


def _provider(srv: Any, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> AnthropicProvider:
    """The provider as `--llm` makes it (its own SDK client: 180 s timeout, 4 retries by
    default), pointed at the local server."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{srv.server_address[1]}")
    return AnthropicProvider("claude-sonnet-5", api_key="sk-test", **kw)


def _rewrite(provider: AnthropicProvider) -> LLMRewrite:
    return LLMRewrite(PROBLEM, provider=provider, render=lambda g: candidate_source(g.params))


def _bounded(fn: Any, limit_s: float) -> tuple[Any, float]:
    """fn() in a thread; its value and how long it took; fails the test past `limit_s`."""
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported below
            out["raised"] = exc

    t0 = time.monotonic()
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(limit_s)
    took = time.monotonic() - t0
    assert not thread.is_alive(), f"still waiting after {limit_s} s"
    assert "raised" not in out, f"raised {type(out['raised']).__name__}: {out['raised']}"
    return out["value"], took


def _context(deadline: float | None = None) -> Context:
    return Context(matmul_space(), np.random.default_rng(0), 1, Archive(), deadline=deadline)


def test_a_truncated_200_response_is_a_value_not_an_exception(
    server: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    server.mode = "truncated"
    provider = _provider(server, monkeypatch)
    reply, _ = _bounded(lambda: provider.complete(_rewrite(provider).system(), "rewrite it"), 30)
    assert reply.error.startswith("malformed API response")
    rewrite = _rewrite(provider)
    child, _ = _bounded(lambda: rewrite.propose([PARENT], _context()), 30)
    assert child is None and rewrite.stats.dropped == {"malformed API response": 1}


def test_a_stalled_connection_holds_a_proposal_no_longer_than_the_wall_time_left(
    server: Any, monkeypatch: pytest.MonkeyPatch
):
    server.mode = "stall"
    rewrite = _rewrite(_provider(server, monkeypatch))  # 180 s per attempt, 4 retries
    child, took = _bounded(lambda: rewrite.propose([PARENT], _context(deadline=time.monotonic() + 2.0)), 20)
    assert child is None and took < 4.0
    assert len(server.requests) == 1  # no retry that could not end in time
    [(reason, n)] = rewrite.stats.dropped.items()
    assert "timed out" in reason.lower() or "connection" in reason.lower()
    # with no time left, no call at all
    child, _ = _bounded(lambda: rewrite.propose([PARENT], _context(deadline=time.monotonic() + 0.2)), 10)
    assert child is None and len(server.requests) == 1


@pytest.mark.slow
def test_a_search_with_a_stalled_llm_ends_at_its_wall_time(server: Any, monkeypatch: pytest.MonkeyPatch):
    server.mode = "stall"
    rewrite = _rewrite(_provider(server, monkeypatch))

    def search() -> Search:  # (its store made in the thread)
        return Search(matmul_space(), _Constant(), [rewrite], options=SearchOptions(population=2, remeasure=0))

    report, took = _bounded(lambda: search().run(Budget(evaluations=50, wall_s=3.0)), 30)
    assert report.stop_reason == "budget: wall time" and took < 6.0


class _Constant:
    """A stand-in evaluator: every genome measures 1 ms plus a little by its id."""

    name = "constant"

    def fingerprint(self) -> dict[str, Any]:
        return {"evaluator": "constant"}

    def evaluate(self, genomes: Any) -> list[Result]:
        return [Result.ok(1.0 + int(g.id[:4], 16) / 1e6) for g in genomes]


def test_a_model_answering_the_same_kernel_again_is_not_paid_for_again(server: Any, monkeypatch: pytest.MonkeyPatch):
    rewrite = _rewrite(_provider(server, monkeypatch))

    def search() -> Search:
        return Search(
            matmul_space(),
            _Constant(),
            [rewrite, PointMutation()],
            options=SearchOptions(population=2, remeasure=0, report_elites=1),
        )

    report, _ = _bounded(lambda: search().run(Budget(evaluations=10), seed=0), 60)
    assert report.evaluations == 10
    # one answer is new, every later one the same kernel: a handful of calls, not one per proposal
    assert 2 <= len(server.requests) <= 5, len(server.requests)
    assert rewrite.stats.proposed == 1
    later = server.requests[-1]["messages"][0]["content"]
    assert "Already submitted" in later and "Submit a substantially different kernel" in later


def test_an_openai_compatible_endpoint_that_stalls_is_bounded_by_the_time_left(server: Any):
    from evokernel.mutators.llm import OpenAICompatibleProvider

    server.mode = "stall"
    provider = OpenAICompatibleProvider("local", f"http://127.0.0.1:{server.server_address[1]}")  # 300 s, 3 retries
    reply, took = _bounded(lambda: provider.complete([{"type": "text", "text": "x"}], "rewrite it", time_left=2.0), 20)
    assert reply.error and took < 4.0


def _search(rewrite: LLMRewrite, **budget: Any) -> Any:
    """A search of `rewrite` and point mutation (made in the calling thread), run to `budget`."""
    search = Search(
        matmul_space(), _Constant(), [rewrite, PointMutation()], options=SearchOptions(population=2, remeasure=0)
    )
    return search.run(Budget(**budget), seed=0)


def test_an_api_that_keeps_failing_is_switched_off_after_three_failed_proposals(
    server: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    server.mode = "fail"
    rewrite = _rewrite(_provider(server, monkeypatch))  # the defaults: 2 retries
    caplog.set_level("WARNING", logger="evokernel.llm")
    report, _ = _bounded(lambda: _search(rewrite, evaluations=16), 30)
    assert report.evaluations == 16  # the search went on with point mutation
    # the first failed proposal retries (3 requests); while failing, later ones try once;
    # after 3 failed proposals in a row, no more requests (was 19-25)
    assert len(server.requests) == 5, len(server.requests)
    off = [r.getMessage() for r in caplog.records if "off for the rest of the run" in r.getMessage()]
    assert len(off) == 1 and "3 proposals in a row failed" in off[0] and "529" in off[0], off
    assert rewrite.exhausted


def test_a_stalled_api_is_switched_off_without_a_wall_time(
    server: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    server.mode = "stall"
    rewrite = _rewrite(_provider(server, monkeypatch, timeout_s=0.3))
    report, took = _bounded(lambda: _search(rewrite, evaluations=12), 30)
    assert report.evaluations == 12
    assert len(server.requests) == 5 and took < 10.0, (len(server.requests), took)
    assert rewrite.available() is not None and "timed out" in rewrite.available().lower()


def test_the_default_request_settings_bound_a_stalled_api():
    client = AnthropicProvider("claude-sonnet-5", api_key="sk-test").client
    # (the SDK's own settings) a connection that does not open fails in 10 s, an answer that
    # does not come in 120 s; 2 retries: a stalled API holds a proposal at most 6 minutes
    assert client.max_retries == 2
    assert client.timeout.connect == 10.0 and client.timeout.read == 120.0


def test_a_request_whose_worst_case_cost_exceeds_what_is_left_is_not_started(
    server: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    # each recorded answer costs $0.0174 at the sonnet prices; max_tokens 8192 alone could cost $0.12
    rewrite = _rewrite(_provider(server, monkeypatch))
    caplog.set_level("WARNING", logger="evokernel.llm")
    report, _ = _bounded(lambda: _search(rewrite, evaluations=12, cost=0.03), 30)
    assert report.evaluations == 12
    assert 0 < report.cost <= 0.03, report.cost  # was $0.0347: a second call started with $0.0126 left
    assert len(server.requests) == 1
    # the one request asked for no more output than the money left could pay for
    assert server.requests[0]["max_tokens"] * 15.0 / 1e6 < 0.03
    assert "not started" in caplog.text
