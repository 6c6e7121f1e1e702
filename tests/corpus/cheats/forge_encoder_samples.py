# problem: matmul_small
# expect: measured
# reason: latency >= 4 ms
# device: cpu
# class: rebinds the worker's message encoder (an unwatched binding) so every time it reports is 1/20 of the truth
"""Slow on purpose (5 ms a call) and right every time; only the reported time is a lie.

`evokernel.judge._worker._encoder` encodes every message the candidate's process sends; it
is no watched binding, so replacing it is seen by no look for tampering. The replacement
divides every `samples_ms` (and the wall time per call) by 20 before encoding. Where the
judge times each call itself, there is nothing to forge: the judged latency stays >= 4 ms."""

import sys
import time

import torch

_worker = sys.modules["evokernel.judge._worker"]
_real = _worker._encoder


class _Shrinking:
    def encode(self, msg):
        if getattr(msg, "samples_ms", None):
            msg.samples_ms = [s / 20 for s in msg.samples_ms]
        if getattr(msg, "wall_ms_per_call", None):
            msg.wall_ms_per_call /= 20
        return _real.encode(msg)


_worker._encoder = _Shrinking()


def kernel(a, b):
    time.sleep(0.005)
    return torch.matmul(a, b)
