# problem: matmul_small
# expect: rejected
# reason: exited with code 0
# device: cpu
# class: crashes at import: os._exit(0) at module level (the process just ends, no message)
import os

os._exit(0)


def kernel(a, b):
    return a @ b
