"""Kernel evaluator: the gate and the timing harness as a search fitness.

Each genome is rendered into a candidate module, run in a sandbox of its own, checked
against the problem's reference on fresh inputs (tuning and held-out shapes), timed, and
re-checked. Candidates import and compile in parallel processes (one per CPU core) while
the judge checks and times one candidate at a time on the GPU: two timings never share it.

    from evokernel.evaluators import KernelEvaluator
    from evokernel.search_spaces.matmul.template import candidate_source

    evaluator = KernelEvaluator("examples/problems/matmul_bf16.py", lambda g: candidate_source(g.params))
    for result in evaluator.evaluate(genomes):
        print(result.status, result.latency_ms)
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from evokernel.judge.candidate import bind_config
from evokernel.judge.device import check_device, cuda_index, default_device, device_kind, gpu_name, is_cuda
from evokernel.judge.env import interpreter_problem, toolchain
from evokernel.core.errors import EvaluatorError
from evokernel.judge.gate import GateOptions, Judge, Verdict, close_quietly
from evokernel.core.genome import Genome
from evokernel.judge.problem import Problem
from evokernel.core.result import Result, Status
from evokernel.judge._isolation import Report
from evokernel.judge.sandbox import ISOLATION_FIELDS, Sandbox, SandboxUnavailable, isolation_report
from evokernel.core.template import template_hash

__all__ = ["KernelEvaluator", "reference_source"]

Render = Callable[[Genome], str]


def reference_source(problem_path: str, params: Mapping[str, Any] | None = None) -> str:
    """A candidate whose kernel is the problem's own reference: always right, used to check
    that the GPU is healthy after a candidate faulted. The problem is loaded with `params`
    (its resolved parameters, `Problem.params`), so the reference is that of the same problem
    whatever the candidate's environment holds."""
    args = repr(str(Path(problem_path).resolve()))
    if params is not None:
        args += f", params=_json.loads({json.dumps(params, sort_keys=True)!r})"
    return (
        "import json as _json\n"
        "from evokernel.judge.problem import Problem as _Problem\n"
        f"kernel = _Problem.load({args}).reference\n"
    )


def _source_of(genome: Genome, render: Render) -> tuple[str, bool]:
    """The candidate's source, and whether it is trusted (rendered by the user's template
    rather than carried by the genome). A carried source gets the genome's parameters bound
    into its `CONFIG`: the numeric mutators tune source kernels through them."""
    if genome.source and "def kernel" in genome.source:
        return bind_config(genome.source, genome.params), False
    return render(genome), True


def _first_ready(queue: Sequence[tuple[int, Genome, Any]], *, wait_s: float) -> int:
    """Index of the first queued candidate the judge can take without waiting: a failure
    already known, or a started sandbox whose process has answered (ready or failed). If none
    is, waits up to `wait_s` for one to answer (or to be started); then the oldest (the judge
    waits on it, under its own timeout)."""
    import time
    from multiprocessing.connection import wait

    deadline = time.monotonic() + wait_s
    while True:
        conns: dict[int, int] = {}
        for i, (_, _, item) in enumerate(queue):
            if isinstance(item, Result):
                return i
            if not item.done():
                continue
            if item.exception() is not None:
                return i  # starting it failed: the judge reports that at once
            sandbox = item.result()
            if sandbox.answered():
                return i
            conns.setdefault(id(sandbox.conn), i)
        left = deadline - time.monotonic()
        if left <= 0:
            return 0
        started = [queue[i][2].result().conn for i in conns.values()]
        # a sandbox still being started is not in `started`: look again soon
        step = min(left, 0.05 if len(started) < len(queue) else left)
        if started:
            wait(started, timeout=step)
        else:
            time.sleep(step)


class KernelEvaluator:
    """Evaluator protocol over the gate. `render` turns a genome into candidate source text
    (a genome carrying its own source that defines `kernel` is used as it is).

    `device` is "cpu", "cuda" (the current CUDA device) or "cuda:N" (ConfigError at once if
    torch sees no such GPU). The fingerprint covers the problem (its source, parameters and
    shapes), the kind of device ("cuda" or "cpu") and the GPU's model by name (not which of the
    host's GPUs: results on two H200s are shared, an H200's and an A100's are not), the
    toolchain, the gate's options and the template: a hash of render's code and of the
    template modules it uses (`evokernel.core.template.template_hash`), or `template`, a name the
    caller gives it (e.g. for a render whose output depends on data it closes over)."""

    name = "kernel"

    def __init__(
        self,
        problem: Problem | str | os.PathLike[str],
        render: Render,
        *,
        device: str | None = None,
        options: GateOptions | None = None,
        workers: int | None = None,
        reuse: int = 64,
        template: str | None = None,
    ) -> None:
        self.problem = problem if isinstance(problem, Problem) else Problem.load(problem)
        self.render = render
        self._template = template
        if device is None:
            device = default_device()
        else:
            # at once, in one line: not a run that every candidate fails and that can never resume
            check_device(device, f"KernelEvaluator(device={device!r})")
        if device == "cpu" and (why := interpreter_problem()):
            raise EvaluatorError(why)  # at once, not as every candidate's runtime error
        self.device = device
        self.options = options or GateOptions()
        # one core for the judge and one for the candidate being timed; the rest compile
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 3) - 2)
        # a process that judged a trusted candidate cleanly takes the next one, up to this
        # many candidates (0: a new process for every candidate)
        self.reuse = reuse
        self._judge: Judge | None = None
        self.faults = 0
        self.best: dict[str, float] = {}  # best median per shape so far: the bar for racing

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            self._judge = Judge(self.problem, self.device, self.options)
        return self._judge

    def close(self) -> None:
        """Free the judge's device memory (its input sets and output slots); a later
        evaluation builds a new judge. Call it when done with a problem, or use the evaluator
        as a context manager, before judging the next problem in the same process."""
        if self._judge is not None:
            self._judge.close()
            self._judge = None

    def __enter__(self) -> KernelEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def template(self) -> str:
        """The template's identity: the `template` given, else a hash of render's code."""
        if self._template is None:
            self._template = template_hash(self.render)
        return self._template

    def fingerprint(self) -> dict[str, Any]:
        # the kind of device and the GPU's name, not its index: two GPUs of one model share results
        if is_cuda(self.device):
            where = toolchain(self.device)
        else:
            where = {"cpu": platform.processor() or platform.machine()}
        return {
            "evaluator": "kernel",
            **self.problem.fingerprint(),
            "device": device_kind(self.device),
            "shapes": self.problem.shapes,  # the tuning shapes themselves (exports read them)
            **where,
            "gate": _gate_identity(self.options),
            "template": self.template,
        }

    def sandbox(self) -> Report:
        """Which sandbox protections this evaluator's candidates get here (SandboxUnavailable
        if they are required and one does not hold)."""
        return isolation_report(self.options.sandbox, self.device)

    def environment(self) -> dict[str, Any]:
        """Recorded with each run: the sandbox's protections, on and off, and the device that
        judges ("cuda:N", its index fixed; "gpu": its name, over the host's first GPU's)."""
        report = self.sandbox()
        where: dict[str, Any] = {"device": "cpu"}
        if is_cuda(self.device):
            index = self._judge.index if self._judge is not None else cuda_index(self.device)
            where = {"device": f"cuda:{index}", "gpu": gpu_name(f"cuda:{index}")}
        return {"sandbox": {"on": sorted(report.on), "off": report.off}, **where}

    def transfer_key(self) -> dict[str, Any]:
        """The problem's family (its FAMILY, else its name) on this device, and its first tuning
        shape's numeric dimensions: searches on other shapes of the family seed this one."""
        where = (toolchain(self.device).get("gpu") or "cuda") if is_cuda(self.device) else "cpu"
        shape = self.problem.shapes[0] if self.problem.shapes else {}
        dims = {k: float(v) for k, v in shape.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return {"family": f"{self.problem.family}@{where}", "shape": dims}

    def fidelities(self) -> list[KernelEvaluator]:
        """A cheap level, then this evaluator: the same template and gate on one tuning shape
        (the heaviest by the problem's WEIGHTS, else the middle one of its list), no held-out
        shapes, and short timing (10-60 calls, 0.3 s at most, a 2% interval), on the same
        device. A genome promoted past it is judged in full here: every shape, held-out
        checks, full timing."""
        shapes = self.problem.shapes
        weights = self.problem.weights
        pick = max(range(len(shapes)), key=lambda i: (weights[i], -i)) if weights else (len(shapes) - 1) // 2
        short = {"min_reps": 10, "max_reps": 60, "max_s": 0.3, "rel_ci": 0.02}
        options = msgspec.structs.replace(self.options, timing={**self.options.timing, **short})
        cheap = KernelEvaluator(
            self.problem.restricted([pick]),
            self.render,
            device=self.device,
            options=options,
            workers=self.workers,
            reuse=self.reuse,
            template=self.template,
        )
        cheap.fidelity_name = f"short@{_shape_label(shapes[pick])}"
        return [cheap, self]

    def evaluate(self, genomes: Sequence[Genome]) -> Iterator[Result]:
        judge = self.judge
        todo = iter(genomes)
        pending: deque[tuple[Genome, Future[Sandbox] | Result]] = deque()
        # sandboxes are started on a thread of their own: starting one (a fork, a folder, a
        # user id) takes ~10 ms that the judge need not wait for
        starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evokernel-start")
        idle: list[Sandbox] = []  # processes free to take the next trusted candidate

        def launch() -> bool:
            genome = next(todo, None)
            if genome is None:
                return False
            try:
                source, trusted = _source_of(genome, self.render)
            except Exception as exc:  # a genome the template cannot render: its failure, not ours
                pending.append(
                    (genome, Result.failed(Status.COMPILE_ERROR, f"render failed: {type(exc).__name__}: {exc}"))
                )
                return True
            while trusted and idle:
                sandbox = idle.pop()
                if sandbox.reuse(source, genome.id):
                    done: Future[Sandbox] = Future()
                    done.set_result(sandbox)
                    pending.append((genome, done))
                    return True
                close_quietly(sandbox)
            pending.append((genome, starter.submit(judge.sandbox, source, label=genome.id, trusted=trusted)))
            return True

        done: dict[int, Result] = {}  # judged out of order, yielded in order
        next_out = 0

        def judge_one(item: Future[Sandbox] | Result) -> Result:
            if isinstance(item, Result):
                return item
            try:
                sandbox = item.result()
            except SandboxUnavailable:  # the machine's, not the candidate's: the run stops
                raise
            except Exception as exc:  # its sandbox did not start: this candidate's failure
                return judge.internal_error(exc, "", "starting its sandbox").to_result()
            keep = False
            try:
                verdict = judge.judge(sandbox, self.best)  # (its own failures are verdicts)
                keep = not (verdict.fault or verdict.internal) and sandbox.reusable and sandbox.uses + 1 < self.reuse
            finally:
                if keep:
                    idle.append(sandbox)
                else:
                    close_quietly(sandbox)
            if verdict.fault:
                self._health_check(verdict)
            self._note_best(verdict)
            return verdict.to_result()

        order = 0
        queue: deque[tuple[int, Genome, Future[Sandbox] | Result]] = deque()
        try:
            while len(pending) < self.workers and launch():
                pass
            while pending or queue:
                while pending:
                    genome, item = pending.popleft()
                    queue.append((order, genome, item))
                    order += 1
                # the judge takes the first candidate that is ready (compiled, or failed), not the
                # oldest: one slow compile does not hold up the GPU; results still leave in order
                pick = _first_ready(queue, wait_s=30.0 if len(queue) > 1 else 0.0)
                idx, genome, item = queue[pick]
                del queue[pick]
                done[idx] = judge_one(item)
                launch()
                while next_out in done:
                    yield done.pop(next_out)
                    next_out += 1
        finally:
            for _, item in pending:
                if isinstance(item, Future):
                    item.add_done_callback(lambda f: f.exception() is None and f.result().close())
            for _, _, item in queue:
                if isinstance(item, Future):
                    item.add_done_callback(lambda f: f.exception() is None and f.result().close())
            starter.shutdown(wait=True)
            for sandbox in idle:
                close_quietly(sandbox)

    def remeasure(self, genomes: Sequence[Genome], *, rounds: int = 3) -> list[Result]:
        """Judge these genomes again, together: checked again on fresh inputs, then timed in
        interleaved blocks (A B C A B C ...) so that their figures compare like for like."""
        judge = self.judge
        sources = [_source_of(g, self.render) for g in genomes]
        sandboxes = [judge.sandbox(src, label=g.id, trusted=trusted) for g, (src, trusted) in zip(genomes, sources)]
        try:
            verdicts = judge.judge_together(sandboxes, rounds=rounds)
        finally:
            for sb in sandboxes:
                close_quietly(sb)
        if any(v.fault for v in verdicts):
            self._health_check(next(v for v in verdicts if v.fault))
        return [v.to_result() for v in verdicts]

    def _note_best(self, verdict: Verdict) -> None:
        if verdict.accepted:
            for t in verdict.timings:
                if t.shape not in verdict.raced:
                    self.best[t.shape] = min(self.best.get(t.shape, math.inf), t.median_ms)

    def _health_check(self, after: Verdict) -> None:
        """After a candidate faulted on the GPU, a fresh process must pass the reference
        before the next candidate is judged."""
        self.faults += 1
        if not self.problem.path:
            return
        # checked, not timed: the decode problem's reference reads its lengths back to the host
        # (`tolist`), which the timing refuses; before session 18 that failed every health
        # check of a decode search and stopped it at its first fault
        verdict = self.judge.check(
            reference_source(self.problem.path, self.problem.params), label="health check", timed=False
        )
        if not verdict.accepted:
            raise EvaluatorError(
                f"the GPU failed a health check after a candidate faulted ({after.reason.splitlines()[0]}): "
                f"{verdict.reason.splitlines()[0]}"
            )


def _shape_label(shape: Mapping[str, Any]) -> str:
    """A short label of a shape for a level's name: its batch size where it has one."""
    if "M" in shape:
        return f"M{shape['M']}"
    return ",".join(f"{k}{v}" for k, v in list(shape.items())[:3])


def _gate_identity(options: GateOptions) -> dict[str, Any]:
    """The gate's options as they bear on results: how candidates are sandboxed is left out
    (a result measured with the sandbox on is the result with it off)."""
    out = msgspec.to_builtins(options)
    for name in ISOLATION_FIELDS:
        out.get("sandbox", {}).pop(name, None)
    return out
