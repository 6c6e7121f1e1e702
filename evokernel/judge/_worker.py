"""The candidate's side of the sandbox: runs in a process of its own, forked from a server
that imported torch and triton but never touched CUDA.

It imports the candidate, compiles it, runs it on inputs the judge (the parent process)
shares with it, copies the outputs into result slots the judge owns, and times it. It never
sees a reference answer and never reports a verdict: the judge compares. Messages to the
judge are msgspec structs, never pickles, so nothing the candidate sends is executed.

No figure the judge ranks on rests on a number this process reports alone. On the CPU the
judge times each call itself (a `tcall` message, the call, the outputs copied into the
judge's slot, a `Done`: `_timed_call`). On the GPU the timing loop runs here (CUDA events
are per process), and the judge brackets each measured block with its own clock (`Ask`, its
word to go, `Block`: `_Witness`).

The harness keeps references to the torch functions and the timing harness
(`evokernel.judge.timing`) it relies on, taken before any candidate code runs, calls those,
and reports a candidate that replaced them (`_tampering`): the names in torch, time,
builtins, the timing module and this one, the code object of each function of those two
modules, and the modules in `sys.modules`. It looks before and after each call, before and
after each timing, and at each timed call whose outputs it copies (moments the candidate
cannot foresee). That is a check, not a wall: the candidate runs in this process, and code
that means to can still reach the harness's state (its frames, its lists) between two
looks. The judge's own checks of the outputs (the copies, the re-check after timing) and its
timing do not depend on it.
"""

# One module on purpose, though over 400 lines: this is the candidate's whole side of the protocol and runs in a forked
# process whose imports are fixed by the fork server's preload list; keeping it one module keeps that list, and what a
# candidate process can reach, short and auditable.

from __future__ import annotations

import builtins
import importlib.util
import inspect
import math
import os
import secrets
import sys
import threading
import time
import traceback
import warnings
from typing import Any

import msgspec
import torch

from evokernel.core.readable import readable
from evokernel.judge import timing as _timing
from evokernel.judge.device import cuda_index, device_kind

__all__ = ["main", "Sandboxed", "Ready", "Done", "Timing", "Ask", "Block", "Failed", "WorkerMessage", "VALUE_PREFIX"]

_type = builtins.type
_isinstance = builtins.isinstance
_perf_counter = time.perf_counter
_Tensor = torch.Tensor
_copy = torch.Tensor.copy_
_randbelow = secrets.randbelow
_randbits = secrets.randbits
_current_stream = torch.cuda.current_stream
_getattr = builtins.getattr
_getattr_static = inspect.getattr_static
_modules = sys.modules
# the timing harness, bound before any candidate code runs: a candidate that rebinds
# `evokernel.judge.timing.time_cpu` (or any of these) changes nothing the worker calls
_time_cpu = _timing.time_cpu
_time_cuda = _timing.time_cuda
_prewarm_cuda = _timing.prewarm_cuda
_Perturber = _timing.Perturber
_HostSync = _timing.HostSync
_GraphCaptureError = _timing.GraphCaptureError
_TIMING = {
    "torch.cuda.Event": torch.cuda.Event,
    "torch.cuda.synchronize": torch.cuda.synchronize,
    "time.perf_counter": time.perf_counter,
}

#: the dtype field of a reference to a plain (host-side) input value: "py:" + its JSON (the
#: judge's `gate._value_ref` writes them)
VALUE_PREFIX = "py:"


def _plain_value(dtype: str) -> Any:
    """A plain input value from its reference (JSON lists back to tuples, as the judge sent them)."""

    def tuples(x: Any) -> Any:
        return tuple(tuples(v) for v in x) if _isinstance(x, list) else x

    return tuples(msgspec.json.decode(dtype[len(VALUE_PREFIX) :]))


# what the harness relies on, captured before any candidate code runs: path -> object
_WATCHED: dict[str, Any] = {}
# where watched paths start (the longest that prefixes a path), and the modules that must stay
# the ones in sys.modules (a function's own `import torch` reads it from there)
_ROOTS: dict[str, Any] = {
    "torch": torch,
    "time": time,
    "builtins": builtins,
    "evokernel.judge.timing": _timing,
    __name__: sys.modules[__name__],
}


def _way(path: str) -> tuple[Any, tuple[str, ...]]:
    """Where a dotted path starts (the longest of `_ROOTS` that prefixes it) and its steps."""
    root = max((r for r in _ROOTS if path == r or path.startswith(r + ".")), key=len)
    return _ROOTS[root], tuple(path[len(root) + 1 :].split(".")) if path != root else ()


def _follow(obj: Any, steps: tuple[str, ...]) -> Any:
    """The object `steps` lead to from `obj`; for class attributes the raw descriptor, which
    is stable (so `X.f.__func__.__code__` for a staticmethod)."""
    for step in steps:
        obj = _getattr_static(obj, step, None) if _isinstance(obj, _type) else _getattr(obj, step, None)
    return obj


def _resolve(path: str) -> Any:
    """The object at a dotted path from one of `_ROOTS`."""
    return _follow(*_way(path))


_WAYS: dict[str, tuple[Any, tuple[str, ...]]] = {}  # path -> (start, steps): found once, followed at each look


def _watch(path: str) -> None:
    _WAYS[path] = _way(path)
    _WATCHED[path] = _follow(*_WAYS[path])


for _path in (
    "torch.cuda.synchronize",
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.current_stream",
    "torch.cuda.Stream.synchronize",
    "torch.cuda.CUDAGraph",
    "torch.cuda.graph",
    "torch.Tensor",
    "torch.Tensor.copy_",
    "torch.Tensor.zero_",
    "torch.Tensor.fill_",
    "torch.Tensor.data_ptr",
    "torch.Tensor.untyped_storage",
    "torch.Tensor.__torch_function__",
    "torch.empty",
    "torch.empty_like",
    "torch.randn",
    "torch.randint",  # the perturbations' positions (timing.Perturber)
    "torch.arange",
    "torch.cat",
    "torch.Generator",
    "torch.Generator.manual_seed",
    "torch.allclose",
    "torch.equal",
    "time.perf_counter",
    "time.perf_counter_ns",
    "builtins.type",
    "builtins.isinstance",
):
    _watch(_path)


def _tampering() -> str | None:
    """Which watched function (or code object, or module) the candidate replaced, or an
    active torch mode, if any."""
    changed = [p for p, way in _WAYS.items() if _follow(*way) is not _WATCHED[p]]
    changed += [
        f"sys.modules[{name!r}]" for name, m in _ROOTS.items() if name != "builtins" and _modules.get(name) is not m
    ]
    changed += [f"{__name__}._TIMING[{name!r}]" for name, f in _TIMING.items() if _WATCHED.get(name) is not f]
    changed = [p for p in changed if not any(p.startswith(q + ".") for q in changed)]  # a rebinding says it all
    if changed:
        return (
            "candidate replaced "
            + ", ".join(changed[:12])
            + (f" and {len(changed) - 12} more" if len(changed) > 12 else "")
        )
    for name in ("_len_torch_function_stack", "_len_torch_dispatch_stack"):
        fn = getattr(torch._C, name, None)
        if fn is not None and fn() > 0:
            return "candidate left a torch function/dispatch mode active"
    return None


# -- messages to the judge ----------------------------------------------------------------
class Ready(msgspec.Struct, tag="ready"):
    import_s: float
    compile_s: float
    # wall-clock stamps (time.time()) of the process's steps, for the judge's breakdown of the
    # time from launch to ready: entered, set up (privileges, cache seed), CUDA up, prewarmed
    stamps: dict[str, float] = {}
    triton_kernels: int = 0


class Done(msgspec.Struct, tag="done"):
    trial: int
    ok: bool
    kind: str = ""  # raised, structure, aliasing, tampering, cuda_error
    error: str = ""
    call_s: float = 0.0


class Timing(msgspec.Struct, tag="timing"):
    shape: str
    samples_ms: list[float]
    graph: bool
    wall_ms_per_call: float
    sampled: list[int] = []  # for each sample slot filled, the rotation set of that timed call
    # for each sample slot, how that call's inputs differed from the set: (input, positions, values)
    perturbations: list[list[tuple[int, list[int], list[float]]]] = []
    phases: dict[str, float] = {}  # wall seconds of the harness's steps (bench.time_cuda)
    ok: bool = True
    kind: str = ""
    error: str = ""


class Ask(msgspec.Struct, tag="ask"):
    """Before each measured block of a CUDA timing: the block is about to be queued (its
    calls); the worker waits for the judge's ("go",), when the judge's clock starts."""

    calls: int


class Block(msgspec.Struct, tag="block"):
    """A measured block's samples, sent right after its device synchronisation: the judge's
    clock stops when they arrive (`timing.bracket_misfit` holds them to that window)."""

    samples_ms: list[float]


class Failed(msgspec.Struct, tag="failed"):
    kind: str  # import, no_kernel, compile, setup, sandbox
    error: str


class Sandboxed(msgspec.Struct, tag="sandboxed"):
    """The keeper's first message, before the candidate's process may run: that process's
    pid as the judge sees it (pid 1 of its own PID namespace, when it has one)."""

    pid: int


WorkerMessage = Sandboxed | Ready | Done | Timing | Failed | Ask | Block
_encoder = msgspec.msgpack.Encoder()


def _send(conn: Any, msg: Any) -> None:
    conn.send_bytes(_encoder.encode(msg))


def _error_text(exc: BaseException, limit: int = 1500) -> str:
    """The exception as text, its innermost cause first: Triton raises a compile error in a
    called function as the caller's CompilationError (a source excerpt pointing at the call)
    from the callee's, so the reason sits at the end of the chain (read from the outermost
    one, a compile error is an excerpt without a reason)."""
    chain, seen = [exc], {id(exc)}
    while chain[-1].__cause__ is not None and id(chain[-1].__cause__) not in seen:
        chain.append(chain[-1].__cause__)
        seen.add(id(chain[-1]))
    # the outermost exception that still states the innermost's message: the callee's
    # CompilationError (its excerpt and the reason) rather than the bare reason
    reason = next(e for e in chain if str(chain[-1]) in str(e))
    text = f"{_type(exc).__name__}: {exc}"
    if reason is not exc:
        text = f"{_type(reason).__name__}: {reason}\n(raised from) {text}"
    return text if len(text) <= limit else text[: limit - 20] + " ... [truncated]"


def _is_cuda_error(text: str) -> bool:
    low = text.lower()
    return any(
        s in low
        for s in (
            "cuda error",
            "illegal memory access",
            "device-side assert",
            "unspecified launch failure",
            "misaligned address",
            "cudaerror",
        )
    )


# -- setup ---------------------------------------------------------------------------------
class Setup(msgspec.Struct):
    source: str  # the candidate module's text
    device: str  # "cpu" or "cuda:N" (the judge's GPU, by index: this process's "cuda" would be GPU 0)
    log_path: str
    work_dir: str  # candidate file, triton cache
    input_specs: list[list[tuple[list[int], list[int], str]]]  # per shape: (shape, stride, dtype) per input
    uid: int | None = None  # run as this user (the judge runs as root): no signals, /proc or files of the judge
    memory_bytes: int | None = None  # address-space limit (CPU candidates)
    # Triton cache entries built by trusted processes (the driver's C utilities, kernel
    # launchers), copied into this candidate's own cache so it does not rebuild them
    seed_cache: str | None = None
    output_dtypes: list[str] = []  # the reference's output dtypes, for prewarm
    prewarm: bool = True  # load the timing harness's kernels while compiling (bench.prewarm_cuda)
    reusable: bool = False  # a trusted candidate's process: after a failed import or compile, wait for the next
    isolation: list[str] = []  # the protections to set up (evokernel.judge._isolation.PROTECTIONS)
    shared_files: list[str] = []  # stay writable inside (the judge's CUDA block's reference counter)
    readable: list[str] = []  # stay readable inside (the Triton cache seed)
    output_bytes: int = 4 << 20  # what the candidate prints is cut after this many bytes
    file_bytes: int = 1 << 30  # no file the candidate writes grows past this (RLIMIT_FSIZE)
    # the host uid and gid its root stands for (the judge is root): [uid, gid]; empty: the judge's
    map_to: list[int] = []
    exposed: list[str] = []  # the host paths its root is built from (read-only); empty: the defaults
    private_work: bool = False  # its folder on the capped scratch file system, not the host's
    tmp_bytes: int = 1 << 30  # the scratch file system (/tmp and a private folder together)
    host_shm_writable: bool = True  # where it keeps the host's /dev/shm (CUDA): writable or read-only
    processes: int = 512  # RLIMIT_NPROC, and the pids cgroup's cap (processes and threads)
    pids_cgroup: str = ""  # the cgroup.procs file of the candidate's pids cgroup (the judge made it)


def _plan(setup: Setup) -> Any:
    """The sandbox `setup` asks for (`evokernel.judge._isolation.Plan`)."""
    import evokernel.judge._isolation as _isolation

    return _isolation.Plan(
        protections=frozenset(setup.isolation),
        work_dir=setup.work_dir,
        shared_files=tuple(setup.shared_files),
        readable=tuple(setup.readable),
        exposed=tuple(setup.exposed),
        private_work=setup.private_work,
        file_bytes=setup.file_bytes,
        tmp_bytes=setup.tmp_bytes,
        host_shm_writable=setup.host_shm_writable,
        processes=setup.processes,
    )


def _keep_output(fd: int, log_fd: int, limit: int, child: int) -> None:
    """Copy what the candidate's processes print (the pipe `fd`) into the log `log_fd`, up
    to `limit` bytes and a note; the rest is read and dropped, so no writer blocks. Returns
    once every writer is gone, or once the candidate's process has exited and the pipe is
    drained (a descendant outside a PID namespace may hold it open)."""
    written, noted = 0, False
    with open(log_fd, "ab", buffering=0) as log:
        while True:
            ready = [fd] if readable(fd, 0.5) else []
            if not ready:
                if os.waitpid(child, os.WNOHANG)[0]:
                    os.set_blocking(fd, False)
                    ready = [fd]
                else:
                    continue
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                return
            if written < limit:
                log.write(data[: limit - written])
                written += min(len(data), limit - written)
            elif not noted:
                log.write(f"\n[evokernel: output cut after {limit} bytes]\n".encode())
                noted = True


def _threads() -> int:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        return 1


def _exit_as(status: int) -> None:
    """Exit the way the candidate's process did (its signal, or its exit code)."""
    import signal

    if os.WIFSIGNALED(status):
        import resource

        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the signal, not a core file of the keeper
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1)


def _seed_cache(seed: str, cache_dir: str) -> None:
    """Copy the seed's entries (one folder per cache key) into this candidate's own cache;
    a copy, so nothing the candidate writes reaches another candidate."""
    import shutil

    try:
        entries = list(os.scandir(seed))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
            try:
                shutil.copytree(entry.path, os.path.join(cache_dir, entry.name), dirs_exist_ok=True)
            except OSError:
                pass  # a half-written seed entry: this candidate builds its own


def _import_candidate(source: str, work_dir: str, n: int = 0) -> Any:
    """Import the n-th candidate this process serves (a file and module name of its own, so
    no bytecode cache or module of an earlier candidate can stand in for it)."""
    name = "evokernel_candidate" if n == 0 else f"evokernel_candidate_{n}"
    path = os.path.join(work_dir, f"{name}.py")
    with open(path, "w") as f:
        f.write(source)
    for old in [m for m in sys.modules if m.startswith("evokernel_candidate")]:
        del sys.modules[old]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _compile_only(kernel: Any, specs: list[list[tuple[list[int], list[int], str]]], device: str) -> tuple[int, str]:
    """Call the kernel once per shape with Triton launches turned into compilations.

    Triton's JIT compiles without launching when asked to warm up; each compiled kernel is
    then loaded and given its launcher (a small C stub Triton builds with the system
    compiler), so the first checked call launches at once. The candidate's host code runs,
    but no Triton kernel touches the GPU: compiling here does not disturb a timing that
    another candidate runs at the same moment. Returns (compilations, first compile error)."""
    try:
        from triton.runtime.jit import JITFunction
    except Exception:  # no triton: nothing to compile
        return 0, ""
    original = JITFunction.run
    count, errors = [0], []

    def compile_only(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        count[0] += 1
        try:
            compiled = original(self, *args, grid=grid, warmup=True, **kwargs)
            init = getattr(compiled, "_init_handles", None)
            if init is not None:
                init()  # loads the binary and builds the launcher; raises OutOfResources
        except Exception as exc:
            errors.append(_error_text(exc))
            raise
        return compiled

    JITFunction.run = compile_only  # type: ignore[method-assign]
    try:
        for shape_specs in specs:
            inputs = [
                _plain_value(dtype)
                if dtype.startswith(VALUE_PREFIX)
                else torch.empty_strided(tuple(shape), tuple(stride), dtype=getattr(torch, dtype), device=device)
                for shape, stride, dtype in shape_specs
            ]
            try:
                kernel(*inputs)
            except Exception:
                # host code that reads the (garbage) outputs may fail here; the checked
                # calls will compile whatever this did not
                pass
    finally:
        JITFunction.run = original  # type: ignore[method-assign]
    return count[0], errors[0] if errors else ""


# -- the calls -----------------------------------------------------------------------------
def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _check_outputs(out: Any, slots: list[torch.Tensor], inputs: list[torch.Tensor]) -> tuple[str, str] | None:
    outs = list(out) if _isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(slots):
        return "structure", f"kernel returned {len(outs)} outputs, the reference {len(slots)}"
    spans = [_storage_span(t) for t in inputs if _isinstance(t, _Tensor) and t.numel()]
    for i, (o, slot) in enumerate(zip(outs, slots)):
        if _type(o) is not _Tensor:
            return (
                "structure",
                f"output {i} is a {_type(o).__module__}.{_type(o).__qualname__}, not a plain torch.Tensor",
            )
        if tuple(o.shape) != tuple(slot.shape):
            return "structure", f"output {i} has shape {tuple(o.shape)}, the reference {tuple(slot.shape)}"
        if o.dtype != slot.dtype:
            return "structure", f"output {i} has dtype {o.dtype}, the reference {slot.dtype}"
        if o.device.type != slot.device.type:
            return "structure", f"output {i} is on {o.device}, the reference on {slot.device}"
        if o.numel():
            lo, hi = _storage_span(o)
            if any(lo < b and a < hi for a, b in spans):
                return "aliasing", f"output {i} shares memory with an input"
    return None


def poison_value(t: torch.Tensor) -> float | complex | int:
    """What judge-owned memory holds before a candidate writes it: NaN (in both parts of a
    complex number), -1 for integers (True for booleans). The gate fills its output slots
    with it, the worker the memory the allocator hands out next (`_poison`)."""
    if t.is_complex():
        return complex(math.nan, math.nan)
    return math.nan if t.is_floating_point() else -1


def _poison(slots: list[torch.Tensor], device: str) -> None:
    """Fill memory the caching allocator will hand out next with `poison_value`, so an output
    the candidate allocates and never writes cannot hold a plausible answer."""
    if device != "cuda":
        return
    blocks = [torch.empty_like(s).fill_(poison_value(s)) for s in slots]
    del blocks


def _raised(conn: Any, trial: int, exc: Exception) -> None:
    text = _error_text(exc)
    _send(conn, Done(trial=trial, ok=False, kind="cuda_error" if _is_cuda_error(text) else "raised", error=text))


def _call(
    conn: Any, kernel: Any, trial: int, inputs: list[torch.Tensor], slots: list[torch.Tensor], device: str
) -> None:
    tamper = _tampering()
    if tamper:
        _send(conn, Done(trial=trial, ok=False, kind="tampering", error=tamper))
        return
    _poison(slots, device)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    threads_before = threading.active_count()
    t0 = _perf_counter()
    try:
        out = kernel(*inputs)
        if device == "cuda":
            # only the current stream: work left on another stream is not done when timed
            _current_stream().synchronize()
    except Exception as exc:
        return _raised(conn, trial, exc)
    finally:
        torch.use_deterministic_algorithms(False)
    call_s = _perf_counter() - t0
    tamper = _tampering()
    if tamper:
        _send(conn, Done(trial=trial, ok=False, kind="tampering", error=tamper))
        return
    bad = _check_outputs(out, slots, inputs)
    if bad is not None:
        _send(conn, Done(trial=trial, ok=False, kind=bad[0], error=bad[1]))
        return
    outs = list(out) if _isinstance(out, (tuple, list)) else [out]
    try:
        for o, slot in zip(outs, slots):
            _copy(slot, o)
        if device == "cuda":
            _current_stream().synchronize()
    except Exception as exc:
        return _raised(conn, trial, exc)
    if threading.active_count() > threads_before:
        _send(conn, Done(trial=trial, ok=False, kind="threads", error="kernel left a thread running after it returned"))
        return
    _send(conn, Done(trial=trial, ok=True, call_s=call_s))


class _Reservoir:
    """Which timed calls' outputs the judge checks: a uniform draw of `k = len(slots)` of all
    the timed calls (reservoir sampling, Algorithm R), made after each call returned and from
    the OS's randomness. The candidate cannot know which calls are checked, and no call is
    safe: the n-th is taken with chance k/n, into a slot drawn at random, whatever came
    before (a fixed chance per call until the slots were full left every call past the first
    few dozen unchecked). The outputs are copied at once (the candidate may reuse its output
    buffer), a replaced slot's copy overwritten; over n calls that is k(1 + H(n) - H(k))
    copies on average, about k(1 + ln(n/k)): 45 for 8 slots and 1000 calls, none of them
    inside a timed region. Each copy is also a look for tampering (`_tampering`), at a
    moment the candidate cannot foresee."""

    def __init__(self, slots: list[list[torch.Tensor]]) -> None:
        self.slots = slots
        self.sampled: list[int] = []  # per slot filled: the rotation set of the call it holds
        self.pending: list[Any] = []  # per slot filled: that call's perturbation, read back after the loop
        self.seen = 0  # timed calls offered
        self.tampered: str | None = None  # what a look during the timing found

    def offer(self, which: int, out: Any, last: bool, rec: Any) -> None:
        """The timing harness's sampler (`timing.Sampler`), after each timed call; once more
        for the final call (`last`), taken then only if no slot is filled."""
        if last:
            if not self.sampled and self.slots:
                self._take(0, which, out, rec)
            return
        self.seen += 1
        slot = self.seen - 1 if self.seen <= len(self.slots) else _randbelow(self.seen)
        if slot < len(self.slots):
            self._take(slot, which, out, rec)

    def _take(self, slot: int, which: int, out: Any, rec: Any) -> None:
        outs = list(out) if _isinstance(out, (tuple, list)) else [out]
        for o, dst in zip(outs, self.slots[slot]):
            _copy(dst, o)
        if slot == len(self.sampled):
            self.sampled.append(which)
            self.pending.append(rec)  # read back after the timing loop: a read-back here would sync
        else:
            self.sampled[slot], self.pending[slot] = which, rec
        if self.tampered is None:
            self.tampered = _tampering()


class _Witness(_timing.BlockWitness):
    """The judge's view of each measured block of a CUDA timing (`timing.BlockWitness`): it
    asks before the block and waits for the judge's word, and sends the samples right after
    the block's synchronisation. The judge's clock, not these messages, is what it trusts."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def before(self, calls: int) -> None:
        _send(self.conn, Ask(calls=calls))
        if self.conn.recv() != ("go",):
            raise RuntimeError("the judge did not let the timed block go")

    def after(self, samples_ms: list[float]) -> None:
        _send(self.conn, Block(samples_ms=list(samples_ms)))


def _timed_call(conn: Any, kernel: Any, n: int, inputs: list[torch.Tensor], slots: list[torch.Tensor]) -> None:
    """One call the judge times itself (CPU): its clock runs from its message to this
    answer. The outputs are copied into the judge's slot before answering; the judge reads
    the slot (when it checks this call) at once, with this process stopped."""
    try:
        out = kernel(*inputs)
    except Exception as exc:
        return _raised(conn, n, exc)
    bad = _check_outputs(out, slots, inputs)
    if bad is not None:
        _send(conn, Done(trial=n, ok=False, kind=bad[0], error=bad[1]))
        return
    try:
        for o, slot in zip(list(out) if _isinstance(out, (tuple, list)) else [out], slots):
            _copy(slot, o)
    except Exception as exc:
        return _raised(conn, n, exc)
    _send(conn, Done(trial=n, ok=True))


def _look(conn: Any) -> None:
    """A look for tampering when the judge asks (after a timed call it checks: a moment the
    candidate cannot foresee)."""
    tamper = _tampering()
    _send(conn, Done(trial=-1, ok=tamper is None, kind="tampering" if tamper else "", error=tamper or ""))


def _time(
    conn: Any,
    kernel: Any,
    shape: str,
    sets: list[list[torch.Tensor]],
    sample_slots: list[list[torch.Tensor]],
    spec: dict[str, Any],
    device: str,
) -> None:
    def failed(kind: str, error: str) -> None:
        _send(
            conn,
            Timing(shape=shape, samples_ms=[], graph=False, wall_ms_per_call=0.0, ok=False, kind=kind, error=error),
        )

    tamper = _tampering()
    if tamper:
        return failed("tampering", tamper)
    spec = dict(spec)
    spec.pop("sample_rate", None)  # no longer used: every timed call may be drawn (`_Reservoir`)
    k = int(spec.pop("perturb", 8))
    reservoir = _Reservoir(sample_slots)
    phases: dict[str, float] = {}
    try:
        perturber = _Perturber(sets, k, _randbits(62)) if k > 0 else None
        fns = [(lambda s=s: kernel(*s)) for s in sets]
        if device == "cuda":
            samples, graph, wall = _time_cuda(
                fns,
                **spec,
                watched=_TIMING,
                sample=reservoir.offer,
                perturb=perturber,
                phases=phases,
                witness=_Witness(conn),
            )
        else:
            samples, graph, wall = _time_cpu(fns, **spec, sample=reservoir.offer, watched=_TIMING, perturb=perturber)
        t0 = _perf_counter()
        perturbations = _Perturber.report_many(reservoir.pending)
        phases["report"] = _perf_counter() - t0
    except Exception as exc:
        text = _error_text(exc)
        if _isinstance(exc, _HostSync):
            return failed("host_sync", str(exc))
        if _isinstance(exc, _GraphCaptureError):
            return failed("graph_capture", str(exc))
        return failed("cuda_error" if _is_cuda_error(text) else "raised", text)
    tamper = reservoir.tampered or _tampering()
    if tamper:
        return failed("tampering", tamper)
    _send(
        conn,
        Timing(
            shape=shape,
            samples_ms=samples,
            graph=graph,
            wall_ms_per_call=wall,
            sampled=reservoir.sampled,
            perturbations=perturbations,
            phases=phases,
        ),
    )


# -- entry point ---------------------------------------------------------------------------
def _map_block(arena: Any) -> Any:
    """The judge's block: as sent (a CPU tensor in shared memory), or mapped here from the
    CUDA IPC handles the judge sent (see sandbox.py: the judge shares it by hand). Before
    the process drops its privileges (after it, the mapping fails with "mapping of buffer
    object failed")."""
    if isinstance(arena, tuple) and arena and arena[0] == "cuda-ipc":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        return rebuild_cuda_tensor(*arena[1])  # (it initialises CUDA first, as it must)
    return arena


def _viewer(arena: Any) -> Any:
    """Turns (byte offset, shape, dtype) into a view of the judge's block."""

    def view(ref: Any) -> Any:
        off, shape, dtype = ref
        if dtype.startswith(VALUE_PREFIX):  # a plain host-side input, carried in the reference itself
            return _plain_value(dtype)
        dt = getattr(torch, dtype)
        n = math.prod(shape) * dt.itemsize
        return arena[off : off + n].view(dt).view(tuple(shape))

    return view


def main(conn: Any, setup_bytes: bytes, arena: Any = None) -> None:
    """Process entry (forked from the server): the keeper. It enters the sandbox's
    namespaces, forks the candidate's process (pid 1 of the new PID namespace), tells the
    judge that process's pid, keeps what it prints (capped), and exits as it did. The keeper
    runs no candidate code; it stays outside the PID namespace, unseen by the candidate."""
    import evokernel.judge._isolation as _isolation

    setup = msgspec.msgpack.decode(setup_bytes, type=Setup)
    os.setsid()  # the judge signals the whole group: the keeper and the candidate's process
    if setup.pids_cgroup:  # its cap on tasks holds whoever it is outside (root is exempt from RLIMIT_NPROC)
        from evokernel.judge._cgroup import join

        try:
            join(setup.pids_cgroup)
        except OSError as exc:
            _send(conn, Failed(kind="sandbox", error=f"cannot join the candidate's pids cgroup: {exc}"))
            return
    if setup.isolation:
        # the fork server ends with its judge: the keeper with it, then the candidate's process
        # (its own parent-death signal), then its namespace; nothing outlives a killed judge
        _isolation.die_with_parent()
    if setup.isolation and _threads() > 1:
        # started from a fresh interpreter (the fork server serves the other device): its
        # threads would keep it from entering a user namespace; a forked child has none
        child = os.fork()
        if child:
            conn.close()
            _, status = os.waitpid(child, 0)
            _exit_as(status)
    # opened before the namespaces: a file open for writing in the new mount namespace would
    # keep the candidate's process from making it read-only
    log_fd = os.open(setup.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    plan = _plan(setup)
    identity = _isolation.Identity(*setup.map_to) if len(setup.map_to) == 2 else None
    try:
        # the allowlist its root is built from comes back held open: reached while this process
        # is still the judge's user, bound later by the candidate's process
        held = _isolation.enter_namespaces(setup.isolation, identity, plan if setup.isolation else None)
    except OSError as exc:
        _send(conn, Failed(kind="sandbox", error=f"cannot enter the sandbox's namespaces: {exc}"))
        return
    out_r, out_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the candidate's process
        os.close(out_r)
        os.close(go_w)
        os.close(log_fd)
        _candidate(conn, setup, arena, out_w, go_r, plan, held)  # never returns
    if held is not None:
        held.close()
    os.close(out_w)
    os.close(go_r)
    try:
        _send(conn, Sandboxed(pid=pid))
        os.write(go_w, b"1")  # go_w stays open: its end tells the candidate's process that the keeper died
    finally:
        conn.close()  # the judge's channel closes when the candidate's process ends, not the keeper
    _keep_output(out_r, log_fd, setup.output_bytes, pid)
    _, status = os.waitpid(pid, 0)
    _exit_as(status)


def _candidate(conn: Any, setup: Setup, arena: Any, out: int, go: int, plan: Any = None, held: Any = None) -> None:
    """The candidate's process: confined, then the harness (`_main`); exits, never returns."""
    import evokernel.judge._isolation as _isolation

    code = 0
    try:
        if "pid" in setup.isolation:
            _isolation.die_with_parent()
        # wait for the keeper to have told the judge this pid; gone keeper: leave
        if os.read(go, 1) != b"1" or readable(go, 0):
            os._exit(1)
        os.close(go)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        try:
            _isolation.confine(plan if plan is not None else _plan(setup), held)
        except OSError as exc:
            _send(conn, Failed(kind="sandbox", error=f"cannot confine the candidate: {exc}"))
            os._exit(1)
        if "mount" in setup.isolation:  # the judge's temp folder and home are not in its root
            import tempfile

            os.environ["HOME"] = setup.work_dir
            os.environ["TMPDIR"] = tempfile.tempdir = "/tmp"
        _main(conn, setup, arena)
    except SystemExit as exc:  # the candidate's sys.exit: its code, as Python would exit with it
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:
        code = 1
        if not _STATE["ready"] and isinstance(exc, Exception):  # the harness failed setting up: say why
            try:
                _send(conn, Failed(kind="setup", error=_error_text(exc) + "\n" + traceback.format_exc()[-1500:]))
            except Exception:
                pass
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


_STATE = {"ready": False}


def _cuda_diagnosis() -> str:
    """Why CUDA may not start in this process: what the driver needs and cannot reach here
    (its device nodes, its /proc and /sys entries, a writable /dev/shm, the driver library's
    own cuInit code). One line, appended to the setup failure."""
    import ctypes
    import errno
    import glob

    notes = [f"uid {os.getuid()}"]
    nodes = sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/nvidia-caps/*"))
    if not nodes:
        notes.append("no /dev/nvidia* node")
    for node in nodes:
        if os.path.isdir(node):
            continue
        try:
            os.close(os.open(node, os.O_RDWR))
        except OSError as exc:
            notes.append(f"{node}: {errno.errorcode.get(exc.errno or 0, exc.errno)}")
    for path in ("/proc/driver/nvidia/params", "/sys/bus/pci/drivers/nvidia", "/dev/shm"):
        if not os.path.exists(path):
            notes.append(f"{path} missing")
    if os.path.isdir("/dev/shm") and not os.access("/dev/shm", os.W_OK):
        notes.append("/dev/shm read-only")
    try:
        code = ctypes.CDLL("libcuda.so.1").cuInit(0)
        notes.append(f"cuInit {code}")
    except OSError as exc:
        notes.append(f"libcuda: {exc}")
    return " [" + "; ".join(notes) + "]"


def _main(conn: Any, setup: Setup, arena: Any = None) -> None:
    stamps = {"entered": time.time()}
    kind = device_kind(setup.device)  # "cuda" or "cpu": what the steps below branch on
    if kind == "cuda":
        try:  # the judge's GPU, before anything touches CUDA: streams, events, graphs and "cuda" tensors go there
            torch.cuda.set_device(cuda_index(setup.device))
        except Exception as exc:
            _send(
                conn, Failed(kind="setup", error=f"cannot select {setup.device}: {_error_text(exc)}{_cuda_diagnosis()}")
            )
            return
    try:  # as the judge's user: the driver refuses the IPC mapping once privileges are dropped
        arena = _map_block(arena)
    except Exception as exc:
        _send(conn, Failed(kind="setup", error=f"cannot map the judge's memory: {_error_text(exc)}"))
        return
    if setup.memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (setup.memory_bytes, setup.memory_bytes))
    if setup.uid is not None:
        try:
            os.setgroups([])
            os.setgid(setup.uid)
            os.setuid(setup.uid)
        except OSError as exc:
            _send(conn, Failed(kind="setup", error=f"cannot drop privileges to uid {setup.uid}: {exc}"))
            return
    warnings.simplefilter("ignore")
    cache_dir = os.path.join(setup.work_dir, "triton-cache")
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    if setup.seed_cache:
        _seed_cache(setup.seed_cache, cache_dir)
    stamps["set_up"] = time.time()
    if kind == "cpu":
        torch.set_num_threads(1)
    if (os.environ.get("TRITON_INTERPRET") == "1") != (kind == "cpu"):
        _send(conn, Failed(kind="setup", error="sandbox server runs triton in the wrong mode for this device"))
        return
    try:
        if kind == "cuda":
            torch.cuda.init()
            torch.empty(1, device=setup.device)
    except Exception as exc:
        _send(conn, Failed(kind="setup", error=_error_text(exc)))
        return
    stamps["cuda_up"] = time.time()
    view = _viewer(arena)
    source: str | None = setup.source
    n = 0
    prewarmed = False
    while source is not None:
        kernel = _load(conn, setup, source, n, stamps, prewarm=setup.prewarm and not prewarmed)
        n += 1
        stamps = {}
        if kernel is None:
            if not setup.reusable:
                return  # it said why; the judge replaces the process
            source = _serve(conn, None, view, kind)  # only "load" or "exit" come now
            continue
        prewarmed = True
        _STATE["ready"] = True
        source = _serve(conn, kernel, view, kind)


def _load(conn: Any, setup: Setup, source: str, n: int, stamps: dict[str, float], *, prewarm: bool) -> Any:
    """Import and compile the process's n-th candidate, then say Ready (or why not)."""
    t0 = _perf_counter()
    try:
        module = _import_candidate(source, setup.work_dir, n)
    except BaseException as exc:  # SystemExit included: the import itself failed
        print(traceback.format_exc(), file=sys.stderr)
        _send(conn, Failed(kind="import", error=_error_text(exc)))
        return None
    kernel = getattr(module, "kernel", None)
    if not callable(kernel):
        _send(conn, Failed(kind="no_kernel", error="the candidate defines no callable `kernel`"))
        return None
    import_s = _perf_counter() - t0
    t1 = _perf_counter()
    compiled = 0
    cuda = device_kind(setup.device) == "cuda"
    if cuda:
        try:
            compiled, compile_error = _compile_only(kernel, setup.input_specs, setup.device)
        except BaseException as exc:
            _send(conn, Failed(kind="compile", error=_error_text(exc)))
            return None
        if compile_error:
            _send(conn, Failed(kind="compile", error=compile_error))
            return None
    compile_s = _perf_counter() - t1
    if cuda and prewarm:
        try:
            _prewarm_cuda(
                [getattr(torch, d) for spec in setup.input_specs for _, _, d in spec if not d.startswith(VALUE_PREFIX)],
                [getattr(torch, d) for d in setup.output_dtypes],
            )
        except Exception as exc:  # the harness's own warm-up: a failure here is the GPU's, say so
            _send(conn, Failed(kind="setup", error=f"harness warm-up failed: {_error_text(exc)}"))
            return None
    stamps["ready"] = time.time()
    _send(conn, Ready(import_s=import_s, compile_s=compile_s, triton_kernels=compiled, stamps=stamps))
    return kernel


def _serve(conn: Any, kernel: Any, view: Any, device: str) -> str | None:
    """Answer the judge's calls and timings for one candidate (`device`: "cuda", the current
    device, which `_main` made the judge's GPU, or "cpu"). Returns the next candidate's
    source when the judge hands this process another one (a trusted template candidate
    after a trusted one), None when it is done."""
    timed: tuple[list[list[Any]], list[list[Any]]] = ([], [])  # the judge's timed calls: input sets, output slots
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return None
        op = msg[0]
        if op == "call":
            _, trial, inputs, slots = msg
            _call(conn, kernel, trial, [view(r) for r in inputs], [view(r) for r in slots], device)
        elif op == "time":
            _, shape, sets, sample_slots, spec = msg
            _time(
                conn,
                kernel,
                shape,
                [[view(r) for r in g] for g in sets],
                [[view(r) for r in g] for g in sample_slots],
                spec,
                device,
            )
        elif op == "tbegin":  # the judge times the calls that follow itself (CPU)
            _, sets, slots = msg
            timed = ([[view(r) for r in g] for g in sets], [[view(r) for r in g] for g in slots])
        elif op == "tcall":
            _, n, which, slot = msg
            _timed_call(conn, kernel, n, timed[0][which], timed[1][slot])
        elif op == "look":
            _look(conn)
        elif op == "load":
            return msg[1]
        elif op == "exit":
            return None
        del msg


# -- what the harness relies on, besides torch's and time's functions ----------------------
_BINDINGS = (
    "_type",
    "_isinstance",
    "_perf_counter",
    "_Tensor",
    "_copy",
    "_randbelow",
    "_randbits",
    "_current_stream",
    "_getattr",
    "_getattr_static",
    "_modules",
    "_time_cpu",
    "_time_cuda",
    "_prewarm_cuda",
    "_Perturber",
    "_HostSync",
    "_GraphCaptureError",
    "_TIMING",
    "_WATCHED",
    "_WAYS",
    "_ROOTS",
)


def _harness_paths() -> list[str]:
    """The timing module's and this module's own functions and classes, as those modules hold
    them, with the code object of each function and method (so `f.__code__ = ...` is seen as
    surely as a rebinding), and the bindings this module took at import."""
    paths = [f"{__name__}.{name}" for name in _BINDINGS]
    paths += [f"{__name__}.{name}.__code__" for name in ("_time_cpu", "_time_cuda", "_prewarm_cuda")]
    paths += ["evokernel.judge.timing.HostSync", "evokernel.judge.timing.GraphCaptureError"]
    for root, module in (("evokernel.judge.timing", _timing), (__name__, sys.modules[__name__])):
        for name, obj in vars(module).items():
            if _getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                paths += [f"{root}.{name}", f"{root}.{name}.__code__"]
            elif _isinstance(obj, _type):
                paths.append(f"{root}.{name}")
                for attr, member in vars(obj).items():
                    wrapped = _isinstance(member, (staticmethod, classmethod))
                    if inspect.isfunction(member.__func__ if wrapped else member):
                        paths.append(f"{root}.{name}.{attr}{'.__func__' if wrapped else ''}.__code__")
    return paths


for _path in _harness_paths():
    _watch(_path)
