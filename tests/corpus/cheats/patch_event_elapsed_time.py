# problem: matmul_small
# expect: rejected
# reason: replaced torch.cuda.Event
# device: cuda
# class: patches torch.cuda.Event.elapsed_time at import so every CUDA-event timing reports 1000x faster
import torch

_real = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _real(self, end) / 1000.0


def kernel(a, b):
    return torch.matmul(a, b)
