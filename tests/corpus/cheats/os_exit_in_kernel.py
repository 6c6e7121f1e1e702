# problem: matmul_small
# expect: rejected
# reason: exited with code 0
# device: cpu
# class: calls os._exit(0) inside kernel() (no cleanup, no exception to catch)
import os


def kernel(a, b):
    os._exit(0)
