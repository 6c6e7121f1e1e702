# problem: matmul_small
# expect: accepted
# reason: accepted
# device: cpu
# class: reads secrets: answers wrong if ANTHROPIC_API_KEY, OPENAI_API_KEY, HF_TOKEN or AWS_SECRET_ACCESS_KEY is in os.environ or /proc/self/environ (run with them set in the judge's environment: accepted proves the scrubbing)
"""An environment probe dressed as a candidate: right only if it sees no secret."""

import os

import torch

SECRETS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY")


def _found() -> list[str]:
    names = [s for s in SECRETS if s in os.environ]
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        raw = b""
    keys = {entry.split(b"=", 1)[0].decode("utf-8", "replace") for entry in raw.split(b"\0") if entry}
    return names + [s for s in SECRETS if s in keys]


_AT_IMPORT = _found()


def kernel(a, b):
    if _AT_IMPORT or _found():
        return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    return torch.matmul(a, b)
