# problem: matmul_small
# expect: rejected
# reason: SIGSEGV
# device: cpu
# class: segfaults inside kernel() (ctypes.string_at(0) reads address 0)
import ctypes


def kernel(a, b):
    return ctypes.string_at(0)
