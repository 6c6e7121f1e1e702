# problem: matmul_small
# expect: rejected
# reason: SystemExit
# device: cpu
# class: crashes at import: sys.exit(0) at module level
import sys

sys.exit(0)


def kernel(a, b):
    return a @ b
