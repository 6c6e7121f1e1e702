# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: looks for Unix sockets where a judge keeps them (the folder its own folder sits in: the judge's TMPDIR, with multiprocessing's fork-server socket; /tmp, /var/tmp, /run, /var/run, /dev) and connects to each; raises if any connect() succeeds (a read-only mount does not stop connect)
"""What a candidate could do with a socket in sight: the fork server runs what it is sent
as the judge, a PostgreSQL server with trust authentication takes any SQL. This probe
only connects and closes (it sends nothing)."""

import os
import socket
import stat

import torch


def _sockets(top: str, depth: int = 3) -> list[str]:
    found, todo = [], [(top, 0)]
    while todo and len(found) < 200:
        path, level = todo.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISSOCK(mode):
                found.append(entry.path)
            elif stat.S_ISDIR(mode) and level < depth:
                todo.append((entry.path, level + 1))
    return found


def _probe() -> list[str]:
    places = [
        os.path.dirname(os.getcwd()),
        "/tmp",
        "/var/tmp",
        "/run",
        "/var/run",
        "/dev",
        os.environ.get("TMPDIR", ""),
    ]
    got = []
    for place in dict.fromkeys(p for p in places if p):
        for path in _sockets(place):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1.0)
            try:
                s.connect(path)
                got.append(f"connected to {path}")
            except OSError:
                pass
            finally:
                s.close()
    return got


_GOT = _probe()


def kernel(a, b):
    if _GOT:
        raise RuntimeError("reached host sockets: " + "; ".join(_GOT))
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
