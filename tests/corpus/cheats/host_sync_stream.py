# problem: matmul_small
# expect: rejected
# reason: host-synchronising
# device: cuda
# class: waits for its stream from the host (Stream.synchronize, not through an op torch's sync debug mode sees)
import torch


def kernel(a, b):
    out = torch.matmul(a, b)
    torch.cuda.current_stream().synchronize()
    return out
