# problem: matmul_small
# expect: rejected
# reason: wrong result
# device: cpu
# class: right only for its first calls (a call counter): right through the checks, garbage from the timed calls on (caught in a sampled timed call or the re-check after it)
"""Right for the first 6 calls, then zeros. With the gate's defaults the checks before timing
take 5 calls (2 seeds x 2 tuning shapes + 1 held-out shape), so every check before timing
passes, the timed calls are cheap and wrong, and only the re-check after timing can tell."""

import torch

RIGHT_CALLS = 6
_calls = [0]


def kernel(a, b):
    _calls[0] += 1
    if _calls[0] <= RIGHT_CALLS:
        return torch.matmul(a, b)
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
