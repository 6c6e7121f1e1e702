# problem: matmul_small
# expect: rejected
# reason: wrong result in a timed call
# device: cpu
# class: lazy in the timed calls only: returns at once and a background thread writes the right answer into the judge's output slot later (found through the caller's frames)
"""Right in every checked call; in a timed call (one not made by the worker's `_call`) it
returns zeros at once, and a thread computes the product (5 ms late, on copies of the
inputs) and writes it into the judge-owned slot that call's output goes to, found by
walking up the stack: the worker's timed-call frame (its `slots`) or, in a harness that
copies sampled outputs itself, its reservoir (and it holds back the harness's report until
its threads are done, by rebinding the worker's unwatched message encoder). A judge that
reads the slot at once, with the candidate stopped, sees the zeros."""

import sys
import threading
import time

import torch

_worker = sys.modules["evokernel.judge._worker"]
_real = _worker._encoder
_pending: list = []


class _Waiting:
    def encode(self, msg):
        while _pending:
            _pending.pop().join()
        return _real.encode(msg)


_worker._encoder = _Waiting()


def _target():
    """Where this call's output is read from: ("slots", slots) or ("reservoir", it, rec)."""
    frame = sys._getframe(2)
    while frame is not None:
        name, local = frame.f_code.co_name, frame.f_locals
        if name == "_call":
            return None
        if name == "_timed_call" and isinstance(local.get("slots"), list):
            return ("slots", local["slots"], None)
        sample = local.get("sample")
        if name == "time_cpu" and getattr(sample, "__self__", None) is not None:
            return ("reservoir", sample.__self__, local.get("rec"))
        frame = frame.f_back
    return None


def kernel(a, b):
    target = _target()
    if target is None:
        return torch.matmul(a, b)
    kind, where, rec = target
    a2, b2 = a.clone(), b.clone()

    def fill():
        time.sleep(0.005)
        product = torch.matmul(a2, b2)
        if kind == "slots":
            where[0].copy_(product)
            return
        for i, p in enumerate(where.pending):
            if p is rec:
                where.slots[i][0].copy_(product)

    t = threading.Thread(target=fill, daemon=True)
    t.start()
    if kind == "reservoir":
        _pending.append(t)
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
