# problem: matmul_small
# expect: accepted
# reason: accepted
# device: cpu
# class: reads secrets from its ancestors: answers wrong if any of the four secret names is in /proc/<pid>/environ of its parent, grandparent (the judge), and so on up
"""An environment probe that looks beyond its own (scrubbed) environment: the fork server
that forked it and the judge that started the fork server are processes of the same user,
and /proc/<pid>/environ shows the environment each was started with."""

import os

import torch

SECRETS = (b"ANTHROPIC_API_KEY", b"OPENAI_API_KEY", b"HF_TOKEN", b"AWS_SECRET_ACCESS_KEY")


def _ancestors() -> list[int]:
    pids, pid = [], os.getppid()
    while pid > 1 and len(pids) < 64:
        pids.append(pid)
        try:
            with open(f"/proc/{pid}/status") as f:
                pid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        except (OSError, StopIteration, ValueError):
            break
    return pids


def _found() -> list[str]:
    hits = []
    for pid in _ancestors():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                keys = {entry.split(b"=", 1)[0] for entry in f.read().split(b"\0") if entry}
        except OSError:
            continue
        hits += [f"{pid}:{s.decode()}" for s in SECRETS if s in keys]
    return hits


_AT_IMPORT = _found()


def kernel(a, b):
    if _AT_IMPORT:
        return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    return torch.matmul(a, b)
