# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: finds the judge and its ancestors through /proc/<pid>/cmdline and writes into their files: a file in the judge's working directory, code appended to the problem file, every stored latency in the search's SQLite database (--db) multiplied by 1000; raises if any write got through
"""What a candidate could do where it shares the judge's file system and sees its processes.

To stay harmless when the sandbox fails, it only touches files whose path holds
`evokernel-probe` (the folder tests/test_gate.py makes for this probe); in the plain corpus
run there is none, and it answers wrong."""

import os
import sqlite3

import torch

TAG = "evokernel-probe"


def _cmdlines() -> dict[int, list[str]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    out[int(name)] = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            except OSError:
                continue
    return out


def _paths(argv: list[str]) -> list[str]:
    found = []
    for arg in argv:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        if TAG in value and os.path.isfile(value):
            found.append(value)
    return found


def _tamper() -> list[str]:
    done = []
    for pid, argv in _cmdlines().items():
        try:  # the judge's working directory, through /proc
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if TAG in cwd:
            try:
                with open(os.path.join(cwd, "written-by-candidate"), "w") as f:
                    f.write("a candidate was here\n")
                done.append(f"wrote into {cwd}")
            except OSError:
                pass
        for path in _paths(argv):
            if path.endswith(".py"):
                try:
                    with open(path, "a") as f:
                        f.write("\nimport os  # appended by a candidate: runs inside the next judge\n")
                    done.append(f"appended to {path}")
                except OSError:
                    pass
            elif path.endswith(".db"):
                try:
                    db = sqlite3.connect(path, timeout=1)
                    db.execute("UPDATE results SET latency_ms = latency_ms * 1000")
                    db.commit()
                    db.close()
                    done.append(f"rewrote {path}")
                except sqlite3.Error:
                    pass
    return done


_DONE = _tamper()


def kernel(a, b):
    if _DONE:
        raise RuntimeError("tampered with the judge's files: " + "; ".join(_DONE))
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
