# problem: matmul_small
# expect: rejected
# reason: after timing
# device: cpu
# class: right through the checks and every timed call, wrong once an input buffer comes back after a long absence (the re-check after timing)
"""A sleeper: it watches where its inputs live. The judge's check buffers are reused, each
called once (or a few times in a row) before timing; while timing, a few input sets rotate
(each comes back after one or two others). A buffer that comes back after 6 or more calls on
other buffers can only be a check after timing: only then is the answer wrong."""

import torch

ABSENCE = 6
_last: dict = {}
_calls = [0]


def kernel(a, b):
    _calls[0] += 1
    key = (a.data_ptr(), b.data_ptr())
    last = _last.get(key)
    _last[key] = _calls[0]
    if last is not None and _calls[0] - last > ABSENCE:
        return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    return torch.matmul(a, b)
