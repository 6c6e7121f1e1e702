"""Workload traces: loading, the continuous-batching replay, nearest-key weights, and the
weighted fitness they feed (the gate on the CPU, the MoE problem's trace path)."""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter, deque
from pathlib import Path

import pytest

from evokernel.core.errors import ConfigError
from evokernel.judge.gate import GateOptions, Judge
from evokernel.judge.problem import Problem, ProblemError
from evokernel.judge.sandbox import SandboxOptions
from evokernel.model.workload import Request, Trace, nearest, weights

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "recorded" / "traces"
CHAT = TRACES / "chat_small.jsonl"
MOE = ROOT / "examples" / "problems" / "moe_bf16.py"
SGLANG_GRID = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]


# --- loading ------------------------------------------------------------------------------


def test_recorded_trace_loads_the_same_from_jsonl_and_csv() -> None:
    a, b = Trace.load(CHAT), Trace.load(TRACES / "chat_small.csv")
    assert a.name == "chat_small" and len(a.requests) == 200
    assert a.requests == b.requests
    assert all(r.input_len >= 8 and r.output_len >= 4 for r in a.requests)
    arrivals = [r.arrival_s for r in a.requests]
    assert arrivals == sorted(arrivals) and arrivals[-1] > 30  # Poisson at 5/s over ~40 s
    assert 300 < statistics.median(r.input_len for r in a.requests) < 550  # lognormal, median 400
    text = a.summary()
    assert "200 requests" in text and "decode steps" in text and "p90" in text


def test_alternate_field_names(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        '{"prompt_len": 10, "completion_len": 3, "timestamp": 2.5}\n'
        "\n"
        '{"input_tokens": 7, "output_tokens": 1}\n'
        '{"Prompt_Tokens": 5.0, "completion_tokens": "4", "arrival_s": "1970-01-01T00:00:01+00:00"}\n'
    )
    t = Trace.load(jsonl)
    assert t.requests == [Request(10, 3, 2.5), Request(7, 1, 0.0), Request(5, 4, 1.0)]
    csv = tmp_path / "t.csv"
    csv.write_text("ContextTokens,GeneratedTokens,TIMESTAMP\n10,3,2.5\n7,1,0\n")
    assert Trace.load(csv).requests == [Request(10, 3, 2.5), Request(7, 1, 0.0)]
    # no suffix: the first character decides
    (tmp_path / "noext").write_text("input_len,output_len\n4,2\n")
    assert Trace.load(tmp_path / "noext").requests == [Request(4, 2)]


@pytest.mark.parametrize(
    "name, text, where, what",
    [
        (
            "bad.jsonl",
            '{"input_len": 1, "output_len": 1}\n{"input_len": 2, "output_len": 2}\n{oops\n',
            ":3:",
            "not JSON",
        ),
        ("bad.jsonl", '{"input_len": 1, "output_len": 1}\n[1, 2]\n', ":2:", "JSON object"),
        ("bad.jsonl", '{"input_len": 1}\n', ":1:", "no output_len"),
        ("bad.jsonl", '{"input_len": 1, "output_len": 2.5}\n', ":1:", "whole number"),
        ("bad.jsonl", '{"input_len": "many", "output_len": 2}\n', ":1:", "not a number"),
        ("bad.jsonl", '{"input_len": 0, "output_len": 2}\n', ":1:", "at least 1"),
        ("bad.jsonl", '{"input_len": 3, "output_len": 2, "timestamp": "noon"}\n', ":1:", "ISO date-time"),
        ("bad.csv", "input_len,output_len\n1,1\n2,2\n3\n", ":4:", "fields"),
        ("bad.csv", "prompt_len,output_len\n1,1\n\n2,x\n", ":4:", "not a number"),
        ("empty.jsonl", "\n\n", "", "no requests"),
    ],
)
def test_malformed_input_names_the_line(tmp_path: Path, name: str, text: str, where: str, what: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=what) as info:
        Trace.load(path)
    assert f"{path}{where}" in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="no such trace file"):
        Trace.load("/nonexistent/trace.jsonl")


def test_save_round_trips(tmp_path: Path) -> None:
    t = Trace([Request(3, 2, 0.5), Request(9, 1, 1.25)])
    for name in ("t.jsonl", "t.csv"):
        t.save(tmp_path / name)
        assert Trace.load(tmp_path / name).requests == t.requests


# --- the batching replay ------------------------------------------------------------------


def test_three_requests_by_hand() -> None:
    """Output lengths 1, 2, 3, two slots. Step 1 prefills A and B (A is done: its one token
    comes from the prefill); step 2 prefills C into the free slot; step 3 decodes B and C
    (B done); step 4 decodes C alone (done)."""
    t = Trace([Request(5, 1), Request(5, 2), Request(5, 3)])
    assert t.decode_batches(max_running=2) == {2: 1, 1: 1}
    # one slot: A, then B (one decode step), then C (two)
    assert t.decode_batches(max_running=1) == {1: 3}
    # room for all: decode B and C together once, then C alone
    assert t.decode_batches(max_running=8) == {2: 1, 1: 1}


def test_kv_cache_limit_and_arrivals() -> None:
    # each request holds 10 + 5 tokens: 30 tokens of cache run two at a time
    t = Trace([Request(10, 5), Request(10, 5), Request(10, 5)])
    assert t.decode_batches(max_tokens=30) == {2: 4, 1: 4}
    assert t.decode_batches(max_tokens=45) == {3: 4}
    with pytest.raises(ConfigError, match="request 0 needs 15 tokens"):
        t.decode_batches(max_tokens=14)
    # B arrives 1.5 steps after A: A decodes alone for a step, B is prefilled, both decode,
    # then B alone
    late = Trace([Request(4, 3, 10.0), Request(4, 3, 11.5)])
    assert late.decode_batches(step_s=1.0) == {1: 2, 2: 1}
    # an idle server jumps to the next arrival
    apart = Trace([Request(4, 2, 0.0), Request(4, 2, 100.0)])
    assert apart.decode_batches(step_s=1.0) == {1: 2}
    with pytest.raises(ConfigError, match="max_running"):
        t.decode_batches(max_running=0)


def _step_by_step(reqs: list[Request], max_running: int, max_tokens: int | None, step_s: float) -> dict[int, int]:
    """The same scheduler, one step at a time (slow, obviously right)."""
    order = sorted(range(len(reqs)), key=lambda j: (reqs[j].arrival_s, j))
    t0 = reqs[order[0]].arrival_s
    queue, running, hist, clock = deque(order), {}, Counter(), 0

    def need(j: int) -> int:
        return reqs[j].input_len + reqs[j].output_len

    while queue or running:
        batch: list[int] = []
        while (
            queue
            and (reqs[queue[0]].arrival_s - t0) / step_s <= clock
            and len(running) + len(batch) < max_running
            and (max_tokens is None or sum(map(need, [*running, *batch])) + need(queue[0]) <= max_tokens)
        ):
            batch.append(queue.popleft())
        if batch:
            running.update({j: reqs[j].output_len - 1 for j in batch if reqs[j].output_len > 1})
        elif running:
            hist[len(running)] += 1
            for j in list(running):
                running[j] -= 1
                if not running[j]:
                    del running[j]
        clock += 1
    return dict(sorted(hist.items()))


def test_event_driven_replay_matches_step_by_step() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 12)
        timed = rng.random() < 0.6
        reqs = [Request(rng.randint(1, 20), rng.randint(1, 15), rng.uniform(0, 30) if timed else 0.0) for _ in range(n)]
        max_running = rng.randint(1, 6)
        max_tokens = rng.choice([None, 40, 80])
        if max_tokens is not None and any(r.input_len + r.output_len > max_tokens for r in reqs):
            max_tokens = None
        step_s = rng.choice([1.0, 0.5, 2.0])
        got = Trace(reqs).decode_batches(max_running, max_tokens, step_s=step_s)
        assert got == _step_by_step(reqs, max_running, max_tokens, step_s), (reqs, max_running, max_tokens, step_s)
        assert sum(s * c for s, c in got.items()) == sum(r.output_len - 1 for r in reqs)  # every decoded token


def test_recorded_trace_batches() -> None:
    t = Trace.load(CHAT)
    hist = t.decode_batches()
    assert sum(s * c for s, c in hist.items()) == sum(r.output_len - 1 for r in t.requests)
    assert sorted(hist) == list(range(1, 39))  # up to 38 at once at 5 requests/s; one at a time at the ends
    assert max(t.decode_batches(max_running=8)) == 8
    assert t.decode_batches() == t.decode_batches()  # deterministic


def test_prefill_tokens() -> None:
    t = Trace([Request(1, 1), Request(3, 1), Request(300, 1), Request(512, 1), Request(5000, 1)])
    assert t.prefill_tokens() == {1: 1, 4: 1, 512: 2, 8192: 1}
    assert t.prefill_tokens([128, 1024]) == {128: 2, 1024: 3}  # longer than the largest: the largest
    assert sum(Trace.load(CHAT).prefill_tokens().values()) == 200


# --- weights ------------------------------------------------------------------------------


def test_nearest_key_weights_and_ties() -> None:
    assert nearest(3, [2, 4]) == 2 and nearest(6, [4, 8]) == 4 and nearest(7, [8, 4]) == 8
    assert nearest(20, SGLANG_GRID) == 16 and nearest(21, SGLANG_GRID) == 24 and nearest(9999, SGLANG_GRID) == 4096
    w = weights({3: 1, 6: 1, 7: 2}, [2, 4, 8])
    assert w == {2: 0.25, 4: 0.25, 8: 0.5} and list(w) == [2, 4, 8]
    assert weights({100: 5}, [8, 1, 64]) == {8: 0.0, 1: 0.0, 64: 1.0}  # every key, in the given order
    assert math.isclose(sum(weights(Trace.load(CHAT).decode_batches(), SGLANG_GRID).values()), 1.0)
    for bad in ({}, {1: 0}, {1: 3, 2: -1}):
        with pytest.raises(ConfigError, match="non-negative counts and some positive"):
            weights(bad, [1, 2])
    with pytest.raises(ConfigError, match="no keys"):
        weights({1: 1}, [])


# --- per-shape weights in problems and in the gate -------------------------------------------

SOFTMAX = (ROOT / "tests" / "corpus" / "problems" / "softmax_small.py").read_text()  # shapes R=37 and R=8


def _problem(tmp_path: Path, extra: str, name: str = "softmax_weighted") -> Problem:
    path = tmp_path / f"{name}.py"
    path.write_text(SOFTMAX + "\n" + extra + "\n")
    return Problem.load(path)


def test_problem_weights_validated_and_fingerprinted(tmp_path: Path) -> None:
    plain = _problem(tmp_path, "", "plain")
    assert plain.weights is None and "weights" not in plain.fingerprint()
    p = _problem(tmp_path, "WEIGHTS = [3, 1]")
    assert p.weights == [3.0, 1.0]
    scaled = _problem(tmp_path, "WEIGHTS = [0.75, 0.25]", "scaled")
    other = _problem(tmp_path, "WEIGHTS = [1, 3]", "other")
    assert p.fingerprint()["weights"] == scaled.fingerprint()["weights"]  # only the shares count
    assert p.fingerprint()["weights"] != other.fingerprint()["weights"]
    for bad, what in [
        ("WEIGHTS = [1]", "2 numbers"),
        ("WEIGHTS = [1, 0]", "positive"),
        ("WEIGHTS = [1, float('nan')]", "positive"),
        ("WEIGHTS = [1, 'x']", "not a number"),
        ("WEIGHTS = 3", "2 numbers"),
        ("WEIGHTS = {8: 1}", "not every shape has an M"),
    ]:
        with pytest.raises(ProblemError, match=what):
            _problem(tmp_path, bad, "bad")


def test_problem_weights_by_m(tmp_path: Path) -> None:
    src = (
        "SHAPES = [{'M': 8, 'C': 16}, {'M': 2, 'C': 16}]\nHELDOUT_SHAPES = [{'M': 3, 'C': 16}]\n"
        "def make_inputs(shape, seed, device='cpu'):\n    return ()\ndef reference():\n    return 0\n"
    )
    path = tmp_path / "by_m.py"
    path.write_text(src + "WEIGHTS = {2: 0.1, 8: 0.9}\n")
    assert Problem.load(path).weights == [0.9, 0.1]  # aligned with SHAPES
    path.write_text(src + "WEIGHTS = {2: 0.1}\n")
    with pytest.raises(ProblemError, match="no weight for M=8"):
        Problem.load(path)
    path.write_text(src + "WEIGHTS = {2: 0.1, 8: 1, 64: 1}\n")
    with pytest.raises(ProblemError, match="M=64"):
        Problem.load(path)


QUICK = GateOptions(
    seeds=1,
    heldout_seeds=1,
    recheck_seeds=1,
    timing={"max_reps": 5, "min_reps": 3, "max_s": 0.5},
    sandbox=SandboxOptions(start_timeout_s=60, call_timeout_s=30, time_timeout_s=60),
)
HONEST = (ROOT / "tests" / "corpus" / "honest" / "torch_softmax.py").read_text()


def test_gate_latency_is_the_weighted_mean_of_shape_medians(tmp_path: Path) -> None:
    weighted = Judge(_problem(tmp_path, "WEIGHTS = [3, 1]"), "cpu", QUICK).check(HONEST)
    assert weighted.accepted, weighted.reason
    medians = [t.median_ms for t in weighted.timings]
    assert len(medians) == 2
    assert weighted.latency_ms == pytest.approx((3 * medians[0] + medians[1]) / 4, rel=1e-12)
    result = weighted.to_result()
    assert result.latency_ms == weighted.latency_ms and list(result.per_shape.values()) == medians
    plain = Judge(_problem(tmp_path, "", "plain"), "cpu", QUICK).check(HONEST)
    assert plain.accepted, plain.reason
    m = [t.median_ms for t in plain.timings]
    assert plain.latency_ms == pytest.approx(math.sqrt(m[0] * m[1]), rel=1e-12)  # geometric mean, as before


# --- the MoE problem tuned for a trace ------------------------------------------------------


def test_moe_problem_shapes_and_weights_from_a_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOKERNEL_MOE_MODEL", "tiny")
    monkeypatch.setenv("EVOKERNEL_MOE_DTYPE", "float32")
    monkeypatch.setenv("EVOKERNEL_MOE_M", "999")  # ignored with a trace
    monkeypatch.setenv("EVOKERNEL_MOE_TRACE", str(CHAT))
    p = Problem.load(MOE)
    ms = [s["M"] for s in p.shapes]
    shares = weights(Trace.load(CHAT).decode_batches(), SGLANG_GRID)
    heavy = sorted((m for m in SGLANG_GRID if shares[m] >= 0.01), key=lambda m: -shares[m])[:6]
    assert ms == sorted(heavy) and set(ms) <= set(SGLANG_GRID) and 999 not in ms
    assert ms == [1, 2, 4, 16, 24, 32]  # the recorded trace: 8 (6.7%) is the seventh heaviest bucket
    assert p.weights == [shares[m] for m in ms] and all(w >= 0.01 for w in p.weights)
    assert all(s["E"] == 4 and s["topk"] == 2 for s in p.shapes)
    assert not {s["M"] for s in p.heldout} & set(ms)
    assert "weights" in p.fingerprint()
    monkeypatch.delenv("EVOKERNEL_MOE_TRACE")
    untraced = Problem.load(MOE)
    assert [s["M"] for s in untraced.shapes] == [999] and untraced.weights is None
