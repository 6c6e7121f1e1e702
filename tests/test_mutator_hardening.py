"""Hardening of the mutators: Optuna's repairs never repeat a point, trials the engine drops
are told; the LLM operator stops at a permanent API error; mistyped search files are one-line
errors."""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import optuna

from evokernel import Budget, Search
from evokernel.core.archive import Archive
from evokernel.core.mutator import Context
from evokernel.engine.landscape import builtin
from evokernel.evaluators import ReplayEvaluator
from evokernel.mutators import OptunaSampler
from evokernel.store import SQLiteStore

LANDSCAPE = builtin("matmul_bf16_h200_M2048_N6144_K4096")


def _stubborn() -> OptunaSampler:
    """A sampler that always asks for the same point, so every ask after the first is repaired."""
    fixed = {"BM": 4, "BN": 3, "BK": 2, "GROUP_M": 1, "num_warps": 1, "num_stages": 3}
    return OptunaSampler(optuna.samplers.PartialFixedSampler(fixed, optuna.samplers.RandomSampler(seed=0)))


def test_repairs_within_one_batch_are_all_different():
    ev = ReplayEvaluator(LANDSCAPE)
    mut = _stubborn()
    ctx = Context(ev.space, np.random.default_rng(0), 1, Archive())
    ids = [g.id for g in (mut.propose([], ctx) for _ in range(8)) if g is not None]
    assert len(ids) == 8 and len(set(ids)) == 8, "a repair returned a point already proposed in this batch"


def test_a_trial_the_engine_dropped_is_failed_when_the_next_generation_starts():
    ev = ReplayEvaluator(LANDSCAPE)
    mut = OptunaSampler("random")
    dropped = mut.propose([], Context(ev.space, np.random.default_rng(0), 1, Archive()))
    assert dropped is not None and mut.study.trials[0].state.name == "RUNNING"
    nxt = mut.propose([], Context(ev.space, np.random.default_rng(0), 2, Archive()))
    assert mut.study.trials[0].state.name == "FAIL"
    assert nxt is not None and nxt.id != dropped.id  # and not offered again


def test_a_tpe_run_proposes_no_duplicates_and_leaves_no_trial_running():
    ev = ReplayEvaluator(LANDSCAPE)
    sampler = OptunaSampler("tpe")
    proposals: list[str] = []
    propose = sampler.propose

    def counted(parents, ctx):
        g = propose(parents, ctx)
        if g is not None:
            proposals.append(g.id)
        return g

    sampler.propose = counted  # type: ignore[method-assign]
    store = SQLiteStore(":memory:")
    report = Search(ev.space, ev, [sampler], store=store).run(Budget(evaluations=80), seed=0)
    assert report.evaluations == 80
    assert "duplicate" not in report.skipped, report.skipped
    trials = sampler.study.trials
    # one trial per ask, a failed one per repaired ask plus the repaired point's own result:
    # never more than two per proposal, and the study is not left with a pile of running trials
    assert len(proposals) <= len(trials) <= 2 * len(proposals)
    running = [t for t in trials if t.state.name == "RUNNING"]
    assert len(running) <= 16, f"{len(running)} trials left running"


# -- search files: a mistyped variable is a one-line error (exit 2), not a traceback mid-run --

_HEAD = """from evokernel.evaluators import ReplayEvaluator
from evokernel.engine.landscape import builtin
evaluator = ReplayEvaluator(builtin("matmul_bf16_h200_M16_N4096_K4096"))
space = evaluator.space
"""


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('options = {"population": 4}', "`options` must be an evokernel SearchOptions, not dict"),
        ('mutators = ["point", "local"]', "`mutators` must be a list of mutator objects"),
        ('descriptor = "tile_class"', "`descriptor` must be a function of a genome"),
    ],
)
def test_a_mistyped_search_file_is_a_one_line_error(tmp_path, evokernel_cmd, cli_env, line, message):
    from tests.test_cli import assert_one_line_error, run

    target = tmp_path / "bad.py"
    target.write_text(_HEAD + line + "\n")
    out = run(evokernel_cmd, cli_env, "search", str(target), "--budget", "5", "--db", str(tmp_path / "e.db"))
    assert_one_line_error(out, message)
    assert str(target) in out.stderr


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('mutators = "point"', "`mutators` must be a list of mutator objects, not str"),
        ("name = 3", "`name` must be a string, not int"),
        ("seeds = [3]", "`seeds` must be a list of genomes or of dicts"),
        ('seeds = {"BM": 64}', "`seeds` must be a list of genomes or of dicts"),
    ],
)
def test_search_file_variables_are_type_checked(tmp_path, line, message):
    from evokernel import SearchSpec
    from evokernel.core.errors import ConfigError

    target = tmp_path / "bad.py"
    target.write_text(_HEAD + line + "\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        SearchSpec.from_file(target)


# -- the LLM operator: a permanent API error ends its calls for the run --------------------


def _llm(handler, max_retries: int = 4):
    anthropic = pytest.importorskip("anthropic")
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - depends on the installed SDK
        import httpx
    from evokernel.mutators.llm import AnthropicProvider, LLMRewrite
    from evokernel.search_spaces.matmul.template import candidate_source

    client = anthropic.Anthropic(
        api_key="sk-test", max_retries=max_retries, http_client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    return LLMRewrite(
        Path(__file__).parent / "corpus" / "problems" / "matmul_small.py",
        provider=AnthropicProvider("claude-sonet-5", client=client),
        render=lambda g: candidate_source(g.params),
    ), httpx


def _error(httpx, status: int, kind: str, message: str):
    return httpx.Response(status, json={"type": "error", "error": {"type": kind, "message": message}})


@pytest.mark.parametrize(
    ("status", "kind", "message"),
    [
        (404, "not_found_error", "model: claude-sonet-5"),
        (401, "authentication_error", "invalid x-api-key"),
        (400, "invalid_request_error", "model: claude-sonet-5 is not a valid model"),
    ],
)
def test_a_permanent_api_error_switches_the_llm_operator_off(caplog, status, kind, message):
    from evokernel.search_spaces import matmul_space

    requests = []

    def handler(request):
        requests.append(request)
        return _error(httpx, status, kind, message)

    rewrite, httpx = _llm(handler)
    parent = matmul_space().genome(BM=32, BN=32, BK=32, GROUP_M=8, num_warps=4, num_stages=2)
    ctx = Context(matmul_space(), np.random.default_rng(0), 1, Archive())
    with caplog.at_level(logging.WARNING, logger="evokernel.llm"):
        for _ in range(5):
            assert rewrite.propose([parent], ctx) is None
    assert len(requests) == 1, "the SDK does not retry it, and nothing calls again"
    off = rewrite.available()
    assert off is not None and off.startswith(f"API error {status}") and "after retries" not in off
    assert rewrite.exhausted  # the engine stops choosing it
    assert caplog.text.count("off for the rest of the run") == 1 and "after retries" not in caplog.text


def test_a_retryable_error_leaves_the_llm_operator_on_and_says_after_retries_only_when_it_retried():
    from evokernel.search_spaces import matmul_space

    requests = []

    def handler(request):
        requests.append(request)
        return _error(httpx, 429, "rate_limit_error", "slow down")

    parent = matmul_space().genome(BM=32, BN=32, BK=32, GROUP_M=8, num_warps=4, num_stages=2)
    ctx = Context(matmul_space(), np.random.default_rng(0), 1, Archive())
    rewrite, httpx = _llm(handler, max_retries=0)
    assert rewrite.propose([parent], ctx) is None
    assert rewrite.available() is None and not rewrite.exhausted
    assert rewrite.stats.dropped == {"API error 429": 1}  # no retry was made: not "after retries"
    assert rewrite.propose([parent], ctx) is None and len(requests) == 2  # still calling


# -- the end-of-run lesson summary keeps within the run's wall time and dollars -------------


@pytest.fixture
def silent_server():
    """An Anthropic endpoint on 127.0.0.1 that reads the request and never answers."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Silent(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.server.requests += 1  # type: ignore[attr-defined]
            release.wait(60)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    srv.daemon_threads = True
    srv.requests = 0  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    release.set()
    srv.shutdown()
    srv.server_close()


def _recorder(srv, monkeypatch):
    pytest.importorskip("anthropic")
    from evokernel.mutators.llm import AnthropicProvider
    from evokernel.store.knowledge import KnowledgeRecorder, new_lesson

    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{srv.server_address[1]}")
    store = SQLiteStore(":memory:")
    store.save_lessons([new_lesson("caveat", "mm", "gpu", {}, "3 candidate(s) failed with shared memory", {}, "r")])
    # as --llm makes it: 180 s per attempt, 4 retries
    provider = AnthropicProvider("claude-sonnet-5", api_key="sk-test")
    return KnowledgeRecorder(store, {"op": "mm", "gpu": "gpu", "toolchain": {}}, summarizer=provider)


def _finish_within(recorder, report, limit_s: float) -> float:
    done = threading.Event()
    t0 = time.monotonic()
    threading.Thread(target=lambda: (recorder.on_finish(report), done.set()), daemon=True).start()
    assert done.wait(limit_s), f"on_finish still waiting after {limit_s} s"
    return time.monotonic() - t0


def test_the_lesson_summary_ends_within_the_runs_wall_time(silent_server, monkeypatch):
    recorder = _recorder(silent_server, monkeypatch)
    recorder.on_start("run", Budget(evaluations=10, wall_s=4.0), False)
    took = _finish_within(recorder, SimpleNamespace(wall_s=1.0, cost=0.0), 15)
    assert took < 4.5 and silent_server.requests == 1


def test_the_lesson_summary_is_skipped_without_time_or_dollars_left(silent_server, monkeypatch):
    recorder = _recorder(silent_server, monkeypatch)
    recorder.on_start("run", Budget(evaluations=10, wall_s=5.0), False)
    _finish_within(recorder, SimpleNamespace(wall_s=4.5, cost=0.0), 5)  # under a second left
    recorder.on_start("run", Budget(evaluations=10, cost=0.5), False)
    _finish_within(recorder, SimpleNamespace(wall_s=1.0, cost=0.5), 5)  # the dollar cap is spent
    assert silent_server.requests == 0
