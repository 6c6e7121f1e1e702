# problem: matmul_small
# expect: rejected
# reason: reported timings do not fit what the judge observed
# device: cuda
# class: a thread started at import walks the main thread's frames to the CUDA timing loop and shrinks its list of samples in place (20x)
"""Slow on purpose (5 ms of GPU time a call) and right every time; only the recorded time is
a lie. Graph replays never call kernel(), so the forging runs on a thread of its own: every
millisecond it looks through every thread's frames for `time_cuda`'s `samples` and divides
the entries it has not seen yet by 20. The judge takes each block's samples as they arrive,
bracketed by its own clock; the shrunk summary no longer matches them."""

import sys
import threading
import time

import torch

_done: dict[int, int] = {}


def _forge() -> None:
    while True:
        for frame in list(sys._current_frames().values()):
            while frame is not None:
                if frame.f_code.co_name == "time_cuda":
                    samples = frame.f_locals.get("samples")
                    if isinstance(samples, list):
                        for i in range(_done.get(id(samples), 0), len(samples)):
                            samples[i] /= 20
                        _done[id(samples)] = len(samples)
                frame = frame.f_back
        time.sleep(1e-3)


threading.Thread(target=_forge, daemon=True).start()
_cycles: list[int] = []


def kernel(a, b):
    if not _cycles:
        props = torch.cuda.get_device_properties(a.device)
        _cycles.append(int(getattr(props, "clock_rate", 1_500_000) * 1e3 * 5e-3))  # kHz -> 5 ms of cycles
    torch.cuda._sleep(_cycles[0])
    return torch.matmul(a, b)
