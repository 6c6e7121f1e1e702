"""Serving-level A/B: launched SGLang servers driven by the user's request trace (extra `sglang`).

One server per variant (the baseline, with no package, and each package written by
`evokernel export sglang-plugin`, applied by evokernel's plugin inside the server's
processes), all started with the same arguments on their own ports and left idle while
another is driven. Each is warmed with a short run of the trace, then the trace is
replayed against one server at a time (`evokernel.integrations.sglang.replay`: open loop at
the trace's arrival times, exact prompt and output lengths, streamed from SGLang's native
`/generate`; SGLang 0.5.17's own benchmark cannot replay a trace file, see that module),
`rounds` times, the order rotated each round; every request's timing is kept in `log_dir`; with
`control`, a second shipped server replays too (the A/A). Reported per variant: TTFT, TPOT, end-to-end
latency (median and p99) and output throughput, medians over the rounds with their spread,
and their ratios to the baseline.

    cmp = ServingComparison(["--model-path", MODEL, "--load-format", "dummy", ...], Trace.load("trace.jsonl"))
    doc = cmp.compare({"evokernel": "pkg"})
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evokernel.evaluators.sglang import Variant

__all__ = ["ServingComparison", "METRICS", "parse_result", "summarise_rounds"]

BASELINE = "sglang_shipped"
CONTROL = "sglang_shipped_control"
#: What is kept of each serving-benchmark run (lower is better except throughput).
METRICS = (
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "output_throughput",
    "completed",
)


def parse_result(path: str | os.PathLike[str]) -> dict[str, float]:
    """The metrics of the last run in a serving-benchmark output file (one JSON per line)."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path}: the serving benchmark wrote no result")
    data = json.loads(lines[-1])
    missing = [k for k in METRICS if k not in data]
    if missing:
        raise ValueError(f"{path}: no {missing} in the serving benchmark's result")
    return {k: float(data[k]) for k in METRICS}


def summarise_rounds(runs: Mapping[str, Sequence[Mapping[str, float]]]) -> dict[str, Any]:
    """Per variant, each metric's median over the rounds (with min and max), and its ratio to
    the baseline's oriented so that > 1 means better (faster, or more throughput)."""
    out: dict[str, Any] = {"variants": {}, "vs_baseline": {}}
    for name, rounds in runs.items():
        out["variants"][name] = {
            k: {
                "median": statistics.median(r[k] for r in rounds),
                "min": min(r[k] for r in rounds),
                "max": max(r[k] for r in rounds),
            }
            for k in METRICS
            if rounds
        }
    base = out["variants"].get(BASELINE)
    for name, stats in out["variants"].items():
        if name == BASELINE or not base:
            continue
        ratios = {}
        for k in METRICS:
            if k == "completed" or not stats.get(k) or not base.get(k) or not stats[k]["median"]:
                continue
            a, b = stats[k]["median"], base[k]["median"]
            ratios[k] = a / b if k == "output_throughput" else b / a
        out["vs_baseline"][name] = ratios
    return out


class _Server:
    def __init__(self, name: str, argv: list[str], port: int, env: dict[str, str], log: Path) -> None:
        self.name, self.port = name, port
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang.launch_server", *argv, "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(log.parent),
        )

    def ready(self, timeout_s: float) -> str | None:
        """None once the server answers /health, else why not."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"the server exited ({self.proc.returncode}); see {self.log.name}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return None
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(2)
        return f"not healthy after {timeout_s:.0f} s"

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self.log.close()


class ServingComparison:
    """See the module's doc. `server_argv` must name --model-path (and --tokenizer-path if
    the model folder has none); each server gets --mem-fraction-static `mem` of its own."""

    def __init__(
        self,
        server_argv: Sequence[str],
        trace: Any,
        *,
        rounds: int = 2,
        num_prompts: int | None = None,
        warm_prompts: int = 16,
        mem: float = 0.25,
        port: int = 31000,
        log_dir: str | os.PathLike[str] = "serving",
        load_timeout_s: float = 600.0,
        run_timeout_s: float = 600.0,
        vocab: int = 10000,
        control: bool = False,
    ) -> None:
        self.server_argv, self.trace, self.rounds = list(server_argv), trace, rounds
        #: a second shipped server (CONTROL) beside the baseline: what two servers running the
        #: same kernels read apart (the A/A); servers differ by their processes' host time
        self.control = control
        self.num_prompts = num_prompts or len(trace.requests)
        self.warm_prompts, self.mem, self.port = warm_prompts, mem, port
        self.log_dir = Path(log_dir)
        self.load_timeout_s, self.run_timeout_s = load_timeout_s, run_timeout_s
        #: prompts are random token ids below this (and above 100), distinct per request
        self.vocab = vocab

    def _model(self) -> str:
        argv = self.server_argv
        return argv[argv.index("--model-path") + 1] if "--model-path" in argv else ""

    def _bench(self, server: _Server, requests: Sequence[Any], out: Path) -> dict[str, float] | str:
        """One replay of `requests` against `server` (`evokernel.integrations.sglang.replay`):
        its metrics, or why there are none; every request's timing is written to `out`. A
        replay in which any request failed (an error, a timeout) is not a result: its metrics
        would cover the requests that finished, the fast ones, and flatter the server."""
        from evokernel.integrations.sglang.replay import replay, summarise

        timings = replay("127.0.0.1", server.port, requests, timeout_s=self.run_timeout_s, vocab=self.vocab)
        out.write_text("".join(json.dumps(vars(t)) + "\n" for t in timings))
        if server.proc.poll() is not None:
            return f"the server exited ({server.proc.returncode}) during the replay; see {server.log.name}"
        try:
            got = summarise(timings)
        except ValueError as exc:
            return f"{exc}; see {out.name}"
        if got["failed"]:
            errors = sorted({t.error or "" for t in timings if not t.ok})
            return f"{got['failed']:.0f} of {len(timings)} requests failed ({errors[:3]}); see {out.name}"
        return got

    def compare(
        self,
        packages: Mapping[str, str | os.PathLike[str] | Variant | None],
        *,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """The baseline and every variant of `packages` (name -> a package folder, or a
        `Variant`: a package and/or server arguments of its own, e.g. SGLang at its best
        value of a flag), replayed in rotated rounds; `progress` gets the comparison so far
        after every replay (to save it: a caller's deadline)."""
        from evokernel.evaluators.sglang import Variant, plugin_free_env
        from evokernel.integrations.sglang.plugin import PACKAGE_ENV

        self.log_dir.mkdir(parents=True, exist_ok=True)
        requests = sorted(self.trace.requests, key=lambda r: r.arrival_s)[: self.num_prompts]
        written = len(requests)
        variants: dict[str, Variant] = {
            BASELINE: Variant(),
            **({CONTROL: Variant()} if self.control else {}),
            **{
                k: v if isinstance(v, Variant) else Variant(package=v)
                for k, v in packages.items()
                if k not in (BASELINE, CONTROL)
            },
        }
        base_env = plugin_free_env()  # (a served engine never runs the shadow checks)
        argv = [*self.server_argv, "--mem-fraction-static", str(self.mem)]
        servers: dict[str, _Server] = {}
        errors: dict[str, str] = {}
        runs: dict[str, list[dict[str, float]]] = {}
        try:
            # one server starts at a time (SGLang sizes its KV cache from the memory free when it
            # starts: servers starting together would each count the others' memory as theirs)
            for i, (name, variant) in enumerate(variants.items()):
                pkg = variant.package
                env = dict(base_env, **({PACKAGE_ENV: str(Path(pkg).resolve())} if pkg else {}))
                server = servers[name] = _Server(
                    name, [*argv, *variant.args], self.port + 10 * i, env, self.log_dir / f"server_{name}.log"
                )
                why = server.ready(self.load_timeout_s)
                if why is None:
                    got = self._bench(server, requests[: self.warm_prompts], self.log_dir / f"warm_{name}.jsonl")
                    why = got if isinstance(got, str) else None
                if why is not None:
                    errors[name] = why
                    server.stop()
                    del servers[name]
            names = list(servers)
            for r in range(self.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)] if names else []:
                    got = self._bench(servers[name], requests, self.log_dir / f"run_{name}_{r}.jsonl")
                    if isinstance(got, str):
                        errors.setdefault(name, got)
                    else:
                        runs.setdefault(name, []).append(got)
                    if progress is not None:
                        progress(self._result(written, argv, variants, runs, errors))
        finally:
            for server in servers.values():
                server.stop()
        return self._result(written, argv, variants, runs, errors)

    def _result(
        self,
        written: int,
        argv: list[str],
        variants: Mapping[str, Variant],
        runs: Mapping[str, list[dict[str, float]]],
        errors: Mapping[str, str],
    ) -> dict[str, Any]:
        return {
            "trace": {"name": getattr(self.trace, "name", ""), "requests": written},
            "rounds": self.rounds,
            "server": argv,
            # each engine's package and flags ("variants" below: their figures, from summarise_rounds)
            "engines": {
                k: {"package": str(v.package) if v.package else None, "args": list(v.args)} for k, v in variants.items()
            },
            "runs": runs,
            "errors": errors,
            **self._summary(runs, errors),
        }

    @staticmethod
    def _summary(runs: Mapping[str, list[dict[str, float]]], errors: Mapping[str, str]) -> dict[str, Any]:
        """`summarise_rounds`, with no ratio for a server that failed a replay (or against a
        baseline that did): its other rounds stand in `variants`, the failure in `errors`."""
        out = summarise_rounds(runs)
        out["vs_baseline"] = {k: v for k, v in out["vs_baseline"].items() if k not in errors and BASELINE not in errors}
        return out
