"""Write `chat_poisson.jsonl`: a synthetic chat-like request trace for the SGLang end-to-end
demonstration (issue 8) when a team has no trace of its own yet. It is not anyone's traffic:
prompt lengths log-normal around 400 tokens (64-2048), outputs log-normal around 96 tokens
(8-512), Poisson arrivals at 8 requests per second, a fixed seed. A real trace (JSONL or
CSV with input/output lengths and arrival times; see `evokernel.model.workload.Trace.load`)
replaces it.

    python examples/workloads/make_chat_trace.py        # rewrites chat_poisson.jsonl
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from evokernel.model.workload import Request, Trace


def chat_trace(n: int = 200, rate: float = 8.0, seed: int = 0) -> Trace:
    rng = random.Random(seed)
    t, requests = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        prompt = min(2048, max(64, round(math.exp(rng.gauss(math.log(400), 0.6)))))
        output = min(512, max(8, round(math.exp(rng.gauss(math.log(96), 0.7)))))
        requests.append(Request(prompt, output, round(t, 4)))
    return Trace(requests, name="chat_poisson")


if __name__ == "__main__":
    out = Path(__file__).with_name("chat_poisson.jsonl")
    chat_trace().save(out)
    print(f"wrote {out}")
