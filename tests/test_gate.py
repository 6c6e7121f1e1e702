"""The gate against the cheating corpus: every known evaluator exploit must be rejected, every
honest candidate accepted.

tests/corpus/cheats/ and tests/corpus/honest/ hold one small candidate module per exploit
class (or honest pattern), each opening with a header:

    # problem: matmul_small     the problem in tests/corpus/problems/ it targets
    # expect: rejected          or accepted, or measured: a cheat whose lie the judge no longer
                                hears (it forges numbers the judge does not take): accepted at
                                its true speed, the reason then `latency >= N ms` (it is slow
                                on purpose, so the bound is no matter of noise)
    # reason: wrong result      a substring of the verdict's reason (case-insensitive); `a | b`:
                                either (the GPU path may catch a cheat at another step)
    # device: cpu               or cuda (skipped without a GPU)
    # class: ...                one line: what it does

Each is judged by the real CLI in a subprocess (`python -m evokernel.cli check ... --json`),
with fake secrets in the CLI's environment. A CLI run costs 3 to 4 s of CPU, nearly all of it
start-up (torch in the CLI, torch and triton in its fork server), so all runs are started when
the first test needs one, a few at a time (several judges at once on one host, as a real
search has them); each test then waits for its own run.

Each CLI run gets a TMPDIR of its own, so the candidate's folder (and the command line of
any process a leak probe starts, which names it) belongs to that run alone: a leak test
looks for, and kills, only processes its own run started.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

from evokernel.judge.cleanup import QUARANTINE, remove_tree
from evokernel.judge.gate import GateOptions, Judge, compare
from evokernel.judge.problem import Problem
from evokernel.core.result import Status
from evokernel.judge.sandbox import SandboxOptions, isolation_report, scrubbed_environment

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
PROBLEMS = CORPUS / "problems"
HEADER_KEYS = ("problem", "expect", "reason", "device", "class")
HAS_CUDA = torch.cuda.is_available()

#: Secrets the judge's environment holds while the corpus runs; no candidate may see them.
FAKE_SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-fake-0123456789",
    "OPENAI_API_KEY": "sk-fake-0123456789",
    "HF_TOKEN": "hf_fake0123456789",
    "AWS_SECRET_ACCESS_KEY": "fake/aws/secret/0123456789",
}
#: Candidates that print put this in what they print; it must never reach the CLI's output.
MARKER = "CANDIDATE-OUTPUT"
HANG_TIMEOUT_S = 10  # --timeout for the candidates that hang (reason: timeout)
RUN_TIMEOUT_S = 240  # a CLI run that takes longer than this is a failure of its own


# --- the corpus ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    path: Path
    problem: str
    expect: str
    reason: str
    device: str
    cls: str

    @property
    def id(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def accepted(self) -> bool:
        return self.expect == "accepted"

    @property
    def at_least_ms(self) -> float | None:
        """For `expect: measured`: the least latency the verdict may give (`latency >= N ms`)."""
        m = re.fullmatch(r"latency >= ([0-9.]+) ms", self.reason)
        return float(m.group(1)) if self.expect == "measured" and m else None

    @property
    def timeout_s(self) -> float | None:
        return HANG_TIMEOUT_S if self.reason == "timeout" else None


def read_header(path: Path) -> dict[str, str]:
    """The `# key: value` lines the file opens with (before any other line)."""
    head: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"#\s*(\w+):\s*(.*?)\s*$", line)
        if not m:
            break
        head[m.group(1)] = m.group(2)
    return head


def _entry(path: Path) -> Entry:
    head = read_header(path)
    missing = [k for k in HEADER_KEYS if not head.get(k)]
    assert not missing, f"{path}: header lacks {missing}"
    return Entry(path, head["problem"], head["expect"], head["reason"], head["device"], head["class"])


ENTRIES = [_entry(p) for d in ("cheats", "honest") for p in sorted((CORPUS / d).glob("*.py"))]
BY_ID = {e.id: e for e in ENTRIES}

#: Every exploit class (and honest pattern) the corpus must keep, and the files that cover it.
CLASSES: dict[str, list[str]] = {
    "stale result cached by input shape": ["cheats/cache_by_shape.py"],
    # not cheats, but calls no timing may hide: reported as host-synchronising (CUDA)
    "host sync inside the timed call": [
        "cheats/host_sync_item.py",
        "cheats/host_sync_tolist.py",
        "cheats/host_sync_synchronize.py",
        "cheats/host_sync_stream.py",
    ],
    "cache keyed by data_ptr (pointers repeat, values change)": ["cheats/cache_by_data_ptr.py"],
    "skips work (computes part of the output)": ["cheats/partial_rows.py", "cheats/partial_k.py"],
    "returns zeros": ["cheats/zeros.py"],
    "returns a constant": ["cheats/constant.py", "cheats/constant_uniform_softmax.py"],
    "NaN or Inf somewhere": ["cheats/nan_one_element.py", "cheats/inf_one_element.py"],
    "too low precision": ["cheats/half_precision.py", "cheats/bfloat16_precision.py"],
    "torch.Tensor subclass": ["cheats/subclass_lying_eq.py", "cheats/subclass_parameter.py"],
    "wrong shape": ["cheats/wrong_shape_transposed.py", "cheats/wrong_shape_broadcast.py"],
    "wrong dtype": ["cheats/wrong_dtype.py"],
    "output aliasing an input": ["cheats/alias_returns_input.py", "cheats/alias_inplace_softmax.py"],
    "mutates an input": ["cheats/mutate_input_scratch.py", "cheats/mutate_input_inplace.py"],
    "uninitialised memory (empty_like unwritten)": ["cheats/empty_like_unwritten.py", "cheats/empty_after_free.py"],
    "right only for its first calls": ["cheats/correct_first_calls.py", "cheats/wrong_after_timing.py"],
    "background thread fills the output later": ["cheats/thread_fills_later.py", "cheats/thread_pool_at_import.py"],
    "special-cases the tuning SHAPES": ["cheats/hardcoded_shapes.py"],
    "monkey-patches torch comparisons": ["cheats/patch_allclose_equal.py", "cheats/patch_tensor_eq_testing.py"],
    "prints a fake verdict": ["cheats/fake_verdict_print.py", "cheats/fake_verdict_parent_fd.py"],
    "fakes timings (patched clocks)": [
        "cheats/patch_perf_counter.py",
        "cheats/patch_clock_during_call.py",
        "cheats/patch_event_elapsed_time.py",
        "cheats/patch_timing_harness.py",
    ],
    # the figures forged in the candidate's process, which it once sent with the samples: 1/20
    # of the truth through a rebound message encoder, or the timing loop's own list shrunk
    # through its frame (both were accepted at 1/20 of their time); the judge now times
    # each call itself (CPU) or brackets each block (GPU)
    "forges the reported samples (encoder, frames)": [
        "cheats/forge_encoder_samples.py",
        "cheats/forge_samples_in_frame.py",
        "cheats/forge_encoder_samples_cuda.py",
        "cheats/forge_samples_thread_cuda.py",
    ],
    "lazy when timed: a thread fills the judge's output slot after the call answered": [
        "cheats/lazy_fills_slot_later.py"
    ],
    "fast wrong path only while timed": [
        "cheats/timing_fastpath_flag.py",
        "cheats/timing_fastpath_stack.py",
        "cheats/timing_fastpath_cadence.py",
    ],
    "cache keyed by input values (timed inputs repeat)": ["cheats/timing_cache_by_value.py"],
    "sys.exit in kernel": ["cheats/sys_exit_in_kernel.py"],
    "os._exit in kernel": ["cheats/os_exit_in_kernel.py"],
    "raises": ["cheats/raises.py", "cheats/raises_keyboard_interrupt.py"],
    "segfaults": ["cheats/segfault.py"],
    "hangs in kernel": ["cheats/hang_in_kernel.py"],
    "hangs at import": ["cheats/hang_at_import.py"],
    "crashes at import": ["cheats/raise_at_import.py", "cheats/sys_exit_at_import.py", "cheats/os_exit_at_import.py"],
    "syntax error": ["cheats/syntax_error.py"],
    "defines no kernel": ["cheats/no_kernel.py", "cheats/kernel_not_callable.py"],
    "impossible allocation": ["cheats/huge_alloc.py"],
    "child process that outlives it": [
        "cheats/spawn_child_then_hang.py",
        "cheats/spawn_detached_child.py",
        "cheats/spawn_setpgid_child.py",
    ],
    "attacks the judge's process": ["cheats/kill_judge.py", "cheats/sigstop_judge.py"],
    "writes into the judge's files (working directory, problem file, search database)": [
        "cheats/tamper_judge_files.py"
    ],
    "floods its output and its folder": ["cheats/output_flood.py"],
    "a folder chain too deep for a recursive removal": ["cheats/deep_folder_chain.py"],
    # the host from inside: its root was the host's root, its file system the host's made read-only
    "writes the host's kernel settings (/proc/sys) as the host's root": ["cheats/host_kernel_settings.py"],
    "connects to host Unix sockets (the fork server's, a database's)": ["cheats/host_sockets.py"],
    "reads files outside its own folder (/etc/shadow, the judge's neighbours, homes)": ["cheats/host_files.py"],
    "namespaces through clone or clone3 (seccomp refused only unshare and setns)": ["cheats/clone_namespaces.py"],
    "floods the host: processes, disk": ["cheats/fork_flood.py", "cheats/disk_flood.py"],
    "reads secrets": ["honest/env_probe.py", "honest/env_probe_ancestors.py", "honest/memory_probe.py"],
    "GPU: side stream not joined": ["cheats/side_stream_no_sync.py", "cheats/side_stream_escape_timing.py"],
    "GPU: device cache keyed by pointer": ["cheats/device_cache_by_pointer.py"],
    "GPU: uninitialised device memory": ["cheats/uninit_device_memory.py"],
    "GPU: illegal memory access (the CUDA context dies)": ["cheats/illegal_memory_access.py"],
    "honest: plain torch and Triton": [
        "honest/torch_matmul.py",
        "honest/torch_softmax.py",
        "honest/triton_matmul.py",
        "honest/triton_softmax.py",
    ],
    "honest: non-contiguous output": ["honest/noncontiguous_output.py"],
    "honest: scratch from torch.empty, fully overwritten": ["honest/scratch_empty_overwritten.py"],
}

#: The protections this machine gives candidates (every test below holds only with them; the
#: probe tests skip, saying which is off, where one is missing).
SANDBOX = isolation_report()
FULL_SANDBOX = not SANDBOX.off
needs_sandbox = pytest.mark.skipif(not FULL_SANDBOX, reason=SANDBOX.describe())


#: Probes that only the sandbox's namespaces stop (the judge's user is the candidate's here).
NEEDS_SANDBOX = {
    "cheats/kill_judge.py",
    "cheats/sigstop_judge.py",
    "honest/env_probe_ancestors.py",
    "cheats/fake_verdict_parent_fd.py",
    "honest/memory_probe.py",
    "cheats/tamper_judge_files.py",
    "cheats/output_flood.py",
    "cheats/host_kernel_settings.py",
    "cheats/host_sockets.py",
    "cheats/host_files.py",
    "cheats/clone_namespaces.py",
    "cheats/fork_flood.py",
    "cheats/disk_flood.py",
}

#: The degenerate problem through the CLI, with an unrelated (honest softmax) candidate.
DEGENERATE_CLI = [
    str(PROBLEMS / "degenerate_small.py"),
    str(CORPUS / "honest" / "torch_softmax.py"),
    "--device",
    "cpu",
    "--json",
    "--no-time",
]


def _params(entries: list[Entry]) -> list[Any]:
    out = []
    for e in entries:
        marks = []
        if e.device == "cuda":
            marks.append(pytest.mark.skipif(not HAS_CUDA, reason="device: cuda (needs a GPU)"))
        if e.id in NEEDS_SANDBOX:
            marks.append(needs_sandbox)
        out.append(pytest.param(e, id=e.id, marks=marks))
    return out


# --- running the CLI, all runs at once ------------------------------------------------------


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    tmp: str = ""  # the run's own TMPDIR (removed): the candidate's folder was in it


def _processes_naming(text: str) -> set[int]:
    """Live processes whose command line holds `text` (a run's own TMPDIR)."""
    want = text.encode()
    pids = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if want in cmd:
            pids.add(int(d.name))
    return pids


class CorpusRuns:
    """Runs `evokernel check` on corpus entries concurrently; each test waits for its own."""

    def __init__(self, env: dict[str, str], entries: list[Entry], extra: dict[str, Any]) -> None:
        self.env = {**env, **FAKE_SECRETS, "PYTHONUNBUFFERED": "1"}
        workers = max(4, min(8, 2 * (os.cpu_count() or 2)))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="corpus")
        # the hangs first: they mostly wait, while the others use the CPU
        ordered = sorted(entries, key=lambda e: e.timeout_s is None)
        self.futures = {e.id: self.pool.submit(self._run, self.command(e)) for e in ordered}
        for key, job in extra.items():  # `check` arguments, or a function of this object
            self.futures[key] = self.pool.submit(job, self) if callable(job) else self.pool.submit(self._run, job)

    @staticmethod
    def command(e: Entry) -> list[str]:
        """`check` arguments for a corpus entry."""
        args = [str(PROBLEMS / f"{e.problem}.py"), str(e.path), "--device", e.device, "--json"]
        return args + (["--timeout", str(e.timeout_s)] if e.timeout_s is not None else [])

    def _run(
        self, args: list[str], *, cwd: Path = ROOT, prefix: list[str] | None = None, env: dict[str, str] | None = None
    ) -> Run:
        """`evokernel check ARGS` (after `prefix`, a wrapper command; `env` added to the
        environment), in a TMPDIR of its own."""
        cmd = [*(prefix or []), sys.executable, "-m", "evokernel.cli", "check", *args]
        tmp = tempfile.mkdtemp(prefix="evokernel-run-")
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd,
                env={**self.env, **(env or {}), "TMPDIR": tmp},
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
        finally:
            remove_tree(tmp)  # (a candidate's folder chain too deep for shutil.rmtree included)
        return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0, tmp)

    def check_in(self, entry_id: str, tmp: Path) -> Run:
        """`evokernel check` of a corpus entry with `tmp` as its TMPDIR, which the caller made
        and removes (it looks at what the run left there first)."""
        cmd = [sys.executable, "-m", "evokernel.cli", "check", *self.command(BY_ID[entry_id])]
        t0 = time.monotonic()
        proc = subprocess.run(
            cmd,
            env={**self.env, "TMPDIR": str(tmp)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0, str(tmp))

    def get(self, e: Entry | str) -> Any:
        key = e if isinstance(e, str) else e.id
        if key not in self.futures:  # not planned at session start (a corpus entry): run it now
            assert isinstance(e, Entry), key
            self.futures[key] = self.pool.submit(self._run, self.command(e))
        return self.futures[key].result(timeout=RUN_TIMEOUT_S + 60)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def corpus_runs(request: pytest.FixtureRequest, cli_env_session: dict[str, str]):
    """Starts the CLI runs of every corpus entry this session's tests will ask for."""
    wanted: dict[str, Entry] = {}
    extra: dict[str, Any] = {}
    for item in request.session.items:
        name = getattr(item, "originalname", "")
        if name == "test_degenerate_problem_is_flagged":
            extra["degenerate"] = DEGENERATE_CLI
        elif name == "test_concurrent_judges_leave_each_other_alone":
            extra["uid-clash"] = _uid_clash_job
        elif name == "test_candidate_cannot_write_the_judges_files":
            extra["tamper"] = _tamper_job
        elif name == "test_deep_folder_chain_is_removed":
            extra["deep-chain"] = _deep_chain_job
        elif name == "test_host_sockets_are_out_of_reach_with_tmpdir_outside_tmp":
            extra["sockets"] = _sockets_job
        elif name == "test_probes_fail_without_a_pid_namespace" and FULL_SANDBOX:
            e = item.callspec.params["entry"]
            extra[f"nopid:{e.id}"] = lambda runs, e=e: runs._run(
                CorpusRuns.command(e), env={"EVOKERNEL_SANDBOX_WITHOUT": "pid"}
            )
        spec = getattr(item, "callspec", None)
        if spec is None or "corpus_runs" not in getattr(item, "fixturenames", ()):
            continue
        e = spec.params.get("entry")
        if isinstance(e, Entry) and (e.device != "cuda" or HAS_CUDA):
            wanted.setdefault(e.id, e)
    runs = CorpusRuns(cli_env_session, list(wanted.values()), extra)
    yield runs
    runs.close()


# --- the tests ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("entry", _params(ENTRIES))
def test_corpus_verdict(corpus_runs: CorpusRuns, entry: Entry) -> None:
    """The CLI's exit code, its one JSON object on stdout, and the reason the header names."""
    run = corpus_runs.get(entry)
    lines = run.stdout.splitlines()
    assert len(lines) == 1, (
        f"stdout must be exactly one JSON object (rc {run.returncode}), got "
        f"{len(lines)} lines:\n{run.stdout[:2000]}\nstderr:\n{run.stderr[-2000:]}"
    )
    data = json.loads(lines[0])
    assert isinstance(data, dict) and isinstance(data.get("accepted"), bool) and isinstance(data.get("reason"), str)
    assert run.returncode == (0 if data["accepted"] else 1), (run.returncode, data["reason"], run.stderr[-2000:])
    # nothing the candidate printed is on the judge's stdout or stderr, except quoted in the
    # verdict's own fields for it (the log tail, an exception's text in the reason)
    own = {k: v for k, v in data.items() if k not in ("log_tail", "reason")}
    assert MARKER not in json.dumps(own) and MARKER not in run.stderr, (run.stdout, run.stderr)
    assert data["label"] == str(entry.path) and data["device"] == entry.device
    if entry.expect == "measured":
        least = entry.at_least_ms
        assert least is not None, f"{entry.id}: reason must read `latency >= N ms`"
        assert data["accepted"], f"{entry.id}: {data['reason']}"
        assert data["latency_ms"] >= least and all(t["median_ms"] >= least for t in data["timings"]), (
            f"{entry.id}: judged at {data['latency_ms']} ms, it takes at least {least} ms a call"
        )
    elif entry.accepted:
        assert data["accepted"], f"{entry.id}: honest candidate rejected: {data['reason']}"
        assert data["status"] == "ok" and data["reason"] == "accepted"
        problem = Problem.load(PROBLEMS / f"{entry.problem}.py")
        n_tuning, n_heldout = len(problem.shapes), len(problem.heldout)
        # at least one check per shape before timing and one re-check per tuning shape after it,
        # each with a seed of its own
        assert data["checks"] >= 2 * n_tuning + n_heldout
        assert len(set(data["seeds"])) == len(data["seeds"]) == data["checks"]
        assert [t["shape"] for t in data["timings"]] == [
            ",".join(f"{k}={v}" for k, v in s.items()) for s in problem.shapes
        ]
        assert all(t["median_ms"] > 0 for t in data["timings"]) and data["latency_ms"] > 0
    else:
        assert not data["accepted"], f"{entry.id}: cheat accepted ({entry.cls})"
        assert data["status"] != "ok"
        assert any(alt.strip().lower() in data["reason"].lower() for alt in entry.reason.split("|")), (
            f"{entry.id}: expected {entry.reason!r} in the reason, got {data['reason']!r}"
        )
        if entry.timeout_s is not None:  # the --timeout given was the one applied
            assert f"no answer after {entry.timeout_s:.0f} s" in data["reason"]


def _assert_no_survivor(run: Run) -> None:
    """After the run ended, no process its candidate started (each names the candidate's
    folder, inside the run's own TMPDIR) is still alive."""
    assert run.tmp
    deadline = time.monotonic() + 5.0  # SIGKILL is delivered asynchronously
    while True:
        left = _processes_naming(run.tmp)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    try:
        assert not left, f"processes of {run.tmp} outlived the candidate: pids {sorted(left)}"
    finally:
        for pid in left:  # started by this run's candidate alone: clean up, whatever the verdict
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(BY_ID["cheats/spawn_child_then_hang.py"], id="child"),
        pytest.param(BY_ID["cheats/spawn_detached_child.py"], id="setsid-child", marks=needs_sandbox),
        pytest.param(BY_ID["cheats/spawn_setpgid_child.py"], id="setpgid-double-fork", marks=needs_sandbox),
    ],
)
def test_child_process_is_reaped(corpus_runs: CorpusRuns, entry: Entry) -> None:
    run = corpus_runs.get(entry)
    # the kernel ran (and so started its children, milliseconds in) before the call timed out
    assert run.returncode == 1 and "running a check" in json.loads(run.stdout)["reason"], run.stdout
    _assert_no_survivor(run)


_SLEEPER = """\
import sys
import time


def kernel(a, b):
    print("in kernel", flush=True)
    time.sleep(3600)
"""


def _in_kernel(tmp: Path) -> bool:
    """Whether a candidate of the run whose TMPDIR is `tmp` printed that it is in its kernel
    (its log, written by the judge's side next to the candidate's folder)."""
    for log in tmp.glob("evokernel-candidate-*.log"):
        try:
            if "in kernel" in log.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False


def _uid_clash_job(runs: CorpusRuns) -> tuple[Run, Run, bool]:
    """Judge A's candidate sleeps in its kernel (30 s call timeout); once it is surely there, a
    second `evokernel check` (B, a candidate that returns zeros) runs start to finish. B's
    judge must not touch A's candidate: A ends with its own timeout."""
    work = Path(tempfile.mkdtemp(prefix="evokernel-uid-clash-"))
    try:
        sleeper = work / "sleeper.py"
        sleeper.write_text(_SLEEPER)
        tmp = work / "tmp"
        tmp.mkdir()
        cmd = [sys.executable, "-m", "evokernel.cli", "check", str(PROBLEMS / "matmul_small.py")]
        t0 = time.monotonic()
        a = subprocess.Popen(
            [*cmd, str(sleeper), "--device", "cpu", "--json", "--timeout", "30"],
            env={**runs.env, "TMPDIR": str(tmp)},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            while not _in_kernel(tmp) and a.poll() is None and time.monotonic() - t0 < 120:
                time.sleep(0.1)
            in_kernel = _in_kernel(tmp)
            b = runs._run(
                [str(PROBLEMS / "matmul_small.py"), str(BY_ID["cheats/zeros.py"].path), "--device", "cpu", "--json"]
            )
            out, err = a.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if a.poll() is None:
                a.kill()
                a.wait()
        return Run(a.returncode, out, err, time.monotonic() - t0), b, in_kernel
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_concurrent_judges_leave_each_other_alone(corpus_runs: CorpusRuns) -> None:
    a, b, in_kernel = corpus_runs.get("uid-clash")
    assert in_kernel, f"A's candidate never reached its kernel: {a.stdout}"
    assert b.returncode == 1 and "wrong result" in json.loads(b.stdout)["reason"], b.stdout
    reason = json.loads(a.stdout)["reason"]
    assert a.returncode == 1 and "no answer after 30 s running a check" in reason, reason


def _tamper_job(runs: CorpusRuns) -> tuple[Run, dict[str, Any]]:
    """cheats/tamper_judge_files.py judged with everything it looks for within its reach if
    the sandbox failed: the judge's working directory, a copy of the problem, and a search
    database named on an ancestor's command line (`--db=...`, as `evokernel search` has it),
    all in a folder named `evokernel-probe-*`. Returns the run and what became of them."""
    import sqlite3

    work = Path(tempfile.mkdtemp(prefix="evokernel-probe-"))
    try:
        problem = work / "matmul_small.py"
        shutil.copy(PROBLEMS / "matmul_small.py", problem)
        db = work / "evokernel.db"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE results (latency_ms REAL)")
            conn.execute("INSERT INTO results VALUES (0.5)")
        wrapper = [
            sys.executable,
            "-c",
            "import subprocess, sys; sys.exit(subprocess.call(sys.argv[2:]))",
            f"--db={db}",
        ]
        run = runs._run(
            [str(problem), str(BY_ID["cheats/tamper_judge_files.py"].path), "--device", "cpu", "--json"],
            cwd=work,
            prefix=wrapper,
        )
        with sqlite3.connect(db) as conn:
            latency = conn.execute("SELECT latency_ms FROM results").fetchone()[0]
        return run, {
            "problem_unchanged": problem.read_bytes() == (PROBLEMS / "matmul_small.py").read_bytes(),
            "latency": latency,
            "files": sorted(p.name for p in work.iterdir()),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


@needs_sandbox
def test_candidate_cannot_write_the_judges_files(corpus_runs: CorpusRuns) -> None:
    run, after = corpus_runs.get("tamper")
    data = json.loads(run.stdout)
    assert not data["accepted"] and "wrong result" in data["reason"], data["reason"]
    assert after["problem_unchanged"] and after["latency"] == 0.5, after
    assert after["files"] == ["evokernel.db", "matmul_small.py"], after


def _sockets_job(runs: CorpusRuns) -> tuple[Run, list[str]]:
    """cheats/host_sockets.py judged with the judge's TMPDIR outside /tmp (the fork server's
    socket, and a database's listening socket, in it: a read-only view of the host's tree
    left both in reach, and connect() works on a read-only mount). Returns the run and the
    connections the listening socket took."""
    import socket

    base = "/var/tmp" if os.path.isdir("/var/tmp") else str(ROOT.parent)
    tmp = Path(tempfile.mkdtemp(prefix="evokernel-sockets-", dir=base))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(tmp / "store.sock"))
        listener.listen(8)
        listener.settimeout(0.2)
        run = runs.check_in("cheats/host_sockets.py", tmp)
        taken = []
        try:
            while True:
                conn, _ = listener.accept()
                taken.append("a connection")
                conn.close()
        except OSError:
            pass
        return run, taken
    finally:
        listener.close()
        remove_tree(tmp)


@needs_sandbox
def test_host_sockets_are_out_of_reach_with_tmpdir_outside_tmp(corpus_runs: CorpusRuns) -> None:
    """The judge's TMPDIR outside /tmp (its fork server's socket there, beside a database's):
    the candidate's root does not hold that folder, so it finds no socket to connect to."""
    run, taken = corpus_runs.get("sockets")
    data = json.loads(run.stdout.splitlines()[-1])
    assert not data["accepted"] and "wrong result" in data["reason"], (data["reason"], run.stderr[-2000:])
    assert taken == [], "the candidate connected to the judge's listening socket"


def _deep_chain_job(runs: CorpusRuns) -> tuple[Run, list[str]]:
    """cheats/deep_folder_chain.py through the CLI, in a TMPDIR of its own: the run, and what
    the judge left in that TMPDIR (its candidate's folder and log, a quarantine)."""
    tmp = Path(tempfile.mkdtemp(prefix="evokernel-deep-"))
    try:
        run = runs.check_in("cheats/deep_folder_chain.py", tmp)
        left = sorted(p.name for p in tmp.iterdir() if p.name.startswith(("evokernel-candidate-", QUARANTINE)))
        return run, left
    finally:
        remove_tree(tmp)


def test_deep_folder_chain_is_removed(corpus_runs: CorpusRuns) -> None:
    """A 20,000-deep chain of folders in the candidate's own folder (`shutil.rmtree` raised
    RecursionError on it: `check` printed a traceback, no verdict, and left 79 MB behind):
    `check` prints its verdict, and the folder is gone."""
    run, left = corpus_runs.get("deep-chain")
    lines = run.stdout.splitlines()
    assert len(lines) == 1, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    data = json.loads(lines[0])
    assert run.returncode == 1 and not data["accepted"], data
    assert "raised: RuntimeError: made a folder chain 20000 deep" in data["reason"], data["reason"]
    assert "RecursionError" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert left == [], f"left in TMPDIR: {left}"


@needs_sandbox
@pytest.mark.parametrize("entry", [pytest.param(BY_ID["cheats/sigstop_judge.py"], id="sigstop")])
def test_judge_cannot_be_frozen(corpus_runs: CorpusRuns, entry: Entry) -> None:
    """SIGSTOP to the judge would leave `check` waiting for good; it finishes in seconds."""
    run = corpus_runs.get(entry)
    assert run.returncode == 1 and "wrong result" in json.loads(run.stdout)["reason"], run.stdout
    assert run.wall_s < RUN_TIMEOUT_S / 2


#: The probes a PID namespace stops, and the fallback must stop too (a GPU path whose CUDA IPC
#: needs the judge in sight: seccomp then refuses signals but to itself, the judge kills the
#: candidate's processes by user namespace).
_NO_PID_PROBES = [
    "cheats/kill_judge.py",
    "cheats/sigstop_judge.py",
    "cheats/fake_verdict_parent_fd.py",
    "honest/env_probe_ancestors.py",
    "honest/memory_probe.py",
    "cheats/spawn_detached_child.py",
    "cheats/spawn_setpgid_child.py",
]


@pytest.mark.slow
@needs_sandbox
@pytest.mark.parametrize("entry", [pytest.param(BY_ID[i], id=i) for i in _NO_PID_PROBES])
def test_probes_fail_without_a_pid_namespace(corpus_runs: CorpusRuns, entry: Entry) -> None:
    run = corpus_runs.get(f"nopid:{entry.id}")
    lines = run.stdout.splitlines()
    assert len(lines) == 1, (run.stdout[-2000:], run.stderr[-2000:])
    data = json.loads(lines[0])
    assert "pid" in data["sandbox"]["off"] and "user" in data["sandbox"]["on"], data["sandbox"]
    assert data["accepted"] == entry.accepted, data["reason"]
    assert any(alt.strip().lower() in data["reason"].lower() for alt in entry.reason.split("|")), data["reason"]
    if entry.reason == "timeout":
        _assert_no_survivor(run)


def test_every_class_has_a_corpus_file() -> None:
    """The corpus cannot silently shrink: every class keeps its files, every file has a class,
    cheats expect rejection and honest candidates acceptance, and each names a real problem."""
    listed = [f for files in CLASSES.values() for f in files]
    assert len(listed) == len(set(listed)), "a file is listed under two classes"
    for cls, files in CLASSES.items():
        assert files, cls
        for f in files:
            assert f in BY_ID, f"class {cls!r}: {f} is missing from tests/corpus"
    assert sorted(BY_ID) == sorted(listed), f"corpus files without a class: {sorted(set(BY_ID) - set(listed))}"
    for e in ENTRIES:
        assert e.expect in (("rejected", "measured") if e.path.parent.name == "cheats" else ("accepted",)), e.id
        assert e.expect != "measured" or e.at_least_ms is not None, e.id
        assert e.device in ("cpu", "cuda"), e.id
        assert (PROBLEMS / f"{e.problem}.py").is_file(), e.id
        assert e.accepted or e.reason != "accepted", e.id
    assert len([e for e in ENTRIES if e.path.parent.name == "cheats"]) >= 50
    assert NEEDS_SANDBOX <= set(BY_ID)


@pytest.mark.parametrize("name", sorted(p.stem for p in PROBLEMS.glob("*.py")))
def test_corpus_problems_load(name: str) -> None:
    problem = Problem.load(PROBLEMS / f"{name}.py")
    assert problem.shapes and problem.heldout
    assert not any(s in problem.shapes for s in problem.heldout)


# --- in-process: the Judge directly, where the CLI is not the point -------------------------

QUICK = GateOptions(
    seeds=2,
    heldout_seeds=1,
    recheck_seeds=1,
    timing={"max_reps": 5, "min_reps": 3, "max_s": 0.5},
    sandbox=SandboxOptions(start_timeout_s=60, call_timeout_s=30, time_timeout_s=60),
)


@pytest.fixture(scope="module")
def matmul_judge() -> Judge:
    return Judge(Problem.load(PROBLEMS / "matmul_small.py"), "cpu", QUICK)


def _source(entry_id: str) -> str:
    return BY_ID[entry_id].path.read_text()


def test_degenerate_problem_is_flagged(corpus_runs: CorpusRuns) -> None:
    """Zeros pass the degenerate problem's tolerance: the judge refuses it, whatever the
    candidate (honest, zeros, or an unrelated one), in-process and through the CLI (a verdict,
    exit 1, not a usage error)."""
    judge = Judge(Problem.load(PROBLEMS / "degenerate_small.py"), "cpu", QUICK)
    assert judge.degenerate is not None and "degenerate" in judge.degenerate
    for source in (
        "def kernel(x):\n    return x * 1e-9\n",
        "import torch\ndef kernel(x):\n    return torch.zeros_like(x)\n",
    ):
        v = judge.check(source)
        assert not v.accepted and v.status is Status.INVALID and "degenerate" in v.reason
    run = corpus_runs.get("degenerate")
    assert run.returncode == 1, run.stderr
    data = json.loads(run.stdout)
    assert not data["accepted"] and "degenerate" in data["reason"] and data["status"] == "invalid"
    # the same problem with outputs of a sane scale is not degenerate
    assert Judge(Problem.load(PROBLEMS / "matmul_small.py"), "cpu", QUICK).degenerate is None


def test_judge_refills_the_same_buffers_with_fresh_values(matmul_judge: Judge) -> None:
    """Pointers repeat (a data_ptr cache sees a hit), values change (and the hit is stale)."""
    shape = matmul_judge.tuning[0]
    ptrs = [t.data_ptr() for t in shape.inputs] + [s.data_ptr() for s in shape.slots]
    refs1, pristine1 = shape.refill(11)
    refs2, pristine2 = shape.refill(12)
    assert [t.data_ptr() for t in shape.inputs] + [s.data_ptr() for s in shape.slots] == ptrs
    assert not torch.equal(pristine1[0], pristine2[0]) and not torch.equal(refs1[0], refs2[0])
    assert torch.equal(pristine2[0], shape.inputs[0])
    assert all(bool(torch.isnan(s).all()) for s in shape.slots)  # slots poisoned before each call


def test_judge_seeds_are_fresh(matmul_judge: Judge) -> None:
    honest = _source("honest/torch_matmul.py")
    v1, v2 = matmul_judge.check(honest), matmul_judge.check(honest)
    assert v1.accepted and v2.accepted, (v1.reason, v2.reason)
    assert v1.checks == v2.checks == 2 * 2 + 1 + 2  # QUICK: 2 seeds x 2 shapes, 1 held out, 2 re-checks
    seeds = v1.seeds + v2.seeds
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**62 for s in seeds)


@pytest.mark.parametrize(
    "entry_id",
    [
        "cheats/cache_by_data_ptr.py",
        "cheats/empty_like_unwritten.py",
        "cheats/hardcoded_shapes.py",
        "cheats/correct_first_calls.py",
        "cheats/mutate_input_scratch.py",
        "cheats/thread_fills_later.py",
    ],
)
def test_judge_rejects_in_process(matmul_judge: Judge, entry_id: str) -> None:
    e = BY_ID[entry_id]
    judge = (
        matmul_judge if e.problem == "matmul_small" else Judge(Problem.load(PROBLEMS / f"{e.problem}.py"), "cpu", QUICK)
    )
    v = judge.check(e.path.read_text(), label=e.id)
    assert not v.accepted and v.status is not Status.OK and e.reason.lower() in v.reason.lower(), v.reason


def test_only_the_recheck_after_timing_catches_the_sleeper(matmul_judge: Judge) -> None:
    """cheats/wrong_after_timing.py is right on every check before timing and on every timed
    call: it passes when nothing is timed, and the re-check after timing catches it."""
    src = _source("cheats/wrong_after_timing.py")
    untimed = Judge(Problem.load(PROBLEMS / "matmul_small.py"), "cpu", msgspec.structs.replace(QUICK, time=False))
    v = untimed.check(src)
    assert v.accepted and v.checks == 2 * 2 + 1 and v.latency_ms is None, v.reason
    v = matmul_judge.check(src)
    assert not v.accepted and "after timing" in v.reason and v.checks == 2 * 2 + 1 + 1, v.reason


@pytest.mark.slow
def test_remeasuring_together_times_the_forgers_at_their_true_speed(matmul_judge: Judge) -> None:
    """The elites' re-measurement (`Judge.judge_together`, what `KernelEvaluator.remeasure`
    runs) takes the same judge-timed path: the forgers come out at their true 5 ms a call
    (before, at 1/20 of it, ahead of the honest matmul), the lazy one is caught."""
    ids = [
        "honest/torch_matmul.py",
        "cheats/forge_encoder_samples.py",
        "cheats/forge_samples_in_frame.py",
        "cheats/lazy_fills_slot_later.py",
    ]
    sandboxes = [matmul_judge.sandbox(_source(i), label=i) for i in ids]
    try:
        honest, encoder, frames, lazy = matmul_judge.judge_together(sandboxes)
    finally:
        for sb in sandboxes:
            sb.close()
    assert honest.accepted and encoder.accepted and frames.accepted, (honest.reason, encoder.reason, frames.reason)
    for forger in (encoder, frames):
        assert forger.latency_ms is not None and forger.latency_ms >= 4.0, forger.latency_ms
        assert all(t.footing is not None and t.footing.mode == "cpu-judge" for t in forger.timings)
    assert not lazy.accepted and "wrong result in a timed call" in lazy.reason, lazy.reason


def test_impossible_allocation_is_rejected_quickly(matmul_judge: Judge) -> None:
    t0 = time.monotonic()
    v = matmul_judge.check(_source("cheats/huge_alloc.py"))
    assert not v.accepted and v.status is Status.RUNTIME_ERROR and "overflow" in v.reason.lower()
    assert time.monotonic() - t0 < 20


@pytest.mark.slow
@needs_sandbox
def test_output_is_capped(matmul_judge: Judge) -> None:
    """1 GB to stdout leaves a log cut after a few MB, with a note; a 2 GB file in the
    candidate's own folder is refused past the file-size limit (so it answers wrong)."""
    from evokernel.judge._worker import Ready

    sb = matmul_judge.sandbox(_source("cheats/output_flood.py"))
    try:
        assert isinstance(sb.wait_ready(), Ready)
        assert os.path.getsize(sb.log_path) < QUICK.sandbox.output_bytes + 200
        assert "output cut after" in sb.log_tail()
        v = matmul_judge.judge(sb)
        assert not v.accepted and "wrong result" in v.reason, v.reason
    finally:
        sb.close()
    assert not os.path.exists(sb.log_path) and not os.path.exists(sb.work_dir)


def test_hang_is_cut_at_the_call_timeout() -> None:
    judge = Judge(
        Problem.load(PROBLEMS / "matmul_small.py"),
        "cpu",
        GateOptions(sandbox=SandboxOptions(start_timeout_s=30, call_timeout_s=2.0)),
    )
    t0 = time.monotonic()
    v = judge.check(_source("cheats/hang_in_kernel.py"))
    assert not v.accepted and v.status is Status.TIMEOUT and "no answer after 2 s running a check" in v.reason
    assert time.monotonic() - t0 < 15


def test_scrubbed_environment_drops_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the fork server (and so every candidate) starts with; the CLI runs of
    honest/env_probe.py prove it end to end."""
    for k, v in FAKE_SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_fake")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = scrubbed_environment()
    assert not (set(FAKE_SECRETS) | {"GITHUB_TOKEN"}) & set(env)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env.get("PATH") == os.environ.get("PATH")
    assert not any(v in FAKE_SECRETS.values() for v in env.values())


def test_compare_is_scale_aware_and_positional() -> None:
    ref = torch.tensor([1e6, -2e6, 3e6, 0.5])
    tol = {"rtol": 1e-5, "atol": 1e-5}
    assert compare([ref], [ref * (1 + 1e-7)], tol) is None
    assert compare([ref], [ref + torch.tensor([0.0, 0.0, 0.0, 200.0])], tol) is not None  # atol scales with RMS
    assert compare([ref], [ref + torch.tensor([0.0, 0.0, 0.0, 10.0])], tol) is None
    tiny = torch.full((4,), 1e-8)
    assert compare([tiny], [torch.zeros(4)], tol) is None  # RMS floored at 1: the canary's business
    nan_ref = torch.tensor([1.0, float("nan"), 3.0])
    assert compare([nan_ref], [torch.tensor([1.0, float("nan"), 3.0])], tol) is None
    assert "NaN or Inf" in compare([nan_ref], [torch.tensor([float("nan"), 2.0, 3.0])], tol)
    assert "differ" in compare([torch.arange(4)], [torch.tensor([0, 1, 2, 4])], tol)


def test_perturber_changes_k_elements_and_reports_them_in_one_read_back() -> None:
    from evokernel.judge.timing import Perturber, perturbable

    a, b = torch.randn(64), torch.arange(40, dtype=torch.int64)  # b is not perturbed (integer)
    pristine = a.clone()
    p = Perturber([[a, b]], 4, seed=1, batch=3)
    recs = []
    for _ in range(5):  # crosses a batch boundary
        rec = p.apply(0)
        changed = (a != pristine).nonzero().reshape(-1).tolist()
        recs.append((rec, a.clone()))
        p.restore(rec, 0)
        assert torch.equal(a, pristine) and len(changed) <= 4
    reports = Perturber.report_many([r for r, _ in recs])
    assert reports == [Perturber.report(r) for r, _ in recs]
    for (rec, seen), report in zip(recs, reports):
        ((j, positions, values),) = report
        assert j == 0 and len(set(positions)) == 4 and perturbable(a, 4) and not perturbable(b, 4)
        rebuilt = pristine.clone()
        rebuilt[torch.tensor(positions)] = torch.tensor(values, dtype=a.dtype)
        assert torch.equal(rebuilt, seen)
    assert Perturber.report_many([[], []]) == [[], []]


def test_prewarm_runs_the_harness_steps_on_any_dtype_mix() -> None:
    """The GPU path runs in the candidate's compile phase; its steps run here on the CPU."""
    from evokernel.judge.timing import prewarm_cuda

    prewarm_cuda(
        [torch.bfloat16, torch.int32, torch.float32, torch.bfloat16],
        [torch.bfloat16, torch.int64],
        flush_mb=1,
        device="cpu",
    )
    prewarm_cuda([torch.int64], [], flush_mb=1, device="cpu")  # nothing to perturb
