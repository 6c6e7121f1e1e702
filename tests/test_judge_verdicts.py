"""Issue 50: the judge always returns a verdict, and what a candidate read does not travel.

- Any failure of the judge's own while it judges one candidate (an exception in the gate, in
  cleaning up after it, in starting its sandbox) is that candidate's verdict: `check` prints
  it, a search goes on with the next candidate. An interrupt is not swallowed.
- What a candidate read outside its folder (here a canary file with a random token) and put
  in its exception or its output reaches neither the store nor a prompt to the model
  (`evokernel.core.redact.redact_failure`).

The candidates run in the real sandbox, judged on the CPU by the real Judge.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evokernel.core.archive import Archive
from evokernel.core.genome import Genome
from evokernel.core.mutator import Context
from evokernel.core.redact import MESSAGE, redact_failure
from evokernel.core.result import Result, Status
from evokernel.evaluators import KernelEvaluator
from evokernel.judge.gate import GateOptions, Judge
from evokernel.judge.problem import Problem
from evokernel.judge.sandbox import Sandbox, SandboxOptions, wait_for_cleanup
from evokernel.search_spaces import matmul_space
from evokernel.search_spaces.matmul.template import candidate_source

ROOT = Path(__file__).resolve().parents[1]
MATMUL = ROOT / "tests" / "corpus" / "problems" / "matmul_small.py"
HONEST = "import torch\n\n\ndef kernel(a, b):\n    return torch.matmul(a, b)\n"
QUICK = GateOptions(
    seeds=1,
    heldout_seeds=1,
    recheck_seeds=1,
    race=0,
    timing={"max_reps": 5, "min_reps": 3, "max_s": 0.5},
    sandbox=SandboxOptions(start_timeout_s=60, call_timeout_s=30, time_timeout_s=60),
)


@pytest.fixture(scope="module")
def judge() -> Judge:
    return Judge(Problem.load(MATMUL), "cpu", QUICK)


# --- a verdict, always ----------------------------------------------------------------------


def test_the_judges_own_failure_is_the_candidates_verdict(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kw: Any) -> None:
        raise ValueError("the judge broke")

    monkeypatch.setattr(Judge, "_trial", broken)
    for timed in (True, False):
        v = judge.check(HONEST, label="x", timed=timed)
        assert not v.accepted and v.status is Status.CRASH and v.label == "x"
        assert v.reason == "internal error while judging it: ValueError: the judge broke"
    monkeypatch.undo()

    def unmade(*args: Any, **kw: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Judge, "sandbox", unmade)
    v = judge.check(HONEST, label="y")
    assert not v.accepted and "internal error while starting its sandbox: OSError" in v.reason


def test_a_failing_cleanup_is_logged_and_the_verdict_stands(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    closed = []
    close = Sandbox.close

    def close_then_fail(self: Sandbox) -> None:
        close(self)  # its processes are gone and its folder too; then the failure
        closed.append(self.work_dir)
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(Sandbox, "close", close_then_fail)
    v = judge.check(HONEST)
    assert v.accepted, v.reason
    assert wait_for_cleanup(30)  # (a candidate with a user of its own: removed off the judge's path)
    assert closed and not os.path.exists(closed[0])


def test_an_interrupt_is_not_a_verdict(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kw: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Judge, "_trial", interrupted)
    with pytest.raises(KeyboardInterrupt):
        judge.check(HONEST)


@pytest.mark.slow
def test_a_search_goes_on_after_the_judge_failed_on_a_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluator's first candidate meets a failure of the judge's, the second a sandbox
    that did not start: both are results, and the third is judged as usual."""
    calls = {"trial": 0}
    trial = Judge._trial

    def once(self: Judge, *args: Any, **kw: Any) -> Any:
        calls["trial"] += 1
        if calls["trial"] == 1:
            raise RuntimeError("reading the slots failed")
        return trial(self, *args, **kw)

    start = Judge.sandbox

    def start_but_second(self: Judge, source: str, label: str = "candidate", **kw: Any) -> Sandbox:
        if label == genomes[1].id:
            raise OSError(24, "Too many open files")
        return start(self, source, label, **kw)

    space = matmul_space()
    genomes = [
        space.genome(BM=16, BN=32, BK=32, GROUP_M=1, num_warps=4, num_stages=s)
        for s in (2, 3, 4)  # (three distinct genomes of one template)
    ]
    monkeypatch.setattr(Judge, "_trial", once)
    monkeypatch.setattr(Judge, "sandbox", start_but_second)
    ev = KernelEvaluator(MATMUL, lambda g: candidate_source(g.params), device="cpu", options=QUICK, workers=1)
    with ev:
        results = list(ev.evaluate(genomes))
    assert [r.status for r in results] == [Status.CRASH, Status.CRASH, Status.OK], [r.error for r in results]
    assert "internal error while judging it: RuntimeError: reading the slots failed" in results[0].error
    assert "internal error while starting its sandbox: OSError" in results[1].error


# --- what a candidate read does not travel --------------------------------------------------


def canary_file() -> tuple[Path, str]:
    """A file with a random token, outside any candidate's folder and where a candidate can
    read it: in the interpreter's prefix (a virtual environment beside the judge), which the
    sandbox shows candidates (read-only); its /tmp, /var/tmp and home are not the host's."""
    token = "canary" + secrets.token_hex(16)
    for where in (sys.prefix, "/var/tmp"):
        try:
            fd, path = tempfile.mkstemp(prefix="evokernel-canary-", suffix=".env", dir=where)
        except OSError:
            continue
        with os.fdopen(fd, "w") as f:
            f.write(f"ANTHROPIC_API_KEY=sk-ant-{token}\nDB_PASSWORD=plain words\nCANARY={token}\n")
        os.chmod(path, 0o644)
        return Path(path), token
    pytest.skip("no folder outside /tmp to write a canary in")


#: Reads the canary, prints it (plainly and dressed as a traceback) and raises with it.
CANARY_READER = """\
CONFIG = {{"BM": 32, "BN": 32, "BK": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 2}}

SECRET = open({path!r}).read()


def kernel(a, b):
    print(SECRET)
    for line in SECRET.splitlines():
        print('  File "evokernel_candidate.py", line 1, in ' + line.split("=")[-1])
        print("RuntimeError: " + line)
    raise RuntimeError("read: " + SECRET)
"""


def test_what_a_candidate_read_is_neither_stored_nor_prompted(judge: Judge, tmp_path: Path) -> None:
    from evokernel.mutators.llm import LLMRewrite
    from evokernel.store import SQLiteStore

    path, token = canary_file()
    try:
        source = CANARY_READER.format(path=str(path))
        verdict = judge.check(source)
    finally:
        path.unlink()
    result = verdict.to_result()
    assert token in result.error, "the candidate did not read the canary: the test proves nothing"
    assert not verdict.accepted and result.status is Status.RUNTIME_ERROR

    kept = redact_failure(result.error)
    assert token not in kept and "plain words" not in kept, kept
    assert "raised: RuntimeError: read: ANTHROPIC_API_KEY=[redacted]" in kept, kept
    assert len(kept) <= 2000

    genome = Genome.of(dict(matmul_space().default()), source=source)
    store = SQLiteStore(str(tmp_path / "s.db"))
    store.begin_run("r1", name="canary", archive_key="k", fingerprint="fp", config={}, environment={})
    store.record("r1", 0, genome, "fp", result)
    store.close()
    for f in tmp_path.iterdir():
        assert token.encode() not in f.read_bytes(), f.name

    class Provider:  # never called: the prompts are built, not sent
        def available(self) -> None:
            return None

    rewrite = LLMRewrite(MATMUL, provider=Provider(), render=lambda g: candidate_source(g.params))
    rewrite._mine[genome.id] = 0  # one of its own rewrites: it goes back for repair
    rewrite.observe(genome, result)
    [(failed, error, _)] = rewrite._to_repair
    ctx = Context(matmul_space(), np.random.default_rng(0), 1, Archive())
    for prompt in (rewrite.repair_prompt(failed, error), rewrite.prompt(genome, ctx)):
        assert token not in prompt.replace(source, ""), prompt
        assert "plain words" not in prompt.replace(source, "")


def test_redaction_caps_floods_and_keeps_the_judges_words() -> None:
    flood = "raised: RuntimeError: " + "leak " * 200_000 + " (M=48,N=40,K=64)"
    kept = redact_failure(flood + "\n" + "\n".join(f"printed {i}" for i in range(10_000)))
    assert len(kept) <= 2000 and kept.startswith("raised: RuntimeError: leak leak")
    assert kept.endswith("[evokernel: 10000 lines the candidate printed or quoted, left out]")
    text = "raised: ValueError: " + "x " * 1000 + "\nTraceback (most recent call last):\nValueError: " + "y " * 1000
    assert max(len(line) for line in redact_failure(text).splitlines()) <= 400
    assert redact_failure(text).splitlines()[-1] == "ValueError: " + ("y " * 1000)[: MESSAGE - 6] + " [cut]"
    wrong = "wrong result: output 0: 12 of 1920 values off (max abs error 0.5 at [3, 4]) (M=48,N=40,K=64)"
    assert redact_failure(wrong) == wrong
    timeout = (
        "timeout: no answer after 60 s running a check (M=48,N=40,K=64)\n[evokernel: output cut after 4194304 bytes]"
    )
    assert redact_failure(timeout) == timeout
    assert redact_failure(Result.failed(Status.CRASH, "").error) == ""
