"""Workload: the user's traffic as a trace of requests (input and output lengths, arrival
times), and what a kernel sees of it: the decode batch sizes a server runs, how often each,
and the prompt lengths its prefills take.

A problem tunes on a few shapes; a trace says how much each shape matters. `decode_batches`
replays the trace through a simple continuous-batching scheduler and counts decode steps per
batch size; `weights` maps that histogram onto the tuned shapes the way SGLang picks a
config (the nearest batch size), so per-shape fitness can be weighted by the traffic.

>>> trace = Trace([Request(100, 1), Request(100, 2), Request(100, 3)], name="tiny")
>>> trace.decode_batches(max_running=2)
{1: 1, 2: 1}
>>> weights({1: 30, 3: 10, 7: 60}, [1, 4, 8])
{1: 0.3, 4: 0.1, 8: 0.6}
"""

from __future__ import annotations

import csv
import heapq
import io
import json
import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from evokernel.core.errors import ConfigError

__all__ = ["Request", "Trace", "weights", "nearest", "DEFAULT_STEP_S"]

#: Seconds one scheduler step (a prefill or a decode step) takes in the simulation; only
#: matters for traces with arrival times (how many steps pass between two arrivals).
DEFAULT_STEP_S = 0.02

#: Field names accepted for each Request field, compared case-insensitively (first match wins).
_FIELDS: dict[str, tuple[str, ...]] = {
    "input_len": (
        "input_len",
        "prompt_len",
        "input_tokens",
        "prompt_tokens",
        "input_length",
        "prompt_length",
        "context_tokens",
        "contexttokens",
        "num_input_tokens",
    ),
    "output_len": (
        "output_len",
        "output_tokens",
        "completion_len",
        "completion_tokens",
        "output_length",
        "generated_tokens",
        "generatedtokens",
        "num_output_tokens",
    ),
    "arrival_s": ("arrival_s", "timestamp", "arrival", "arrival_time", "time_s"),
}


class Request(msgspec.Struct, frozen=True):
    """One request: prompt tokens in, tokens generated, arrival (seconds, any origin)."""

    input_len: int
    output_len: int
    arrival_s: float = 0.0


class Trace(msgspec.Struct, frozen=True):
    """The requests a server saw, in any order (the simulation sorts them by arrival)."""

    requests: list[Request]
    name: str = ""

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        """A trace from JSONL (one object per line) or CSV with a header row.

        Fields: `input_len` (or prompt_len, input_tokens, ...), `output_len` (or output_tokens,
        completion_len, ...), optional `arrival_s` or `timestamp` (seconds, or an ISO date-time).
        The format is read from the suffix (.csv; .jsonl, .ndjson, .json), else from the first
        character. Malformed input raises ConfigError naming the file and line."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"no such trace file: {path}")
        text = path.read_text()
        suffix = path.suffix.lower()
        jsonl = suffix in (".jsonl", ".ndjson", ".json") or (suffix != ".csv" and text.lstrip().startswith("{"))
        rows = _jsonl_rows(text, path) if jsonl else _csv_rows(text, path)
        requests = [_request(row, f"{path}:{line}") for line, row in rows]
        if not requests:
            raise ConfigError(f"{path}: the trace holds no requests")
        return cls(requests, name=path.stem)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the trace as JSONL (CSV where the path ends in .csv)."""
        path = Path(path)
        if path.suffix.lower() == ".csv":
            out = io.StringIO()
            w = csv.writer(out, lineterminator="\n")
            w.writerow(["input_len", "output_len", "arrival_s"])
            w.writerows([r.input_len, r.output_len, r.arrival_s] for r in self.requests)
            path.write_text(out.getvalue())
        else:
            path.write_text("".join(msgspec.json.encode(r).decode() + "\n" for r in self.requests))

    def to_mooncake(
        self, path: str | os.PathLike[str], *, tokens_per_block: int = 130, limit: int | None = None
    ) -> int:
        """Write the trace for SGLang's serving benchmark to replay with its arrival times
        (`--dataset-name mooncake --dataset-path PATH`): one object per request with
        `timestamp` (ms from the first arrival), `hash_ids` (the prompt, as blocks the
        benchmark expands to ~`tokens_per_block` tokens each: lengths are kept to a block)
        and `output_length`. Distinct requests get distinct blocks (no shared prefixes).
        Returns the number of requests written."""
        reqs = sorted(self.requests, key=lambda r: r.arrival_s)[:limit]
        t0 = reqs[0].arrival_s if reqs else 0.0
        lines, block = [], 0
        for r in reqs:
            n = max(1, round(r.input_len / tokens_per_block))
            lines.append(
                json.dumps(
                    {
                        "timestamp": int(round((r.arrival_s - t0) * 1000)),
                        "hash_ids": list(range(block, block + n)),
                        "output_length": r.output_len,
                    }
                )
            )
            block += n
        Path(path).write_text("".join(line + "\n" for line in lines))
        return len(lines)

    # -- what kernels see ------------------------------------------------------------------
    def decode_batches(
        self, max_running: int = 256, max_tokens: int | None = None, *, step_s: float = DEFAULT_STEP_S
    ) -> dict[int, int]:
        """{decode batch size: decode steps at that size}, from a continuous-batching replay.

        The scheduler (deterministic, SGLang's default shape, simplified): requests queue in
        arrival order (all at once where the trace has no arrival times). Whenever queued
        requests have arrived and the head fits, a prefill step admits them in order, while
        fewer than `max_running` run and (with `max_tokens`, the KV cache's size in tokens)
        their input_len + output_len fit beside the running ones' (reserved on admission, no
        preemption). The prefill emits each admitted request's first token; running requests
        wait during it (no mixed batches). Otherwise a decode step: every running request emits
        one token, and a request leaves once it has all output_len tokens. Each step takes
        `step_s` seconds of the trace's clock; an idle server jumps to the next arrival.

        >>> Trace([Request(10, 1), Request(10, 2), Request(10, 3)]).decode_batches(max_running=1)
        {1: 3}
        """
        if max_running < 1:
            raise ConfigError(f"max_running must be at least 1, got {max_running}")
        if max_tokens is not None and max_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {max_tokens}")
        if not step_s > 0:
            raise ConfigError(f"step_s must be positive, got {step_s}")
        order = sorted(range(len(self.requests)), key=lambda j: (self.requests[j].arrival_s, j))
        if max_tokens is not None:
            for j in order:
                r = self.requests[j]
                if r.input_len + r.output_len > max_tokens:
                    raise ConfigError(
                        f"request {j} needs {r.input_len + r.output_len} tokens of KV cache, "
                        f"more than max_tokens={max_tokens}"
                    )
        t0 = self.requests[order[0]].arrival_s if order else 0.0
        arrive = [(self.requests[j].arrival_s - t0) / step_s for j in order]  # in steps
        need = [self.requests[j].input_len + self.requests[j].output_len for j in order]
        hist: dict[int, int] = {}
        running: list[tuple[int, int]] = []  # (decode step count at which it leaves, queue index)
        used = 0  # KV tokens reserved by the running requests
        clock = 0  # steps taken
        done = 0  # decode steps taken: a request admitted at d0 needing r more tokens leaves at d0 + r
        i = 0  # the head of the queue
        n = len(order)

        def fits(k: int, gone: int = 0, held: int = 0) -> bool:
            return len(running) + gone < max_running and (max_tokens is None or used + held + need[k] <= max_tokens)

        while i < n or running:
            # a prefill step; `gone`, `held`: requests it admits that finish in it (output_len 1),
            # and their KV tokens (held during this step only)
            first, gone, held = i, 0, 0
            while i < n and arrive[i] <= clock and fits(i, gone, held):
                left = self.requests[order[i]].output_len - 1  # the prefill emits the first token
                if left > 0:
                    heapq.heappush(running, (done + left, i))
                    used += need[i]
                else:
                    gone, held = gone + 1, held + need[i]
                i += 1
            if i > first:
                clock += 1
                continue
            if not running:  # idle until the next arrival
                clock = max(clock, math.ceil(arrive[i]))
                continue
            # decode steps at this batch size until a request leaves or the head could be admitted
            k = running[0][0] - done
            if i < n and fits(i):
                k = min(k, max(1, math.ceil(arrive[i] - clock)))
            hist[len(running)] = hist.get(len(running), 0) + k
            done += k
            clock += k
            while running and running[0][0] <= done:
                used -= need[heapq.heappop(running)[1]]
        return dict(sorted(hist.items()))

    def prefill_tokens(self, buckets: Sequence[int] | None = None) -> dict[int, int]:
        """{bucket: prompts in it}: each prompt length goes to the smallest bucket that holds it
        (the largest bucket for longer ones); default buckets: powers of two.

        >>> Trace([Request(3, 1), Request(300, 1), Request(512, 1)]).prefill_tokens()
        {4: 1, 512: 2}
        """
        keys = sorted(set(buckets)) if buckets is not None else None
        if keys is not None and not keys:
            raise ConfigError("prefill_tokens: buckets must not be empty")
        hist: dict[int, int] = {}
        for r in self.requests:
            if keys is None:
                b = 1 << max(0, r.input_len - 1).bit_length()
            else:
                b = next((k for k in keys if k >= r.input_len), keys[-1])
            hist[b] = hist.get(b, 0) + 1
        return dict(sorted(hist.items()))

    def summary(self, top: int = 8, **decode: Any) -> str:
        """A few lines for people: sizes, length statistics, the commonest decode batch sizes
        (`decode` goes to decode_batches)."""
        if not self.requests:
            return f"trace {self.name or '(unnamed)'}: no requests"
        ins = sorted(r.input_len for r in self.requests)
        outs = sorted(r.output_len for r in self.requests)
        span = max(r.arrival_s for r in self.requests) - min(r.arrival_s for r in self.requests)
        hist = self.decode_batches(**decode)
        steps = sum(hist.values())
        lines = [
            f"trace {self.name or '(unnamed)'}: {len(self.requests)} requests over {span:.1f} s, "
            f"{sum(ins)} input and {sum(outs)} output tokens"
        ]
        for label, xs in (("input", ins), ("output", outs)):
            lines.append(
                f"  {label} length: mean {statistics.fmean(xs):.0f}, p50 {_pct(xs, 50)}, "
                f"p90 {_pct(xs, 90)}, p99 {_pct(xs, 99)}, max {xs[-1]}"
            )
        heavy = sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        shares = ", ".join(f"{b}: {c / steps:.1%}" for b, c in heavy) if steps else "none"
        lines.append(f"  decode steps: {steps}; commonest batch sizes: {shares}")
        return "\n".join(lines)


# -- mapping a histogram onto tuned shapes ----------------------------------------------------
def nearest(value: float, keys: Iterable[int]) -> int:
    """The key nearest `value` (SGLang's config lookup), ties to the smaller.

    >>> nearest(6, [4, 8]), nearest(7, [4, 8]), nearest(5000, [1, 4096])
    (4, 8, 4096)
    """
    ks = list(keys)
    if not ks:
        raise ConfigError("nearest: no keys")
    return min(ks, key=lambda k: (abs(k - value), k))


def weights(histogram: Mapping[int, float], keys: Iterable[int]) -> dict[int, float]:
    """{key: share}: each observed size's count goes to the nearest key (ties to the smaller),
    normalised to sum 1; every key appears, in the given order (0.0 where none went).

    >>> weights({2: 1, 3: 1, 6: 2}, [2, 4, 8])
    {2: 0.5, 4: 0.5, 8: 0.0}
    """
    ks = list(dict.fromkeys(keys))
    if not ks:
        raise ConfigError("weights: no keys to weight")
    total = sum(float(c) for c in histogram.values())
    if any(c < 0 for c in histogram.values()) or not total > 0:
        raise ConfigError(
            f"weights: the histogram must have non-negative counts and some positive, got {dict(histogram)}"
        )
    share = dict.fromkeys(ks, 0.0)
    for size, count in histogram.items():
        share[nearest(size, ks)] += float(count)
    return {k: v / total for k, v in share.items()}


# -- parsing -------------------------------------------------------------------------------
def _jsonl_rows(text: str, path: Path) -> list[tuple[int, Mapping[str, Any]]]:
    rows = []
    for line, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{line}: not JSON ({exc.msg}): {raw[:80]!r}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}:{line}: expected a JSON object per line, got {type(obj).__name__}")
        rows.append((line, obj))
    return rows


def _csv_rows(text: str, path: Path) -> list[tuple[int, Mapping[str, Any]]]:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    rows = []
    for row in reader:
        line = reader.line_num
        if not row or not any(c.strip() for c in row):
            continue
        if header is None:
            header = [c.strip() for c in row]
            continue
        if len(row) != len(header):
            raise ConfigError(f"{path}:{line}: {len(row)} fields where the header has {len(header)}")
        rows.append((line, dict(zip(header, (c.strip() for c in row)))))
    return rows


def _field(row: Mapping[str, Any], name: str) -> Any:
    low = {str(k).lower(): v for k, v in row.items()}
    for alias in _FIELDS[name]:
        if alias in low and low[alias] not in (None, ""):
            return low[alias]
    return None


def _request(row: Mapping[str, Any], where: str) -> Request:
    values: dict[str, Any] = {}
    for name in ("input_len", "output_len"):
        raw = _field(row, name)
        if raw is None:
            raise ConfigError(f"{where}: no {name} (or {', '.join(_FIELDS[name][1:4])}) in {dict(row)}")
        try:
            as_float = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: {name} is not a number: {raw!r}") from None
        if not as_float.is_integer():
            raise ConfigError(f"{where}: {name} must be a whole number of tokens, got {raw!r}")
        values[name] = int(as_float)
    if values["input_len"] < 1 or values["output_len"] < 1:
        raise ConfigError(
            f"{where}: input_len and output_len must be at least 1, got "
            f"{values['input_len']} and {values['output_len']}"
        )
    raw = _field(row, "arrival_s")
    if raw is not None:
        try:
            values["arrival_s"] = float(raw)
        except (TypeError, ValueError):
            try:
                values["arrival_s"] = datetime.fromisoformat(str(raw)).timestamp()
            except ValueError:
                raise ConfigError(f"{where}: arrival is neither seconds nor an ISO date-time: {raw!r}") from None
        if not math.isfinite(values["arrival_s"]):
            raise ConfigError(f"{where}: arrival must be finite, got {raw!r}")
    return Request(**values)


def _pct(xs: Sequence[int], p: float) -> int:
    """The p-th percentile of sorted values (nearest rank)."""
    return xs[min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))]
