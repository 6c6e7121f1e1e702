# problem: matmul_small
# expect: rejected
# reason: timeout
# device: cpu
# class: hangs at import: sleeps for ever at module level, ignoring SIGTERM and SIGINT
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    time.sleep(3600)


def kernel(a, b):
    return a @ b
