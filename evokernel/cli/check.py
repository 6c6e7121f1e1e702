"""`evokernel check PROBLEM CANDIDATE`: check (and time) one candidate against a problem, in a sandbox."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from evokernel.cli._common import device_arg, positive_float, positive_int, say_sandbox
from evokernel.core.errors import ConfigError, EvokernelError


def add_parser(sub: Any) -> None:
    c = sub.add_parser("check", help="check (and time) one candidate against a problem, in a sandbox")
    c.add_argument("problem", help="problem module (.py): make_inputs, reference, SHAPES")
    c.add_argument("candidate", help="candidate module (.py) defining kernel(*inputs)")
    c.add_argument(
        "--device",
        type=device_arg,
        default=None,
        metavar="{cpu,cuda,cuda:N}",
        help="cpu, cuda (the current GPU) or cuda:N (torch's N-th visible GPU); "
        "default: cuda when a GPU is present, else cpu (Triton through its interpreter)",
    )
    c.add_argument("--no-time", action="store_true", help="check correctness only")
    c.add_argument("--seeds", type=positive_int, default=1, help="checks per tuning shape before timing")
    c.add_argument("--timeout", type=positive_float, default=None, help="seconds per step (import, call, timing)")
    c.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    c.add_argument(
        "--require-sandbox",
        action="store_true",
        help="exit 2 unless every sandbox protection (namespaces, seccomp, limits) holds here",
    )
    c.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a parameter of the problem (its Params), as text: e.g. --param m=64,128; repeatable; "
        "overrides the problem's environment variable",
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0 if the candidate is accepted, 1 if it is rejected, 2 for usage errors."""
    for path in (args.problem, args.candidate):
        if not Path(path).is_file():
            raise ConfigError(f"no such file: {path}")
    try:
        source = Path(args.candidate).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {args.candidate}: {exc}") from None
    from evokernel.judge.gate import GateOptions, Judge
    from evokernel.judge.problem import Problem
    from evokernel.judge.sandbox import SandboxOptions, isolation_report

    from evokernel.judge.device import check_device, default_device, is_cuda

    device = args.device
    if device is None:
        device = default_device()
    else:
        check_device(device, f"--device {device}")
    problem = Problem.load(args.problem, param_text=param_text(args.param) if args.param else None)
    full = problem
    if device == "cpu":
        problem = problem.on_cpu()
    if not args.json:  # what it is about to do: on the CPU, a full-size problem takes minutes
        print(
            check_plan(problem, device, cpu_sized=problem is not full, timed=not args.no_time),
            file=sys.stderr,
            flush=True,
        )
    limits = (
        {}
        if args.timeout is None
        else {"start_timeout_s": args.timeout, "call_timeout_s": args.timeout, "time_timeout_s": args.timeout}
    )
    sandbox = SandboxOptions(**limits, isolation="require" if args.require_sandbox else None)
    report = isolation_report(sandbox, device)  # SandboxUnavailable (exit 2) if required and not all there
    say_sandbox(report)
    options = GateOptions(seeds=args.seeds, time=not args.no_time, sandbox=sandbox)
    try:
        judge = Judge(problem, device, options)
    except EvokernelError:
        raise
    except Exception as exc:  # the problem's own code failed: a usage error, not a verdict
        raise ConfigError(f"{args.problem}: {type(exc).__name__}: {exc}") from None
    verdict = judge.check(source, label=args.candidate)
    if args.json:
        extra = {"shapes": "cpu" if problem is not full else "full"}
        if device == "cpu" and verdict.timings:
            extra["note"] = CPU_TIMINGS
        print(
            json.dumps(
                {
                    **msgspec.to_builtins(verdict),
                    "device": device,
                    **extra,
                    "sandbox": {"on": sorted(report.on), "off": report.off},
                }
            )
        )
    elif verdict.accepted:
        figures = ", ".join(f"{t.shape}: {t.median_ms:.5f} ms" for t in verdict.timings)
        print(f"accepted{': ' + figures if figures else ''}")
        if device == "cpu" and verdict.timings:
            print(f"note: {CPU_TIMINGS}", file=sys.stderr)
    else:
        print(f"rejected: {verdict.reason.splitlines()[0]}", file=sys.stderr)
    code = 0 if verdict.accepted else 1
    if is_cuda(device):
        # torch warns at interpreter exit about CUDA memory still shared with candidate
        # processes the judge killed; leave before that noise reaches the verdict's stderr
        # (once the candidate's folder is removed: os._exit skips the wait at exit)
        from evokernel.judge.sandbox import wait_for_cleanup

        wait_for_cleanup()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def param_text(items: list[str]) -> dict[str, str]:
    """`--param NAME=VALUE` arguments as {NAME: VALUE} (converted by the problem's Params)."""
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"--param {item!r}: expected NAME=VALUE")
        if name.strip() in out:
            raise ConfigError(f"--param {name.strip()} is given twice")
        out[name.strip()] = value
    return out


CPU_TIMINGS = (
    "timed on the CPU (wall clock; Triton kernels run in its interpreter): these figures say nothing about GPU speed"
)


def check_plan(problem: Any, device: str, *, cpu_sized: bool, timed: bool) -> str:
    """One line on what `check` is about to do, and on the CPU how long it may take."""

    def shapes(items: list[dict[str, Any]]) -> str:
        text = "; ".join(",".join(f"{k}={v}" for k, v in s.items()) for s in items[:3])
        return text + ("; ..." if len(items) > 3 else "")

    what = "correctness, then timing" if timed else "correctness only (--no-time)"
    held = f" and {len(problem.heldout)} held-out" if problem.heldout else ""
    n = len(problem.shapes)
    line = (
        f"check: {problem.name} on {'the CPU' if device == 'cpu' else device}: {what}, at "
        f"{n} {'CPU-sized ' if cpu_sized else ''}shape{'s' if n > 1 else ''} ({shapes(problem.shapes)}){held}"
    )
    if device == "cpu" and not cpu_sized:
        try:
            work: float | None = max((problem.flops(s) or 0.0) for s in problem.shapes + problem.heldout)
        except Exception:  # the problem's own flops(); unknown work is not a reason to stop
            work = None
        if work is None or work == 0 or work > 1e9:
            # a GFLOP per call is about a second of a CPU core's time, and checks and timing make many calls
            line += "; the problem declares no CPU_SHAPES, so its full sizes run on the CPU: this can take minutes" + (
                " (--no-time skips timing)" if timed else ""
            )
    return line
