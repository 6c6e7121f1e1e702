# problem: matmul_small
# expect: rejected
# reason: replaced time.perf_counter
# device: cpu
# class: patches time.perf_counter (the CPU timer) at import so every timed call seems 1000x faster
import time

import torch

_real = time.perf_counter
time.perf_counter = lambda: _real() / 1000.0
time.perf_counter_ns = lambda: int(_real() * 1e6)


def kernel(a, b):
    return torch.matmul(a, b)
