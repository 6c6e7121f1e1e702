"""Timing: CUDA events around each call, the L2 flushed before it, inputs rotated, CUDA-graph
replay for short kernels, and repetition until the median's confidence interval is tight.

On the CPU the judge times every call itself (`time_judged`: its own clock around one
message to the candidate's process and its answer). On the GPU, CUDA events and graphs
belong to one process, so `time_cuda` runs inside the candidate's process (see `_worker`),
from functions captured before any candidate code ran (`watched`); the judge brackets each
measured block with its own clock (`BlockWitness`) and holds the reported samples to what it
saw (`bracket_misfit`).

>>> lo, hi = median_ci([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
>>> lo <= 5.0 <= hi
True
"""

# One module on purpose, though over 400 lines: every way of timing a call (events, graphs, flush, rotation, perturbation,
# host-sync detection, the judge's own loop and its brackets of the candidate's) shares one set of helpers and one
# footing record; the parts that run inside the candidate's process use the captured functions (`watched`).

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from evokernel.judge.footing import HostSync

__all__ = [
    "median_ci",
    "relative_ci",
    "time_cuda",
    "time_cpu",
    "time_judged",
    "Bracket",
    "BlockWitness",
    "bracket_misfit",
    "Perturber",
    "perturbable",
    "StreamHold",
    "HostSync",
    "GraphCaptureError",
    "check_no_host_sync",
]


def median_ci(samples: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """A distribution-free confidence interval of the median (order statistics)."""
    xs = sorted(samples)
    n = len(xs)
    if n < 3:
        return (xs[0], xs[-1]) if xs else (math.nan, math.nan)
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return xs[lo], xs[hi]


def relative_ci(samples: Sequence[float]) -> float:
    """Half-width of the median's 95% interval over the median."""
    lo, hi = median_ci(samples)
    med = statistics.median(samples)
    return (hi - lo) / 2 / med if med > 0 else math.inf


Sampler = Callable[[int, Any, bool, Any], None]  # (rotation set, outputs, last call, perturbation) -> None


def torch_uint8() -> Any:
    import torch

    return torch.uint8


def perturbable(t: Any, k: int) -> bool:
    """Whether the harness changes `k` elements of this input before each timed call."""
    import torch

    return k > 0 and isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() >= 2 * k and t.is_contiguous()


class Perturber:
    """Before each timed call, changes `k` elements of every floating-point input of the set
    in place (values copied from other positions, so they stay in distribution), and puts
    them back after the call. Positions come from a generator seeded by the OS's randomness:
    no two timed calls see the same inputs, so a cache keyed by input values misses every
    time, and the candidate cannot know in advance which elements change.

    Perturbations are drawn in batches (`batch` calls per rotation set at once), so a timed
    call costs two small index writes per input and nothing that waits for the GPU: the host
    stays ahead of the device, and no launch latency lands next to a timed call. `apply`
    returns the call's perturbation as (input index, positions, new values, old values)
    device tensors; `report` reads one back to the host (do it after the timing loop)."""

    def __init__(self, sets: list[list[Any]], k: int, seed: int, *, batch: int = 32) -> None:
        import torch

        self.sets, self.k, self.batch = sets, k, batch
        device = next((t.device for t in (sets[0] if sets else []) if isinstance(t, torch.Tensor)), "cpu")
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.torch = torch
        self._plans: list[list[tuple[int, Any, Any, Any]]] = [[] for _ in sets]  # per set: batched draws
        self._next = [0 for _ in sets]

    def _inputs(self, which: int) -> list[tuple[int, Any]]:
        return [(j, t) for j, t in enumerate(self.sets[which]) if perturbable(t, self.k)]

    @staticmethod
    def _flat(t: Any) -> Any:
        """The input as a flat tensor of what is copied: one-byte floats (fp8) as their bytes,
        since gathers and index writes on them are not kernels every build has."""
        import torch

        return t.view(torch.uint8).view(-1) if t.element_size() == 1 else t.view(-1)

    def _draw(self, which: int) -> None:
        """Positions and values for the next `batch` calls on set `which`: distinct positions
        within a call (k evenly spaced offsets from a random base), values copied from other
        positions of the unperturbed set (the same offsets from the base shifted by 1 ... n-1,
        so no position is ever copied onto itself: drawn independently, the two bases met once
        in n calls and that call's inputs were left as they were)."""
        torch, plan = self.torch, []
        for j, t in self._inputs(which):
            n, flat = t.numel(), self._flat(t)
            ar = torch.arange(self.k, device=t.device) * (n // self.k)
            base = torch.randint(n, (self.batch, 1), generator=self.gen, device=t.device)
            idx = (base + ar) % n
            src = (base + torch.randint(1, n, (self.batch, 1), generator=self.gen, device=t.device) + ar) % n
            # values are kept in the input's dtype (bytes reinterpreted for fp8: a view, no kernel)
            plan.append((j, idx, flat[src].view(t.dtype), flat[idx].view(t.dtype)))
        self._plans[which] = plan
        self._next[which] = 0

    def apply(self, which: int) -> list[tuple[int, Any, Any, Any]]:
        if not self._plans[which] or self._next[which] >= self.batch:
            self._draw(which)
        r = self._next[which]
        self._next[which] = r + 1
        rec = []
        for j, idx, new, old in self._plans[which]:
            t = self.sets[which][j]
            self._flat(t)[idx[r]] = new[r].view(torch_uint8()) if t.element_size() == 1 else new[r]
            rec.append((j, idx[r], new[r], old[r]))
        return rec

    def restore(self, rec: list[tuple[int, Any, Any, Any]], which: int) -> None:
        for j, idx, _, old in reversed(rec):
            t = self.sets[which][j]
            self._flat(t)[idx] = old.view(torch_uint8()) if t.element_size() == 1 else old

    @staticmethod
    def report(rec: list[tuple[int, Any, Any, Any]]) -> list[tuple[int, list[int], list[float]]]:
        return Perturber.report_many([rec])[0]

    @staticmethod
    def report_many(recs: list[list[tuple[int, Any, Any, Any]]]) -> list[list[tuple[int, list[int], list[float]]]]:
        """Several calls' perturbations read back at once (two copies to the host in all)."""
        import torch

        parts = [(j, idx, new) for rec in recs for j, idx, new, _ in rec]
        if not parts:
            return [[] for _ in recs]
        positions = torch.cat([idx.reshape(-1) for _, idx, _ in parts]).tolist()
        values = torch.cat([_as_float64(new) for _, _, new in parts]).tolist()
        out, at, it = [], 0, iter(parts)
        for rec in recs:
            calls = []
            for _ in rec:
                j, idx, _ = next(it)
                n = idx.numel()
                calls.append((j, positions[at : at + n], values[at : at + n]))
                at += n
            out.append(calls)
        return out


def _as_float64(values: Any) -> Any:
    """Perturbation values as a flat float64 tensor, every value exact: the judge rebuilds
    the timed call's inputs from them, so a rounded value is an input the kernel never saw
    (float64 as it is; narrower floats through float32, which holds each exactly and which
    one-byte floats convert to in every build)."""
    import torch

    flat = values.reshape(-1)
    return flat if flat.dtype == torch.float64 else flat.float().double()


class StreamHold:
    """Holds a CUDA stream at a point until the host lets it go, so that a whole block of
    timed calls is queued before the GPU starts on it (the idea of nvbench's blocking
    kernel): the GPU then runs the block back to back, and no host launch latency can land
    inside a timed region, however slow or busy the host is.

    The hold is the driver's stream memory operation `cuStreamWaitValue32` on a flag in
    pinned host memory; `release` writes the flag. A watchdog thread releases a hold the
    host has not released within `timeout_s`, so a candidate that synchronises inside its
    call (it would wait on the held GPU, which waits on the host) costs time, never a
    deadlock; `tripped` counts those releases. `create` returns None where the driver
    offers no stream memory operations."""

    def __init__(self, torch: Any, wait: Any, flag: Any, dptr: int, timeout_s: float) -> None:
        import ctypes
        import threading

        self.torch, self._wait, self._flag, self._dptr = torch, wait, flag, dptr
        self._cell = ctypes.c_uint32.from_address(flag.data_ptr())
        self.timeout_s = timeout_s
        self.value = 0
        self.tripped = 0
        self._deadline: float | None = None
        self._closed = False
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name="evokernel-hold-watchdog", daemon=True)
        self._thread.start()

    _shared: dict[float, StreamHold | None] = {}

    @classmethod
    def shared(cls, torch: Any, timeout_s: float = 0.2) -> StreamHold | None:
        """One hold per process and timeout, created on first use (see `create`)."""
        if timeout_s not in cls._shared:
            cls._shared[timeout_s] = cls.create(torch, timeout_s)
        return cls._shared[timeout_s]

    @classmethod
    def create(cls, torch: Any, timeout_s: float = 0.2) -> StreamHold | None:
        import ctypes

        try:
            lib = ctypes.CDLL("libcuda.so.1")
            wait = next(getattr(lib, n) for n in ("cuStreamWaitValue32_v2", "cuStreamWaitValue32") if hasattr(lib, n))
            wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            wait.restype = ctypes.c_int
            get_ptr = lib.cuMemHostGetDevicePointer_v2
            get_ptr.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
            get_ptr.restype = ctypes.c_int
            flag = torch.zeros(4, dtype=torch.int32, pin_memory=True)
            dptr = ctypes.c_uint64(0)
            if get_ptr(ctypes.byref(dptr), ctypes.c_void_p(flag.data_ptr()), 0) != 0:
                return None
            hold = cls(torch, wait, flag, int(dptr.value), timeout_s)
        except (OSError, StopIteration, AttributeError, RuntimeError):
            return None
        # try it once, on a stream of its own (a hold the GPU cannot see released would stall
        # that stream for good): a hold released at once must let the stream through
        try:
            side = torch.cuda.Stream()
            done = torch.cuda.Event()
            hold.hold(side.cuda_stream)
            done.record(side)
            hold.release()
            deadline = time.monotonic() + 1.0
            while not done.query():
                if time.monotonic() > deadline:
                    hold.close()
                    return None
                time.sleep(1e-4)
        except RuntimeError:
            hold.close()
            return None
        return hold

    def hold(self, stream: int | None = None) -> None:
        """Hold `stream` (a CUstream handle; the current stream by default) here."""
        with self._cv:
            self.value = (self.value + 1) & 0x7FFFFFFF
            handle = self.torch.cuda.current_stream().cuda_stream if stream is None else stream
            rc = self._wait(handle, self._dptr, self.value, 0)  # CU_STREAM_WAIT_VALUE_GEQ
            if rc != 0:
                raise RuntimeError(f"cuStreamWaitValue32 failed with CUresult {rc}")
            self._deadline = time.monotonic() + self.timeout_s
            self._cv.notify()

    def release(self) -> None:
        with self._cv:
            self._cell.value = self.value
            self._deadline = None

    def close(self) -> None:
        with self._cv:
            self._cell.value = self.value
            self._closed = True
            self._cv.notify()
        self._thread.join(1.0)

    def _watch(self) -> None:
        with self._cv:
            while not self._closed:
                if self._deadline is None:
                    self._cv.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                self._cell.value = self.value
                self._deadline = None
                self.tripped += 1


def prewarm_cuda(
    input_dtypes: Sequence[Any],
    output_dtypes: Sequence[Any],
    *,
    flush_mb: int = 256,
    hold_timeout_s: float = 0.2,
    device: str = "cuda",
) -> None:
    """Pay the timing harness's first-use costs in a fresh process ahead of time: the flush
    buffer's allocation (kept by torch's caching allocator), the stream hold, and the
    loading of every kernel `time_cuda` and the Perturber launch (fill, random draws, index
    reads and writes, copies, events), each launched once on a handful of elements. Meant
    for the candidate's compile phase, where it runs in parallel with other candidates'
    timings: it touches the GPU for microseconds only. `device`: "cuda" (the current device)
    or "cuda:N"; `device="cpu"` runs the same steps where there is no GPU, for tests."""
    import torch

    from evokernel.judge.device import is_cuda, on_device

    with on_device(device):
        _prewarm(torch, input_dtypes, output_dtypes, flush_mb, hold_timeout_s, device, is_cuda(device))


def _prewarm(
    torch: Any,
    input_dtypes: Sequence[Any],
    output_dtypes: Sequence[Any],
    flush_mb: int,
    hold_timeout_s: float,
    device: str,
    cuda: bool,
) -> None:
    flush = torch.empty(flush_mb * 2**20, dtype=torch.int8, device=device)
    del flush
    if cuda:
        StreamHold.shared(torch, hold_timeout_s)
    small = torch.empty(4096, dtype=torch.int8, device=device)
    small.zero_()
    start = end = None
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    recs = []
    for dtype in dict.fromkeys(input_dtypes):
        t = torch.zeros(64, dtype=dtype, device=device)
        if perturbable(t, 2):
            p = Perturber([[t]], 2, 0, batch=2)
            rec = p.apply(0)
            p.restore(rec, 0)
            recs.append(rec)
        t.clone()
    Perturber.report_many(recs + recs)  # the read-back after the loop: concatenation, copies to the host
    for dtype in dict.fromkeys(output_dtypes):
        torch.zeros(64, dtype=dtype, device=device).copy_(torch.ones(64, dtype=dtype, device=device))
    if start is not None and end is not None:
        end.record()
        end.synchronize()
        start.elapsed_time(end)


class GraphCaptureError(RuntimeError):
    """A call that cannot be captured in a CUDA graph, where the footing asked for graphs."""


def _graphs(fns: list[Callable[[], Any]], torch: Any) -> list[Callable[[], Any]]:
    """Each function captured into a CUDA graph (a replay returns the graph's outputs); a
    call that cannot be captured raises HostSync when the capture failed on a host
    synchronisation, else GraphCaptureError, never a silent fall back to eager timing."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(side)
    runners = []
    try:
        for f in fns:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = f()
            runners.append(lambda g=g, out=out: (g.replay(), out)[1])
    except Exception as exc:
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
        if any(
            s in text.lower()
            for s in (
                "synchroniz",
                "not permitted when stream is capturing",
                "operation would make the legacy stream depend",
            )
        ):
            raise HostSync(
                f"host-synchronising: kernel() waits for the GPU inside the call, so it cannot be "
                f"captured in a CUDA graph ({text})"
            ) from None
        raise GraphCaptureError(
            f"kernel() cannot be captured in a CUDA graph ({text}); time it with "
            "GateOptions(graph='off') if it must run eagerly"
        ) from None
    return runners


def check_no_host_sync(fns: list[Callable[[], Any]], torch: Any, hold: StreamHold | None) -> None:
    """Raise HostSync if a call waits for the GPU from the host. Each function is called
    once with torch's sync debug mode set to "error" (torch raises on `.item()`,
    `.tolist()`, `.cpu()`, blocking copies and the like) and, where the driver can hold a
    stream, with the stream held: a call that synchronises with the device cannot return
    until the hold's watchdog lets the stream go, which the watchdog counts (this catches
    `torch.cuda.synchronize()` and syncs outside torch too). Costs nothing for a call that
    does not synchronise; the hold's timeout for one that does."""
    set_mode = getattr(torch.cuda, "set_sync_debug_mode", None)
    get_mode = getattr(torch.cuda, "get_sync_debug_mode", None)
    for f in fns:
        before = hold.tripped if hold is not None else 0
        old = get_mode() if get_mode is not None else 0
        error: str | None = None
        if hold is not None:
            hold.hold()
        try:
            if set_mode is not None:
                set_mode("error")
            f()
        except RuntimeError as exc:
            text = str(exc)
            if "synchroniz" not in text.lower():
                raise
            error = text.strip().splitlines()[0][:300]
        finally:
            if set_mode is not None:
                set_mode(old)
            if hold is not None:
                hold.release()
        torch.cuda.synchronize()
        if error is not None:
            raise HostSync(
                f"host-synchronising: kernel() synchronises with the GPU inside the call ({error}); "
                "pass host-side values (lengths, maximum lengths) as plain Python arguments instead "
                "of reading them back from device tensors"
            )
        if hold is not None and hold.tripped != before:
            raise HostSync(
                f"host-synchronising: kernel() waited for the GPU inside the call (the held stream "
                f"was let go by the watchdog after {hold.timeout_s:.2f} s): a device or stream "
                "synchronisation, a blocking copy to the host, or an event wait"
            )


def time_cuda(
    fns: list[Callable[[], Any]],
    *,
    watched: dict[str, Any],
    min_reps: int = 30,
    max_reps: int = 1000,
    batch: int = 25,
    rel_ci: float = 0.005,
    max_s: float = 2.0,
    graph: str = "on",  # "on": replay CUDA graphs; "off": held eager launches; "auto": graph under graph_below_ms
    graph_below_ms: float = 0.1,
    flush_mb: int = 256,
    warmup: int = 3,
    warmup_ms: float = 10.0,
    guard_us: float = 50.0,
    hold: int = 16,
    hold_timeout_s: float = 0.2,
    sample: Sampler | None = None,
    perturb: Perturber | None = None,
    phases: dict[str, float] | None = None,
    witness: BlockWitness | None = None,
) -> tuple[list[float], bool, float]:
    """Per-call device times in ms (one input set per call, rotating), whether graphs were
    replayed, and the wall time per call of a device-synchronised loop (no flush), which
    exposes work that escaped the timed stream. It runs on the current CUDA device (the
    candidate's process made it the judge's GPU: `_worker._main`). `sample` sees every timed call's outputs
    right after its end event (outside the timed region). `phases`, if given, receives the
    wall seconds of each step (setup, warmup, probe, graph, measure, escape).

    Every call is first checked for host synchronisation (`check_no_host_sync`): a call that
    waits for the GPU inside the timed region would be timed on another footing than the
    rest, so it raises HostSync instead. With `graph="on"` (the default) every sample is a
    graph replay, and a call that cannot be captured raises (HostSync or GraphCaptureError),
    never a silent fall back to eager launches; `"off"` times held eager launches; `"auto"`
    (graphs below `graph_below_ms`) lets the footing depend on the candidate's speed, so its
    figures compare only with others that landed on the same mode.

    `hold`: timed calls are queued in blocks of this many behind a StreamHold, released
    once the block is queued (0: no hold). Where the hold is off or the driver cannot hold
    a stream, a `guard_us` spin on the GPU before each start event covers the launch
    latency instead.

    `witness`, if given, is told before each measured block (the probe, then the blocks of
    the loop) how many calls it holds, and waits there for the judge's word; it is handed the
    block's samples right after the block's device synchronisation (see `BlockWitness`)."""
    import torch

    Event = watched["torch.cuda.Event"]
    sync = watched["torch.cuda.synchronize"]
    clock = watched["time.perf_counter"]
    phases = phases if phases is not None else {}
    mark = [clock()]

    def lap(name: str) -> None:
        now = clock()
        phases[name] = phases.get(name, 0.0) + now - mark[0]
        mark[0] = now

    flush = torch.empty(flush_mb * 2**20, dtype=torch.int8, device="cuda")
    # The host's launch latency must never land inside a timed region: if the GPU runs dry
    # before a start event, the start fires and the call arrives tens of microseconds later
    # (the perturbation's small kernels and the flush make that likely). Measured on the
    # H200 (docs/lessons.md): no protection, up to +55% on a 0.14 ms matmul; a 50 us
    # spin on the GPU before each start event, spreads under 1% in one call and outliers up
    # to +60% in another (a busy host outlasts any fixed spin). The default now holds the
    # stream while a block of calls is queued (StreamHold); the spin is the fallback.
    holder = StreamHold.shared(torch, hold_timeout_s) if hold > 0 else None
    tripped = holder.tripped if holder is not None else 0
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    guard_cycles = (
        int(guard_us * getattr(props, "clock_rate", 1_500_000) / 1e3) if guard_us > 0 and holder is None else 0
    )
    phases["held"] = 1.0 if holder is not None else 0.0

    def rep(
        runners: list[Callable[[], Any]], k: int, start: Any = None, end: Any = None, check: bool = False
    ) -> tuple[Any, list[Any]]:
        rec = perturb.apply(k) if perturb is not None else []
        flush.zero_()  # noqa: F821 (deleted after the last rep, below)
        if guard_cycles:
            torch.cuda._sleep(guard_cycles)
        if start is not None:
            start.record()
        out = runners[k]()
        if end is not None:
            end.record()
        if check and sample is not None:
            sample(k, out, False, rec)
        if rec:
            perturb.restore(rec, k)  # type: ignore[union-attr]
        return out, rec

    # warm-up: the same steps as a timed call (so every kernel the harness uses is loaded),
    # at least `warmup` rounds and `warmup_ms` of back-to-back work, so the GPU's clocks are
    # up before the first timed call
    lap("setup")
    w0, rounds = clock(), 0
    while rounds < warmup or (clock() - w0) * 1e3 < warmup_ms:
        for k in range(len(fns)):
            rep(fns, k)
        sync()
        rounds += 1

    lap("warmup")
    check_no_host_sync(fns, torch, holder if holder is not None else StreamHold.shared(torch, hold_timeout_s))
    lap("sync_check")
    last: list[Any] = [None, 0, []]

    def measure(runners: list[Callable[[], Any]], n: int, offset: int, check: bool = True) -> list[float]:
        starts = [Event(enable_timing=True) for _ in range(n)]
        ends = [Event(enable_timing=True) for _ in range(n)]
        if witness is not None:
            witness.before(n)  # the judge's clock starts: nothing of this block is queued yet
        try:
            for i in range(n):
                if holder is not None and i % hold == 0:
                    if i:
                        holder.release()
                    holder.hold()
                k = (offset + i) % len(runners)
                out, rec = rep(runners, k, starts[i], ends[i], check=check)
                last[0], last[1], last[2] = out, k, rec
        finally:
            if holder is not None:
                holder.release()
        sync()
        times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        if witness is not None:
            witness.after(times)  # the judge's clock stops when these arrive
        return times

    runners, used_graph = fns, False
    probe = measure(fns, min(5, max_reps), 0, check=False)
    lap("probe")
    if graph not in ("on", "off", "auto"):
        raise ValueError(f"graph must be 'on', 'off' or 'auto', got {graph!r}")
    if graph == "on" or (graph == "auto" and statistics.median(probe) < graph_below_ms):
        runners, used_graph = _graphs(fns, torch), True
        for r in runners:
            r()
        sync()
        lap("graph")
    samples: list[float] = []
    t0 = clock()
    while True:
        step = min_reps if not samples else batch
        samples += measure(runners, max(1, min(step, max_reps - len(samples))), len(samples))
        if len(samples) >= max_reps or clock() - t0 > max_s:
            break
        if len(samples) >= min_reps and relative_ci(samples) <= rel_ci:
            break
    if sample is not None:
        sample(last[1], last[0], True, last[2])
    lap("measure")
    med = statistics.median(samples)
    # Work that escaped the timed stream: the device-synchronised wall time of `reps` calls,
    # without flush or events. Under a hold, the clock starts when the held calls are let go,
    # so a candidate that takes longer to launch than to run (many small kernels) is not
    # mistaken for one whose work escaped: its launches are all queued by then. Work on
    # another stream that waits for the timed one (it must: the inputs change before each
    # call) is held too, and counted; the device synchronisation waits for every stream.
    reps = max(3, min(hold if holder is not None else 20, 20, int(0.02 / max(med * 1e-3, 1e-6))))
    wall_ms = math.inf
    for _ in range(3):  # the least of up to three tries: a busy host can stall one of them
        sync()
        if holder is not None:
            before = holder.tripped
            holder.hold()
            for i in range(reps):
                runners[i % len(runners)]()
            w0 = clock()
            holder.release()
            sync()
            if holder.tripped != before:  # the host could not queue them all in time: unheld
                holder = None
                continue
        else:
            w0 = clock()
            for i in range(reps):
                runners[i % len(runners)]()
            sync()
        wall_ms = min(wall_ms, (clock() - w0) / reps * 1e3)
        if wall_ms <= 1.5 * med + 0.05:
            break
    del flush
    shared = StreamHold.shared(torch, hold_timeout_s) if hold > 0 else None
    if shared is not None:
        shared.release()
        phases["hold_tripped"] = float(shared.tripped - tripped)
    lap("escape")
    return samples, used_graph, wall_ms


def time_cpu(
    fns: list[Callable[[], Any]],
    *,
    min_reps: int = 5,
    max_reps: int = 50,
    rel_ci: float = 0.02,
    max_s: float = 2.0,
    warmup: int = 1,
    sample: Sampler | None = None,
    watched: dict[str, Any] | None = None,
    perturb: Perturber | None = None,
    **_: Any,
) -> tuple[list[float], bool, float]:
    """The CPU counterpart: wall time per call, rotating inputs (on the clock captured
    before any candidate code ran, not on whatever `time.perf_counter` is now)."""
    clock = (watched or {}).get("time.perf_counter", time.perf_counter)
    for _ in range(warmup):
        for f in fns:
            f()
    samples: list[float] = []
    t_end = clock() + max_s
    i, out, rec = 0, None, []
    while len(samples) < max_reps:
        k = i % len(fns)
        rec = perturb.apply(k) if perturb is not None else []
        t0 = clock()
        out = fns[k]()
        samples.append((clock() - t0) * 1e3)
        if sample is not None:
            sample(k, out, False, rec)
        if rec:
            perturb.restore(rec, k)  # type: ignore[union-attr]
        i += 1
        if len(samples) >= min_reps and (relative_ci(samples) <= rel_ci or clock() > t_end):
            break
    if sample is not None:
        sample((i - 1) % len(fns), out, True, rec)
    return samples, False, statistics.median(samples)


def time_judged(
    call: Callable[[int, bool], float],
    sets: int,
    *,
    min_reps: int = 5,
    max_reps: int = 50,
    rel_ci: float = 0.02,
    max_s: float = 2.0,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
    **_: Any,
) -> list[float]:
    """The judge's side of CPU timing: `call(k, timed)` runs one call on rotation set `k` in
    the candidate's process and returns the time the judge saw, in ms (its own clock around
    the message and the answer); `timed` is False for the warm-up. The same rotation and
    stopping rule as `time_cpu`, with no number from the candidate's process in them.

    >>> time_judged(lambda k, timed: 1.0 + k, 2, min_reps=4, max_reps=4)
    [1.0, 2.0, 1.0, 2.0]
    """
    for _ in range(warmup):
        for k in range(sets):
            call(k, False)
    samples: list[float] = []
    t_end = clock() + max_s
    i = 0
    while len(samples) < max_reps:
        samples.append(call(i % sets, True))
        i += 1
        if len(samples) >= min_reps and (relative_ci(samples) <= rel_ci or clock() > t_end):
            break
    return samples


class BlockWitness:
    """What `time_cuda` tells the judge about each measured block: `before(calls)` when the
    block is about to be queued (it waits there for the judge's word, when the judge's clock
    starts), `after(samples_ms)` right after the block's device synchronisation (when the
    judge's clock stops). The worker's implementation sends messages; this one does nothing."""

    def before(self, calls: int) -> None:
        pass

    def after(self, samples_ms: list[float]) -> None:
        pass


class Bracket(msgspec.Struct, frozen=True):
    """One measured block as the judge saw it: the wall time from its word to go to the
    block's samples arriving (its own clock), the samples reported, and whether the calls
    were graph replays (where a call's cost outside its events is the harness's alone)."""

    window_ms: float
    samples_ms: list[float]
    graph: bool = False


def bracket_misfit(
    blocks: Sequence[Bracket], *, overhead_ms: float | None, constant_ms: float, tol: float, eps_ms: float = 0.01
) -> str | None:
    """Why the reported samples cannot be what the judge observed, or None.

    (a) In every block the samples add up to no more than the window (the calls ran one
    after another within it; `eps_ms` and 0.1% for the two clocks). (b) Over the graph-replay
    blocks, the samples add up to at least what is left of the windows once `overhead_ms` per
    call (the harness's own work around each call: flush, perturbation, launch, copies,
    calibrated by the judge on a trusted candidate and overstated) and `constant_ms` per
    block (messages, waking up, the synchronisation) are taken off, within `tol`. (b) is
    checked on the blocks together, so one block the judge was late to read (its own host
    busy) does not reject an honest candidate; it is skipped where `overhead_ms` is None.

    >>> fair = [Bracket(5.0, [1.0] * 4, True)]
    >>> bracket_misfit(fair, overhead_ms=0.2, constant_ms=0.5, tol=0.05) is None
    True
    >>> bracket_misfit([Bracket(5.0, [0.05] * 4, True)], overhead_ms=0.2, constant_ms=0.5, tol=0.05)[:32]
    'the samples add up to 0.2000 ms '
    """
    for i, b in enumerate(blocks):
        total = math.fsum(b.samples_ms)
        if not total <= b.window_ms * 1.001 + eps_ms:
            return (
                f"the samples of block {i} add up to {total:.4f} ms, more than the {b.window_ms:.4f} ms "
                f"the judge saw the block take ({len(b.samples_ms)} calls)"
            )
    graphs = [b for b in blocks if b.graph]
    if overhead_ms is None or not graphs:
        return None
    total = math.fsum(math.fsum(b.samples_ms) for b in graphs)
    window = math.fsum(b.window_ms for b in graphs)
    calls = sum(len(b.samples_ms) for b in graphs)
    floor = (window - calls * overhead_ms - len(graphs) * constant_ms) / (1 + tol)
    if total < floor:
        return (
            f"the samples add up to {total:.4f} ms over {calls} calls in {len(graphs)} blocks, the judge "
            f"saw {window:.4f} ms pass; at most {overhead_ms:.4f} ms per call and {constant_ms:.2f} ms per "
            f"block are the harness's, so the calls took at least {floor:.4f} ms"
        )
    return None
