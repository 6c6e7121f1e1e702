"""Issue 23 on the GPU: does the judge's CUDA block (shared with candidates through CUDA IPC)
open inside the sandbox's namespaces, and which namespace, if any, breaks it?

For each variant (the sandbox off; every protection; every protection but one; one alone),
a judge on the GPU checks two honest candidates of tests/corpus/problems/matmul_small.py
(torch.matmul and the Triton template) through the real sandbox: the candidate maps the
judge's block, reads its inputs from it and writes its outputs into it, so "accepted" means
the IPC mapping works both ways under that variant. Each verdict is one JSON line in
OUT/sandbox_h200.jsonl (with the protections that held, the reason, the time to ready);
the last line recommends what to switch off for CUDA (`without`), also written alone to
OUT/sandbox_without.txt for `benchmarks/device.sh sandbox` ("" : nothing; "off": no variant
with namespaces worked).

    python benchmarks/sandbox_h200.py --out $OUT [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
T0 = time.monotonic()

#: (name, SandboxOptions fields); the order is the fallback order for the recommendation
VARIANTS: list[tuple[str, dict]] = [
    ("all", {"isolation": "auto"}),
    ("all-shm", {"isolation": "auto", "without": ("shm",)}),
    ("all-seccomp", {"isolation": "auto", "without": ("seccomp",)}),
    ("all-ipc", {"isolation": "auto", "without": ("ipc",)}),
    ("all-net", {"isolation": "auto", "without": ("net",)}),
    ("all-shm-seccomp", {"isolation": "auto", "without": ("shm", "seccomp")}),
    ("all-pid", {"isolation": "auto", "without": ("pid",)}),
    ("all-pid-shm", {"isolation": "auto", "without": ("pid", "shm")}),
    ("all-user", {"isolation": "auto", "without": ("user",)}),
    ("all-user-pid", {"isolation": "auto", "without": ("user", "pid")}),
    ("all-mount", {"isolation": "auto", "without": ("mount", "shm")}),
    ("all-seccomp-caps", {"isolation": "auto", "without": ("seccomp", "caps")}),
    ("off", {"isolation": "off"}),
]
ALONE = ["user", "pid", "mount", "net", "ipc"]


def log(out: Path, record: dict) -> None:
    record = {"t": round(time.monotonic() - T0, 2), **record}
    with open(out / "sandbox_h200.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record)[:600], flush=True)


def judge_variant(out: Path, name: str, fields: dict, device: str) -> bool:
    from evokernel.judge._isolation import PROTECTIONS
    from evokernel.judge.gate import GateOptions, Judge
    from evokernel.judge.problem import Problem
    from evokernel.judge.sandbox import SandboxOptions, isolation_report

    sandbox = SandboxOptions(start_timeout_s=120, call_timeout_s=60, time_timeout_s=60, **fields)
    report = isolation_report(sandbox)
    options = GateOptions(sandbox=sandbox, timing={"max_reps": 20, "min_reps": 5, "max_s": 1.0})
    judge = Judge(Problem.load(ROOT / "tests/corpus/problems/matmul_small.py"), device, options)
    ok = True
    try:
        for cand in ("honest/torch_matmul.py", "honest/triton_matmul.py"):
            t = time.monotonic()
            v = judge.check((ROOT / "tests/corpus" / cand).read_text(), label=cand)
            ok &= v.accepted
            log(
                out,
                {
                    "variant": name,
                    "candidate": cand,
                    "accepted": v.accepted,
                    "reason": v.reason[:400],
                    "on": sorted(report.on),
                    "off": {k: r for k, r in report.off.items() if k in PROTECTIONS},
                    "wait_s": round(v.wait_s, 3),
                    "wall_s": round(time.monotonic() - t, 3),
                    "latency_ms": v.latency_ms,
                    "log_tail": v.log_tail[-300:],
                },
            )
    finally:
        judge.close()
    return ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--device", default="cuda", help="cuda or cuda:N")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from evokernel.judge._isolation import PROTECTIONS
    from evokernel.judge.sandbox import isolation_report

    try:
        max_userns = Path("/proc/sys/user/max_user_namespaces").read_text().strip()
    except OSError:
        max_userns = None
    log(
        out,
        {
            "env": True,
            "kernel": platform.release(),
            "python": sys.version.split()[0],
            "euid": os.geteuid(),
            "max_user_namespaces": max_userns,
            "sandbox_here": isolation_report().describe(),
        },
    )
    works: dict[str, bool] = {}

    def run(name: str, fields: dict) -> None:
        try:
            works[name] = judge_variant(out, name, fields, args.device)
        except Exception as exc:  # a variant the judge cannot even set up: say so, go on
            works[name] = False
            log(out, {"variant": name, "crashed": f"{type(exc).__name__}: {exc}"[:600]})

    for name, fields in VARIANTS:
        run(name, fields)
    # the first variant (fewest protections off, least important first) under which the GPU works
    recommended = next((",".join(f.get("without", ())) for n, f in VARIANTS if n != "off" and works.get(n)), "off")
    (out / "sandbox_without.txt").write_text(recommended + "\n")
    log(out, {"summary": True, "works": works, "without": recommended})
    for p in ALONE:  # diagnosis: which namespace alone breaks it
        run(f"only-{p}", {"isolation": "auto", "without": tuple(sorted(set(PROTECTIONS) - {p}))})
    log(out, {"summary": True, "works": works, "without": recommended})


if __name__ == "__main__":
    main()
