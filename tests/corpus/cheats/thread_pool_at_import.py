# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: background thread started at import (so the thread count does not change per call) fills outputs after kernel() returned
"""A worker thread, started when the module is imported, receives (a, b, out) and writes the
product into `out` a second later; kernel() returns `out` at once, unwritten (zeros)."""

import queue
import threading
import time

import torch

_jobs: queue.Queue = queue.Queue()


def _worker():
    while True:
        a, b, out = _jobs.get()
        time.sleep(1.0)
        torch.matmul(a, b, out=out)


threading.Thread(target=_worker, daemon=True).start()


def kernel(a, b):
    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    _jobs.put((a.clone(), b.clone(), out))
    return out
