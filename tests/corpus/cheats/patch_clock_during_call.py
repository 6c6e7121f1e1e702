# problem: matmul_small
# expect: rejected
# reason: timing | tampering: candidate replaced time.perf_counter
# device: cpu
# class: fakes fast timings with a one-shot time.perf_counter, installed only inside timed calls; it undoes itself on first use, so no check sees it
"""The product is always right; only the time is a lie.

A timed call is told apart from a checked one by the harness's own state: the checks run
with torch.use_deterministic_algorithms(True), the timing loop without. Inside a timed call
the kernel installs a time.perf_counter that, read once right after the call returns (by the
timing loop), reports 100 ns since the call began and puts the real clock back. Outside a
call the clock is untouched, so looking for replaced functions before and after a timing run
finds nothing."""

import time

import torch

_real = time.perf_counter


def kernel(a, b):
    start = _real()
    c = torch.matmul(a, b)
    if not torch.are_deterministic_algorithms_enabled():

        def once():
            time.perf_counter = _real
            return start + 1e-7

        time.perf_counter = once
    return c
