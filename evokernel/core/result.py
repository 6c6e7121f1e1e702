"""What an evaluation returns: a status, and a latency only when the status is ok.

Failures are values: a configuration that does not compile, crashes, hangs or computes
the wrong answer is a `Result` with that status and an infinite fitness, never an
exception in the search.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import msgspec

__all__ = ["Status", "Result"]


class Status(str, enum.Enum):
    OK = "ok"
    INVALID = "invalid"  # not a point of the space (or not recorded in a landscape)
    COMPILE_ERROR = "compile_error"  # failed to build: out of shared memory, registers, syntax
    RUNTIME_ERROR = "runtime_error"  # built, then raised or faulted when launched
    INCORRECT = "incorrect"  # ran, wrong answer
    TIMEOUT = "timeout"
    CRASH = "crash"  # the worker process died


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """One measurement of one genome by one evaluator.

    `latency_ms` is the fitness (lower is better), set only when `status` is ok.
    `noise` is the measurement's relative spread (0.03 = 3%); the search uses it to decide
    whether a gain is real. `samples` are the raw timings behind `latency_ms`."""

    status: Status
    latency_ms: float | None = None
    noise: float = 0.0
    samples: tuple[float, ...] = ()
    per_shape: dict[str, float] = msgspec.field(default_factory=dict)
    error: str = ""
    cost: float = 0.0
    elapsed_s: float = 0.0
    meta: dict[str, Any] = msgspec.field(default_factory=dict)

    @classmethod
    def ok(cls, latency_ms: float, **kw: Any) -> Result:
        if not (isinstance(latency_ms, (int, float)) and math.isfinite(latency_ms) and latency_ms > 0):
            return cls(status=Status.RUNTIME_ERROR, error=f"evaluator returned latency {latency_ms!r}")
        return cls(status=Status.OK, latency_ms=float(latency_ms), **kw)

    @classmethod
    def failed(cls, status: Status, error: str, **kw: Any) -> Result:
        return cls(status=Status(status), error=error, **kw)

    @property
    def is_ok(self) -> bool:
        return self.status is Status.OK and self.latency_ms is not None

    @property
    def estimated(self) -> bool:
        """Whether `latency_ms` is an estimate rather than a measurement at the evaluator's
        full fidelity (a cascade's calibrated cheap figure for a genome it did not promote)."""
        info = self.meta.get("fidelity") if isinstance(self.meta, dict) else None
        return isinstance(info, dict) and bool(info.get("estimated"))

    @property
    def fitness(self) -> float:
        """Latency in ms, infinite for anything that did not run correctly."""
        return self.latency_ms if self.is_ok else math.inf  # type: ignore[return-value]

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def decode(cls, data: bytes | str) -> Result:
        return msgspec.json.decode(data, type=cls)
