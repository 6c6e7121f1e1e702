# problem: matmul_small
# expect: rejected
# reason: exited with code 0 | compile: SystemExit: 0
# device: cpu
# class: calls sys.exit(0) inside kernel() (a clean exit, as if all went well)
import sys


def kernel(a, b):
    sys.exit(0)
