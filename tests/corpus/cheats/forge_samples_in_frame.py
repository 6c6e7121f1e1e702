# problem: matmul_small
# expect: measured
# reason: latency >= 4 ms
# device: cpu
# class: walks up the stack to the timing loop's frame and shrinks its list of samples in place (20x)
"""Slow on purpose (5 ms a call) and right every time; only the recorded time is a lie.

From inside kernel(), `sys._getframe` leads to whatever frame called it; a frame that holds
a list named `samples` is the timing loop's, and every sample appended since the last call
is divided by 20 in place (no binding changes, so no look for tampering sees it). Where the
judge times each call itself, no frame of the candidate's process holds the samples: the
judged latency stays >= 4 ms."""

import sys
import time

import torch

_done = {}  # id of a samples list -> how many of its entries were shrunk


def _shrink() -> None:
    frame = sys._getframe(2)
    while frame is not None:
        samples = frame.f_locals.get("samples")
        if isinstance(samples, list) and samples and all(isinstance(s, float) for s in samples):
            start = _done.get(id(samples), 0)
            for i in range(start, len(samples)):
                samples[i] /= 20
            _done[id(samples)] = len(samples)
            return
        frame = frame.f_back


def kernel(a, b):
    _shrink()
    time.sleep(0.005)
    return torch.matmul(a, b)
