"""Three holes in the judge's sandbox, each shut and kept shut here.

- A candidate that writes the length of a message to the judge and part of its body, then
  sleeps, hung the judge for good: `Connection.poll` saw a byte, `recv_bytes` then waited
  for the rest without a deadline. The judge now reads frames itself (`sandbox._Frames`),
  under the call's deadline, and times such a candidate out like any other.
- Timed calls were copied out for checking only until the sample slots were full (the first
  few dozen calls), so a candidate wrong from its 60th call on was accepted. The worker now
  draws a uniform sample of all timed calls (`_worker._Reservoir`).
- The worker looked up the timing harness (`evokernel.judge.timing.time_cpu`, ...) at call
  time, so a candidate that rebound it reported any figures it liked. The worker now binds
  the harness at import and reports a rebinding, or a replaced code object, as tampering.
- The samples themselves came from the candidate's process, and a candidate that rebound an
  unwatched binding (the message encoder) or shrank the timing loop's list through its frame
  reported what it liked. On the CPU the judge now times every call itself; on the GPU it
  brackets each measured block with its own clock (`timing.bracket_misfit`, `_worker._Witness`,
  `Sandbox.time`). The corpus holds those cheats (tests/corpus/cheats/forge_*.py).

The candidates run in the real sandbox, judged on the CPU by the real Judge, as the
corpus's in-process tests in tests/test_gate.py are.
"""

from __future__ import annotations

import multiprocessing
import socket
import struct
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

from evokernel.core.result import Status
from evokernel.judge import _worker
from evokernel.judge.gate import GateOptions, Judge, Verdict
from evokernel.judge.problem import Problem
from evokernel.judge.sandbox import Outcome, SandboxOptions, _BadFrame, _Frames

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "tests" / "corpus" / "problems" / "matmul_small.py"
HONEST = "import torch\n\n\ndef kernel(a, b):\n    return torch.matmul(a, b)\n"
SANDBOX = SandboxOptions(start_timeout_s=60, call_timeout_s=30, time_timeout_s=60)


def _judge(timing: dict[str, Any], sandbox: SandboxOptions = SANDBOX) -> Judge:
    opts = GateOptions(seeds=1, heldout_seeds=1, recheck_seeds=1, race=0, timing=timing, sandbox=sandbox)
    return Judge(Problem.load(MATMUL), "cpu", opts)


# --- 1. a message cut short times out ------------------------------------------------------


def test_frames_match_multiprocessing_and_keep_a_partial_message() -> None:
    """What `Connection.send_bytes` writes reads back whole; a message that arrives in pieces
    is kept across reads whose deadline passes; the next message stays in the channel."""
    ours, theirs = multiprocessing.Pipe()
    try:
        frames = _Frames(ours.fileno(), 1 << 20)
        theirs.send_bytes(b"first")
        theirs.send_bytes(b"x" * 20_000)  # header and body written apart (over 16 KiB)
        assert frames.read(time.monotonic() + 5) == b"first"
        assert ours.poll(0)  # the second message is still in the channel, unread
        assert frames.read(time.monotonic() + 5) == b"x" * 20_000
        assert frames.read(time.monotonic() + 0.05) is None and not frames.partial
    finally:
        ours.close()
        theirs.close()
    a, b = socket.socketpair()
    with a, b:
        frames = _Frames(b.fileno(), 1 << 10)
        a.sendall(struct.pack("!i", 6)[:3])  # not even the whole length
        assert frames.read(time.monotonic() + 0.05) is None and frames.partial
        a.sendall(struct.pack("!i", 6)[3:] + b"abc")
        assert frames.read(time.monotonic()) is None  # deadline already passed: what is there, no wait
        a.sendall(b"def" + struct.pack("!i", -1) + struct.pack("!Q", 2) + b"hi")
        assert frames.read(time.monotonic() + 1) == b"abcdef"
        assert frames.read(time.monotonic() + 1) == b"hi"  # the long form of the length


def test_frames_refuse_bad_lengths_and_tell_eof_apart() -> None:
    a, b = socket.socketpair()
    with b:
        frames = _Frames(b.fileno(), 1 << 10)
        a.sendall(struct.pack("!i", 3) + b"ab")
        a.close()
        with pytest.raises(OSError, match="end of file"):  # closed inside a message
            frames.read(time.monotonic() + 1)
    a, b = socket.socketpair()
    with b:
        a.close()
        with pytest.raises(EOFError):  # closed between messages
            _Frames(b.fileno(), 1 << 10).read(time.monotonic() + 1)
    for header in (
        struct.pack("!i", 1 << 20),
        struct.pack("!i", -5),
        struct.pack("!i", -1) + struct.pack("!Q", 1 << 40),
    ):
        a, b = socket.socketpair()
        with a, b:
            a.sendall(header)
            with pytest.raises(_BadFrame):
                _Frames(b.fileno(), 1 << 10).read(time.monotonic() + 1)


_HALF_MESSAGE = """\
import inspect
import os
import struct
import time

import torch


def kernel(a, b):
    # the judge's channel, from the harness's frame: a length of 1000 bytes, one of them, then sleep
    f = inspect.currentframe()
    while f is not None and "conn" not in f.f_locals:
        f = f.f_back
    os.write(f.f_locals["conn"].fileno(), struct.pack("!i", 1000) + b"\\x81")
    time.sleep(3600)
    return torch.matmul(a, b)
"""


@pytest.mark.slow
def test_half_a_message_times_out_like_silence() -> None:
    judge = _judge({}, SandboxOptions(start_timeout_s=60, call_timeout_s=3, time_timeout_s=5))
    sandbox = judge.sandbox(_HALF_MESSAGE, "half-message")
    got: dict[str, Verdict] = {}
    t0 = time.monotonic()
    worker = threading.Thread(target=lambda: got.setdefault("v", judge.judge(sandbox)), daemon=True)
    worker.start()
    worker.join(60)
    try:
        assert not worker.is_alive(), "the judge hung on a message cut short"
    finally:
        sandbox.close()
    v = got["v"]
    assert not v.accepted and v.status is Status.TIMEOUT, v.reason
    assert "no answer after 3 s running a check" in v.reason
    assert time.monotonic() - t0 < 30


# --- 2. every timed call may be checked ------------------------------------------------------


class _Counting(_worker._Reservoir):
    def __init__(self, slots: list[list[torch.Tensor]]) -> None:
        super().__init__(slots)
        self.copies = 0

    def _take(self, slot: int, which: int, out: Any, rec: Any) -> None:
        self.copies += 1
        super()._take(slot, which, out, rec)


def _draw(k: int, n: int) -> _Counting:
    """A reservoir of k slots offered n timed calls: call i returns [i], on rotation set i % 3,
    with perturbation record i."""
    reservoir = _Counting([[torch.zeros(1)] for _ in range(k)])
    out = torch.zeros(1)  # one output buffer for every call, as a candidate may reuse one
    for i in range(n):
        out.fill_(i)
        reservoir.offer(i % 3, out, False, i)
    reservoir.offer((n - 1) % 3, out, True, n - 1)  # the harness offers the last call once more
    return reservoir


def test_reservoir_draws_from_every_call_and_keeps_its_records_together() -> None:
    k, n, rounds = 8, 600, 120
    late, copies = 0, 0
    for _ in range(rounds):
        r = _draw(k, n)
        assert len(r.sampled) == len(r.pending) == k
        calls = [int(slot[0].item()) for slot in r.slots]
        assert calls == r.pending and len(set(calls)) == k  # each slot holds the call its records name
        assert r.sampled == [c % 3 for c in calls]
        late += sum(c >= n // 2 for c in calls)
        copies += r.copies
    # uniform over all calls: half the draws in the second half (8 * 120 draws; 4 sigma is 0.065)
    assert abs(late / (k * rounds) - 0.5) < 0.08
    # about k (1 + ln(n / k)) copies, far from one per call
    assert copies / rounds < 2 * k * (1 + 4.4)


def test_reservoir_takes_the_last_call_when_nothing_was_drawn() -> None:
    r = _Counting([[torch.zeros(1)]])
    r.offer(2, torch.full((1,), 7.0), True, "rec")
    assert r.sampled == [2] and r.pending == ["rec"] and r.slots[0][0].item() == 7.0
    empty = _Counting([])
    empty.offer(0, torch.zeros(1), False, None)
    empty.offer(0, torch.zeros(1), True, None)
    assert empty.sampled == [] and empty.copies == 0


_WRONG_LATE = """\
import torch

# right for the first 20 calls on each input buffer, zeros after: the checks and the re-check
# use a buffer of their own (a few calls); the timing rotates 3 buffers for hundreds of calls
_calls = {}


def kernel(a, b):
    n = _calls[a.data_ptr()] = _calls.get(a.data_ptr(), 0) + 1
    if n > 20:
        return torch.zeros(a.shape[0], b.shape[1])
    return torch.matmul(a, b)
"""

#: enough timed calls that the wrong ones (from about the 58th on) are most of them
LONG_TIMING = {"min_reps": 240, "max_reps": 240, "rel_ci": 0.0, "max_s": 30.0}


@pytest.mark.slow
def test_wrong_only_after_many_calls_is_caught() -> None:
    """The 8 drawn calls of a shape all fall among its first 57 of 240 with a chance of about
    (57/240)^8, 1e-5 (and both shapes must slip); before, 8 slots at a 0.3 chance per call were
    full after about 27 calls, and this candidate passed."""
    judge = _judge(LONG_TIMING)
    v = judge.check(HONEST, label="honest")
    assert v.accepted, v.reason
    for _ in range(2):
        v = judge.check(_WRONG_LATE, label="wrong-late")
        assert not v.accepted and v.status is Status.INCORRECT, v.reason
        assert "wrong result in a timed call" in v.reason


# --- 3. the timing harness cannot be swapped -------------------------------------------------

_REBIND = """\
import torch

import evokernel.judge.timing as T

_real = T.time_cpu


def fake(fns, **kw):
    samples, graph, wall = _real(fns, **kw)
    return [s / 1000.0 for s in samples], graph, wall / 1000.0


T.time_cpu = T.time_cuda = fake


def kernel(a, b):
    return torch.matmul(a, b)
"""

_RECODE = """\
import types

import torch

import evokernel.judge.timing as T

_f = T.time_cpu
_real = types.FunctionType(_f.__code__, _f.__globals__, "real", _f.__defaults__, _f.__closure__)
_real.__kwdefaults__ = _f.__kwdefaults__


def fake(fns, **kw):
    samples, graph, wall = _real(fns, **kw)
    return [s / 1000.0 for s in samples], graph, wall / 1000.0


_f.__code__ = fake.__code__  # the worker's own binding is this function object
_f.__globals__["_real"] = _real


def kernel(a, b):
    return torch.matmul(a, b)
"""

_WHILE_TIMED = """\
import inspect

import torch

import evokernel.judge.timing as T

# swaps a helper of the harness during the first timed calls and puts it back two calls later:
# the looks before and after the timing see nothing (a timed call is one the judge times
# itself, through the worker's `_timed_call`; the judge asks for a look after each call it checks)
_real = T.relative_ci
_timed = [0]


def kernel(a, b):
    f = inspect.currentframe().f_back
    while f is not None and f.f_code.co_name != "_timed_call":
        f = f.f_back
    if f is not None:
        _timed[0] += 1
        if _timed[0] == 4:  # 3 warm-up calls (one per rotated set), then the first timed call
            T.relative_ci = lambda samples: 0.0
        elif _timed[0] == 6:
            T.relative_ci = _real
    return torch.matmul(a, b)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "named"),
    [
        pytest.param(_REBIND, "evokernel.judge.timing.time_cpu", id="rebinds-time_cpu"),
        pytest.param(_RECODE, "evokernel.judge.timing.time_cpu.__code__", id="replaces-its-code"),
        pytest.param(_WHILE_TIMED, "evokernel.judge.timing.relative_ci", id="swaps-while-timed"),
    ],
)
def test_patching_the_timing_harness_is_tampering(source: str, named: str) -> None:
    judge = _judge({"min_reps": 10, "max_reps": 10, "max_s": 5.0})
    v = judge.check(textwrap.dedent(source), label="patches-harness")
    assert not v.accepted and v.status is Status.INCORRECT, v.reason
    assert "tampering" in v.reason and named in v.reason, v.reason


def test_the_watch_covers_the_harness() -> None:
    """Every function of the timing module and of the worker is watched by name and by code
    object (methods and staticmethods too), and the worker calls its own bindings."""
    watched = set(_worker._WATCHED)
    for path in (
        "evokernel.judge.timing.time_cpu",
        "evokernel.judge.timing.time_cuda.__code__",
        "evokernel.judge.timing.Perturber.apply.__code__",
        "evokernel.judge.timing.Perturber.report_many.__func__.__code__",
        "evokernel.judge._worker._time.__code__",
        "evokernel.judge._worker._Reservoir.offer.__code__",
        "evokernel.judge._worker._time_cpu.__code__",
        "torch.randint",
        "torch.Generator",
    ):
        assert path in watched, path
    assert all(v is not None for v in _worker._WATCHED.values())
    assert _worker._tampering() is None


# --- 4. the judge's own clock ------------------------------------------------------------------


def test_the_bracket_check_holds_samples_to_the_window() -> None:
    """(a) no block's samples add up to more than its window; (b) over the graph blocks, the
    samples cover the windows but for the calibrated harness cost (per call, per block)."""
    from evokernel.judge.timing import Bracket, bracket_misfit

    honest = [Bracket(0.9, [0.2] * 4), *(Bracket(12.0, [1.0] * 10, graph=True) for _ in range(5))]
    assert bracket_misfit(honest, overhead_ms=0.3, constant_ms=2.0, tol=0.05) is None
    forged = [Bracket(0.9, [0.01] * 4), *(Bracket(12.0, [0.05] * 10, graph=True) for _ in range(5))]
    why = bracket_misfit(forged, overhead_ms=0.3, constant_ms=2.0, tol=0.05)
    assert why is not None and "50 calls in 5 blocks" in why, why
    # the eager probe (block 0) is held to its window only; no calibration: (a) alone
    assert bracket_misfit([Bracket(10.0, [0.01])], overhead_ms=0.3, constant_ms=2.0, tol=0.05) is None
    assert bracket_misfit(forged, overhead_ms=None, constant_ms=2.0, tol=0.05) is None
    too_long = [Bracket(5.0, [2.0] * 3, graph=True)]
    why = bracket_misfit(too_long, overhead_ms=None, constant_ms=0.0, tol=0.0)
    assert why is not None and "more than the 5.0000 ms" in why, why
    # one block the judge read late (its own host busy) does not reject: the blocks count together
    late = [*honest[:-1], Bracket(25.0, [1.0] * 10, graph=True)]
    assert bracket_misfit(late, overhead_ms=0.3, constant_ms=2.0, tol=0.05) is None


def _fake_worker(conn: Any, calls: list[int], factor: float) -> None:
    """Plays `time_cuda` under `_worker._Witness`: each block asks, waits for the judge's word,
    is busy 20 ms (its calls' time, measured here) and sends its samples times `factor`
    (1: honest); then the report."""
    assert conn.recv()[0] == "time"
    witness = _worker._Witness(conn)
    sent = []
    for n in calls:
        witness.before(n)
        t0 = time.perf_counter()
        time.sleep(0.02)
        block = [(time.perf_counter() - t0) * 1e3 / n * factor] * n
        witness.after(block)
        sent.append(block)
    flat = [x for block in sent[1:] for x in block]
    _worker._send(conn, _worker.Timing(shape="s", samples_ms=flat, graph=True, wall_ms_per_call=1.0))


@pytest.mark.parametrize(("factor", "fits"), [(1.0, True), (0.05, False), (2.0, False)])
def test_the_sandbox_brackets_each_block_with_its_own_clock(factor: float, fits: bool) -> None:
    """The judge's side of the CUDA protocol, against a worker on a pipe (no GPU needed): a
    window per block from the judge's word to go to the block's arrival, measured by the
    judge; samples that claim a fraction of it (or more than all of it) do not fit."""
    from evokernel.judge.sandbox import Sandbox
    from evokernel.judge.timing import bracket_misfit

    sandbox = Sandbox("", device="cpu", input_specs=[], options=SandboxOptions(isolation="off"))
    ours, theirs = multiprocessing.Pipe()
    sandbox.conn, sandbox._frames = ours, _Frames(ours.fileno(), 1 << 20)
    calls = [2, 4, 4, 4]  # the probe, then the loop's blocks
    worker = threading.Thread(target=_fake_worker, args=(theirs, calls, factor), daemon=True)
    worker.start()
    try:
        got = sandbox.time("s", [], [], {})
    finally:
        worker.join(10)
        sandbox.close()
    assert not isinstance(got, Outcome), got
    timing, brackets = got
    assert [len(b.samples_ms) for b in brackets] == calls
    assert timing.samples_ms == [x for b in brackets[1:] for x in b.samples_ms]
    assert all(b.window_ms >= 20.0 for b in brackets)
    graphs = [msgspec.structs.replace(b, graph=i > 0) for i, b in enumerate(brackets)]
    why = bracket_misfit(graphs, overhead_ms=0.5, constant_ms=2.0, tol=0.05)
    assert (why is None) == fits, why


def test_the_calibration_candidate_answers_every_tuning_shape() -> None:
    """The trusted do-nothing candidate the judge calibrates its brackets with (`gate._null_source`)
    returns outputs of each tuning shape's own shapes and dtypes, on the inputs' device."""
    from evokernel.judge.gate import _null_source

    judge = _judge({})
    try:
        scope: dict[str, Any] = {}
        exec(_null_source(judge.tuning), scope)
        for shape in judge.tuning:
            out = scope["kernel"](*shape.inputs)
            outs = list(out) if isinstance(out, tuple) else [out]
            assert [(o.shape, o.dtype) for o in outs] == [(s.shape, s.dtype) for s in shape.slots]
    finally:
        judge.close()


def test_a_candidate_that_fails_before_the_judge_reads_is_reported_as_it_failed() -> None:
    """The keeper names the candidate's process first; a candidate that fails at once is gone
    (reaped) by the time a busy judge reads that name. Its own failure is the verdict, not a
    "protocol" error (on the GPU every fast CUDA setup failure read as one)."""
    from evokernel.judge.sandbox import Sandbox

    sandbox = Sandbox("raise ImportError('broken at once')\n", device="cpu", input_specs=[], options=SandboxOptions())
    sandbox.start()
    try:
        deadline = time.monotonic() + 30
        while sandbox.process is not None and sandbox.process.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        got = sandbox.wait_ready()
    finally:
        sandbox.close()
    assert isinstance(got, Outcome) and got.kind == "import", got
    assert "broken at once" in got.error


def test_a_judge_holding_many_descriptors_still_reads_its_candidates() -> None:
    """Past descriptor 1023 `select()` refuses to wait ("filedescriptor out of range"): a judge
    with many candidates in flight crashed so on the GPU. The judge's waits take any number."""
    import os
    import resource

    from evokernel.core.readable import readable

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this host allows {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    r, w = os.pipe()
    high_r, high_w = os.dup2(r, 1100), os.dup2(w, 1101)
    try:
        frames = _Frames(high_r, 1 << 20)
        assert not readable(high_r, 0.0) and frames.read(time.monotonic() + 0.05) is None
        os.write(high_w, struct.pack("!i", 3) + b"abc")
        assert readable(high_r, 1.0) and frames.read(time.monotonic() + 1.0) == b"abc"
    finally:
        for fd in (r, w, high_r, high_w):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_closed_sandboxes_leave_no_descriptor_behind() -> None:
    """A judge keeps its sandboxes (an evaluator's queue, a result's reference): closing one
    frees its descriptors once its process is gone, whether or not the object is collected."""
    import os

    from evokernel.judge.sandbox import Sandbox, _reap

    def count() -> int:
        return len(os.listdir("/proc/self/fd"))

    warm = Sandbox("raise ImportError('x')\n", device="cpu", input_specs=[], options=SandboxOptions()).start()
    warm.wait_ready()
    warm.close()
    time.sleep(0.5)
    _reap()
    before = count()
    kept = [
        Sandbox("raise ImportError('x')\n", device="cpu", input_specs=[], options=SandboxOptions()).start()
        for _ in range(6)
    ]
    for sandbox in kept:
        sandbox.wait_ready()
        sandbox.close()
    deadline = time.monotonic() + 10
    while count() > before + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
        _reap()
    assert count() <= before + 1, (
        before,
        count(),
        [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")],
    )
