# problem: matmul_small
# expect: rejected
# reason: reported timings do not fit what the judge observed
# device: cuda
# class: rebinds the worker's message encoder so every CUDA-event sample it reports (blocks and summary alike) is 1/20 of the truth
"""Slow on purpose (5 ms of GPU time a call, `torch.cuda._sleep`, captured in the graph) and
right every time; only the reported time is a lie. The replaced encoder divides every
`samples_ms` it sends by 20, so the blocks the judge brackets and the final report agree
with each other; what they cannot agree with is the judge's clock around each block."""

import sys

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
_cycles: list[int] = []


def kernel(a, b):
    if not _cycles:
        props = torch.cuda.get_device_properties(a.device)
        _cycles.append(int(getattr(props, "clock_rate", 1_500_000) * 1e3 * 5e-3))  # kHz -> 5 ms of cycles
    torch.cuda._sleep(_cycles[0])
    return torch.matmul(a, b)
