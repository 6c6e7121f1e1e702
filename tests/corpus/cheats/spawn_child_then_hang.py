# problem: matmul_small
# expect: rejected
# reason: timeout
# device: cpu
# class: spawns a child process (sleep 600) that would outlive it, then hangs: the process-group kill must reap both
import subprocess
import time

_child = None


def kernel(a, b):
    global _child
    _child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    while True:
        time.sleep(1)
