"""The LLM rewrite operator through the real Anthropic SDK: recorded Messages API responses
(tests/recorded/anthropic) served by the SDK's HTTP transport, never a fake client class."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

anthropic = pytest.importorskip("anthropic")
try:  # the HTTP library the SDK is built on: httpx2 in recent releases, httpx before
    import httpx2 as httpx
except ImportError:  # pragma: no cover - depends on the installed SDK
    import httpx

from evokernel import Budget, Search  # noqa: E402
from evokernel.core.archive import Archive  # noqa: E402
from evokernel.evaluators import KernelEvaluator  # noqa: E402
from evokernel.core.genome import Genome  # noqa: E402
from evokernel.core.mutator import Context  # noqa: E402
from evokernel.mutators import PointMutation  # noqa: E402
from evokernel.mutators.llm import AnthropicProvider, LLMRewrite, validate_source  # noqa: E402
from evokernel.engine.search import SearchOptions  # noqa: E402
from evokernel.search_spaces import matmul_space  # noqa: E402
from evokernel.search_spaces.matmul.template import candidate_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "recorded" / "anthropic"
PROBLEM = ROOT / "tests" / "corpus" / "problems" / "matmul_small.py"
STATUS = {"rate_limit_429.json": 429, "overloaded_529.json": 529, "server_500.json": 500}


_ANSWERS = itertools.count()


class Recorded:
    """Serves recorded responses in order to the SDK's HTTP client; keeps the requests."""

    def __init__(self, *names: str, vary: bool = False) -> None:
        self.queue = list(names)
        self.requests: list[dict[str, Any]] = []
        self.vary = vary  # each answer's source a different module (a comment numbers it)

    def __call__(self, request: Any) -> Any:
        self.requests.append(json.loads(request.content))
        name = self.queue.pop(0)
        headers = {"retry-after-ms": "1"} if name in STATUS else {"request-id": "req_test"}
        body = json.loads((RECORDED / name).read_text())
        if self.vary:
            for block in body.get("content", []):
                if block.get("type") == "tool_use" and "source" in block["input"]:
                    block["input"]["source"] += f"\n# answer {next(_ANSWERS)}\n"
        return httpx.Response(STATUS.get(name, 200), json=body, headers=headers)


def provider(recorded: Recorded, **kw: Any) -> AnthropicProvider:
    client = anthropic.Anthropic(
        api_key="sk-test",
        max_retries=kw.pop("max_retries", 2),
        http_client=httpx.Client(transport=httpx.MockTransport(recorded)),
    )
    return AnthropicProvider("claude-sonnet-5", client=client, **kw)


def context(space: Any = None) -> Context:
    return Context(space or matmul_space(), np.random.default_rng(0), 1, Archive())


PARENT = matmul_space().genome(BM=32, BN=32, BK=32, GROUP_M=8, num_warps=4, num_stages=2)


def op(recorded: Recorded, **kw: Any) -> LLMRewrite:
    return LLMRewrite(PROBLEM, provider=provider(recorded, **kw), render=lambda g: candidate_source(g.params))


def test_a_tool_use_answer_becomes_a_validated_genome_and_its_cost_is_charged():
    rec = Recorded("success_tool_use.json")
    charged: list[tuple[float, str]] = []
    ctx = context()
    ctx.charge = lambda amount, what: charged.append((amount, what))
    child = op(rec).propose([PARENT], ctx)
    assert child is not None and "torch.matmul" in child.source and child.params == PARENT.params
    body = rec.requests[0]
    assert body["model"] == "claude-sonnet-5" and body["tool_choice"] == {"type": "tool", "name": "submit_kernel"}
    assert body["system"][1]["cache_control"] == {"type": "ephemeral"}  # the problem part is cached
    assert "matmul_small" in body["system"][1]["text"] and "CONFIG" in body["messages"][0]["content"]
    # 1812 in, 412 out, 1530 cache writes at Sonnet prices
    assert charged and charged[0][0] == pytest.approx((1812 * 3 + 412 * 15 + 1530 * 3.75) / 1e6)


@pytest.mark.parametrize("errors", [["rate_limit_429.json"], ["overloaded_529.json"], ["server_500.json"]])
def test_the_sdk_retries_rate_limits_overload_and_server_errors(errors: list[str]):
    rec = Recorded(*errors, "success_tool_use.json")
    child = op(rec).propose([PARENT], context())
    assert child is not None and len(rec.requests) == 2


def test_errors_past_the_retries_drop_the_proposal_with_a_reason(caplog: pytest.LogCaptureFixture):
    rec = Recorded("overloaded_529.json", "overloaded_529.json", "overloaded_529.json")
    rewrite = op(rec, max_retries=2)
    with caplog.at_level(logging.WARNING, logger="evokernel.llm"):
        assert rewrite.propose([PARENT], context()) is None
    assert len(rec.requests) == 3 and "API error 529" in caplog.text
    assert rewrite.stats.dropped == {"API error 529 after retries": 1}


@pytest.mark.parametrize(
    "name, reason",
    [
        ("truncated.json", "truncated answer"),
        ("syntax_error.json", "invalid source: does not parse"),
        ("malformed_edit.json", "malformed edit: edit 1: its search text is not"),
        ("dropped_config.json", "invalid source: dropped its CONFIG"),
    ],
)
def test_truncated_and_malformed_answers_are_dropped(name: str, reason: str, caplog: pytest.LogCaptureFixture):
    rewrite = op(Recorded(name))
    with caplog.at_level(logging.WARNING, logger="evokernel.llm"):
        assert rewrite.propose([PARENT], context()) is None
    assert reason in caplog.text and rewrite.stats.calls == 1


def test_without_a_key_the_operator_says_so_once_and_proposes_nothing(monkeypatch, caplog):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    rewrite = LLMRewrite(PROBLEM, render=lambda g: candidate_source(g.params))
    assert rewrite.available() == "no ANTHROPIC_API_KEY"
    with caplog.at_level(logging.WARNING, logger="evokernel.llm"):
        assert rewrite.propose([PARENT], context()) is None
        assert rewrite.propose([PARENT], context()) is None
    assert caplog.text.count("is off: no ANTHROPIC_API_KEY") == 1


def test_source_validation():
    assert validate_source("def kernel(a, b):\n    return a\n", arity=2) is None
    assert "takes 1 inputs" in validate_source("def kernel(a):\n    return a\n", arity=2)
    assert "no top-level function" in validate_source("def kern(a, b):\n    return a\n")
    assert "CONFIG keys dropped: ['BN']" in validate_source(
        "CONFIG = {'BM': 1}\ndef kernel(a, b):\n    return a\n", config_keys=["BM", "BN"]
    )
    # a new tunable must be declared in SPACE, with CONFIG's value among its values
    new = "CONFIG = {'BM': 1, 'U': 2}\ndef kernel(a, b):\n    return a\n"
    assert "neither a parameter" in validate_source(new, config_keys=["BM"], known=["BM"])
    assert validate_source(new + "SPACE = {'U': [1, 2]}\n", config_keys=["BM"], known=["BM"]) is None
    assert "not among" in validate_source(new + "SPACE = {'U': [1, 4]}\n", config_keys=["BM"], known=["BM"])


def test_edits_declaring_a_new_tunable_are_applied_and_its_values_tried_without_more_calls():
    from evokernel.judge.candidate import config_of, space_of
    from evokernel.core.result import Result

    rec = Recorded("edits_new_tunable.json")
    rewrite = op(rec, max_retries=0)
    ctx = context()
    child = rewrite.propose([PARENT], ctx)
    assert (
        child is not None and config_of(child.source)["CHUNKS"] == 2 and space_of(child.source) == {"CHUNKS": [1, 2, 4]}
    )
    assert "torch.chunk" in child.source and child.params == PARENT.params
    assert "search/replace" in rec.requests[0]["system"][0]["text"]
    # once the structure passes the gate, its other CHUNKS values come next, without a call
    rewrite.observe(child, Result.ok(0.5, per_shape={"s": 0.5}))
    variants = [rewrite.propose([PARENT], ctx) for _ in range(2)]
    assert sorted(config_of(v.source)["CHUNKS"] for v in variants) == [1, 4]
    assert all(v.lineage.parents == (child.id,) for v in variants)
    assert rewrite.stats.tuned == 2 and rewrite.stats.calls == 1 and len(rec.requests) == 1


def test_the_evaluator_binds_a_source_genomes_parameters_into_its_config():
    from evokernel.evaluators.kernel import _source_of
    from evokernel.judge.candidate import config_of

    source = candidate_source(PARENT.params)
    moved = Genome.of(dict(PARENT.params, BM=64), source=source)
    bound, trusted = _source_of(moved, lambda g: "")
    assert config_of(bound)["BM"] == 64 and not trusted
    assert _source_of(Genome.of(dict(PARENT.params), source=source), lambda g: "")[0] == source


@pytest.mark.slow
def test_a_search_judges_llm_rewrites_and_a_dollar_cap_stops_the_calls_not_the_search():
    """On the CPU: the operator's rewrite goes through the real gate; once the run has spent
    its dollars, only the numeric operators propose."""
    rec = Recorded(*["success_tool_use.json"] * 20)
    rewrite = op(rec)
    from evokernel.store import SQLiteStore

    store = SQLiteStore(":memory:")
    ev = KernelEvaluator(PROBLEM, lambda g: candidate_source(g.params), device="cpu", workers=2)
    report = Search(
        matmul_space(),
        ev,
        [rewrite, PointMutation()],
        store=store,
        options=SearchOptions(population=2, remeasure=0, report_elites=1),
    ).run(Budget(evaluations=8, cost=0.03), seed=0)
    assert report.evaluations == 8
    # each call costs ~0.0116 $, but starts only if its worst case (the prompt and at least
    # 1024 output tokens, ~0.022 $) fits in what is left: the cap stops the second
    assert rewrite.stats.calls == 1 and report.cost <= 0.03
    judged = [e for e in store.history(report.run_id) if e.genome.lineage.operator == "llm-rewrite"]
    assert judged and all(e.result.is_ok and "(rewritten)" in e.genome.source for e in judged)


def test_a_rewrite_rejected_by_the_gate_goes_back_with_its_error_and_the_fix_is_accepted():
    from evokernel.store import SQLiteStore

    rec = Recorded("broken_kernel.json", "success_tool_use.json")
    rewrite = op(rec)
    store = SQLiteStore(":memory:")
    ev = KernelEvaluator(PROBLEM, lambda g: candidate_source(g.params), device="cpu", workers=1)
    report = Search(
        matmul_space(), ev, [rewrite], store=store, options=SearchOptions(population=1, remeasure=0, report_elites=1)
    ).run(Budget(evaluations=3), seed=0)
    mine = [e for e in store.history(report.run_id) if e.genome.lineage.operator == "llm-rewrite"]
    assert [e.result.status.value for e in mine] == ["incorrect", "ok"]
    assert "wrong result" in mine[0].result.error
    repair_request = rec.requests[1]["messages"][0]["content"]
    assert "It was rejected with" in repair_request and "wrong result" in repair_request
    assert rewrite.stats.repairs == 1 and rewrite.stats.tokens["cache_read"] == 1530


@pytest.mark.slow
def test_the_llm_flag_without_a_key_says_the_operator_is_off_and_searches_on(tmp_path: Path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "evokernel.cli",
            "search",
            str(ROOT / "examples" / "matmul_kernel.py"),
            "--llm",
            "--budget",
            "2",
            "--population",
            "2",
            "--db",
            str(tmp_path / "s.db"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("LLM operator off: no ANTHROPIC_API_KEY; searching without it") == 1
    replay = subprocess.run(
        [
            sys.executable,
            "-m",
            "evokernel.cli",
            "search",
            "matmul_bf16_h200_M16_N4096_K4096",
            "--llm",
            "--budget",
            "2",
            "--db",
            str(tmp_path / "r.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert replay.returncode == 2 and "needs a search file whose evaluator judges a problem" in replay.stderr


class _Server:
    """A local HTTP server answering /chat/completions with recorded responses, in order."""

    def __init__(self, *names: str) -> None:
        import http.server
        import threading

        self.queue, self.requests = list(names), []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                outer.requests.append((self.path, json.loads(self.rfile.read(int(self.headers["content-length"])))))
                name = outer.queue.pop(0)
                body = (ROOT / "tests" / "recorded" / "openai" / name).read_bytes()
                self.send_response(429 if name.startswith("rate_limit") else 200)
                self.send_header("content-type", "application/json")
                if name.startswith("rate_limit"):
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()


@pytest.mark.parametrize(
    "names, ok",
    [
        (["tool_call.json"], True),
        (["fenced_block.json"], True),
        (["rate_limit_429.json", "tool_call.json"], True),
        (["length.json"], False),
    ],
)
def test_an_openai_compatible_endpoint_plugs_in_the_same_way(names: list[str], ok: bool):
    from evokernel.mutators.llm import OpenAICompatibleProvider

    server = _Server(*names)
    try:
        prov = OpenAICompatibleProvider("qwen3-coder", server.url, backoff_s=0.01, prices=(0.5, 1.5))
        rewrite = LLMRewrite(PROBLEM, provider=prov, render=lambda g: candidate_source(g.params))
        child = rewrite.propose([PARENT], context())
    finally:
        server.close()
    assert (child is not None) == ok
    path, body = server.requests[-1]
    assert path == "/v1/chat/completions" and body["tool_choice"]["function"]["name"] == "submit_kernel"
    assert body["messages"][0]["role"] == "system" and "matmul_small" in body["messages"][0]["content"]
    if ok:
        assert "torch.matmul" in child.source and rewrite.stats.cost_usd == pytest.approx(
            (1900 * 0.5 + (350 if names[-1] == "tool_call.json" else 360) * 1.5) / 1e6
        )
    else:
        assert rewrite.stats.dropped == {"truncated answer (max_tokens 8192 reached)": 1}


def test_several_models_are_mixed_by_gains_per_dollar():
    """Two models answer the same rewrites; the one charging a tenth as much per call gets
    most of the later calls once both have been tried."""
    dear = Recorded(*["success_tool_use.json"] * 40, vary=True)
    cheap = Recorded(*["success_tool_use.json"] * 40, vary=True)
    providers = [provider(dear, prices=(30.0, 150.0, 37.5, 3.0)), provider(cheap, prices=(3.0, 15.0, 3.75, 0.3))]
    rewrite = LLMRewrite(PROBLEM, provider=providers, render=lambda g: candidate_source(g.params))
    from evokernel.core.result import Result

    ctx = context()
    for i in range(30):
        parent = matmul_space().genome(dict(PARENT.params, num_stages=2 + i % 4))
        rewrite.observe(parent, Result.ok(1.0))  # the parent as measured
        child = rewrite.propose([parent], ctx)
        if child is not None:  # every rewrite gains over its parent here
            rewrite.observe(child, Result.ok(0.5))
    calls = [m["calls"] for m in rewrite.model_stats()]
    assert sum(calls) == 30 and calls[1] > 2 * calls[0], calls
