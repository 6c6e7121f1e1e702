# problem: matmul_small
# expect: rejected
# reason: candidate replaced evokernel.judge.timing
# device: cpu
# class: rebinds the timing harness (evokernel.judge.timing.time_cpu / time_cuda) at import so the reported samples are 1000x smaller
import torch

import evokernel.judge.timing as T

_real = T.time_cpu


def fake(fns, **kw):
    samples, graph, wall = _real(fns, **kw)  # run honestly: the sampled outputs and perturbations are real
    return [s / 1000.0 for s in samples], graph, wall / 1000.0


T.time_cpu = T.time_cuda = fake


def kernel(a, b):
    return torch.matmul(a, b)
