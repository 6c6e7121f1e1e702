"""End-to-end fitness: a real SGLang engine with a candidate package applied, timed against
the unpatched engine in the same call (extra `sglang`).

Every variant (the baseline, with no package, and each candidate package written by
`evokernel export sglang-plugin`) is one engine in its own process
(`python -m evokernel.integrations.sglang.driver`), loaded one after another (SGLang sizes its KV cache
from the memory free when it starts), then kept side by side on the GPU with the same
server arguments (`--load-format dummy` initialises the same weights in each: SGLang seeds
its dummy loader). Each engine warms every (batch size, input length) of the plan before
anything is timed. Then the plan is run `repeats` times, variant after variant for each
point, the order rotated each round, so baseline and candidates see the same GPU state;
each timed run follows untimed runs of the same batch for `prerun_s` seconds (the GPU's
clocks come up after the other engines' turns; each sample records the SM clock before and
after), and each engine runs on its own share of the CPUs (`pin_cpus`), the shares moved one
engine along every round (`rotated`: one set of cores' host speed is no engine's); the figures are
medians with their spread (min, max). A round's figure for a point is the fastest of
`best_of` consecutive runs: an engine's step time falls in one of two host states per run
(measured on the H200: 0.79-0.86 or 0.98-1.18 ms at batch 1, the GPU clock at 1980 MHz in
both; BENCHMARKS.md, issue 8),
the same for every variant. With `control` (the default) a second shipped engine
runs as an A/A control: its paired ratios to the baseline are what noise alone reads, and a
variant is called faster or slower only beyond them. Numerics: each candidate's first-step
logits and greedy tokens on fixed prompts are compared with the baseline's; a candidate
whose logits differ beyond tolerance, or that produces non-finite values, fails.

    ev = SGLangEvaluator(["--model-path", MODEL, "--load-format", "dummy", ...],
                         batch_sizes=(1, 16, 64, 256), prefill_lens=(512, 2048))
    report = ev.compare({"evokernel": Path("pkg")})      # an ABReport
    report.to_json()["geomean"]["sglang_shipped"]        # decode throughput ratio

`SGLangEvaluator.evaluate(genomes)` makes it an `Evaluator` for the last stage of a
promotion cascade: `package(genome)` writes a genome's package, and its result's latency
is the workload-weighted median decode latency.
"""

# One module on purpose, though over 400 lines: one evaluator drives SGLang engines in their own processes (pinning,
# A/B rounds, numerics) and reports the A/B; the engine handle, the verdict and the report read the same per-round
# records.

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.core.errors import EvaluatorError
from evokernel.core.readable import readable
from evokernel.core.genome import Genome
from evokernel.core.result import Result, Status
from evokernel.integrations.sglang.plugin import CHECK_ENV, PACKAGE_ENV

__all__ = [
    "SGLangEvaluator",
    "ABReport",
    "ab_markdown",
    "compare_numerics",
    "summarise",
    "profile_engine",
    "BASELINE",
    "CONTROL",
    "Variant",
    "DECODE_ATTENTION_KERNELS",
    "DECODE_ATTENTION_STAGES",
]

BASELINE = "sglang_shipped"
#: Triton kernels of a decode step that are its attention, by stage (names as the profiler
#: reports them): 1 reads the KV cache, one program per split (SGLang 0.5.17's grouped stage 1
#: for GQA and stage 1 for MHA; evokernel's `template_decode` split kernel), 2 combines the
#: splits (SGLang's stage-2 reduction; evokernel's reduce kernel)
DECODE_ATTENTION_STAGES = {
    1: ("_fwd_grouped_kernel_stage1", "_fwd_kernel_stage1", "_split_kernel"),
    2: ("_fwd_kernel_stage2", "_reduce_kernel"),
}
#: all of them
DECODE_ATTENTION_KERNELS = DECODE_ATTENTION_STAGES[1] + DECODE_ATTENTION_STAGES[2]
#: a second, identical shipped engine: the A/A control whose ratios to the baseline show what
#: the measurement's noise alone reads as a gain or a loss
CONTROL = "sglang_shipped_control"


def plugin_free_env() -> dict[str, str]:
    """This process's environment without the evokernel plugin's settings (the package, its
    shadow check, the MoE config folder the plugin points SGLang at): what an engine of a
    comparison starts from, its own package added where it has one."""
    return {k: v for k, v in os.environ.items() if k not in (PACKAGE_ENV, CHECK_ENV, "SGLANG_MOE_CONFIG_DIR")}


@dataclass(frozen=True)
class Variant:
    """One engine of a comparison: the package it applies (None: SGLang as installed) and
    server arguments appended to the evaluator's (later flags win in SGLang's parser), e.g. a
    value of `--triton-attention-num-kv-splits` to sweep against."""

    package: str | os.PathLike[str] | None = None
    args: tuple[str, ...] = ()


def summarise(samples: Sequence[float]) -> dict[str, float]:
    """Median and spread of repeated measurements."""
    xs = sorted(float(x) for x in samples)
    return {
        "median": statistics.median(xs),
        "min": xs[0],
        "max": xs[-1],
        "n": len(xs),
        "spread_pct": 100 * (xs[-1] - xs[0]) / statistics.median(xs) if xs[0] > 0 else 0.0,
    }


def another_round(done: int, rounds_s: float, elapsed_s: float, deadline_s: float | None) -> bool:
    """Whether a comparison starts round `done + 1` (0-based `done`): always the first; after
    that, only if it would end by `deadline_s` (seconds since the comparison started, loading
    included), a round taking as long as the mean of those run so far plus a fifth.

    >>> another_round(0, 0.0, 500.0, 100.0), another_round(2, 100.0, 300.0, 365.0), another_round(2, 100.0, 300.0, 355.0)
    (True, True, False)
    """
    if done == 0 or deadline_s is None:
        return True
    return elapsed_s + 1.2 * rounds_s / done <= deadline_s


def compare_numerics(
    base: Mapping[str, Any], cand: Mapping[str, Any], *, rtol: float = 0.05, atol: float = 1e-3
) -> dict[str, Any]:
    """A candidate's logits and greedy tokens against the baseline's: `ok` if its first-step
    logits (the prefill's) are finite and within atol + rtol * max|baseline| everywhere
    sampled, and, where the probe recorded the last decode step's logits and the greedy tokens
    agree up to it (the same context on both sides), so are those (the decode kernels')."""
    a, b = base["logits_sample"], cand["logits_sample"]
    if len(a) != len(b):
        return {"ok": False, "reason": f"logits sample sizes differ ({len(a)} vs {len(b)})"}
    diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0)
    bound = atol + rtol * float(base["logits_absmax"])
    steps = list(zip(base["tokens"], cand["tokens"]))
    same = sum(x == y for sa, sb in steps for x, y in zip(sa, sb))
    total = sum(len(sa) for sa, _ in steps) or 1
    first_diverge = next((i for i, (sa, sb) in enumerate(steps) if sa != sb), None)
    ok = bool(cand.get("finite", True)) and diff <= bound
    reason = (
        ""
        if ok
        else ("non-finite logits" if not cand.get("finite", True) else f"logits differ by {diff:.3g} > {bound:.3g}")
    )
    out: dict[str, Any] = {
        "ok": ok,
        "reason": reason,
        "max_logit_diff": diff,
        "bound": bound,
        "token_agreement": same / total,
        "first_divergent_step": first_diverge,
    }
    da, db = base.get("decode_logits_sample"), cand.get("decode_logits_sample")
    if da is not None and db is not None:
        out["context"] = base.get("context")
        if not cand.get("decode_finite", True):
            out.update(ok=False, reason="non-finite decode logits")
        elif first_diverge is not None and first_diverge < len(steps) - 1:
            # an earlier token differs: the last steps saw different contexts (reported, not judged)
            out["decode_logits"] = f"not compared: tokens diverge at step {first_diverge}"
        elif len(da) == len(db):
            ddiff = max((abs(x - y) for x, y in zip(da, db)), default=0.0)
            dbound = atol + rtol * float(base.get("decode_logits_absmax", 0.0))
            out.update(max_decode_logit_diff=ddiff, decode_bound=dbound)
            if ok and ddiff > dbound:
                out.update(ok=False, reason=f"decode logits differ by {ddiff:.3g} > {dbound:.3g}")
    return out


def _verdict(median: float, boots: Sequence[float], n: int, control: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The interval and verdict of one variant at one point. With the A/A control's interval
    at that point, "faster" needs the variant's whole interval above the control's as well as
    above 1.0 (and "slower" below both): the control is the same engine as the baseline, so
    what its interval covers is noise by construction (measured on the H200: an A/A pair
    read "slower", [0.838, 0.997], on a bootstrap over 7 rounds of a bimodal step time)."""
    low, high = boots[int(0.025 * (len(boots) - 1))], boots[int(0.975 * (len(boots) - 1))]
    up, down = 1.0, 1.0
    if control is not None:
        up, down = max(1.0, control["high"]), min(1.0, control["low"])
    verdict = "faster" if low > up else "slower" if high < down else "within noise"
    out = {"median": median, "low": low, "high": high, "rounds": n, "verdict": verdict}
    if control is not None:
        out["control"] = [control["low"], control["high"]]
    return out


@dataclass
class ABReport:
    """What one comparison measured: per variant and plan point, the samples; numerics."""

    plan: dict[str, Any]
    samples: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)  # variant -> point -> runs
    numerics: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    #: variant -> decode point -> GPU kernel time per decode step from the profiler
    #: ({"gpu_ms_per_step", "by_kernel": {name: ms per step}}), where the comparison took it
    kernels: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def composite(self, name: str, variants: Sequence[str], key: str = "median_decode_throughput") -> dict[str, str]:
        """A reference made of several engines: at each point, the samples (and kernel times)
        of whichever of `variants` has the best median there, e.g. SGLang at its best value of
        a flag per point from a sweep of engines. The pick reads the same rounds it is then
        compared on, so its own luck counts for it: a candidate's ratio to it is, if anything,
        understated. Returns and records (meta["composite"][name]) point -> the variant chosen."""
        chosen: dict[str, str] = {}
        points = {p for v in variants for p in self.samples.get(v, {})}
        for point in sorted(points):
            best: tuple[float, str] | None = None
            for v in variants:
                vals = [r[key] for r in self.samples.get(v, {}).get(point, []) if key in r]
                if vals and (best is None or statistics.median(vals) > best[0]):
                    best = (statistics.median(vals), v)
            if best is not None:
                chosen[point] = best[1]
                self.samples.setdefault(name, {})[point] = list(self.samples[best[1]][point])
                if point in self.kernels.get(best[1], {}):
                    self.kernels.setdefault(name, {})[point] = self.kernels[best[1]][point]
        self.meta.setdefault("composite", {})[name] = chosen
        return chosen

    def attention_ms(self, variant: str, point: str, attributed: bool = False, stage: int = 0) -> float | None:
        """The decode attention's GPU time per decode step (ms) of a variant at a point, from
        its profiled kernels (`DECODE_ATTENTION_KERNELS`), or None where none was profiled: the
        sum of their durations, or with `attributed` the step's busy time credited to them
        (`driver.kernel_attribution`: a kernel launched early beside the one before it counts
        from when that one ends; the durations where the profile has no attribution). `stage`
        1 or 2: only the split kernels that read the cache, or only the reductions of their
        splits (`DECODE_ATTENTION_STAGES`): what reading the KV costs apart from combining it."""
        got = self.kernels.get(variant, {}).get(point)
        if not got:
            return None
        by = got.get("attributed_by_kernel") if attributed else None
        by = by if by is not None else got.get("by_kernel", {})
        names = DECODE_ATTENTION_STAGES[stage] if stage else DECODE_ATTENTION_KERNELS
        return sum(ms for k, ms in by.items() if k in names)

    def kernel_ratios(self, reference: str = BASELINE, key: str = "gpu_ms_per_step") -> dict[str, dict[str, float]]:
        """variant -> point -> the reference's GPU kernel time per decode step over the
        variant's (a speedup), with "geomean" over the decode points both have. `key`: the sum
        of the kernels' durations (`gpu_ms_per_step`), or the time some kernel ran
        (`busy_ms_per_step`: overlapping kernels counted once)."""
        ref = self.kernels.get(reference, {})
        decode_points = set(self.plan.get("decode_points", []))
        out: dict[str, dict[str, float]] = {}
        for variant, points in self.kernels.items():
            if variant == reference:
                continue
            got = {p: ref[p][key] / k[key] for p, k in points.items() if p in ref and k.get(key) and ref[p].get(key)}
            on = [r for p, r in got.items() if p in decode_points]
            if on:
                got["geomean"] = math.exp(sum(map(math.log, on)) / len(on))
            out[variant] = got
        return out

    def table(self) -> list[dict[str, Any]]:
        rows = []
        for variant, points in self.samples.items():
            for point, runs in points.items():
                row: dict[str, Any] = {"variant": variant, "point": point}
                for key in ("prefill_latency", "median_decode_latency", "median_decode_throughput"):
                    vals = [r[key] for r in runs if key in r]
                    if vals:
                        row[key] = summarise(vals)
                rows.append(row)
        return rows

    def ratios(
        self, key: str = "median_decode_throughput", *, higher_is_better: bool = True, reference: str = BASELINE
    ) -> dict[str, dict[str, float]]:
        """variant -> point -> its median over the reference's (a speedup either way)."""
        base = self.samples.get(reference, {})
        out: dict[str, dict[str, float]] = {}
        for variant, points in self.samples.items():
            if variant == reference:
                continue
            for point, runs in points.items():
                mine = [r[key] for r in runs if key in r]
                ref = [r[key] for r in base.get(point, []) if key in r]
                if mine and ref:
                    a, b = statistics.median(mine), statistics.median(ref)
                    out.setdefault(variant, {})[point] = (a / b) if higher_is_better else (b / a)
        return out

    def paired(
        self,
        key: str = "median_decode_throughput",
        *,
        higher_is_better: bool = True,
        resamples: int = 2000,
        seed: int = 0,
        reference: str = BASELINE,
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """variant -> point -> the median of per-round ratios over the reference (the
        baseline unless given: e.g. a `composite`), with a 95% bootstrap interval over rounds
        and a verdict ("faster", "slower", "within noise"); the A/A control's intervals (its
        ratios to the baseline) are the noise floor of every verdict.

        Rounds are interleaved (each engine's run of a point follows the others'), so the
        baseline's run of the same round shares the variant's conditions; pairing them
        removes the drift between rounds that dominates unpaired medians on a small model
        (measured on the H200: spreads of 12-58% with gaps of a few percent). Under "geomean", the
        geometric mean over the decode points with rounds resampled jointly."""
        import random

        rng = random.Random(seed)
        out: dict[str, dict[str, dict[str, Any]]] = {}
        decode_points = set(self.plan.get("decode_points", []))
        # the A/A control first, against the baseline: its intervals are every verdict's noise floor
        floor: dict[str, dict[str, Any]] = {}
        variants = [CONTROL] if CONTROL in self.samples else []
        variants += [v for v in self.samples if v not in (reference, CONTROL)]
        for variant in variants:
            points = self.samples[variant]
            base = self.samples.get(BASELINE if variant == CONTROL else reference, {})
            control = floor if variant != CONTROL else {}
            per_point: dict[str, dict[Any, float]] = {}  # point -> round -> ratio
            for point, runs in points.items():
                ref = base.get(point, [])
                # by round: a run that failed in one engine must not shift the later rounds'
                # pairs (samples without a round, from older reports, pair in order)
                by_round = {b.get("round", j): b for j, b in enumerate(ref)}
                pairs = {
                    m.get("round", j): (m[key], b[key])
                    for j, m in enumerate(runs)
                    if (b := by_round.get(m.get("round", j))) is not None
                    and key in m
                    and key in b
                    and m[key] > 0
                    and b[key] > 0
                }
                if not pairs:
                    continue
                per_point[point] = {r: (a / b) if higher_is_better else (b / a) for r, (a, b) in pairs.items()}
            res: dict[str, dict[str, Any]] = {}
            for point, by_r in per_point.items():
                ratios = list(by_r.values())
                boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
                res[point] = _verdict(statistics.median(ratios), boots, len(ratios), control.get(point))
            gm_points = [p for p in per_point if p in decode_points and key == "median_decode_throughput"]
            # the rounds every point has (a round missing at one point leaves the geomean, so each
            # resampled round contributes the same round's ratio at every point)
            rounds = sorted(set.intersection(*(set(per_point[p]) for p in gm_points)), key=str) if gm_points else []
            n = len(rounds)
            if gm_points and n:

                def gmean(idx: list[Any]) -> float:
                    return math.exp(
                        sum(math.log(statistics.median([per_point[p][r] for r in idx])) for p in gm_points)
                        / len(gm_points)
                    )

                boots = sorted(gmean(rng.choices(rounds, k=n)) for _ in range(resamples))
                res["geomean"] = _verdict(gmean(rounds), boots, n, control.get("geomean"))
            if variant == CONTROL:
                floor = res
                if reference != BASELINE:
                    continue  # the control is the baseline's twin: against another reference it says nothing
            out[variant] = res
        return out

    def to_json(self) -> dict[str, Any]:
        decode = self.ratios("median_decode_throughput")
        prefill = self.ratios("prefill_latency", higher_is_better=False)

        def gm(xs: Sequence[float]) -> float | None:
            xs = [x for x in xs if x > 0]
            return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None

        decode_points = [p for p in self.plan.get("decode_points", [])]
        # the headline is evokernel's variants over shipped; the A/A control's own ratio is
        # reported beside it (what noise alone reads), not as a variant
        geomean = {
            v: gm([r for p, r in per.items() if p in decode_points]) for v, per in decode.items() if v != CONTROL
        }
        composites = list(self.meta.get("composite", {}))
        doc: dict[str, Any] = {
            "plan": self.plan,
            "rows": self.table(),
            "decode_throughput_ratio": decode,
            "prefill_speedup": prefill,
            "geomean": {BASELINE: geomean},
            "control_geomean": gm([r for p, r in decode.get(CONTROL, {}).items() if p in decode_points]),
            "paired": {
                "decode_throughput": self.paired("median_decode_throughput"),
                "prefill_speedup": self.paired("prefill_latency", higher_is_better=False),
            },
        }
        for name in composites:  # the same, against each composite reference
            against = self.ratios("median_decode_throughput", reference=name)
            doc["geomean"][name] = {
                v: gm([r for p, r in per.items() if p in decode_points])
                for v, per in against.items()
                if v not in (CONTROL, BASELINE)
            }
            doc["paired"][f"decode_throughput_vs_{name}"] = self.paired("median_decode_throughput", reference=name)
        if self.kernels:
            doc["kernel_time"] = self.kernels
            doc["kernel_time_ratio"] = {ref: self.kernel_ratios(ref) for ref in [BASELINE, *composites]}
            doc["busy_time_ratio"] = {
                ref: self.kernel_ratios(ref, "busy_ms_per_step") for ref in [BASELINE, *composites]
            }
            doc["attention_ms_per_step"] = {
                v: {p: self.attention_ms(v, p) for p in points} for v, points in self.kernels.items()
            }
            doc["attention_attributed_ms_per_step"] = {
                v: {p: self.attention_ms(v, p, attributed=True) for p in points} for v, points in self.kernels.items()
            }
        return {
            **doc,
            "numerics": self.numerics,
            "errors": self.errors,
            "meta": self.meta,
            "samples": self.samples,
        }  # every run, in round order: what a later analysis re-reads


def cpu_sets(n: int, available: Sequence[int] | None = None) -> list[list[int]]:
    """`n` disjoint CPU sets, one per engine, from the CPUs this process may use: each engine's
    host work (a decode step of a small model is mostly that) stays on its own cores instead of
    migrating among the others'. Measured on the H200: one engine's decode step at b1 in two
    states, 0.85-0.95 ms and 1.12-1.24 ms, round after round. Fewer CPUs than engines: no pinning.

    >>> cpu_sets(3, range(16))
    [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    >>> cpu_sets(3, [0, 1])
    [[], [], []]
    """
    cpus = sorted(available if available is not None else os.sched_getaffinity(0))
    per = len(cpus) // max(n, 1)
    if per < 1:
        return [[] for _ in range(n)]
    return [cpus[i * per : (i + 1) * per] for i in range(n)]


def rotated(sets: Sequence[Sequence[int]], r: int) -> list[list[int]]:
    """Round r's CPU sets: engine k takes set (k + r) mod n, so over n rounds each engine runs
    on every set once (a set's cores may be slower hosts: interrupts, a sibling's load).

    >>> rotated([[0, 1], [2, 3], [4, 5]], 1)
    [[2, 3], [4, 5], [0, 1]]
    """
    n = len(sets)
    return [list(sets[(k + r) % n]) for k in range(n)] if n else []


class _Engine:
    """One `evokernel.integrations.sglang.driver` process and its command pipes."""

    def __init__(self, name: str, argv: list[str], plan: dict[str, Any], env: dict[str, str], log: Path) -> None:
        self.name = name
        cmd_r, self.cmd_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        env = dict(env, EVOKERNEL_BENCH_FDS=f"{cmd_r},{reply_w}")
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evokernel.integrations.sglang.driver", "--plan", json.dumps(plan), "--", *argv],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(cmd_r, reply_w),
            start_new_session=True,
            # not the caller's folder: `python -m` puts it first on sys.path,
            # and a source checkout there would shadow the installed package
            cwd=str(log.parent),
        )
        os.close(cmd_r)
        os.close(reply_w)
        self._buf = b""
        #: why the engine can answer nothing more: a command it did not answer in time would have
        #: its late reply read as the next command's, and it would still be running on the GPU
        #: beside the other engines' timed runs, so it is stopped and every later ask says why
        self.broken: str | None = None

    def read(self, timeout_s: float) -> dict[str, Any]:
        if self.broken:
            return {"error": self.broken}
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.broken = f"no answer after {timeout_s:.0f} s (the engine was stopped; see {self.log.name})"
                self._stop()
                return {"error": self.broken}
            if readable(self.reply_r, left):
                chunk = os.read(self.reply_r, 1 << 16)
                if not chunk:
                    return {"error": f"the engine process ended (exit {self.proc.poll()}); see {self.log.name}"}
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def ask(self, msg: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if self.broken:
            return {"error": self.broken}
        try:
            os.write(self.cmd_w, (json.dumps(msg) + "\n").encode())
        except OSError as exc:
            return {"error": f"the engine process is gone ({exc})"}
        return self.read(timeout_s)

    def _stop(self) -> None:
        """Kill the engine's process group now (it stops using the GPU)."""
        import signal

        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def close(self) -> None:
        if not self.broken:
            try:
                os.write(self.cmd_w, b'{"cmd": "quit"}\n')
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._stop()
        for fd in (self.cmd_w, self.reply_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


class SGLangEvaluator:
    """See the module's doc. `server_argv`: SGLang server arguments shared by every variant
    (give each engine a small `--mem-fraction-static`: they share the GPU)."""

    name = "sglang"

    def __init__(
        self,
        server_argv: Sequence[str],
        *,
        batch_sizes: Sequence[int] = (1, 16, 64, 256),
        input_len: int = 512,
        output_len: int = 32,
        prefill_lens: Sequence[int] = (512, 2048),
        repeats: int = 3,
        weights: Mapping[int, float] | None = None,
        package: Callable[[Genome], Path] | None = None,
        log_dir: str | os.PathLike[str] = "sglang-logs",
        load_timeout_s: float = 600.0,
        run_timeout_s: float = 300.0,
        numerics_steps: int = 8,
        rtol: float = 0.05,
        prerun_s: float = 0.3,
        pin_cpus: bool = True,
        control: bool = True,
        best_of: int = 3,
        decode_points: Sequence[tuple[int, int]] | None = None,
        kernel_steps: int = 0,
        deadline_s: float | None = None,
        numerics_point: tuple[int, int] | None = None,
        check_calls: int = 1,
    ) -> None:
        self.server_argv = list(server_argv)
        #: each package engine's attention hooks also run SGLang's kernel on their first
        #: `check_calls` eager calls per shape and report the largest difference (the plugin's
        #: CHECK_ENV; the warm-up absorbs the waits): numerics on the engine's own inputs, which the
        #: logits probe cannot give on dummy weights (their attention barely moves the logits)
        self.check_calls = check_calls
        #: seconds for one `compare` (loading included): the kernel profile and the numerics run
        #: first, then rounds until the next would end past it (at least one round; `repeats` at most)
        self.deadline_s = deadline_s
        #: (batch, input length) of the numerics probe: (min(4, largest batch), 64) unless given
        #: (long contexts: a long point, so the decode steps compared run the long-context kernels)
        self.numerics_point = numerics_point
        #: (batch size, context) of each decode point: the grid of `batch_sizes` x `input_len`
        #: unless given (long contexts: e.g. ((1, 32768), (4, 16384), (32, 4096)))
        self.decode_points = [(int(b), int(c)) for b, c in decode_points] if decode_points else None
        if self.decode_points:
            batch_sizes = sorted({b for b, _ in self.decode_points})
        #: with kernel_steps > 0, each engine's decode at each point is also profiled for that
        #: many steps: GPU kernel time per step, per kernel (what wall clock hides or adds)
        self.kernel_steps = kernel_steps
        self.batch_sizes, self.input_len, self.output_len = list(batch_sizes), input_len, output_len
        self.prefill_lens, self.repeats = list(prefill_lens), repeats
        self.weights = dict(weights) if weights else {b: 1.0 for b in self.batch_sizes}
        self.package, self.log_dir = package, Path(log_dir)
        self.load_timeout_s, self.run_timeout_s = load_timeout_s, run_timeout_s
        self.numerics_steps, self.rtol = numerics_steps, rtol
        self.prerun_s, self.pin_cpus, self.control, self.best_of = prerun_s, pin_cpus, control, best_of

    @classmethod
    def for_trace(
        cls,
        server_argv: Sequence[str],
        trace: Any,
        *,
        batch_sizes: Sequence[int] = (1, 16, 64, 256),
        max_running: int = 256,
        **kw: Any,
    ) -> SGLangEvaluator:
        """Weighted by a workload (`evokernel.model.workload.Trace`): each batch size's weight is the
        share of the trace's decode steps nearest to it under continuous batching, and the
        input and output lengths are the trace's medians."""
        from evokernel.model.workload import weights

        hist = trace.decode_batches(max_running=max_running)
        ins = sorted(r.input_len for r in trace.requests)
        outs = sorted(r.output_len for r in trace.requests)
        kw.setdefault("input_len", ins[len(ins) // 2])
        kw.setdefault("output_len", max(2, outs[len(outs) // 2]))
        return cls(server_argv, batch_sizes=batch_sizes, weights=weights(hist, batch_sizes), **kw)

    def plan(self) -> dict[str, Any]:
        pairs = self.decode_points or [(b, self.input_len) for b in self.batch_sizes]
        decode = [(b, i, self.output_len) for b, i in pairs]
        # a decode point's run times its prefill too: a prefill length already there is not run again
        prefill = [(1, n, 2) for n in self.prefill_lens if (1, n) not in {(b, i) for b, i, _ in decode}]
        points = decode + prefill
        return {
            "points": [list(p) for p in points],
            "decode_points": [f"b{b}_i{i}_o{o}" for b, i, o in decode],
            "warm": sorted({(b, i) for b, i, _ in points}),
            "max_batch": max(self.batch_sizes),
        }

    def fingerprint(self) -> dict[str, Any]:
        return {
            "evaluator": "sglang",
            "server": self.server_argv,
            "plan": self.plan(),
            "repeats": self.repeats,
            "weights": {str(k): v for k, v in sorted(self.weights.items())},
            **({"kernel_steps": self.kernel_steps} if self.kernel_steps else {}),
        }

    def compare(
        self,
        packages: Mapping[str, str | os.PathLike[str] | Variant | None],
        *,
        control: bool | None = None,
        progress: Callable[[ABReport], None] | None = None,
    ) -> ABReport:
        """The baseline and every variant of `packages` (name -> a package folder, or a
        `Variant`: a package and/or server arguments of its own), interleaved; with the A/A
        control engine when `control` (default: the evaluator's setting); `progress` is
        called with the report after every round (to save what was measured so far)."""
        plan = self.plan()
        t_start = time.monotonic()
        report = ABReport(plan=plan, meta={"server": self.server_argv, "repeats": self.repeats})
        self.log_dir.mkdir(parents=True, exist_ok=True)
        variants: dict[str, Variant] = {
            BASELINE: Variant(),
            **({CONTROL: Variant()} if (self.control if control is None else control) else {}),
            **{
                k: v if isinstance(v, Variant) else Variant(package=v)
                for k, v in packages.items()
                if k not in (BASELINE, CONTROL)
            },
        }
        report.meta["variants"] = {
            k: {"package": str(v.package) if v.package else None, "args": list(v.args)} for k, v in variants.items()
        }
        cpus = cpu_sets(len(variants)) if self.pin_cpus else [[] for _ in variants]
        report.meta["cpus"] = {name: c for name, c in zip(variants, cpus)}
        engines: dict[str, _Engine] = {}
        base_env = plugin_free_env()
        # the engines start together (importing SGLang takes ~30 s of CPU each) but load one at
        # a time, in turn on a lock file: SGLang sizes its KV cache from the memory free when
        # it starts, so engines loading together would each count the others' memory as
        # theirs; each warms up (compiles) inside its turn too, so the engines' load times add up
        lock = self.log_dir / ".load.lock"
        try:
            for (name, variant), mine in zip(variants.items(), cpus):
                env = dict(
                    base_env,
                    **({PACKAGE_ENV: str(Path(variant.package).resolve())} if variant.package else {}),
                    **({CHECK_ENV: str(self.check_calls)} if variant.package and self.check_calls else {}),
                    **({"EVOKERNEL_BENCH_CPUS": ",".join(map(str, mine))} if mine else {}),
                )
                engines[name] = _Engine(
                    name,
                    [*self.server_argv, *variant.args],
                    {"warm": plan["warm"], "max_batch": plan["max_batch"], "load_lock": str(lock.resolve())},
                    env,
                    self.log_dir / f"{name}.log",
                )
            for name, engine in list(engines.items()):
                loaded = engine.read(self.load_timeout_s * len(variants))  # the others' turns come first
                report.meta.setdefault("loaded", {})[name] = loaded
                if not loaded.get("loaded"):
                    report.errors[name] = loaded.get("error", "not loaded")
                    engine.close()
                    del engines[name]
            for name, engine in list(engines.items()):
                ready = engine.read(self.load_timeout_s)
                report.meta.setdefault("ready", {})[name] = ready
                if not ready.get("ready"):
                    report.errors[name] = ready.get("error", "not ready")
                    engine.close()
                    del engines[name]
            if BASELINE not in engines:
                return report
            names = list(engines)

            def ask(name: str, msg: dict[str, Any]) -> dict[str, Any]:
                # the plugin's hook counters ride on every reply: keep the latest per engine
                # (whether the package's kernels ran, or why SGLang's did)
                got = dict(engines[name].ask(msg, self.run_timeout_s))
                if "hooks" in got:
                    report.meta.setdefault("hooks", {})[name] = got.pop("hooks")
                return got

            if self.kernel_steps > 0:
                decode_triples = [p for p in plan["points"] if f"b{p[0]}_i{p[1]}_o{p[2]}" in plan["decode_points"]]
                for b, i, o in decode_triples:
                    point = f"b{b}_i{i}_o{o}"
                    for name in engines:
                        got = ask(name, {"cmd": "kernels", "batch_size": b, "input_len": i, "steps": self.kernel_steps})
                        if "error" in got:
                            report.errors.setdefault(name, f"{point} kernels: {got['error']}")
                        else:
                            report.kernels.setdefault(name, {})[point] = got
            nb, ni = self.numerics_point or (min(4, max(self.batch_sizes)), 64)
            probe = {
                "cmd": "logits",
                "batch_size": nb,
                "input_len": ni,
                "steps": self.numerics_steps,
                "seed": 7,
            }
            logits = {name: ask(name, probe) for name in engines}
            for name, got in logits.items():
                if name == BASELINE:
                    continue
                if "error" in logits[BASELINE]:  # nothing to compare against: not the variant's failure
                    report.numerics[name] = {
                        "ok": False,
                        "reason": f"the baseline's probe: {logits[BASELINE]['error']}",
                    }
                    report.errors.setdefault(BASELINE, f"numerics probe: {logits[BASELINE]['error']}")
                elif "error" in got:
                    report.numerics[name] = {"ok": False, "reason": got["error"]}
                else:
                    report.numerics[name] = compare_numerics(logits[BASELINE], got, rtol=self.rtol)
            if progress is not None:  # the kernel times and numerics, before the rounds
                progress(report)
            started = time.monotonic()
            where = dict(zip(variants, cpus))  # each engine's CPUs this round
            for r in range(self.repeats):
                if not another_round(r, time.monotonic() - started, time.monotonic() - t_start, self.deadline_s):
                    report.meta["stopped"] = f"deadline after {r} round(s)"
                    break
                if r and all(cpus):  # the CPU sets move one engine along each round
                    where = dict(zip(variants, rotated(cpus, r)))
                    for name in names:
                        got = ask(name, {"cmd": "pin", "cpus": where[name]})
                        if "error" in got:  # the engine runs on where it was: noted, not a failure
                            report.meta.setdefault("pin_errors", {}).setdefault(name, f"round {r}: {got['error']}")
                    report.meta.setdefault("cpus_by_round", {})[str(r)] = {n: where[n] for n in names}
                for b, i, o in plan["points"]:
                    point = f"b{b}_i{i}_o{o}"
                    order = names[r % len(names) :] + names[: r % len(names)]
                    for name in order:
                        got = ask(
                            name,
                            {
                                "cmd": "run",
                                "batch_size": b,
                                "input_len": i,
                                "output_len": o,
                                "seed": r,
                                "prerun_s": self.prerun_s,
                                "best_of": self.best_of,
                            },
                        )
                        if "error" in got:
                            report.errors.setdefault(name, f"{point}: {got['error']}")
                        else:
                            report.samples.setdefault(name, {}).setdefault(point, []).append(
                                dict(got, round=r, **({"cpus": where[name]} if where.get(name) else {}))
                            )
                if progress is not None:  # what a round measured, before the next (a caller's deadline)
                    report.meta["rounds_done"] = r + 1
                    progress(report)
        finally:
            for engine in engines.values():
                engine.close()
        return report

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        """Each genome's package against the baseline; latency = the workload-weighted median
        decode latency (ms); a numerics failure or an engine error is a failed result."""
        if self.package is None:
            raise ValueError("SGLangEvaluator.evaluate needs `package` (a genome -> its package folder)")
        for genome in genomes:
            try:
                folder = self.package(genome)
            except Exception as exc:
                yield Result.failed(Status.COMPILE_ERROR, f"package failed: {type(exc).__name__}: {exc}")
                continue
            # a fitness, not a verdict: the A/A control would only cost an engine and its runs
            report = self.compare({genome.id: folder}, control=False)
            if BASELINE in report.errors:  # SGLang as shipped failed (memory, flags): no genome can be judged
                raise EvaluatorError(f"SGLang as shipped (the baseline) failed: {report.errors[BASELINE][:1000]}")
            if genome.id in report.errors:
                yield Result.failed(Status.RUNTIME_ERROR, report.errors[genome.id][:2000])
                continue
            numerics = report.numerics.get(genome.id, {})
            if not numerics.get("ok"):
                yield Result.failed(Status.INCORRECT, f"end-to-end numerics: {numerics.get('reason', 'not checked')}")
                continue
            runs = report.samples.get(genome.id, {})
            total = weight = 0.0
            for b, i in self.decode_points or [(b, self.input_len) for b in self.batch_sizes]:
                lat = [x["median_decode_latency"] for x in runs.get(f"b{b}_i{i}_o{self.output_len}", [])]
                if lat:
                    total += self.weights.get(b, 0.0) * statistics.median(lat) * 1e3
                    weight += self.weights.get(b, 0.0)
            if not weight:
                yield Result.failed(Status.RUNTIME_ERROR, "no decode point was measured")
                continue
            yield Result.ok(total / weight, meta={"sglang": report.to_json()})


def profile_engine(
    server_argv: Sequence[str],
    *,
    batch_size: int = 1,
    input_len: int = 512,
    output_len: int = 8,
    package: str | os.PathLike[str] | None = None,
    trace_path: str | os.PathLike[str],
    log_dir: str | os.PathLike[str] = "sglang-profile",
    load_timeout_s: float = 900.0,
    run_timeout_s: float = 300.0,
) -> Any:
    """An SGLang engine's prefill and decode steps under torch.profiler, as an
    `evokernel.model.profile.Profile`: the engine is loaded as the A/B evaluator loads it (plugins
    first; `package` is an evokernel export to apply), warmed at the point, then one
    `one_batch` run of (batch_size, input_len, output_len) is profiled and its trace parsed.
    Decode steps replayed from CUDA graphs show their kernels without the ops and modules
    that launched them (a graph replay has no per-op CPU events); prefill is fully
    attributed. Raises ConfigError with the engine's own error when it cannot start."""
    from evokernel.core.errors import ConfigError
    from evokernel.model.profile import parse_trace

    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = plugin_free_env()
    if package is not None:
        env[PACKAGE_ENV] = str(Path(package).resolve())
    plan = {"warm": [[batch_size, input_len]], "max_batch": batch_size}
    engine = _Engine("profile", list(server_argv), plan, env, log_dir / "profile.log")
    try:
        for stage in ("loaded", "ready"):
            got = engine.read(load_timeout_s)
            if not got.get(stage):
                raise ConfigError(
                    f"the SGLang engine did not start: {got.get('error', 'no answer')} "
                    f"(its log: {log_dir / 'profile.log'})"
                )
        got = engine.ask(
            {
                "cmd": "profile",
                "batch_size": batch_size,
                "input_len": input_len,
                "output_len": output_len,
                "path": str(Path(trace_path).resolve()),
            },
            run_timeout_s,
        )
        if "error" in got:
            raise ConfigError(f"profiling the SGLang engine failed: {got['error']}")
    finally:
        engine.close()
    name = f"sglang-b{batch_size}-i{input_len}-o{output_len}"
    return parse_trace(trace_path, iterations=1, target=name)


def ab_markdown(doc: dict[str, Any]) -> list[str]:
    """The A/B table of a comparison (`ABReport.to_json()`, plus the optional `control_geomean`):
    unpaired medians and paired per-round ratios, one line per variant and point."""
    lines = [
        "| variant | point | prefill ms | decode ms (median, spread) | decode tok/s | vs shipped | paired per round [95%] |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios = doc["decode_throughput_ratio"]
    paired = doc["paired"]["decode_throughput"]

    def pair(variant: str, point: str) -> str:
        got = paired.get(variant, {}).get(point)
        return f"{got['median']:.3f} [{got['low']:.3f}, {got['high']:.3f}] {got['verdict']}" if got else "-"

    for row in doc["rows"]:
        d = row.get("median_decode_latency", {})
        p = row.get("prefill_latency", {})
        tp = row.get("median_decode_throughput", {})
        ratio = ratios.get(row["variant"], {}).get(row["point"])
        lines.append(
            f"| {row['variant']} | {row['point']} | {1e3 * p.get('median', 0):.3f} | "
            f"{1e3 * d.get('median', 0):.3f} ({d.get('spread_pct', 0):.1f}%) | {tp.get('median', 0):.0f} | "
            f"{f'{ratio:.3f}' if ratio else '-'} | {pair(row['variant'], row['point'])} |"
        )
    lines.append(
        "\npaired geomean (decode, rounds resampled): " + "; ".join(f"{v}: {pair(v, 'geomean')}" for v in paired)
    )
    if doc.get("control_geomean"):
        lines.append(
            f"\nA/A control (a second shipped engine) vs shipped, geomean: {doc['control_geomean']:.3f}: "
            "what noise alone reads; verdicts above are called only beyond its intervals"
        )
    lines.append(
        f"\ngeomean decode throughput vs shipped: {doc['geomean']}; numerics: "
        f"{ {k: v.get('ok') for k, v in doc['numerics'].items()} }; errors: {doc['errors']}"
    )
    return lines
