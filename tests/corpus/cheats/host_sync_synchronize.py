# problem: matmul_small
# expect: rejected
# reason: host-synchronising
# device: cuda
# class: calls torch.cuda.synchronize() inside the call (the timed region would then hold the host's wait)
import torch


def kernel(a, b):
    out = torch.matmul(a, b)
    torch.cuda.synchronize()
    return out
