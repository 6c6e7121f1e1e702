"""One SGLang engine, held in one process, timed on command (run by `evaluators/sglang.py`).

    python -m evokernel.integrations.sglang.driver --plan PLAN.json -- <SGLang server arguments>

The process loads SGLang's model runner the way `sglang.benchmark.one_batch` does (same
server arguments: `--model-path`, `--load-format dummy`, backends ...), after calling
SGLang's own `load_plugins()`, so the evokernel plugin applies the package named by
EVOKERNEL_SGLANG_PACKAGE exactly as it would in a served engine's scheduler. Then it warms
every (batch size, input length) of the plan once (Triton compiles and autotunes outside
any timed pass), both under the plan's load lock (the next engine sizes its KV cache from
the memory free, so it must not see this one's warm-up peak), says it is loaded and then
ready (the two replies come together, after the warm-up), and answers commands, one JSON object per line, on the
file descriptors named by EVOKERNEL_BENCH_FDS ("<commands>,<replies>"), so SGLang's own
prints on stdout never mix with them:

- {"cmd": "run", "batch_size": B, "input_len": I, "output_len": O, "prerun_s": P, "best_of": R} ->
  prefill latency (s), median decode latency (s) and throughput, as `one_batch` measures them
  (synchronised wall clock around each step, decode in SGLang's CUDA graphs), of the fastest
  of R runs (every run's median decode latency is kept), and the SM clock (MHz) before and
  after, and per run the host's steal ticks and the process's involuntary context switches
  (`runs_host`); with P > 0, untimed 8-step runs of the same batch for P seconds come first;

EVOKERNEL_BENCH_CPUS ("0,1,2,3") pins the process and every thread it starts to those CPUs.
- {"cmd": "logits", "batch_size": B, "input_len": I, "steps": S, "seed": K} -> greedy tokens
  for S steps and the first step's logits (a few summary numbers and a sample of values)
  on fixed prompts, for the numerics check against the unpatched engine;
- {"cmd": "profile", "batch_size": B, "input_len": I, "output_len": O, "path": P} -> one such
  run under torch.profiler (CPU and CUDA activity, shapes, FLOPs, a record_function scope
  per module of the model, as `evokernel.model.profile.profile_module` opens them), its Chrome
  trace written to P, and the run's figures (`evokernel profile --sglang` reads the trace);
- {"cmd": "kernels", "batch_size": B, "input_len": I, "steps": S} -> after a prefill of the batch
  and one untimed step, S decode steps (CUDA graphs as served) under torch.profiler, CUDA
  activity only: GPU kernel time per step (`gpu_ms_per_step`, the sum of the kernels' durations)
  and per kernel name (`by_kernel`, ms per step; `attributed_by_kernel`: the step's busy time
  credited to one kernel at each instant, see `kernel_attribution`, which differs from the
  durations only where kernels overlap, as a programmatic dependent launch makes them), and the prefill's kernels (`prefill_gpu_ms`,
  `prefill_by_kernel`, ms), and where a step's wall clock goes in this one process: the same
  steps timed without the profiler (`wall_ms_per_step`), kernels per step, the time some kernel
  ran (`busy_ms_per_step`), the device's own gaps between kernels (`device_gap_ms_per_step`)
  and the rest (`host_ms_per_step`: the GPU waiting for the host), see `step_timeline`;
- {"cmd": "pin", "cpus": [c, ...]} -> every thread of the process moved onto those CPUs
  (`{"pinned": [...], "threads": n}`): the evaluator rotates the engines' CPU sets between rounds,
  so no engine's figures carry one set of cores' host speed;
- {"cmd": "quit"}.

With "load_lock" (a file path) in the plan, the process imports SGLang first and then loads
the model while holding an exclusive lock on that file: engines started together import in
parallel and load one after another (SGLang sizes its KV cache from the memory free when it
starts).

Every reply carries `hooks` where the evokernel plugin installed any: per op, the calls
that ran evokernel's kernel and SGLang's, and why (`plugin.hook_stats`).

Failures are replies ({"error": ...}), never a silent death: the parent reads them.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["main", "kernel_events", "kernel_times", "step_timeline"]


def _reply(fd: int, obj: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(obj) + "\n").encode())


def _lines(fd: int):
    buf = b""
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def _engine(server_argv: list[str], max_batch: int) -> Any:
    """SGLang's model runner as `one_batch` builds it, plugins loaded first."""
    from sglang.benchmark import one_batch as ob
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import PortArgs, ServerArgs

    load_plugins()
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    server_args = ServerArgs.from_cli_args(parser.parse_args(server_argv))
    if server_args.cuda_graph_config is not None:
        server_args.cuda_graph_config[ob.Phase.DECODE].max_bs = max_batch
    ob._set_envs_and_config(server_args)
    port_args = PortArgs.init_new(server_args)
    ob.initialize_moe_config(server_args)
    ob.initialize_fp8_gemm_config(server_args)
    ob.initialize_fp4_gemm_config(server_args)
    runner, _ = ob.load_model(server_args, port_args, 0, 0)
    return runner


def _run(runner: Any, batch_size: int, input_len: int, output_len: int, seed: int = 0) -> dict[str, Any] | None:
    import numpy as np
    from sglang.benchmark import one_batch as ob

    np.random.seed(seed)
    reqs = ob.prepare_synthetic_inputs_for_latency_test(batch_size, input_len)
    return ob.latency_test_run_once(
        "evokernel",
        runner,
        lambda *a, **k: None,
        reqs,
        batch_size,
        input_len,
        output_len,
        0,
        False,
        False,
        ("CPU", "GPU"),
        "",
        "all",
        0,
    )


def _host_counters() -> dict[str, int]:
    """The host's steal time (all CPUs, clock ticks: time the hypervisor ran something else
    on a vCPU) and this process's involuntary context switches, where Linux reports them:
    differences across a run tell host-side interference from the engine's own work."""
    out: dict[str, int] = {}
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        if fields and fields[0] == "cpu" and len(fields) > 8:
            out["steal_ticks"] = int(fields[8])
    except OSError:
        pass
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("nonvoluntary_ctxt_switches"):
                    out["involuntary_switches"] = int(line.split()[1])
    except OSError:
        pass
    return out


def _pin(cpus: Sequence[int]) -> dict[str, Any]:
    """Every thread of this process (SGLang's and torch's included) onto `cpus`; threads started
    later inherit it from their creator."""
    want = {int(c) for c in cpus}
    moved = 0
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else [str(os.getpid())]:
        try:
            os.sched_setaffinity(int(tid), want)
            moved += 1
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
        except OSError as exc:  # CPUs this process may not use: it stays where it was
            return {"error": f"cannot pin to {sorted(want)}: {exc}", "threads": moved}
    return {"pinned": sorted(want), "threads": moved}


def _sm_clock() -> int | None:
    """The GPU's SM clock now (MHz, through NVML), or None where it cannot be read."""
    try:
        import torch

        return int(torch.cuda.clock_rate())
    except Exception:
        return None


def _profile(runner: Any, batch_size: int, input_len: int, output_len: int, path: str, seed: int = 0) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from evokernel.model.profile import _scopes

    # one_batch wraps SGLang's ModelRunner (its nn.Module is .model) in a bench runner (.torch_runner)
    model = getattr(runner, "model", None) or getattr(getattr(runner, "torch_runner", None), "model", None)
    handles = _scopes(model) if model is not None and hasattr(model, "named_modules") else []
    try:
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_flops=True
        ) as prof:
            got = _run(runner, batch_size, input_len, output_len, seed)
            torch.cuda.synchronize()
    finally:
        for h in handles:
            h.remove()
    prof.export_chrome_trace(path)
    return {"trace": path, **(got or {"error": "batch does not fit the KV cache"})}


def _kernels(runner: Any, batch_size: int, input_len: int, steps: int, seed: int = 0) -> dict[str, Any]:
    import numpy as np
    import torch
    from sglang.benchmark import one_batch as ob
    from torch.profiler import ProfilerActivity, profile

    np.random.seed(seed)
    runner.clear()
    reqs = ob.prepare_synthetic_inputs_for_latency_test(batch_size, input_len)
    torch.cuda.synchronize()
    # (a profile of the prefill alone recorded its first kernels without durations and none of the
    # model's on the H200 (session 22); a throwaway session first: not yet known to help)
    with profile(activities=[ProfilerActivity.CUDA]):
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prefill:
        next_ids, _, batch = runner.extend(reqs)
        torch.cuda.synchronize()
    next_ids, _ = runner.decode(next_ids, batch)  # the first step outside the window
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):  # synchronised per step, as the timed runs step (one_batch)
            next_ids, _ = runner.decode(next_ids, batch)
            torch.cuda.synchronize()
    walls = []  # the same steps' wall clock in this process, profiler off
    for _ in range(steps):
        t0 = time.perf_counter()
        next_ids, _ = runner.decode(next_ids, batch)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    runner.cleanup(batch)
    events = kernel_events(prof)
    by = kernel_times(events)
    if not by:
        return {"error": "the profiler recorded no kernels"}
    pre = kernel_times(kernel_events(prefill))
    wall_ms = sorted(walls)[len(walls) // 2] * 1e3
    line = step_timeline(events, steps)
    return {
        "steps": steps,
        "gpu_ms_per_step": sum(by.values()) / steps / 1e3,
        "by_kernel": {k: v / steps / 1e3 for k, v in sorted(by.items(), key=lambda kv: -kv[1])},
        "attributed_by_kernel": {
            k: v / steps / 1e3 for k, v in sorted(kernel_attribution(events).items(), key=lambda kv: -kv[1])
        },
        # where a step's wall clock goes, in this one process: the kernels, the device's own gaps
        # between them (graph nodes, queued launches) and the rest (the GPU waiting for the host)
        "wall_ms_per_step": wall_ms,
        **line,
        "host_ms_per_step": wall_ms - line["busy_ms_per_step"] - line["device_gap_ms_per_step"],
        # the batch's prefill (one extend, not graph-captured): which attention kernel ran it
        "prefill_gpu_ms": sum(pre.values()) / 1e3,
        "prefill_by_kernel": {k: v / 1e3 for k, v in sorted(pre.items(), key=lambda kv: -kv[1])},
    }


def kernel_events(prof: Any) -> list[dict[str, Any]]:
    """The kernels of a CUDA-activity profile, as its Chrome trace lists them (ts, dur in us)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    return [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]


def kernel_times(events: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Microseconds per kernel name.

    >>> kernel_times([{"name": "a", "dur": 2.0}, {"name": "b", "dur": 1.0}, {"name": "a", "dur": 3.0}])
    {'a': 5.0, 'b': 1.0}
    """
    by: dict[str, float] = {}
    for e in events:
        by[e["name"]] = by.get(e["name"], 0.0) + float(e.get("dur", 0.0))
    return by


def kernel_attribution(events: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Microseconds per kernel name of the time some kernel ran (the union of their intervals),
    each instant credited to the oldest kernel running then (the one that started first). Where
    no two kernels run at once this is `kernel_times`. Where they overlap, the overlap counts
    once: a kernel launched as the programmatic dependent of the one before it starts while
    that one finishes and waits for its results (`gdc_wait`), so it is credited from the moment
    its predecessor ends, and the time it spent waiting (or prefetching) under its predecessor
    goes to the predecessor, which was running then anyway. The sum over names is the busy time.

    >>> ev = [{"name": "p", "ts": 0, "dur": 10}, {"name": "d", "ts": 8, "dur": 6}, {"name": "r", "ts": 13, "dur": 3}]
    >>> kernel_attribution(ev)
    {'p': 10.0, 'd': 4.0, 'r': 2.0}
    >>> kernel_attribution([{"name": "a", "ts": 0, "dur": 2}, {"name": "b", "ts": 5, "dur": 1}, {"name": "a", "ts": 7, "dur": 3}])
    {'a': 5.0, 'b': 1.0}
    """
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), str(e["name"])) for e in events)
    cuts = sorted({t for lo, hi, _ in spans for t in (lo, hi)})
    by: dict[str, float] = {}
    running: list[tuple[float, float, str]] = []  # a heap by start: the oldest kernel on top
    i = 0
    for a, b in zip(cuts, cuts[1:]):
        while i < len(spans) and spans[i][0] <= a:
            heapq.heappush(running, spans[i])
            i += 1
        while running and running[0][1] <= a:  # ended: the next oldest takes over
            heapq.heappop(running)
        if running:
            name = running[0][2]
            by[name] = by.get(name, 0.0) + (b - a)
    return by


#: an idle gap between kernels shorter than this (us) is the device's own launch latency (the
#: next node of a CUDA graph, a launch already queued); a longer one is the GPU waiting for the host
DEVICE_GAP_US = 10.0


def step_timeline(
    events: Sequence[Mapping[str, Any]], steps: int, device_gap_us: float = DEVICE_GAP_US
) -> dict[str, Any]:
    """Per step of `steps` profiled decode steps (each synchronised): kernels launched, time some
    kernel ran (`busy`: the union of the kernels' intervals, so kernels overlapping on two streams
    count once), idle gaps between kernels shorter than `device_gap_us` (the device's own: graph
    nodes one after another) and longer ones (the GPU waiting for the host), in ms. A step's
    wall clock minus busy and device gaps is its host time: the comparison of two engines' host
    time then needs no second process's run.

    >>> ev = [{"ts": 0, "dur": 10}, {"ts": 12, "dur": 10}, {"ts": 15, "dur": 2}, {"ts": 100, "dur": 10}, {"ts": 113, "dur": 5}]
    >>> t = step_timeline(ev, 2); t["kernels_per_step"], t["busy_ms_per_step"], t["device_gap_ms_per_step"]
    (2.5, 0.0175, 0.0025)
    >>> t["host_gap_ms_per_step"], t["device_gap_us"]
    (0.039, 10.0)
    """
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in events)
    busy = short = long = 0.0
    end = None
    for lo, hi in spans:
        if end is None or lo > end:
            if end is not None:
                gap = lo - end
                if gap < device_gap_us:
                    short += gap
                else:
                    long += gap
            busy += hi - lo
            end = hi
        elif hi > end:
            busy += hi - end
            end = hi
    n = max(1, steps)
    return {
        "kernels_per_step": len(spans) / n,
        "busy_ms_per_step": round(busy / n / 1e3, 6),
        "device_gap_ms_per_step": round(short / n / 1e3, 6),
        "host_gap_ms_per_step": round(long / n / 1e3, 6),
        "device_gap_us": device_gap_us,
    }


def _hooks() -> dict[str, Any]:
    """The evokernel plugin's hooks in this process, what each ran so far (empty without a
    package): whether the package's kernels ran, or why SGLang's did."""
    mod = sys.modules.get("evokernel.integrations.sglang.plugin")
    return mod.hook_stats() if mod is not None and hasattr(mod, "hook_stats") else {}


def _eager_decode_check(runner: Any, next_ids: Any, batch: Any) -> str:
    """With the plugin's shadow check on (EVOKERNEL_SGLANG_CHECK), one more decode step of the
    probe's batch outside the CUDA graphs, so the decode hook runs eagerly and compares its output
    with SGLang's kernel on the engine's own cache (a captured call cannot be read back). Its
    tokens are not part of the probe. Returns "" when off, else what happened."""
    from evokernel.integrations.sglang.plugin import check_calls

    if not check_calls():
        return ""
    mr = getattr(runner, "torch_runner", runner)
    if not hasattr(mr, "decode_cuda_graph_runner"):
        return "no decode graph runner to step around"
    graphs = mr.decode_cuda_graph_runner
    try:
        mr.decode_cuda_graph_runner = None  # model_runner.forward then runs the step eagerly
        runner.decode(next_ids, batch)
        return "ran"
    except Exception as exc:  # the probe's figures stand; the check's failure is reported
        return f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        mr.decode_cuda_graph_runner = graphs


def _free_cache() -> None:
    """Give the caching allocator's free blocks back to the device: engines share the GPU, and
    one engine's prefill peak (a batch of 16 x 8192 tokens: gigabytes of activations) kept in
    its cache would count as used memory for every engine loaded or run after it."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _load(
    server_argv: list[str], max_batch: int, lock: str | None, warm: Sequence[Sequence[int]] = ()
) -> tuple[Any, float, float]:
    """The engine, loaded and warmed (a few steps at each (batch, input length) of `warm`)
    while holding `lock` (a file) where one is given, its cache freed before the lock is
    released: SGLang sizes the KV cache from the memory free when an engine loads, so the
    next engine must not see this one's warm-up peak. Returns (runner, load_s, warm_s)."""
    t0 = time.monotonic()

    def build() -> tuple[Any, float, float]:
        runner = _engine(server_argv, max_batch)
        loaded = time.monotonic()
        for bs, il in warm:
            _run(runner, int(bs), int(il), 4)
        _free_cache()
        return runner, loaded - t0, time.monotonic() - loaded

    if not lock:
        return build()
    import fcntl

    import sglang.benchmark.one_batch  # noqa: F401 - the import's ~30 s outside the lock

    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        t0 = time.monotonic()  # the turn starts (the wait for the others is not this engine's load)
        return build()
    finally:
        os.close(fd)  # releases the lock


def _logits(runner: Any, batch_size: int, input_len: int, steps: int, seed: int) -> dict[str, Any]:
    """Greedy tokens for `steps` steps, a sample of the first step's logits (the prefill's) and
    of the last decode step's (the decode kernels'), each with its largest magnitude."""
    import numpy as np
    import torch
    from sglang.benchmark import one_batch as ob

    rng = np.random.default_rng(seed)
    prompts = rng.integers(0, 10000, (batch_size, input_len), dtype=np.int32).tolist()
    runner.clear()
    reqs = ob.prepare_synthetic_inputs_for_latency_test(batch_size, input_len, prompts)
    next_ids, logits, batch = runner.extend(reqs)
    first = logits.float()
    last = None
    tokens = [next_ids.tolist()]
    for _ in range(steps - 1):
        next_ids, last = runner.decode(next_ids, batch)
        tokens.append(next_ids.tolist())
    eager = _eager_decode_check(runner, next_ids, batch)
    runner.cleanup(batch)

    def sample(x: Any) -> dict[str, Any]:
        flat = x.float().reshape(-1)
        idx = torch.linspace(0, flat.numel() - 1, steps=min(4096, flat.numel())).long().to(flat.device)
        return {
            "sample": flat[idx].tolist(),
            "absmax": float(flat.abs().max()),
            "std": float(flat.std()),
            "finite": bool(torch.isfinite(flat).all()),
        }

    head = sample(first)
    out: dict[str, Any] = {
        "tokens": tokens,
        "logits_sample": head["sample"],
        "logits_absmax": head["absmax"],
        "logits_std": head["std"],
        "finite": head["finite"],
    }
    if eager:
        out["eager_decode_check"] = eager
    if last is not None:
        tail = sample(last)
        out.update(
            decode_logits_sample=tail["sample"],
            decode_logits_absmax=tail["absmax"],
            decode_finite=tail["finite"],
            context=input_len + steps - 1,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(prog="python -m evokernel.integrations.sglang.driver")
    ap.add_argument("--plan", required=True, help="JSON: {'warm': [[batch, input_len], ...], 'max_batch': B}")
    args = ap.parse_args(argv[:split])
    fds = os.environ.get("EVOKERNEL_BENCH_FDS", "")
    try:
        cmd_fd, reply_fd = (int(x) for x in fds.split(","))
    except ValueError:
        print(
            "evokernel.integrations.sglang.driver: EVOKERNEL_BENCH_FDS must be '<commands>,<replies>'", file=sys.stderr
        )
        return 2
    plan = json.loads(args.plan)
    cpus = os.environ.get("EVOKERNEL_BENCH_CPUS", "")
    if cpus and hasattr(os, "sched_setaffinity"):  # before any thread starts: they all inherit it
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    try:
        runner, loaded, warmed = _load(
            argv[split + 1 :], int(plan.get("max_batch", 1)), plan.get("load_lock"), plan.get("warm", [])
        )
        # the KV cache and CUDA graphs are allocated and the warm-up's cache freed: the next
        # engine may load now (SGLang sizes its KV cache from the memory free when it starts,
        # so engines that load at the same time would each count the other's memory as their own)
        _reply(reply_fd, {"loaded": True, "load_s": round(loaded, 2)})
        _reply(
            reply_fd,
            {
                "ready": True,
                "load_s": round(loaded, 2),
                "warm_s": round(warmed, 2),
                "package": os.environ.get("EVOKERNEL_SGLANG_PACKAGE", ""),
            },
        )
    except Exception as exc:  # the parent reports it as this variant's failure
        _reply(
            reply_fd,
            {"ready": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]},
        )
        return 1

    def answer(msg: dict[str, Any]) -> None:
        _free_cache()  # this command's peak, back to the device before the next engine's turn
        hooks = _hooks()
        _reply(reply_fd, dict(msg, hooks=hooks) if hooks else msg)

    for msg in _lines(cmd_fd):
        try:
            if msg.get("cmd") == "quit":
                break
            if msg.get("cmd") == "run":
                b, i, seed = int(msg["batch_size"]), int(msg["input_len"]), int(msg.get("seed", 0))
                # the GPU's clocks up (from ~345 MHz idle to ~1980) after the other engines' turns:
                # short untimed runs of the same batch for prerun_s seconds
                start = time.monotonic()
                while time.monotonic() - start < float(msg.get("prerun_s", 0)):
                    _run(runner, b, i, 8, seed)
                before = _sm_clock()
                runs = []
                for _ in range(max(1, int(msg.get("best_of", 1)))):
                    host = _host_counters()
                    got_run = _run(runner, b, i, int(msg["output_len"]), seed)
                    after = _host_counters()
                    if got_run is not None:
                        got_run = dict(got_run, host={k: after[k] - v for k, v in host.items() if k in after})
                    runs.append(got_run)
                got = None
                if all(r is not None for r in runs):
                    # the run with the fastest median step (every run's median is kept): a run's
                    # steps share one host state, fast or slow (measured on the H200), so the best of a few
                    # runs estimates the engine, not the state it happened to be in
                    best = min(runs, key=lambda r: r.get("median_decode_latency", float("inf")))
                    got = dict(
                        best,
                        sm_clock_mhz=[before, _sm_clock()],
                        runs_median_decode_latency=[r.get("median_decode_latency") for r in runs],
                        runs_host=[r.get("host") for r in runs],
                    )
                answer(got if got is not None else {"error": "batch does not fit the KV cache"})
            elif msg.get("cmd") == "pin":
                answer(_pin(msg["cpus"]))
            elif msg.get("cmd") == "profile":
                answer(
                    _profile(
                        runner,
                        int(msg["batch_size"]),
                        int(msg["input_len"]),
                        int(msg["output_len"]),
                        str(msg["path"]),
                        int(msg.get("seed", 0)),
                    ),
                )
            elif msg.get("cmd") == "kernels":
                answer(
                    _kernels(
                        runner,
                        int(msg["batch_size"]),
                        int(msg["input_len"]),
                        int(msg.get("steps", 16)),
                        int(msg.get("seed", 0)),
                    ),
                )
            elif msg.get("cmd") == "logits":
                answer(
                    _logits(
                        runner,
                        int(msg["batch_size"]),
                        int(msg["input_len"]),
                        int(msg["steps"]),
                        int(msg.get("seed", 0)),
                    ),
                )
            else:
                answer({"error": f"unknown command {msg!r}"})
        except Exception as exc:
            answer({"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
