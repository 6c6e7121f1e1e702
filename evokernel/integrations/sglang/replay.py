"""Open-loop replay of a request trace against a running SGLang server (its native
`/generate` endpoint, streamed), with the serving metrics taken per request.

Each request of the trace is sent at its own arrival time (relative to the first request's),
whether or not earlier ones have finished, as token ids of exactly its input length (random
ids, a different sequence per request, so the server's prefix cache finds nothing to share)
with `max_new_tokens` = its output length and `ignore_eos`, so every request decodes exactly
the tokens the trace says. Time to first token is the time to the first streamed chunk that
carries a completion token; time per output token is the rest of the request's latency over
its remaining tokens; output throughput is every output token over the time from the first
send to the last completion.

This is what `python -m sglang.benchmark.serving --dataset-name mooncake
--use-trace-timestamps` means to do; its 0.5.17 release cannot replay a mooncake file (its
benchmark reads `.prompt` of the dict rows that dataset yields and stops), and its mooncake
rows expand prompts from hash blocks, where this sends exact lengths. Standard library only:
one thread per request in flight (a trace's concurrency, tens), `http.client` for the stream.

    got = replay("127.0.0.1", 30000, trace.requests[:40], timeout_s=300)
    metrics = summarise(got)    # median/p99 TTFT, TPOT, end-to-end latency, throughput, completed
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["RequestTiming", "replay", "summarise"]


@dataclass
class RequestTiming:
    """One request as the client saw it (seconds; `sent_s` from the replay's start)."""

    input_len: int
    output_len: int
    arrival_s: float
    sent_s: float = 0.0
    ttft_s: float | None = None
    latency_s: float | None = None
    tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttft_s is not None and self.latency_s is not None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (None with fewer than two tokens)."""
        if not self.ok or self.tokens < 2:
            return None
        assert self.latency_s is not None and self.ttft_s is not None
        return (self.latency_s - self.ttft_s) / (self.tokens - 1)


def _one(host: str, port: int, ids: list[int], timing: RequestTiming, timeout_s: float, t0: float) -> None:
    body = json.dumps(
        {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": timing.output_len, "ignore_eos": True, "temperature": 0.0},
            "stream": True,
        }
    )
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    start = time.perf_counter()
    timing.sent_s = start - t0
    try:
        conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            timing.error = f"HTTP {resp.status}: {resp.read(500).decode(errors='replace')}"
            return
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            got = json.loads(data)
            if "error" in got:
                timing.error = str(got["error"])[:500]
                return
            n = int((got.get("meta_info") or {}).get("completion_tokens") or 0)
            if n > timing.tokens:
                if timing.ttft_s is None:
                    timing.ttft_s = time.perf_counter() - start
                timing.tokens = n
        timing.latency_s = time.perf_counter() - start
        if timing.ttft_s is None:
            timing.error = "the stream ended without a token"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        timing.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def replay(
    host: str,
    port: int,
    requests: Sequence[Any],
    *,
    timeout_s: float = 600.0,
    vocab: int = 10000,
    seed: int = 0,
    time_scale: float = 1.0,
) -> list[RequestTiming]:
    """Send `requests` (each with `input_len`, `output_len`, `arrival_s`: a
    `evokernel.model.workload.Request`) at their arrival times (relative to the earliest,
    stretched by `time_scale`) and wait for them all, at most `timeout_s` for the whole
    replay; a request still running then is reported with an error. Returns them in
    arrival order."""
    reqs = sorted(requests, key=lambda r: r.arrival_s)
    if not reqs:
        return []
    first = reqs[0].arrival_s
    timings = [RequestTiming(int(r.input_len), int(r.output_len), float(r.arrival_s - first)) for r in reqs]
    rng = random.Random(seed)
    threads: list[tuple[RequestTiming, threading.Thread]] = []
    t0 = time.perf_counter()
    deadline = t0 + timeout_s
    for timing in timings:
        ids = [rng.randrange(100, vocab) for _ in range(timing.input_len)]
        wait = t0 + timing.arrival_s * time_scale - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if time.perf_counter() > deadline:
            timing.error = f"not sent: the replay's {timeout_s:.0f} s ran out"
            continue
        left = max(1.0, deadline - time.perf_counter())
        th = threading.Thread(target=_one, args=(host, port, ids, timing, left, t0), daemon=True)
        th.start()
        threads.append((timing, th))
    for _, th in threads:
        th.join(max(0.0, deadline - time.perf_counter()))
    for timing, th in threads:
        if th.is_alive() and timing.error is None:
            timing.error = f"still running after the replay's {timeout_s:.0f} s"
    return timings


def summarise(timings: Sequence[RequestTiming]) -> dict[str, float]:
    """The serving metrics of one replay (milliseconds; throughput in tokens/s), over the
    requests that completed: `completed` counts them, `failed` the others."""
    done = [t for t in timings if t.ok]
    if not done:
        errors = sorted({t.error or "" for t in timings})
        raise ValueError(f"no request completed ({len(timings)} sent): {errors[:3]}")
    ttft = np.array([t.ttft_s for t in done], dtype=float) * 1e3
    e2e = np.array([t.latency_s for t in done], dtype=float) * 1e3
    tpots = [t.tpot_s for t in done if t.tpot_s is not None]
    tpot = np.array(tpots, dtype=float) * 1e3 if tpots else np.array([float("nan")])
    span = max(t.sent_s + (t.latency_s or 0.0) for t in done) - min(t.sent_s for t in done)
    return {
        "median_ttft_ms": float(np.median(ttft)),
        "p99_ttft_ms": float(np.percentile(ttft, 99)),
        "median_tpot_ms": float(np.median(tpot)),
        "p99_tpot_ms": float(np.percentile(tpot, 99)),
        "median_e2e_latency_ms": float(np.median(e2e)),
        "p99_e2e_latency_ms": float(np.percentile(e2e, 99)),
        "output_throughput": sum(t.tokens for t in done) / span if span > 0 else float("nan"),
        "completed": float(len(done)),
        "failed": float(len(timings) - len(done)),
    }
