# problem: matmul_small
# expect: rejected
# reason: left a thread running
# device: cpu
# class: background thread that fills the output after kernel() returned
"""Returns an unwritten output at once; a thread computes the product into it 2 s later
(the work leaves the timed region, and the result lands after the harness looked)."""

import threading
import time

import torch


def kernel(a, b):
    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    a2, b2 = a.clone(), b.clone()

    def fill():
        time.sleep(2.0)
        torch.matmul(a2, b2, out=out)

    threading.Thread(target=fill, daemon=True).start()
    return out
