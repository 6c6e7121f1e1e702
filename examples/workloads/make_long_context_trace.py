"""Write `long_context_poisson.jsonl`: a synthetic long-context request trace for the SGLang
serving comparison of issue 29 (decode attention over 4k-32k-token caches), when a team has
no trace of its own yet. It is not anyone's traffic: prompt lengths log-uniform from 4096 to
32768 tokens, outputs log-normal around 160 tokens (32-512), Poisson arrivals at 1 request
per second, a fixed seed; every request fits a 40960-token context. A real trace (JSONL or
CSV with input/output lengths and arrival times; see `evokernel.model.workload.Trace.load`)
replaces it.

    python examples/workloads/make_long_context_trace.py     # rewrites long_context_poisson.jsonl
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from evokernel.model.workload import Request, Trace


def long_context_trace(n: int = 120, rate: float = 1.0, seed: int = 0) -> Trace:
    rng = random.Random(seed)
    t, requests = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        prompt = round(math.exp(rng.uniform(math.log(4096), math.log(32768))))
        output = min(512, max(32, round(math.exp(rng.gauss(math.log(160), 0.6)))))
        requests.append(Request(prompt, output, round(t, 4)))
    return Trace(requests, name="long_context_poisson")


if __name__ == "__main__":
    out = Path(__file__).with_name("long_context_poisson.jsonl")
    long_context_trace().save(out)
    print(f"wrote {out}")
