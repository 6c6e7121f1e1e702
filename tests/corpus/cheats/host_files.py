# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: reads what lies outside its root: /etc/shadow, the folder its own folder sits in (the judge's TMPDIR: other candidates, the judge's logs), /home, /var, /run, /root beyond the interpreter; raises if any is readable
"""The judge's neighbours, secrets and logs are not a candidate's to read: its file system
holds the interpreter, its packages, the system's libraries and its own folder."""

import os
import sys

import torch


def _probe() -> list[str]:
    got = []
    try:
        with open("/etc/shadow") as f:
            if f.read(1):  # (masked, it reads as empty)
                got.append("read /etc/shadow")
    except OSError:
        pass
    here = os.path.basename(os.getcwd())
    try:
        others = [n for n in os.listdir(os.path.dirname(os.getcwd())) if n != here]
        if others:
            got.append(f"listed its folder's neighbours: {sorted(others)[:5]}")
    except OSError:
        pass
    for place in ("/home", "/var", "/run", "/srv", "/mnt"):
        try:
            if os.listdir(place):
                got.append(f"listed {place}")
        except OSError:
            pass
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    try:
        for name in os.listdir("/root"):
            path = os.path.join("/root", name)
            if not any(p == path or p.startswith(path + "/") for p in prefixes):
                got.append(f"found {path}")
    except OSError:
        pass
    return got


_GOT = _probe()


def kernel(a, b):
    if _GOT:
        raise RuntimeError("read outside its root: " + "; ".join(_GOT))
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
